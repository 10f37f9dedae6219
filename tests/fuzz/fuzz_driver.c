/* Corpus replay and mutation driver of the reader fuzz targets; see fuzz_driver.h. */
#include "fuzz_driver.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* splitmix64: deterministic mutation positions */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A position, half the time within the first or last 4 KiB where the structure lives
 * (ZIP headers and pickle; the model's header, the graph's first nodes, tags of big fields);
 * otherwise anywhere. */
static size_t pick(uint64_t *s, size_t n)
{
    uint64_t r = next(s);
    size_t edge = n < 4096 ? n : 4096;
    switch (r & 3) {
    case 0: return (size_t)((r >> 2) % edge);
    case 1: return n - 1 - (size_t)((r >> 2) % edge);
    default: return (size_t)((r >> 2) % n);
    }
}

static int run_copy(const FuzzTarget *t, const uint8_t *d, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);   /* exact size: ASan flags any read past the end */
    if (!copy)
        abort();
    memcpy(copy, d, n);
    int loaded = t->one(copy, n);
    free(copy);
    return loaded;
}

static void fuzz_file(const FuzzTarget *t, const char *path, long muts, uint64_t seed)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s\n", t->name, path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t n = sz > 0 ? (size_t)sz : 0;
    uint8_t *d = malloc(n ? n : 1);
    if (!d || fread(d, 1, n, f) != n) {
        fprintf(stderr, "%s: cannot read %s\n", t->name, path);
        exit(1);
    }
    fclose(f);
    long runs = 1, loaded = run_copy(t, d, n);
    int original = loaded;

    /* truncations: every length near both ends, and evenly spread ones */
    for (size_t k = 0; k < 512 && k < n; k++) {
        loaded += run_copy(t, d, k);
        loaded += run_copy(t, d, n - 1 - k);
        runs += 2;
    }
    for (size_t k = 1; n > 1024 && k < 256; k++, runs++)
        loaded += run_copy(t, d, n / 256 * k);

    /* the target's mutations, in place on an exact-size copy */
    uint8_t *m = malloc(n ? n : 1);
    if (!m)
        abort();
    memcpy(m, d, n);
    uint64_t s = seed;
    for (long k = 0; n && k < muts; k++, runs++) {
        size_t at = pick(&s, n);
        uint8_t old = m[at];
        uint64_t r = next(&s);
        t->mutate(&m[at], k, r);
        loaded += t->one(m, n);
        m[at] = old;
    }
    free(m);
    free(d);
    printf("%s: %s: %zu bytes, %s, %ld runs, %ld loaded\n", t->name, path, n, original ? "loads" : "rejected", runs, loaded);
}

static int is_dir(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int fuzz_driver_main(int argc, char **argv, const FuzzTarget *t)
{
    long muts = 3000;
    uint64_t seed = t->seed;
    size_t ext_len = strlen(t->ext);
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            muts = strtol(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [-n MUTATIONS_PER_FILE] [-s SEED] FILE_OR_DIR...\n", argv[0]);
            return 2;
        } else if (is_dir(argv[i])) {
            /* sorted, so that runs are reproducible */
            DIR *dh = opendir(argv[i]);
            char **names = NULL;
            size_t nn = 0;
            struct dirent *de;
            while (dh && (de = readdir(dh))) {
                size_t l = strlen(de->d_name);
                if (de->d_name[0] == '.' || l < ext_len || strcmp(de->d_name + l - ext_len, t->ext))
                    continue;
                names = realloc(names, (nn + 1) * sizeof *names);
                names[nn] = malloc(strlen(argv[i]) + l + 2);
                sprintf(names[nn++], "%s/%s", argv[i], de->d_name);
            }
            if (dh)
                closedir(dh);
            if (nn)
                qsort(names, nn, sizeof *names, cmp_str);
            for (size_t k = 0; k < nn; k++) {
                fuzz_file(t, names[k], muts, seed + (uint64_t)nfiles++);
                free(names[k]);
            }
            free(names);
        } else {
            fuzz_file(t, argv[i], muts, seed + (uint64_t)nfiles++);
        }
    }
    if (!nfiles) {
        fprintf(stderr, "%s: no %s files given\n", t->name, t->ext);
        return 2;
    }
    printf("%s: %d file(s), no invariant broken\n", t->name, nfiles);
    return 0;
}
