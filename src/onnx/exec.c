/*
 * ONNX executor core: the value table, graph checks, topological order,
 * constant folding at open, the per-run memory plan, and binding of inputs
 * and outputs. The ops themselves live in ox_elementwise.c, ox_shape.c and
 * ox_nn.c.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "onnx/exec_internal.h"

#define BLOCK_ALIGN 256
/* A free block is reused for a request when it wastes at most this much. */
#define REUSE_SLACK ((size_t)64 << 10)

static const OxOpDef *const op_tables[] = { ditto_ox_ops_elementwise, ditto_ox_ops_shape, ditto_ox_ops_nn };

static const OxOpDef *find_op(const char *op_type)
{
    for (size_t t = 0; t < sizeof op_tables / sizeof *op_tables; t++)
        for (const OxOpDef *d = op_tables[t]; d->name; d++)
            if (!strcmp(d->name, op_type))
                return d;
    return NULL;
}

bool ditto_onnx_op_supported(const char *op_type)
{
    return op_type && find_op(op_type) != NULL;
}

void ditto_onnx_runner_params_default(DittoOnnxRunnerParams *p)
{
    memset(p, 0, sizeof *p);
    p->fold_constants = true;
}

/* ---- messages ---- */

static const char *model_name(const DittoOnnxRunner *r)
{
    return r->model->path ? r->model->path : "onnx model";
}

static void node_label(const OxNode *n, char *buf, size_t size)
{
    const DittoOnnxNode *s = n->src;
    if (s->name && s->name[0])
        snprintf(buf, size, "node '%s' (#%d %s)", s->name, n->index, s->op_type);
    else
        snprintf(buf, size, "node #%d (%s)", n->index, s->op_type);
}

int ox_fail(DittoOnnxRunner *r, const OxNode *n, int err, const char *fmt, ...)
{
    char msg[512], label[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    node_label(n, label, sizeof label);
    return ditto_fail(r->log, err, "%s: %s: %s", model_name(r), label, msg);
}

/* ---- value table ---- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int find_value(const DittoOnnxRunner *r, const char *name)
{
    if (!r->hash_cap)
        return -1;
    size_t mask = r->hash_cap - 1;
    for (size_t i = (size_t)hash_str(name) & mask;; i = (i + 1) & mask) {
        int v = r->hash[i];
        if (v < 0)
            return -1;
        if (!strcmp(r->vals[v].name, name))
            return v;
    }
}

/* Append a value; -1 (and an error) when the name exists already. */
static int add_value(DittoOnnxRunner *r, const char *name)
{
    size_t mask = r->hash_cap - 1;
    size_t i = (size_t)hash_str(name) & mask;
    for (; r->hash[i] >= 0; i = (i + 1) & mask)
        if (!strcmp(r->vals[r->hash[i]].name, name))
            return -1;
    int v = r->nvals++;
    r->hash[i] = v;
    OxValue *x = &r->vals[v];
    memset(x, 0, sizeof *x);
    x->name = name;
    x->producer = -1;
    x->graph_input = -1;
    x->block = -1;
    x->type = DITTO_DTYPE_COUNT;
    return v;
}

/* ---- small helpers for ops ---- */

OxValue *ox_in(DittoOnnxRunner *r, const OxNode *n, int i)
{
    if (i < 0 || i >= n->nin || n->in[i] < 0)
        return NULL;
    return &r->vals[n->in[i]];
}

OxValue *ox_need(DittoOnnxRunner *r, const OxNode *n, int i)
{
    OxValue *v = ox_in(r, n, i);
    if (!v)
        ox_fail(r, n, DITTO_ERR_FORMAT, "input %d is required", i);
    return v;
}

bool ox_out_used(DittoOnnxRunner *r, const OxNode *n, int k)
{
    if (k < 0 || k >= n->nout || n->out[k] < 0)
        return false;
    const OxValue *v = &r->vals[n->out[k]];
    return v->nreaders > 0 || v->is_output;
}

static const DittoOnnxAttr *ox_attr_find(const OxNode *n, const char *name)
{
    const DittoOnnxNode *s = n->src;
    for (int i = 0; i < s->n_attrs; i++)
        if (s->attrs[i].name && !strcmp(s->attrs[i].name, name))
            return &s->attrs[i];
    return NULL;
}

bool ox_has_attr(const OxNode *n, const char *name)
{
    return ox_attr_find(n, name) != NULL;
}

int64_t ox_attr_int(const OxNode *n, const char *name, int64_t def)
{
    const DittoOnnxAttr *a = ox_attr_find(n, name);
    if (!a)
        return def;
    if (a->type == DITTO_ATTR_INT)
        return a->i;
    if (a->type == DITTO_ATTR_FLOAT)
        return (int64_t)a->f;
    return def;
}

float ox_attr_float(const OxNode *n, const char *name, float def)
{
    const DittoOnnxAttr *a = ox_attr_find(n, name);
    if (!a)
        return def;
    if (a->type == DITTO_ATTR_FLOAT)
        return a->f;
    if (a->type == DITTO_ATTR_INT)
        return (float)a->i;
    return def;
}

const char *ox_attr_str(const OxNode *n, const char *name, const char *def)
{
    const DittoOnnxAttr *a = ox_attr_find(n, name);
    return a && a->type == DITTO_ATTR_STRING && a->s ? a->s : def;
}

int ox_attr_ints(const OxNode *n, const char *name, const int64_t **v)
{
    const DittoOnnxAttr *a = ox_attr_find(n, name);
    *v = NULL;
    if (!a)
        return -1;
    if (a->type == DITTO_ATTR_INTS) {
        *v = a->ints;
        return (int)a->n;
    }
    if (a->type == DITTO_ATTR_INT) {
        *v = &a->i;
        return 1;
    }
    return -1;
}

int ox_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out)
{
    int nd = na > nb ? na : nb;
    if (nd > DITTO_MAX_DIMS)
        return DITTO_ERR_SHAPE;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - na), ib = i - (nd - nb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return DITTO_ERR_SHAPE;
        out[i] = da == 1 ? db : da;
    }
    *nout = nd;
    return 0;
}

bool ox_axis(int64_t axis, int ndim, int *out)
{
    if (axis < 0)
        axis += ndim;
    if (axis < 0 || axis >= ndim)
        return false;
    *out = (int)axis;
    return true;
}

/* ---- memory plan ---- */

static size_t round_up(size_t n)
{
    n = n ? n : 1;
    return (n + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
}

static void *host_scratch(DittoOnnxRunner *r, size_t bytes)
{
    if (!r->host_arena_init) {
        if (ditto_arena_init(&r->host_arena, &ditto_host_allocator, 0) < 0)
            return NULL;
        r->host_arena_init = true;
    }
    return ditto_arena_bytes(&r->host_arena, round_up(bytes));
}

static bool host_is_device(const DittoOnnxRunner *r)
{
    return r->be->device == DITTO_DEVICE_CPU;
}

/* Best-fit block of at least `bytes` from the free list, else a new one carved from ws. -1 on OOM. */
static int plan_alloc(DittoOnnxRunner *r, size_t bytes)
{
    bytes = round_up(bytes);
    int best = -1;
    for (int i = 0; i < r->nblocks; i++) {
        const OxBlock *b = &r->blocks[i];
        if (b->refs == 0 && b->size >= bytes && (b->size <= 2 * bytes || b->size - bytes <= REUSE_SLACK) &&
            (best < 0 || b->size < r->blocks[best].size))
            best = i;
    }
    if (best >= 0) {
        r->blocks[best].refs = 1;
        return best;
    }
    if (r->nblocks == r->capblocks) {
        int cap = r->capblocks ? 2 * r->capblocks : 64;
        OxBlock *nb = ditto_realloc(r->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return -1;
        r->blocks = nb;
        r->capblocks = cap;
    }
    void *p = ditto_arena_bytes(r->ws, bytes);
    if (!p)
        return -1;
    r->run_bytes += bytes;
    OxBlock *b = &r->blocks[r->nblocks];
    b->ptr = p;
    b->size = bytes;
    b->refs = 1;
    return r->nblocks++;
}

static void block_unref(DittoOnnxRunner *r, int b)
{
    if (b >= 0 && r->blocks[b].refs > 0)
        r->blocks[b].refs--;
}

static int storage_alloc(DittoOnnxRunner *r, size_t bytes, bool host, void **ptr, int *block)
{
    *block = -1;
    if (host && !host_is_device(r)) {
        *ptr = host_scratch(r, bytes);
        return *ptr ? 0 : DITTO_ERR_NOMEM;
    }
    int b = plan_alloc(r, bytes);
    if (b < 0)
        return DITTO_ERR_NOMEM;
    *ptr = r->blocks[b].ptr;
    *block = b;
    return 0;
}

int ox_temp(DittoOnnxRunner *r, DittoDType storage, int ndim, const int64_t *shape, bool host, DittoTensor *t)
{
    *t = ditto_tensor(NULL, storage, ndim, shape);
    size_t bytes = ditto_tensor_nbytes(t);
    void *p;
    int b;
    int rc = storage_alloc(r, bytes, host, &p, &b);
    if (rc < 0)
        return ditto_fail(r->log, rc, "%s: out of memory for a %zu-byte temporary", model_name(r), bytes);
    if (b >= 0) {
        if (r->ntemps == r->captemps) {
            int cap = r->captemps ? 2 * r->captemps : 16;
            int *nt = ditto_realloc(r->temps, (size_t)cap * sizeof *nt);
            if (!nt) {
                block_unref(r, b);
                return DITTO_ERR_NOMEM;
            }
            r->temps = nt;
            r->captemps = cap;
        }
        r->temps[r->ntemps++] = b;
    }
    t->data = p;
    t->device = host ? DITTO_DEVICE_CPU : r->be->device;
    return 0;
}

/* Persistent storage of a constant: host copy in cbuf, or device copy in cdev. */
static int const_alloc(DittoOnnxRunner *r, OxValue *v, size_t bytes, bool host)
{
    DittoBuffer *b = host ? &v->cbuf : &v->cdev;
    const DittoAllocator *a = host ? &ditto_host_allocator : &r->be->allocator;
    int rc = ditto_buffer_alloc(b, a, bytes ? bytes : 1);
    if (rc < 0)
        return ditto_fail(r->log, rc, "%s: out of memory for constant '%s' (%zu bytes)", model_name(r), v->name, bytes);
    r->const_bytes += bytes;
    return 0;
}

static void const_free(DittoOnnxRunner *r, OxValue *v)
{
    if (v->cbuf.ptr)
        r->const_bytes -= v->cbuf.size;
    if (v->cdev.ptr)
        r->const_bytes -= v->cdev.size;
    ditto_buffer_free(&v->cbuf);
    ditto_buffer_free(&v->cdev);
    memset(&v->t, 0, sizeof v->t);
    memset(&v->dev, 0, sizeof v->dev);
    v->set = false;
}

int ox_alloc(DittoOnnxRunner *r, const OxNode *n, int k, DittoDType type, int ndim, const int64_t *shape, bool host, DittoTensor *t)
{
    if (k >= n->nout || n->out[k] < 0) {
        /* an omitted output: compute into a temporary nobody reads */
        return ox_temp(r, ox_storage(type), ndim, shape, host, t);
    }
    OxValue *v = &r->vals[n->out[k]];
    DittoDType st = ox_storage(type);
    DittoTensor d = ditto_tensor(NULL, st, ndim, shape);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "negative output dimension %lld", (long long)shape[i]);
    size_t bytes = ditto_tensor_nbytes(&d);
    if (r->folding) {
        bool on_host = host || host_is_device(r);
        DITTO_TRY(const_alloc(r, v, bytes, on_host));
        d.data = on_host ? v->cbuf.ptr : v->cdev.ptr;
        d.device = on_host ? DITTO_DEVICE_CPU : r->be->device;
        v->is_const = true;
        v->block = -1;
        v->dev = on_host && !host_is_device(r) ? (DittoTensor){ 0 } : d;
    } else {
        void *p;
        int rc = storage_alloc(r, bytes, host, &p, &v->block);
        if (rc < 0)
            return ox_fail(r, n, rc, "out of memory for output '%s' (%zu bytes)", v->name, bytes);
        d.data = p;
        d.device = host ? DITTO_DEVICE_CPU : r->be->device;
        memset(&v->dev, 0, sizeof v->dev);
    }
    v->t = d;
    v->host = host;
    v->type = type;
    v->set = true;
    v->uses_left = v->nuses;
    *t = d;
    return 0;
}

static int alias_common(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, int64_t offset, int ndim,
                        const int64_t *shape, DittoDType type)
{
    DittoTensor view = ditto_tensor(NULL, src->t.dtype, ndim, shape);
    if (ditto_tensor_numel(&view) + offset > ditto_tensor_numel(&src->t))
        return ox_fail(r, n, DITTO_ERR_SHAPE, "view of %lld elements past a tensor of %lld", (long long)ditto_tensor_numel(&view),
                       (long long)ditto_tensor_numel(&src->t));
    view.data = (char *)src->t.data + (size_t)offset * ditto_dtype_size(src->t.dtype);
    view.device = src->t.device;
    if (k >= n->nout || n->out[k] < 0)
        return 0;
    if (r->folding) {
        /* constants own their memory: copy rather than share */
        DittoTensor d;
        DittoTensor sv;
        DITTO_TRY(src->host || host_is_device(r) ? ox_host(r, src, &sv) : ox_dev(r, src, &sv));
        view.data = (char *)sv.data + (size_t)offset * ditto_dtype_size(src->t.dtype);
        view.device = sv.device;
        DITTO_TRY(ox_alloc(r, n, k, type, ndim, shape, src->host, &d));
        if (d.device == DITTO_DEVICE_CPU && (src->host || host_is_device(r)))
            memcpy(d.data, view.data, ditto_tensor_nbytes(&d));
        else
            DITTO_TRY(ditto_op_copy(r->be, &view, &d));
        return 0;
    }
    OxValue *v = &r->vals[n->out[k]];
    v->t = view;
    v->host = src->host;
    v->type = type;
    v->block = src->block;
    if (v->block >= 0)
        r->blocks[v->block].refs++;
    v->set = true;
    v->uses_left = v->nuses;
    if (src->is_const) {
        /* a view of a constant: keep the device copy in step */
        v->dev = src->dev;
        if (v->dev.data) {
            v->dev.data = (char *)src->dev.data + (size_t)offset * ditto_dtype_size(src->t.dtype);
            v->dev.ndim = ndim;
            memcpy(v->dev.shape, shape, sizeof(int64_t) * (size_t)ndim);
            ditto_tensor_set_contiguous(&v->dev);
        }
    } else {
        memset(&v->dev, 0, sizeof v->dev);
    }
    return 0;
}

int ox_alias(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, int ndim, const int64_t *shape, DittoDType type)
{
    if (ox_storage(type) != src->t.dtype)
        return ox_fail(r, n, DITTO_ERR_INVAL, "internal: view changes the storage type");
    return alias_common(r, n, k, src, 0, ndim, shape, type);
}

int ox_alias_at(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, int64_t offset, int ndim, const int64_t *shape)
{
    return alias_common(r, n, k, src, offset, ndim, shape, src->type);
}

int ox_try_inplace(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, DittoDType type, int ndim, const int64_t *shape,
                   DittoTensor *t)
{
    if (r->folding || k >= n->nout || n->out[k] < 0 || !src || src->block < 0 || src->host || src->is_output ||
        src->uses_left != 1 || r->blocks[src->block].refs != 1 || ox_storage(type) != src->t.dtype || src->t.ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (src->t.shape[i] != shape[i])
            return 0;
    OxValue *v = &r->vals[n->out[k]];
    v->t = src->t;
    v->host = false;
    v->type = type;
    v->block = src->block;
    r->blocks[v->block].refs++;
    v->set = true;
    v->uses_left = v->nuses;
    memset(&v->dev, 0, sizeof v->dev);
    *t = v->t;
    return 1;
}

int ox_reshape_output(DittoOnnxRunner *r, const OxNode *n, int k, int ndim, const int64_t *shape)
{
    if (k >= n->nout || n->out[k] < 0)
        return 0;
    OxValue *v = &r->vals[n->out[k]];
    DittoTensor t = v->t;
    t.ndim = ndim;
    memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
    ditto_tensor_set_contiguous(&t);
    if (ditto_tensor_numel(&t) != ditto_tensor_numel(&v->t))
        return ox_fail(r, n, DITTO_ERR_SHAPE, "internal: reshape changes the element count");
    v->t = t;
    if (v->dev.data) {
        void *p = v->dev.data;
        DittoDevice d = v->dev.device;
        v->dev = t;
        v->dev.data = p;
        v->dev.device = d;
    }
    return 0;
}

/* ---- placement ---- */

int ox_dev(DittoOnnxRunner *r, const OxValue *v, DittoTensor *t)
{
    if (!v->set)
        return ditto_fail(r->log, DITTO_ERR_INVAL, "%s: value '%s' used before it was computed", model_name(r), v->name);
    if (host_is_device(r)) {
        *t = v->t;
        t->device = DITTO_DEVICE_CPU;
        return 0;
    }
    if (!v->host) {
        *t = v->t;
        return 0;
    }
    if (v->dev.data) {
        *t = v->dev;
        return 0;
    }
    DITTO_TRY(ox_temp(r, v->t.dtype, v->t.ndim, v->t.shape, false, t));
    return r->be->upload(r->be, t->data, v->t.data, ditto_tensor_nbytes(t));
}

int ox_host(DittoOnnxRunner *r, const OxValue *v, DittoTensor *t)
{
    if (!v->set)
        return ditto_fail(r->log, DITTO_ERR_INVAL, "%s: value '%s' used before it was computed", model_name(r), v->name);
    if (host_is_device(r) || v->host) {
        *t = v->t;
        t->device = DITTO_DEVICE_CPU;
        return 0;
    }
    *t = ditto_tensor(NULL, v->t.dtype, v->t.ndim, v->t.shape);
    size_t bytes = ditto_tensor_nbytes(t);
    t->data = host_scratch(r, bytes);
    if (!t->data)
        return DITTO_ERR_NOMEM;
    int rc = r->be->sync ? r->be->sync(r->be) : 0;
    if (rc >= 0 && bytes)
        rc = r->be->download(r->be, t->data, v->t.data, bytes);
    return rc;
}

int ox_read_ints(DittoOnnxRunner *r, const OxNode *n, const OxValue *v, int64_t *out, int max, int *count)
{
    DittoTensor t;
    DITTO_TRY(ox_host(r, v, &t));
    int64_t numel = ditto_tensor_numel(&t);
    if (numel > max)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "'%s' has %lld elements, at most %d expected", v->name, (long long)numel, max);
    if (ox_is_float(v->type)) {
        for (int64_t i = 0; i < numel; i++)
            out[i] = (int64_t)((const float *)t.data)[i];
    } else {
        memcpy(out, t.data, (size_t)numel * sizeof *out);
    }
    *count = (int)numel;
    return 0;
}

int ox_read_scalar(DittoOnnxRunner *r, const OxNode *n, const OxValue *v, double *out)
{
    DittoTensor t;
    DITTO_TRY(ox_host(r, v, &t));
    if (ditto_tensor_numel(&t) != 1)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "'%s' must hold one element", v->name);
    *out = t.dtype == DITTO_F32 ? (double)*(const float *)t.data : (double)*(const int64_t *)t.data;
    return 0;
}

/* ---- strided copies ---- */

void ox_host_copy(const DittoTensor *src, DittoTensor *dst)
{
    size_t es = ditto_dtype_size(src->dtype);
    int64_t numel = ditto_tensor_numel(dst);
    if (numel == 0)
        return;
    if (src->ndim == 0 || ditto_tensor_is_contiguous(src)) {
        memcpy(dst->data, src->data, (size_t)numel * es);
        return;
    }
    int nd = src->ndim, last = nd - 1;
    int64_t n = src->shape[last], rows = numel / n, ls = src->stride[last];
    char *d = dst->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = 0;
        for (int i = last - 1; i >= 0; i--) {
            off += (rem % src->shape[i]) * src->stride[i];
            rem /= src->shape[i];
        }
        const char *s = (const char *)src->data + off * (int64_t)es;
        if (es == 4)
            for (int64_t i = 0; i < n; i++)
                memcpy(d + i * 4, s + i * ls * 4, 4);
        else
            for (int64_t i = 0; i < n; i++)
                memcpy(d + i * (int64_t)es, s + i * ls * (int64_t)es, es);
        d += n * (int64_t)es;
    }
}

int ox_materialize(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *src, const DittoTensor *view, DittoDType type)
{
    DittoTensor d;
    DITTO_TRY(ox_alloc(r, n, k, type, view->ndim, view->shape, src->host, &d));
    if (ditto_tensor_numel(&d) == 0)
        return 0;
    if (src->host) {
        /* view is over src->t; src may be a device-only constant on a device backend */
        DittoTensor sh;
        DITTO_TRY(ox_host(r, src, &sh));
        DittoTensor v = *view;
        v.data = (char *)sh.data + ((const char *)view->data - (const char *)src->t.data);
        ox_host_copy(&v, &d);
        return 0;
    }
    DittoTensor v = *view;
    v.device = r->be->device;
    int rc = ditto_op_copy(r->be, &v, &d);
    return rc < 0 ? ox_fail(r, n, rc, "copy failed") : 0;
}

/* ---- open ---- */

static int fail_model(DittoOnnxRunner *r, int err, const char *fmt, ...) DITTO_PRINTF(3, 4);
static int fail_model(DittoOnnxRunner *r, int err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ditto_fail(r->log, err, "%s: %s", model_name(r), msg);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const void *const *)a, y = (uintptr_t)*(const void *const *)b;
    return x < y ? -1 : x > y;
}

/* Convert an initializer (or any catalog tensor) into storage of value v on the host (and the device). */
static int materialize_entry(DittoOnnxRunner *r, OxValue *v, const DittoCatalogEntry *e)
{
    if ((unsigned)e->dtype >= DITTO_DTYPE_COUNT)
        return fail_model(r, DITTO_ERR_UNSUPPORTED, "tensor '%s' has an element type this executor does not support", e->name);
    if (e->ndim < 0 || e->ndim > DITTO_MAX_DIMS)
        return fail_model(r, DITTO_ERR_UNSUPPORTED, "tensor '%s' has rank %d (at most %d supported)", e->name, e->ndim, DITTO_MAX_DIMS);
    DittoDType st = ox_storage(e->dtype);
    DittoTensor t = ditto_tensor(NULL, st, e->ndim, e->shape);
    int64_t numel = ditto_tensor_numel(&t);
    bool contiguous = true;
    int64_t s = 1;
    for (int i = e->ndim - 1; i >= 0; i--) {
        if (e->shape[i] != 1 && e->stride[i] != s)
            contiguous = false;
        s *= e->shape[i];
    }
    v->type = e->dtype;
    v->host = true;
    v->is_const = true;
    v->set = true;
    v->block = -1;
    if (e->dtype == st && contiguous && ((uintptr_t)e->data % ditto_dtype_size(st)) == 0) {
        /* read in place from the model's mapping (never written: constants are not in the memory plan) */
        t.data = (void *)(uintptr_t)e->data;
    } else {
        DITTO_TRY(const_alloc(r, v, ditto_tensor_nbytes(&t), true));
        t.data = v->cbuf.ptr;
        if (numel > 0) {
            if (st == DITTO_F32) {
                int rc = ditto_catalog_read_f32(r->model->init, e, t.data);
                if (rc < 0)
                    return fail_model(r, rc, "cannot read tensor '%s'", e->name);
            } else if (contiguous) {
                ditto_convert_unaligned(t.data, DITTO_I64, e->data, e->dtype, (size_t)numel);
            } else {
                return fail_model(r, DITTO_ERR_UNSUPPORTED, "integer tensor '%s' is not contiguous", e->name);
            }
        }
    }
    t.device = DITTO_DEVICE_CPU;
    v->t = t;
    v->dev = host_is_device(r) ? t : (DittoTensor){ 0 };
    return 0;
}

int ox_const_entry(DittoOnnxRunner *r, const OxNode *n, int k, const DittoCatalogEntry *e)
{
    if ((unsigned)e->dtype >= DITTO_DTYPE_COUNT || e->ndim < 0 || e->ndim > DITTO_MAX_DIMS)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "tensor '%s' has an unsupported element type or rank", e->name);
    DittoTensor t;
    DITTO_TRY(ox_alloc(r, n, k, e->dtype, e->ndim, e->shape, true, &t));
    int64_t numel = ditto_tensor_numel(&t);
    if (numel == 0)
        return 0;
    if (t.dtype == DITTO_F32) {
        int rc = ditto_catalog_read_f32(r->model->init, e, t.data);
        if (rc < 0)
            return ox_fail(r, n, rc, "cannot read tensor '%s'", e->name);
    } else {
        ditto_convert_unaligned(t.data, DITTO_I64, e->data, e->dtype, (size_t)numel);
    }
    return 0;
}

/* Device copy of a host constant (device backends). */
static int upload_const(DittoOnnxRunner *r, OxValue *v)
{
    if (host_is_device(r) || !v->host || v->dev.data)
        return 0;
    size_t bytes = ditto_tensor_nbytes(&v->t);
    DITTO_TRY(const_alloc(r, v, bytes, false));
    v->dev = v->t;
    v->dev.data = v->cdev.ptr;
    v->dev.device = r->be->device;
    return bytes ? r->be->upload(r->be, v->cdev.ptr, v->t.data, bytes) : 0;
}

/*
 * Table ops an ONNX op always runs on (besides copy/unary/binary, which every
 * backend has), so that a backend without them fails at open, not mid-run.
 * Ops that may run on the host (Gather, Where, Concat of shapes, ...) are not
 * listed: they need the table only for device tensors.
 */
static const struct { const char *op; DittoOp need[2]; } op_needs[] = {
    { "Conv", { DITTO_OP_CONV, DITTO_OP_COUNT } },
    { "ConvTranspose", { DITTO_OP_CONV_TRANSPOSE, DITTO_OP_COUNT } },
    { "MatMul", { DITTO_OP_MATMUL, DITTO_OP_COUNT } },
    { "Gemm", { DITTO_OP_MATMUL, DITTO_OP_LINEAR } },
    { "MaxPool", { DITTO_OP_POOL, DITTO_OP_COUNT } },
    { "AveragePool", { DITTO_OP_POOL, DITTO_OP_COUNT } },
    { "GlobalAveragePool", { DITTO_OP_REDUCE, DITTO_OP_COUNT } },
    { "GlobalMaxPool", { DITTO_OP_REDUCE, DITTO_OP_COUNT } },
    { "BatchNormalization", { DITTO_OP_BATCH_NORM, DITTO_OP_COUNT } },
    { "InstanceNormalization", { DITTO_OP_INSTANCE_NORM, DITTO_OP_COUNT } },
    { "LayerNormalization", { DITTO_OP_LAYER_NORM, DITTO_OP_COUNT } },
    { "GroupNormalization", { DITTO_OP_GROUP_NORM, DITTO_OP_COUNT } },
    { "Softmax", { DITTO_OP_SOFTMAX, DITTO_OP_COUNT } },
    { "LogSoftmax", { DITTO_OP_SOFTMAX, DITTO_OP_COUNT } },
    { "LpNormalization", { DITTO_OP_REDUCE, DITTO_OP_COUNT } },
    { "Resize", { DITTO_OP_RESIZE, DITTO_OP_COUNT } },
    { "Upsample", { DITTO_OP_RESIZE, DITTO_OP_COUNT } },
    { "PRelu", { DITTO_OP_PRELU, DITTO_OP_COUNT } },
    { "GridSample", { DITTO_OP_GRID_SAMPLE, DITTO_OP_COUNT } },
};

/* The first table op that op_type needs and the backend lacks, or DITTO_OP_COUNT. */
static DittoOp backend_lacks(const DittoBackend *be, const char *op_type)
{
    static const DittoOp always[3] = { DITTO_OP_COPY, DITTO_OP_UNARY, DITTO_OP_BINARY };
    for (int i = 0; i < 3; i++)
        if (!ditto_ops_has(&be->ops, always[i]))
            return always[i];
    for (size_t i = 0; i < sizeof op_needs / sizeof *op_needs; i++) {
        if (strcmp(op_needs[i].op, op_type))
            continue;
        for (int k = 0; k < 2; k++)
            if (op_needs[i].need[k] != DITTO_OP_COUNT && !ditto_ops_has(&be->ops, op_needs[i].need[k]))
                return op_needs[i].need[k];
    }
    return DITTO_OP_COUNT;
}

static int build_graph(DittoOnnxRunner *r)
{
    const DittoOnnxModel *m = r->model;
    size_t ninit = m->init ? m->init->n : 0;
    size_t nv = ninit + m->n_inputs;
    for (size_t i = 0; i < m->n_nodes; i++)
        nv += (size_t)(m->nodes[i].n_outputs > 0 ? m->nodes[i].n_outputs : 0);
    if (nv > (size_t)1 << 28 || m->n_nodes > (size_t)1 << 26)
        return fail_model(r, DITTO_ERR_FORMAT, "graph too large");
    r->hash_cap = 16;
    while (r->hash_cap < 2 * nv)
        r->hash_cap *= 2;
    r->vals = ditto_calloc(nv ? nv : 1, sizeof *r->vals);
    r->hash = ditto_malloc(r->hash_cap * sizeof *r->hash);
    r->nodes = ditto_calloc(m->n_nodes ? m->n_nodes : 1, sizeof *r->nodes);
    r->order = ditto_calloc(m->n_nodes ? m->n_nodes : 1, sizeof *r->order);
    r->run = ditto_calloc(m->n_nodes ? m->n_nodes : 1, sizeof *r->run);
    if (!r->vals || !r->hash || !r->nodes || !r->order || !r->run)
        return DITTO_ERR_NOMEM;
    memset(r->hash, 0xff, r->hash_cap * sizeof *r->hash);
    r->nnodes = (int)m->n_nodes;

    for (int i = 0; i < r->nnodes; i++) {
        const DittoOnnxNode *s = &m->nodes[i];
        OxNode *n = &r->nodes[i];
        n->src = s;
        n->index = i;
        n->nin = s->n_inputs;
        n->nout = s->n_outputs;
        if (n->nin < 0 || n->nout < 0)
            return fail_model(r, DITTO_ERR_FORMAT, "node #%d has a negative input or output count", i);
        n->in = ditto_malloc((size_t)(n->nin + n->nout + 1) * sizeof(int));
        if (!n->in)
            return DITTO_ERR_NOMEM;
        n->out = n->in + n->nin;
        const char *dom = s->domain ? s->domain : "";
        /* unsupported ops are reported once the nodes feeding the outputs are known (check_ops) */
        n->def = dom[0] && strcmp(dom, "ai.onnx") ? NULL : find_op(s->op_type ? s->op_type : "");
        for (int k = 0; k < n->nout; k++) {
            const char *name = s->outputs[k];
            if (!name || !name[0]) {
                n->out[k] = -1;
                continue;
            }
            int v = add_value(r, name);
            if (v < 0)
                return ox_fail(r, n, DITTO_ERR_FORMAT, "output '%s' is already defined elsewhere", name);
            r->vals[v].producer = i;
            n->out[k] = v;
        }
    }
    /*
     * Initializers. The catalog also holds the tensors of node attributes
     * (Constant values, named after the Constant's output, and others such
     * as ConstantOfShape's value): those are not graph values.
     */
    size_t nattr = 0;
    for (size_t i = 0; i < m->n_nodes; i++)
        for (int a = 0; a < m->nodes[i].n_attrs; a++)
            nattr += m->nodes[i].attrs[a].type == DITTO_ATTR_TENSOR;
    const void **attr_tensors = ditto_malloc((nattr ? nattr : 1) * sizeof *attr_tensors);
    if (!attr_tensors)
        return DITTO_ERR_NOMEM;
    nattr = 0;
    for (size_t i = 0; i < m->n_nodes; i++)
        for (int a = 0; a < m->nodes[i].n_attrs; a++)
            if (m->nodes[i].attrs[a].type == DITTO_ATTR_TENSOR)
                attr_tensors[nattr++] = m->nodes[i].attrs[a].tensor;
    qsort(attr_tensors, nattr, sizeof *attr_tensors, cmp_ptr);
    for (size_t i = 0; i < ninit; i++) {
        const DittoCatalogEntry *e = &m->init->entries[i];
        const void *key = e;
        if (nattr && bsearch(&key, attr_tensors, nattr, sizeof *attr_tensors, cmp_ptr))
            continue;
        int existing = find_value(r, e->name);
        if (existing >= 0 && r->vals[existing].producer >= 0 && !strcmp(r->nodes[r->vals[existing].producer].src->op_type, "Constant"))
            continue;   /* value_float(s) / value_int(s) of a Constant */
        int v = add_value(r, e->name);
        if (v < 0) {
            ditto_free(attr_tensors);
            return fail_model(r, DITTO_ERR_FORMAT, "initializer '%s' is defined twice (or also a node output)", e->name);
        }
        r->vals[v].init = e;
        r->vals[v].is_const = true;
        r->vals[v].type = e->dtype;
    }
    ditto_free(attr_tensors);
    for (size_t i = 0; i < m->n_inputs; i++) {
        if (find_value(r, m->inputs[i].name) >= 0)
            continue;   /* an initializer listed as input: a constant */
        int v = add_value(r, m->inputs[i].name);
        if (v < 0)
            return fail_model(r, DITTO_ERR_FORMAT, "graph input '%s' defined twice", m->inputs[i].name);
        r->vals[v].graph_input = (int)i;
        r->vals[v].type = m->inputs[i].dtype;
    }
    for (int i = 0; i < r->nnodes; i++) {
        OxNode *n = &r->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            const char *name = n->src->inputs[k];
            if (!name || !name[0]) {
                n->in[k] = -1;
                continue;
            }
            n->in[k] = find_value(r, name);
            if (n->in[k] < 0)
                return ox_fail(r, n, DITTO_ERR_FORMAT, "input '%s' is not a graph input, initializer or node output", name);
        }
    }
    for (size_t i = 0; i < m->n_outputs; i++) {
        int v = find_value(r, m->outputs[i].name);
        if (v < 0)
            return fail_model(r, DITTO_ERR_FORMAT, "graph output '%s' is never produced", m->outputs[i].name);
        r->vals[v].is_output = true;
    }
    return 0;
}

/* Kahn's algorithm, ties in file order. */
static int topo_sort(DittoOnnxRunner *r)
{
    int n = r->nnodes;
    int *indeg = ditto_calloc((size_t)(n ? n : 1), sizeof *indeg);
    int *cstart = ditto_calloc((size_t)r->nvals + 1, sizeof *cstart);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += r->nodes[i].nin;
    int *cons = ditto_malloc((size_t)(total ? total : 1) * sizeof *cons);
    int *fill = ditto_calloc((size_t)r->nvals + 1, sizeof *fill);
    int rc = 0;
    if (!indeg || !cstart || !cons || !fill) {
        rc = DITTO_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r->nodes[i].nin; k++) {
            int v = r->nodes[i].in[k];
            if (v >= 0 && r->vals[v].producer >= 0) {
                indeg[i]++;
                cstart[v + 1]++;
            }
        }
    for (int v = 0; v < r->nvals; v++)
        cstart[v + 1] += cstart[v];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r->nodes[i].nin; k++) {
            int v = r->nodes[i].in[k];
            if (v >= 0 && r->vals[v].producer >= 0)
                cons[cstart[v] + fill[v]++] = i;
        }
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++)
        if (!indeg[i])
            r->order[tail++] = i;
    while (head < tail) {
        const OxNode *nd = &r->nodes[r->order[head++]];
        for (int k = 0; k < nd->nout; k++) {
            int v = nd->out[k];
            if (v < 0)
                continue;
            for (int c = cstart[v]; c < cstart[v + 1]; c++)
                if (--indeg[cons[c]] == 0)
                    r->order[tail++] = cons[c];
        }
    }
    if (tail < n) {
        for (int i = 0; i < n; i++)
            if (indeg[i]) {
                rc = ox_fail(r, &r->nodes[i], DITTO_ERR_FORMAT, "the graph has a cycle through this node");
                break;
            }
    }
done:
    ditto_free(indeg);
    ditto_free(cstart);
    ditto_free(cons);
    ditto_free(fill);
    return rc;
}

/*
 * Every node feeding an output must have an op this executor (and the
 * backend) supports: the error names the op and the node. A node feeding
 * nothing (exporters leave e.g. RandomUniform of layer-drop behind) is never
 * evaluated, so its op only draws a warning.
 */
static int check_ops(DittoOnnxRunner *r)
{
    for (int i = 0; i < r->nnodes; i++) {
        const OxNode *n = &r->nodes[i];
        const DittoOnnxNode *s = n->src;
        const char *dom = s->domain ? s->domain : "", *op = s->op_type ? s->op_type : "";
        bool foreign = dom[0] && strcmp(dom, "ai.onnx");
        if (!n->def) {
            if (n->needed) {
                if (foreign)
                    return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "unsupported op '%s' of domain '%s'", op, dom);
                return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "unsupported op '%s'", op);
            }
            char label[300];
            node_label(n, label, sizeof label);
            ditto_log(r->log, DITTO_LOG_WARN, "%s: %s: unsupported op '%s%s%s' ignored: it feeds no graph output", model_name(r), label,
                      dom, foreign ? ":" : "", op);
            continue;
        }
        DittoOp lack = n->needed ? backend_lacks(r->be, op) : DITTO_OP_COUNT;
        if (lack != DITTO_OP_COUNT)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "the %s backend lacks op %s", r->be->name, ditto_op_name(lack));
    }
    return 0;
}

static void release_temps(DittoOnnxRunner *r)
{
    for (int i = 0; i < r->ntemps; i++)
        block_unref(r, r->temps[i]);
    r->ntemps = 0;
}

static int exec_node(DittoOnnxRunner *r, const OxNode *n)
{
    int rc = n->def->run(r, n);
    release_temps(r);
    if (rc < 0)
        return rc;
    for (int k = 0; k < n->nout; k++) {
        int v = n->out[k];
        if (v >= 0 && !r->vals[v].set && ox_out_used(r, n, k))
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "output %d ('%s') is not produced by this executor", k, r->vals[v].name);
    }
    return 0;
}

static int fold_constants(DittoOnnxRunner *r)
{
    DittoArena scratch;
    DITTO_TRY(ditto_arena_init(&scratch, &r->be->allocator, 0));
    DittoArenaMark start = ditto_arena_mark(&scratch);
    r->ws = &scratch;
    r->folding = true;
    int rc = 0;
    for (int i = 0; i < r->nnodes && rc >= 0; i++) {
        OxNode *n = &r->nodes[r->order[i]];
        if (!n->needed)
            continue;
        bool all_const = r->params.fold_constants || n->nin == 0;
        for (int k = 0; k < n->nin && all_const; k++) {
            int v = n->in[k];
            if (v >= 0 && !r->vals[v].is_const)
                all_const = false;
        }
        if (!all_const)
            continue;
        for (int k = 0; k < n->nin && rc >= 0; k++) {
            OxValue *v = n->in[k] >= 0 ? &r->vals[n->in[k]] : NULL;
            if (v && v->init && !v->set)
                rc = materialize_entry(r, v, v->init);
        }
        if (rc >= 0)
            rc = exec_node(r, n);
        n->folded = rc >= 0;
        r->nblocks = 0;   /* the scratch arena is reused from the start for the next node */
        ditto_arena_release(&scratch, start);
    }
    r->folding = false;
    r->ws = NULL;
    r->nblocks = 0;
    ditto_arena_free(&scratch);
    return rc;
}

static int prepare(DittoOnnxRunner *r)
{
    /* nodes needed for the graph outputs */
    for (int v = 0; v < r->nvals; v++)
        if (r->vals[v].is_output && r->vals[v].producer >= 0)
            r->nodes[r->vals[v].producer].needed = true;
    for (int i = r->nnodes - 1; i >= 0; i--) {
        OxNode *n = &r->nodes[r->order[i]];
        if (!n->needed)
            continue;
        for (int k = 0; k < n->nin; k++) {
            int v = n->in[k];
            if (v >= 0 && r->vals[v].producer >= 0)
                r->nodes[r->vals[v].producer].needed = true;
        }
    }
    for (int i = 0; i < r->nnodes; i++) {
        const OxNode *n = &r->nodes[i];
        if (n->needed)
            for (int k = 0; k < n->nin; k++)
                if (n->in[k] >= 0)
                    r->vals[n->in[k]].nreaders++;
    }
    DITTO_TRY(check_ops(r));
    DITTO_TRY(fold_constants(r));
    r->nrun = r->nfolded = r->ndead = 0;
    for (int i = 0; i < r->nnodes; i++) {
        OxNode *n = &r->nodes[r->order[i]];
        if (!n->needed)
            r->ndead++;
        else if (n->folded)
            r->nfolded++;
        else
            r->run[r->nrun++] = r->order[i];
    }
    /* static use counts; constants still needed get their storage (and device copy) */
    bool *keep = ditto_calloc((size_t)r->nvals + 1, sizeof *keep);
    if (!keep)
        return DITTO_ERR_NOMEM;
    for (int i = 0; i < r->nrun; i++) {
        const OxNode *n = &r->nodes[r->run[i]];
        for (int k = 0; k < n->nin; k++) {
            int v = n->in[k];
            if (v < 0)
                continue;
            if (r->vals[v].is_const)
                keep[v] = true;
            else
                r->vals[v].nuses++;
        }
    }
    int rc = 0;
    for (int v = 0; v < r->nvals && rc >= 0; v++) {
        OxValue *x = &r->vals[v];
        if (!x->is_const)
            continue;
        if (keep[v] || x->is_output) {
            if (x->init && !x->set)
                rc = materialize_entry(r, x, x->init);
            if (rc >= 0 && ox_is_float(x->type))
                rc = upload_const(r, x);
        } else {
            const_free(r, x);   /* read only by folded nodes */
        }
    }
    ditto_free(keep);
    return rc;
}

int ditto_onnx_runner_open(DittoOnnxRunner **out, const DittoOnnxModel *model, DittoBackend *be, const DittoOnnxRunnerParams *p)
{
    *out = NULL;
    if (!model || !be)
        return DITTO_ERR_INVAL;
    DittoOnnxRunner *r = ditto_calloc(1, sizeof *r);
    if (!r)
        return DITTO_ERR_NOMEM;
    r->model = model;
    r->be = be;
    r->log = &be->log;
    r->opset = model->opset > 0 ? model->opset : 1;
    if (p)
        r->params = *p;
    else
        ditto_onnx_runner_params_default(&r->params);
    int rc = build_graph(r);
    if (rc >= 0)
        rc = topo_sort(r);
    if (rc >= 0)
        rc = prepare(r);
    if (rc < 0) {
        if (rc == DITTO_ERR_NOMEM)
            ditto_fail(r->log, rc, "%s: out of memory while opening the graph", model_name(r));
        ditto_onnx_runner_close(&r);
        return rc;
    }
    *out = r;
    return 0;
}

void ditto_onnx_runner_close(DittoOnnxRunner **pr)
{
    DittoOnnxRunner *r = pr ? *pr : NULL;
    if (!r)
        return;
    for (int v = 0; v < r->nvals; v++) {
        ditto_buffer_free(&r->vals[v].cbuf);
        ditto_buffer_free(&r->vals[v].cdev);
    }
    for (int i = 0; i < r->nnodes; i++)
        ditto_free(r->nodes[i].in);
    if (r->host_arena_init)
        ditto_arena_free(&r->host_arena);
    ditto_free(r->vals);
    ditto_free(r->hash);
    ditto_free(r->nodes);
    ditto_free(r->order);
    ditto_free(r->run);
    ditto_free(r->blocks);
    ditto_free(r->temps);
    ditto_free(r);
    *pr = NULL;
}

void ditto_onnx_runner_info(const DittoOnnxRunner *r, DittoOnnxRunnerInfo *info)
{
    memset(info, 0, sizeof *info);
    info->n_nodes = (size_t)r->nnodes;
    info->n_folded = (size_t)r->nfolded;
    info->n_run = (size_t)r->nrun;
    info->n_dead = (size_t)r->ndead;
    info->const_bytes = r->const_bytes;
    info->last_run_bytes = r->run_bytes;
}

/* ---- run ---- */

static int bind_input(DittoOnnxRunner *r, OxValue *v, const DittoTensor *t)
{
    const DittoOnnxValueInfo *vi = &r->model->inputs[v->graph_input];
    char a[DITTO_SHAPE_STR_MAX], b[DITTO_SHAPE_STR_MAX];
    if (t->device != r->be->device)
        return fail_model(r, DITTO_ERR_INVAL, "input '%s' is not on the %s backend's device", v->name, r->be->name);
    if (vi->ndim >= 0) {
        bool ok = vi->ndim == t->ndim;
        for (int i = 0; ok && i < t->ndim; i++)
            ok = vi->shape[i] < 0 || vi->shape[i] == t->shape[i];
        if (!ok)
            return fail_model(r, DITTO_ERR_SHAPE, "input '%s' has shape %s, the graph declares %s", v->name,
                              ditto_shape_str(t->shape, t->ndim, a, sizeof a), ditto_shape_str(vi->shape, vi->ndim, b, sizeof b));
    }
    DittoDType want = (unsigned)vi->dtype < DITTO_DTYPE_COUNT ? vi->dtype : t->dtype;
    if (ox_is_float(want) != ox_is_float(t->dtype))
        return fail_model(r, DITTO_ERR_INVAL, "input '%s' is %s, the graph declares %s", v->name, ditto_dtype_name(t->dtype),
                          ditto_dtype_name(want));
    v->type = want;
    v->set = true;
    v->uses_left = v->nuses;
    v->block = -1;
    memset(&v->dev, 0, sizeof v->dev);
    DittoTensor d = ditto_tensor(NULL, ox_storage(want), t->ndim, t->shape);
    size_t bytes = ditto_tensor_nbytes(&d);
    if (ox_is_float(want)) {
        v->host = false;
        if (t->dtype == DITTO_F32 && ditto_tensor_is_contiguous(t)) {
            v->t = *t;   /* the caller's memory, read only */
            return 0;
        }
        void *p;
        DITTO_TRY(storage_alloc(r, bytes, false, &p, &v->block));
        d.data = p;
        d.device = r->be->device;
        v->t = d;
        return ditto_op_copy(r->be, t, &d);
    }
    v->host = true;
    void *p;
    DITTO_TRY(storage_alloc(r, bytes, true, &p, &v->block));
    d.data = p;
    d.device = DITTO_DEVICE_CPU;
    v->t = d;
    if (host_is_device(r))
        return ditto_op_copy(r->be, t, &d);
    if (!ditto_tensor_is_contiguous(t))
        return fail_model(r, DITTO_ERR_INVAL, "integer input '%s' must be contiguous", v->name);
    size_t raw = (size_t)ditto_tensor_numel(t) * ditto_dtype_size(t->dtype);
    void *tmp = host_scratch(r, raw);
    if (!tmp)
        return DITTO_ERR_NOMEM;
    int rc = raw ? r->be->download(r->be, tmp, t->data, raw) : 0;
    if (rc >= 0)
        ditto_convert(d.data, DITTO_I64, tmp, t->dtype, (size_t)ditto_tensor_numel(t));
    return rc;
}

static int make_output(DittoOnnxRunner *r, const OxValue *v, DittoDType declared, DittoTensor *out)
{
    DittoDType want = (unsigned)declared < DITTO_DTYPE_COUNT ? declared : v->type;
    if (ox_is_float(v->type)) {
        if (!ox_is_float(want) || r->params.outputs_f32)
            want = DITTO_F32;
        if (want == DITTO_F32 && v->block >= 0 && (!v->host || host_is_device(r))) {
            *out = v->t;
            out->device = r->be->device;
            return 0;
        }
        DittoTensor src;
        DITTO_TRY(ox_dev(r, v, &src));
        DITTO_TRY(ditto_arena_tensor(r->ws, want, v->t.ndim, v->t.shape, out));
        return ditto_op_copy(r->be, &src, out);
    }
    if (ox_is_float(want))
        want = DITTO_I64;
    DittoTensor src;
    DITTO_TRY(ox_host(r, v, &src));
    DITTO_TRY(ditto_arena_tensor(r->ws, want, v->t.ndim, v->t.shape, out));
    size_t numel = (size_t)ditto_tensor_numel(out);
    if (host_is_device(r)) {
        ditto_convert(out->data, want, src.data, DITTO_I64, numel);
        return 0;
    }
    void *tmp = host_scratch(r, numel * ditto_dtype_size(want));
    if (!tmp)
        return DITTO_ERR_NOMEM;
    ditto_convert(tmp, want, src.data, DITTO_I64, numel);
    return numel ? r->be->upload(r->be, out->data, tmp, numel * ditto_dtype_size(want)) : 0;
}

int ditto_onnx_runner_run(DittoOnnxRunner *r, DittoArena *ws, const DittoOnnxIO *inputs, int n_inputs, DittoOnnxIO *outputs,
                          int n_outputs)
{
    if (!r || !ws || (n_inputs > 0 && !inputs) || (n_outputs > 0 && !outputs) || n_inputs < 0 || n_outputs < 0)
        return DITTO_ERR_INVAL;
    if (r->be->bad_state)
        return DITTO_ERR_BADSTATE;
    r->ws = ws;
    r->nblocks = 0;
    r->ntemps = 0;
    r->run_bytes = 0;
    if (r->host_arena_init)
        ditto_arena_reset(&r->host_arena);
    for (int v = 0; v < r->nvals; v++) {
        OxValue *x = &r->vals[v];
        if (x->is_const)
            continue;
        x->set = false;
        x->block = -1;
        x->uses_left = x->nuses;
        memset(&x->dev, 0, sizeof x->dev);
    }
    int rc = 0;
    for (int i = 0; i < n_inputs && rc >= 0; i++) {
        int v = inputs[i].name ? find_value(r, inputs[i].name) : -1;
        if (v < 0 || r->vals[v].graph_input < 0)
            rc = fail_model(r, DITTO_ERR_NOENT, "'%s' is not an input of the graph", inputs[i].name ? inputs[i].name : "(null)");
        else if (r->vals[v].set)
            rc = fail_model(r, DITTO_ERR_INVAL, "input '%s' given twice", inputs[i].name);
        else
            rc = bind_input(r, &r->vals[v], &inputs[i].t);
    }
    for (int v = 0; v < r->nvals && rc >= 0; v++) {
        const OxValue *x = &r->vals[v];
        if (x->graph_input >= 0 && !x->set && (x->nuses > 0 || x->is_output))
            rc = fail_model(r, DITTO_ERR_INVAL, "input '%s' is missing", x->name);
    }
    for (int i = 0; i < r->nrun && rc >= 0; i++) {
        const OxNode *n = &r->nodes[r->run[i]];
        rc = exec_node(r, n);
        if (rc < 0)
            break;
        for (int k = 0; k < n->nin; k++) {
            int v = n->in[k];
            if (v < 0 || r->vals[v].is_const)
                continue;
            OxValue *x = &r->vals[v];
            if (--x->uses_left == 0 && !x->is_output)
                block_unref(r, x->block);
        }
        for (int k = 0; k < n->nout; k++) {
            int v = n->out[k];
            if (v >= 0 && r->vals[v].set && r->vals[v].nuses == 0 && !r->vals[v].is_output)
                block_unref(r, r->vals[v].block);
        }
    }
    for (int i = 0; i < n_outputs && rc >= 0; i++) {
        int v = outputs[i].name ? find_value(r, outputs[i].name) : -1;
        if (v < 0 || !r->vals[v].is_output) {
            rc = fail_model(r, DITTO_ERR_NOENT, "'%s' is not an output of the graph", outputs[i].name ? outputs[i].name : "(null)");
            break;
        }
        DittoDType declared = DITTO_DTYPE_COUNT;
        for (size_t k = 0; k < r->model->n_outputs; k++)
            if (!strcmp(r->model->outputs[k].name, outputs[i].name))
                declared = r->model->outputs[k].dtype;
        rc = make_output(r, &r->vals[v], declared, &outputs[i].t);
        if (rc < 0)
            fail_model(r, rc, "cannot hand out output '%s'", outputs[i].name);
    }
    r->ws = NULL;
    return rc;
}
