/*
 * Fuzz target for the .pth reader (ZIP + pickle + catalog).
 *
 * With -DDITTO_LIBFUZZER=ON (clang) libFuzzer drives LLVMFuzzerTestOneInput.
 * Otherwise main() replays files and folders given on the command line and,
 * for each file, deterministic mutations: truncations, bit flips and byte
 * overwrites biased towards the structure (local headers, the pickle at the
 * start, the central directory at the end). Any broken invariant aborts.
 *
 * Invariants: an error returns a negative code with exactly one error line
 * naming the file; a success yields entries whose bytes lie inside the input
 * (read back through ditto_catalog_read_f32, so ASan sees every access).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "weights/catalog.h"

#define NAME "fuzz.pth"

typedef struct LogCount {
    int errors, lines;
    char first[1024];
} LogCount;

static void count_cb(void *cookie, DittoLogLevel level, const char *msg)
{
    LogCount *lc = cookie;
    if (!lc->lines++)
        snprintf(lc->first, sizeof lc->first, "%s", msg);
    lc->errors += level == DITTO_LOG_ERROR;
}

static float scratch[1 << 16];
static int last_loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    LogCount lc = { 0 };
    DittoLogger lg = { count_cb, &lc, DITTO_LOG_DEBUG };
    DittoCatalog *c = NULL;
    int rc = ditto_catalog_open_pth_memory(&c, data, size, NAME, &lg);
    last_loaded = rc == 0;
    if (rc < 0) {
        if (c || lc.errors != 1 || lc.lines != 1 || strncmp(lc.first, NAME ": ", sizeof NAME + 1)) {
            fprintf(stderr, "fuzz_pth: rc %d with %d log line(s), first: '%s'\n", rc, lc.lines, lc.first);
            abort();
        }
        return 0;
    }
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        const uint8_t *p = e->data;
        if (e->offset > size || e->span > size - e->offset || p != data + e->offset || ditto_catalog_find(c, e->name) != e) {
            fprintf(stderr, "fuzz_pth: entry '%s' outside the input (offset %llu span %llu, %zu bytes)\n", e->name,
                    (unsigned long long)e->offset, (unsigned long long)e->span, size);
            abort();
        }
        if (ditto_catalog_entry_numel(e) <= (int64_t)(sizeof scratch / sizeof *scratch) && ditto_catalog_read_f32(c, e, scratch) < 0)
            abort();
    }
    ditto_catalog_close(&c);
    return 0;
}

#ifndef DITTO_LIBFUZZER

/* splitmix64: deterministic mutation positions */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A position, half the time within the first or last 4 KiB where ZIP and pickle structure lives. */
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

static int run_copy(const uint8_t *d, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);   /* exact size: ASan flags any read past the end */
    if (!copy)
        abort();
    memcpy(copy, d, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
    return last_loaded;
}

static void fuzz_file(const char *path, long flips, uint64_t seed)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_pth: cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t n = sz > 0 ? (size_t)sz : 0;
    uint8_t *d = malloc(n ? n : 1);
    if (!d || fread(d, 1, n, f) != n) {
        fprintf(stderr, "fuzz_pth: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    long runs = 1, loaded = run_copy(d, n);
    int original = loaded;

    /* truncations: every length near both ends, and evenly spread ones */
    for (size_t k = 0; k < 512 && k < n; k++) {
        loaded += run_copy(d, k);
        loaded += run_copy(d, n - 1 - k);
        runs += 2;
    }
    for (size_t k = 1; n > 1024 && k < 256; k++, runs++)
        loaded += run_copy(d, n / 256 * k);

    /* bit flips and byte overwrites, in place on an exact-size copy */
    uint8_t *m = malloc(n ? n : 1);
    if (!m)
        abort();
    memcpy(m, d, n);
    uint64_t s = seed;
    for (long k = 0; n && k < flips; k++, runs++) {
        size_t at = pick(&s, n);
        uint8_t old = m[at];
        uint64_t r = next(&s);
        if (k % 4 == 3)
            m[at] = (uint8_t)((r & 1) ? 0xff : (r & 2) ? 0 : r >> 8);   /* overwrite: 0xff, 0 or random */
        else
            m[at] ^= (uint8_t)(1u << (r & 7));
        LLVMFuzzerTestOneInput(m, n);
        loaded += last_loaded;
        m[at] = old;
    }
    free(m);
    free(d);
    printf("fuzz_pth: %s: %zu bytes, %s, %ld runs, %ld loaded\n", path, n, original ? "loads" : "rejected", runs, loaded);
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

int main(int argc, char **argv)
{
    long flips = 3000;
    uint64_t seed = 20261129;
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            flips = strtol(argv[++i], NULL, 0);
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
                if (de->d_name[0] == '.' || l < 4 || strcmp(de->d_name + l - 4, ".pth"))
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
                fuzz_file(names[k], flips, seed + (uint64_t)nfiles++);
                free(names[k]);
            }
            free(names);
        } else {
            fuzz_file(argv[i], flips, seed + (uint64_t)nfiles++);
        }
    }
    if (!nfiles) {
        fprintf(stderr, "fuzz_pth: no .pth files given\n");
        return 2;
    }
    printf("fuzz_pth: %d file(s), no invariant broken\n", nfiles);
    return 0;
}

#endif
