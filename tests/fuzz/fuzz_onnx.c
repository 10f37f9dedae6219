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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#include "fuzz_driver.h"

static int one(const uint8_t *data, size_t size)
{
    LLVMFuzzerTestOneInput(data, size);
    return last_loaded;
}

/* bit flips, protobuf-relevant bytes, lengths +-1 */
static void mutate(uint8_t *b, long k, uint64_t r)
{
    static const uint8_t special[] = { 0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x0a, 0x12 };
    switch (k % 4) {
    case 0:
    case 1: *b ^= (uint8_t)(1u << (r & 7)); break;
    case 2: *b = special[r % sizeof special]; break;
    default: *b = (uint8_t)(*b + ((r & 1) ? 1 : 0xff)); break;
    }
}

int main(int argc, char **argv)
{
    static const FuzzTarget t = { "fuzz_onnx", ".onnx", 20261130, one, mutate };
    return fuzz_driver_main(argc, argv, &t);
}

#endif
