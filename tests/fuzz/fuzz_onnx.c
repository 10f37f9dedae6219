/*
 * Fuzz target for the ONNX reader (protobuf wire format, graph, initializers).
 *
 * With -DDITTO_LIBFUZZER=ON (clang) libFuzzer drives LLVMFuzzerTestOneInput.
 * Otherwise main() replays files and folders given on the command line and,
 * for each file, deterministic mutations: truncations, bit flips, byte
 * overwrites with values that matter to protobuf (0x00, 0x7f, 0x80, 0xff:
 * varint ends and continuations, field numbers, wire types) and small
 * length changes (a byte +-1). Any broken invariant aborts.
 *
 * Invariants: an error returns a negative code and no model, with exactly one
 * error line naming the file; a success yields a model whose strings are all
 * set, whose attribute tensors are catalog entries, whose graph inputs are
 * not initializers, and whose entries lie inside the input (raw data) or on
 * the heap (typed fields), read back through ditto_catalog_read_f32 so that
 * ASan sees every byte.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "weights/onnx.h"

#define NAME "fuzz.onnx"

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

static void broken(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_onnx: %s: %s\n", what, detail);
    abort();
}

static void check_model(const DittoOnnxModel *m, const uint8_t *data, size_t size)
{
    const DittoCatalog *c = m->init;
    if (!c || !m->path || !m->producer || m->n_initializers > c->n)
        broken("model", "missing catalog, path or producer");
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        const uint8_t *p = e->data;
        if (!p || ditto_catalog_find(c, e->name) != e)
            broken("entry without data or not found by name", e->name);
        bool in_input = size && p >= data && p < data + size;
        if (in_input && (e->offset != (uint64_t)(p - data) || e->span > (uint64_t)(data + size - p)))
            broken("raw entry outside the input", e->name);
        /* raw entries are bounds-checked above; reading a few thousand elements keeps big corpus files fast */
        int64_t most = in_input ? 4096 : (int64_t)(sizeof scratch / sizeof *scratch);
        if (ditto_catalog_entry_numel(e) <= most && ditto_catalog_read_f32(c, e, scratch) < 0)
            broken("entry unreadable", e->name);
    }
    for (size_t i = 0; i < m->n_nodes; i++) {
        const DittoOnnxNode *n = &m->nodes[i];
        if (!n->name || !n->op_type || !*n->op_type || !n->domain)
            broken("node", "missing name, op_type or domain");
        for (int k = 0; k < n->n_inputs; k++)
            if (!n->inputs[k])
                broken("node input", n->op_type);
        for (int k = 0; k < n->n_outputs; k++)
            if (!n->outputs[k])
                broken("node output", n->op_type);
        for (int k = 0; k < n->n_attrs; k++) {
            const DittoOnnxAttr *a = &n->attrs[k];
            if (!a->name || ditto_onnx_attr(n, a->name) != a)
                broken("attribute name", n->op_type);
            if (a->type == DITTO_ATTR_TENSOR && (!a->tensor || a->tensor < c->entries || a->tensor >= c->entries + c->n))
                broken("attribute tensor not in the catalog", a->name);
            if (a->type == DITTO_ATTR_STRING && !a->s)
                broken("string attribute", a->name);
            for (size_t j = 0; a->type == DITTO_ATTR_STRINGS && j < a->n; j++)
                if (!a->strings[j])
                    broken("strings attribute", a->name);
            if ((a->type == DITTO_ATTR_FLOATS && a->n && !a->floats) || (a->type == DITTO_ATTR_INTS && a->n && !a->ints))
                broken("list attribute", a->name);
        }
    }
    const DittoOnnxValueInfo *lists[3] = { m->inputs, m->outputs, m->value_info };
    size_t counts[3] = { m->n_inputs, m->n_outputs, m->n_value_info };
    for (int l = 0; l < 3; l++) {
        for (size_t i = 0; i < counts[l]; i++) {
            const DittoOnnxValueInfo *v = &lists[l][i];
            if (!v->name || !*v->name || v->ndim < -1 || v->ndim > DITTO_MAX_DIMS)
                broken("value info", v->name ? v->name : "(null)");
            const DittoCatalogEntry *e = l == 0 ? ditto_catalog_find(c, v->name) : NULL;
            if (e && (size_t)(e - c->entries) < m->n_initializers)
                broken("graph input that is an initializer", v->name);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    LogCount lc = { 0 };
    DittoLogger lg = { count_cb, &lc, DITTO_LOG_DEBUG };
    DittoOnnxModel *m = NULL;
    int rc = ditto_onnx_open_memory(&m, data, size, NAME, &lg);
    last_loaded = rc == 0;
    if (rc < 0) {
        if (m || lc.errors != 1 || lc.lines != 1 || strncmp(lc.first, NAME ": ", sizeof NAME + 1)) {
            fprintf(stderr, "fuzz_onnx: rc %d with %d log line(s), first: '%s'\n", rc, lc.lines, lc.first);
            abort();
        }
        return 0;
    }
    if (!m || lc.errors)
        broken("success", "no model, or an error logged");
    check_model(m, data, size);
    ditto_onnx_close(&m);
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

/* A position, half the time within the first 4 KiB where the model's header, the graph's
 * first nodes and the tags of big fields live; otherwise anywhere. */
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

static void fuzz_file(const char *path, long muts, uint64_t seed)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_onnx: cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    size_t n = sz > 0 ? (size_t)sz : 0;
    uint8_t *d = malloc(n ? n : 1);
    if (!d || fread(d, 1, n, f) != n) {
        fprintf(stderr, "fuzz_onnx: cannot read %s\n", path);
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

    /* in place on an exact-size copy: bit flips, protobuf-relevant bytes, lengths +-1 */
    static const uint8_t special[] = { 0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x0a, 0x12 };
    uint8_t *m = malloc(n ? n : 1);
    if (!m)
        abort();
    memcpy(m, d, n);
    uint64_t s = seed;
    for (long k = 0; n && k < muts; k++, runs++) {
        size_t at = pick(&s, n);
        uint8_t old = m[at];
        uint64_t r = next(&s);
        switch (k % 4) {
        case 0:
        case 1: m[at] ^= (uint8_t)(1u << (r & 7)); break;
        case 2: m[at] = special[r % sizeof special]; break;
        default: m[at] = (uint8_t)(m[at] + ((r & 1) ? 1 : 0xff)); break;
        }
        LLVMFuzzerTestOneInput(m, n);
        loaded += last_loaded;
        m[at] = old;
    }
    free(m);
    free(d);
    printf("fuzz_onnx: %s: %zu bytes, %s, %ld runs, %ld loaded\n", path, n, original ? "loads" : "rejected", runs, loaded);
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
    long muts = 3000;
    uint64_t seed = 20261130;
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
                if (de->d_name[0] == '.' || l < 5 || strcmp(de->d_name + l - 5, ".onnx"))
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
                fuzz_file(names[k], muts, seed + (uint64_t)nfiles++);
                free(names[k]);
            }
            free(names);
        } else {
            fuzz_file(argv[i], muts, seed + (uint64_t)nfiles++);
        }
    }
    if (!nfiles) {
        fprintf(stderr, "fuzz_onnx: no .onnx files given\n");
        return 2;
    }
    printf("fuzz_onnx: %d file(s), no invariant broken\n", nfiles);
    return 0;
}

#endif
