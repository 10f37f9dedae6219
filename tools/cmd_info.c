/*
 * ditto info FILE...: list the tensors of checkpoints (key, dtype, shape, bytes) and totals;
 * for ONNX models also the graph inputs, outputs and op counts. The format is sniffed from
 * the first bytes (a .pth is a zip, "PK"), not from the file name.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "tools/cli.h"
#include "weights/catalog.h"
#include "weights/onnx.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ditto info FILE.pth|FILE.onnx [FILE ...]\n\n"
               "Lists every tensor of a PyTorch checkpoint (as torch.save writes it, e.g. the\n"
               "official ditto_pytorch/models/*.pth): key, dtype, shape and bytes, then the\n"
               "totals. Nested dicts are flattened with '.' (\"model_state_dict.final_layer.weight\").\n"
               "For an ONNX model: IR and opset versions, the graph inputs (weights that old\n"
               "exporters list as inputs are left out) and outputs with dtypes and shapes ('?' for\n"
               "symbolic dims), the op types with their node counts, and the initializers (then\n"
               "the tensors of Constant nodes and attributes) with totals. The format is found\n"
               "from the file's first bytes, not its name. Nothing is executed and no tensor\n"
               "data is read. Exit status: 0 when every file was read, 1 otherwise (with a\n"
               "one-line error per bad file).\n");
}

static int info_pth(const char *path, const DittoLogger *log)
{
    DittoCatalog *c = NULL;
    if (ditto_catalog_open_pth(&c, path, log) < 0)
        return 1;
    int wk = 3, wd = 5, ws = 5;
    char shape[DITTO_SHAPE_STR_MAX];
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        int l = (int)strlen(e->name), d = (int)strlen(ditto_dtype_name(e->dtype)),
            s = (int)strlen(ditto_shape_str(e->shape, e->ndim, shape, sizeof shape));
        wk = l > wk ? l : wk;
        wd = d > wd ? d : wd;
        ws = s > ws ? s : ws;
    }
    printf("%s: %zu tensors\n", path, c->n);
    printf("  %-*s  %-*s  %-*s  %14s\n", wk, "key", wd, "dtype", ws, "shape", "bytes");
    uint64_t elems = 0, bytes = 0;
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        uint64_t nb = ditto_catalog_entry_nbytes(e);
        printf("  %-*s  %-*s  %-*s  %14" PRIu64 "\n", wk, e->name, wd, ditto_dtype_name(e->dtype), ws,
               ditto_shape_str(e->shape, e->ndim, shape, sizeof shape), nb);
        elems += (uint64_t)ditto_catalog_entry_numel(e);
        bytes += nb;
    }
    printf("total: %zu tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB); file %zu bytes\n\n", c->n, elems, bytes,
           (double)bytes / (1024.0 * 1024.0), c->map.size);
    ditto_catalog_close(&c);
    return 0;
}

/* "(1,3,?,?)"; "?" for an unknown rank */
static const char *vi_shape(const DittoOnnxValueInfo *v, char *buf, size_t n)
{
    if (v->ndim < 0) {
        snprintf(buf, n, "?");
        return buf;
    }
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && k < n; i++) {
        if (v->shape[i] < 0)
            k += (size_t)snprintf(buf + k, n - k, i ? ",?" : "?");
        else
            k += (size_t)snprintf(buf + k, n - k, i ? ",%" PRId64 : "%" PRId64, v->shape[i]);
    }
    if (k < n)
        snprintf(buf + k, n - k, ")");
    return buf;
}

static const char *vi_dtype(const DittoOnnxValueInfo *v)
{
    return v->dtype < DITTO_DTYPE_COUNT ? ditto_dtype_name(v->dtype) : "?";
}

static void print_values(const char *title, const DittoOnnxValueInfo *v, size_t n)
{
    int wn = 4, wd = 5;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(v[i].name), d = (int)strlen(vi_dtype(&v[i]));
        wn = l > wn ? l : wn;
        wd = d > wd ? d : wd;
    }
    printf("%s (%zu):\n", title, n);
    char shape[DITTO_SHAPE_STR_MAX];
    for (size_t i = 0; i < n; i++)
        printf("  %-*s  %-*s  %s\n", wn, v[i].name, wd, vi_dtype(&v[i]), vi_shape(&v[i], shape, sizeof shape));
}

typedef struct OpCount {
    const char *op, *domain;
    size_t n;
} OpCount;

static int cmp_opcount(const void *a, const void *b)
{
    const OpCount *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    int r = strcmp(x->op, y->op);
    return r ? r : strcmp(x->domain, y->domain);
}

static bool default_domain(const char *d)
{
    return !*d || !strcmp(d, "ai.onnx");
}

static void print_ops(const DittoOnnxModel *m)
{
    OpCount *ops = ditto_calloc(m->n_nodes ? m->n_nodes : 1, sizeof *ops);
    size_t nops = 0;
    if (!ops) {
        printf("ops: (out of memory)\n");
        return;
    }
    for (size_t i = 0; i < m->n_nodes; i++) {
        const DittoOnnxNode *nd = &m->nodes[i];
        const char *dom = default_domain(nd->domain) ? "" : nd->domain;
        size_t k = 0;
        while (k < nops && (strcmp(ops[k].op, nd->op_type) || strcmp(ops[k].domain, dom)))
            k++;
        if (k == nops)
            ops[nops++] = (OpCount){ nd->op_type, dom, 0 };
        ops[k].n++;
    }
    qsort(ops, nops, sizeof *ops, cmp_opcount);
    int w = 7;
    for (size_t k = 0; k < nops; k++) {
        int l = (int)(strlen(ops[k].op) + (*ops[k].domain ? strlen(ops[k].domain) + 1 : 0));
        w = l > w ? l : w;
    }
    printf("ops (%zu types, %zu nodes):\n", nops, m->n_nodes);
    char name[512];
    for (size_t k = 0; k < nops; k++) {
        snprintf(name, sizeof name, "%s%s%s", ops[k].domain, *ops[k].domain ? "." : "", ops[k].op);
        printf("  %-*s  %zu\n", w, name, ops[k].n);
    }
    ditto_free(ops);
}

static void print_tensors(const char *title, const DittoCatalogEntry *e, size_t n, uint64_t *elems, uint64_t *bytes)
{
    int wk = 4, wd = 5, ws = 5;
    char shape[DITTO_SHAPE_STR_MAX];
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(e[i].name), d = (int)strlen(ditto_dtype_name(e[i].dtype)),
            s = (int)strlen(ditto_shape_str(e[i].shape, e[i].ndim, shape, sizeof shape));
        wk = l > wk ? l : wk;
        wd = d > wd ? d : wd;
        ws = s > ws ? s : ws;
    }
    printf("%s (%zu):\n", title, n);
    if (!n)
        return;
    printf("  %-*s  %-*s  %-*s  %14s\n", wk, "name", wd, "dtype", ws, "shape", "bytes");
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = ditto_catalog_entry_nbytes(&e[i]);
        printf("  %-*s  %-*s  %-*s  %14" PRIu64 "\n", wk, e[i].name, wd, ditto_dtype_name(e[i].dtype), ws,
               ditto_shape_str(e[i].shape, e[i].ndim, shape, sizeof shape), nb);
        *elems += (uint64_t)ditto_catalog_entry_numel(&e[i]);
        *bytes += nb;
    }
}

static int info_onnx(const char *path, const DittoLogger *log)
{
    DittoOnnxModel *m = NULL;
    if (ditto_onnx_open(&m, path, log) < 0)
        return 1;
    const DittoCatalog *c = m->init;
    printf("%s: ONNX model, IR %" PRId64 ", opset %" PRId64 ", producer '%s'\n", path, m->ir_version, m->opset, m->producer);
    print_values("inputs", m->inputs, m->n_inputs);
    print_values("outputs", m->outputs, m->n_outputs);
    print_ops(m);
    uint64_t ie = 0, ib = 0, ce = 0, cb = 0;
    print_tensors("initializers", c->entries, m->n_initializers, &ie, &ib);
    size_t nconst = c->n - m->n_initializers;
    if (nconst)
        print_tensors("constants from Constant nodes and tensor attributes", c->entries + m->n_initializers, nconst, &ce, &cb);
    printf("total: %zu initializers, %" PRIu64 " elements, %" PRIu64 " bytes (%.2f MiB); %zu constants, %" PRIu64
           " bytes; %zu value infos; file %zu bytes\n\n",
           m->n_initializers, ie, ib, (double)ib / (1024.0 * 1024.0), nconst, cb, m->n_value_info, c->map.size);
    ditto_onnx_close(&m);
    return 0;
}

/* A .pth is a zip ("PK"); the pre-1.6 formats start with a pickle (0x80) or are a tar. Anything else is tried as ONNX. */
static int info_file(const char *path, const DittoLogger *log)
{
    unsigned char head[262] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return info_pth(path, log);   /* its error names the file and the reason */
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if ((n >= 2 && head[0] == 'P' && head[1] == 'K') || (n >= 1 && head[0] == 0x80) || (n == sizeof head && !memcmp(head + 257, "ustar", 5)))
        return info_pth(path, log);
    return info_onnx(path, log);
}

int ditto_cmd_info(int argc, char **argv)
{
    int nfiles = 0, files_only = 0;
    for (int i = 1; i < argc; i++) {
        if (files_only || argv[i][0] != '-' || !argv[i][1]) {
            nfiles++;
        } else if (!strcmp(argv[i], "--")) {
            files_only = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ditto info: unknown option '%s' (run 'ditto info --help')\n", argv[i]);
            return 2;
        }
    }
    if (!nfiles) {
        usage(stderr);
        return 2;
    }
    DittoLogger log = ditto_logger_stderr(DITTO_LOG_WARN);
    int bad = 0;
    files_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!files_only && !strcmp(argv[i], "--")) {
            files_only = 1;
            continue;
        }
        fflush(stdout);   /* keep listings and errors in order on a shared terminal */
        bad |= info_file(argv[i], &log);
    }
    return bad ? 1 : 0;
}
