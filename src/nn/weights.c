#include "nn/weights.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"

void ditto_weights_free(DittoWeights *w)
{
    for (int i = 0; i < w->n; i++)
        ditto_buffer_free(&w->bufs[i]);
    ditto_free(w->bufs);
    memset(w, 0, sizeof *w);
}

void ditto_loader_init(DittoLoader *l, DittoCatalog *cat, DittoBackend *be, DittoWeights *dst, const char *what, const char *prefix)
{
    memset(l, 0, sizeof *l);
    l->cat = cat;
    l->be = be;
    l->dst = dst;
    l->what = what;
    l->dtype = DITTO_F32;
    snprintf(l->prefix, sizeof l->prefix, "%s", prefix ? prefix : "");
}

/* Compare a checkpoint key with a wanted key, optionally deleting every "module." substring first (as upstream does for DDP keys). */
static bool key_eq(const char *have, const char *want, bool strip)
{
    if (!strip)
        return !strcmp(have, want);
    char norm[256];
    size_t k = 0;
    while (*have && k + 1 < sizeof norm) {
        if (!strncmp(have, "module.", 7)) {
            have += 7;
            continue;
        }
        norm[k++] = *have++;
    }
    norm[k] = 0;
    return !*have && !strcmp(norm, want);
}

static DittoCatalogEntry *find(DittoLoader *l, const char *key)
{
    if (!l->strip_module)
        return ditto_catalog_get(l->cat, key);
    for (size_t i = 0; i < l->cat->n; i++)
        if (key_eq(l->cat->entries[i].name, key, true))
            return &l->cat->entries[i];
    return NULL;
}

static void vkey(DittoLoader *l, char *buf, size_t n, const char *fmt, va_list ap)
{
    size_t k = (size_t)snprintf(buf, n, "%s", l->prefix);
    if (k < n)
        vsnprintf(buf + k, n - k, fmt, ap);
}

const DittoCatalogEntry *ditto_loader_peek(DittoLoader *l, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(l, key, sizeof key, fmt, ap);
    va_end(ap);
    return find(l, key);
}

static const char *file_name(const DittoLoader *l)
{
    const char *s = strrchr(l->cat->path, '/');
    return s ? s + 1 : l->cat->path;
}

int ditto_loader_fail(DittoLoader *l, int err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ditto_log(&l->be->log, DITTO_LOG_ERROR, "%s: %s (loading the %s)", file_name(l), msg, l->what);
    if (!l->err)
        l->err = err;
    return l->err;
}

static const DittoCatalogEntry *peek_rank(DittoLoader *l, int ndim, const char *fmt, va_list ap)
{
    if (l->err)
        return NULL;
    char key[256];
    vkey(l, key, sizeof key, fmt, ap);
    const DittoCatalogEntry *e = find(l, key);
    bool ok = e && e->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = e->shape[i] >= 1 && e->shape[i] <= INT32_MAX;
    if (ok)
        return e;
    char have[DITTO_SHAPE_STR_MAX];
    if (!e)
        ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s' is missing; is this the right checkpoint?", key);
    else
        ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s' has shape %s, expected a %d-d tensor", key, ditto_shape_str(e->shape, e->ndim, have, sizeof have), ndim);
    return NULL;
}

const DittoCatalogEntry *ditto_loader_peek_rank(DittoLoader *l, int ndim, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const DittoCatalogEntry *e = peek_rank(l, ndim, fmt, ap);
    va_end(ap);
    return e;
}

int64_t ditto_loader_dim(DittoLoader *l, int ndim, int axis, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const DittoCatalogEntry *e = peek_rank(l, ndim, fmt, ap);
    va_end(ap);
    return e && axis >= 0 && axis < ndim ? e->shape[axis] : 0;
}

/* Look up key and check the shape; marks the entry used. */
static DittoCatalogEntry *expect(DittoLoader *l, const char *key, int ndim, const int64_t *shape)
{
    DittoCatalogEntry *e = find(l, key);
    char want[DITTO_SHAPE_STR_MAX], have[DITTO_SHAPE_STR_MAX];
    if (!e) {
        ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s' %s is missing", key, ditto_shape_str(shape, ndim, want, sizeof want));
        return NULL;
    }
    bool same = e->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = e->shape[i] == shape[i];
    if (!same) {
        ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s' has shape %s, expected %s", key, ditto_shape_str(e->shape, e->ndim, have, sizeof have),
                 ditto_shape_str(shape, ndim, want, sizeof want));
        return NULL;
    }
    e->used = true;
    return e;
}

static int store(DittoLoader *l, DittoBuffer *out, size_t bytes)
{
    DittoWeights *w = l->dst;
    DittoBuffer *nb = ditto_grow(w->bufs, w->n, &w->cap, 64, sizeof *nb);
    if (!nb)
        return DITTO_ERR_NOMEM;
    w->bufs = nb;
    int rc = ditto_buffer_alloc(&w->bufs[w->n], &l->be->allocator, bytes);
    if (rc < 0)
        return rc;
    *out = w->bufs[w->n++];
    w->bytes += bytes;
    return 0;
}

/* Upload host float32 data as a new parameter tensor of dtype dt (F32 or F16, converted on the host). */
static int bind(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const float *host, DittoDType dt)
{
    if (dt != DITTO_F32 && dt != DITTO_F16)
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "parameters cannot be stored as %s", ditto_dtype_name(dt));
    DittoTensor t = ditto_tensor(NULL, dt, ndim, shape);
    size_t bytes = ditto_tensor_nbytes(&t);
    const void *src = host;
    void *conv = NULL;
    float *perm = NULL;
    if (l->conv_channels_last && (ndim == 4 || ndim == 5) && shape[0] > 16) {
        /* (O, C, k...) -> (O, k..., C) */
        const int64_t O = shape[0], C = shape[1], n = ditto_tensor_numel(&t), kvol = O && C ? n / (O * C) : 0;
        perm = ditto_malloc_aligned(sizeof(float) * (size_t)(n + 1));
        if (!perm)
            return ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
        for (int64_t o = 0; o < O; o++)
            for (int64_t k = 0; k < kvol; k++)
                for (int64_t c = 0; c < C; c++)
                    perm[(o * kvol + k) * C + c] = host[(o * C + c) * kvol + k];
        host = perm;
        src = host;
        ditto_tensor_set_channels_last(&t);
    }
    if (dt != DITTO_F32) {
        conv = ditto_malloc_aligned(bytes ? bytes : 1);
        if (!conv) {
            ditto_free_aligned(perm);
            return ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
        }
        ditto_convert(conv, dt, host, DITTO_F32, (size_t)ditto_tensor_numel(&t));
        src = conv;
    }
    DittoBuffer b;
    int rc = store(l, &b, bytes);
    if (rc < 0) {
        ditto_free_aligned(conv);
        ditto_free_aligned(perm);
        return ditto_loader_fail(l, rc, "out of memory for parameters");
    }
    rc = l->be->upload(l->be, b.ptr, src, bytes);
    ditto_free_aligned(conv);
    ditto_free_aligned(perm);
    if (rc < 0)
        return ditto_loader_fail(l, rc, "upload of parameters failed");
    t.data = b.ptr;
    t.device = l->be->device;
    *out = t;
    return 0;
}

/* fn(ctx, in, out) into a float32 host buffer of out_shape, then bound like bind. */
static int bind_mapped(DittoLoader *l, DittoTensor *out, int out_ndim, const int64_t *out_shape, DittoLoaderMap fn, void *ctx,
                       const float *in)
{
    DittoTensor t = ditto_tensor(NULL, DITTO_F32, out_ndim, out_shape);
    float *mapped = ditto_malloc_aligned((size_t)ditto_tensor_numel(&t) * sizeof(float) + 1);
    if (!mapped)
        return ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
    fn(ctx, in, mapped);
    bind(l, out, out_ndim, out_shape, mapped, l->dtype);
    ditto_free_aligned(mapped);
    return l->err;
}

static float *read_host(DittoLoader *l, const DittoCatalogEntry *e)
{
    float *h = ditto_malloc_aligned((size_t)ditto_catalog_entry_numel(e) * sizeof(float));
    if (!h) {
        ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory reading '%s'", e->name);
        return NULL;
    }
    int rc = ditto_catalog_read_f32(l->cat, e, h);
    if (rc < 0) {
        ditto_free_aligned(h);
        ditto_loader_fail(l, rc, "cannot read '%s'", e->name);
        return NULL;
    }
    return h;
}

static int get_key(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const char *key, DittoDType dt)
{
    memset(out, 0, sizeof *out);
    if (l->err)
        return l->err;
    DittoCatalogEntry *e = expect(l, key, ndim, shape);
    if (!e)
        return l->err;
    float *h = read_host(l, e);
    if (!h)
        return l->err;
    bind(l, out, ndim, shape, h, dt);
    ditto_free_aligned(h);
    return l->err;
}

int ditto_loader_get(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const char *fmt, ...)
{
    memset(out, 0, sizeof *out);
    if (l->err)
        return l->err;
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(l, key, sizeof key, fmt, ap);
    va_end(ap);
    return get_key(l, out, ndim, shape, key, l->dtype);
}

/* prefix + fmt into buf, as every getter forms its key */
static void key_of(DittoLoader *l, char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vkey(l, buf, n, fmt, ap);
    va_end(ap);
}

/*
 * The n keys (each exactly shape) bound as one tensor concatenated along
 * dim 0 in key order: each read straight into its rows, or (fn) mapped there
 * from shape to out_shape. ditto_loader_get_cat and _get_cat_map.
 */
static int get_cat_parts(DittoLoader *l, DittoTensor *out, int n, const char *const *keys, int ndim, const int64_t *shape, int out_ndim,
                         const int64_t *out_shape, DittoLoaderMap fn, void *ctx)
{
    memset(out, 0, sizeof *out);
    if (l->err)
        return l->err;
    if (n < 1 || ndim < 1 || ndim > DITTO_MAX_DIMS || out_ndim < 1 || out_ndim > DITTO_MAX_DIMS)
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "bad concatenation of %d tensors", n);
    int64_t per = 1;   /* values of one part as bound */
    for (int i = 0; i < out_ndim; i++) {
        if (out_shape[i] < 1 || per > INT64_MAX / out_shape[i])
            return ditto_loader_fail(l, DITTO_ERR_INVAL, "bad shape of a concatenated parameter ('%s')", keys[0]);
        per *= out_shape[i];
    }
    if (per > (int64_t)(SIZE_MAX / sizeof(float) - 1) / n || out_shape[0] > INT64_MAX / n)
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "concatenation of %d tensors ('%s'...) is too large", n, keys[0]);
    float *all = ditto_malloc_aligned((size_t)(per * n) * sizeof(float) + 1);
    if (!all)
        return ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
    for (int i = 0; i < n && !l->err; i++) {
        char key[256];
        key_of(l, key, sizeof key, "%s", keys[i]);
        DittoCatalogEntry *e = expect(l, key, ndim, shape);
        if (!e)
            break;
        if (fn) {
            float *in = read_host(l, e);
            if (in)
                fn(ctx, in, all + per * i);   /* straight into its rows */
            ditto_free_aligned(in);
        } else {
            int rc = ditto_catalog_read_f32(l->cat, e, all + per * i);
            if (rc < 0)
                ditto_loader_fail(l, rc, "cannot read '%s'", e->name);
        }
    }
    if (!l->err) {
        int64_t cat_shape[DITTO_MAX_DIMS];
        memcpy(cat_shape, out_shape, sizeof(int64_t) * (size_t)out_ndim);
        cat_shape[0] *= n;
        bind(l, out, out_ndim, cat_shape, all, l->dtype);
    }
    ditto_free_aligned(all);
    return l->err;
}

int ditto_loader_get_cat(DittoLoader *l, DittoTensor *out, int n, const char *const *keys, int ndim, const int64_t *shape)
{
    return get_cat_parts(l, out, n, keys, ndim, shape, ndim, shape, NULL, NULL);
}

int ditto_loader_get_map(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, int out_ndim, const int64_t *out_shape,
                         DittoLoaderMap fn, void *ctx, const char *fmt, ...)
{
    memset(out, 0, sizeof *out);
    if (l->err)
        return l->err;
    if (out_ndim < 1 || out_ndim > DITTO_MAX_DIMS)
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "bad shape of a mapped parameter");
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(l, key, sizeof key, fmt, ap);
    va_end(ap);
    DittoCatalogEntry *e = expect(l, key, ndim, shape);
    if (!e)
        return l->err;
    float *in = read_host(l, e);
    if (!in)
        return l->err;
    bind_mapped(l, out, out_ndim, out_shape, fn, ctx, in);
    ditto_free_aligned(in);
    return l->err;
}

int ditto_loader_get_cat_map(DittoLoader *l, DittoTensor *out, int n, const char *const *keys, int ndim, const int64_t *shape, int out_ndim,
                             const int64_t *out_shape, DittoLoaderMap fn, void *ctx)
{
    return get_cat_parts(l, out, n, keys, ndim, shape, out_ndim, out_shape, fn, ctx);
}

int ditto_loader_skip(DittoLoader *l, const char *fmt, ...)
{
    if (l->err)
        return l->err;
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(l, key, sizeof key, fmt, ap);
    va_end(ap);
    DittoCatalogEntry *e = find(l, key);
    if (!e)
        return ditto_loader_fail(l, DITTO_ERR_KEY, "key '%s' is missing", key);
    e->used = true;
    return 0;
}

/* The folded spectral-norm weight of base (its full key) as host float32 (caller frees), NULL after an error. */
static float *sn_host(DittoLoader *l, int ndim, const int64_t *shape, const char *base)
{
    char key[288];   /* base (under 256) and a suffix */
    int64_t rows = shape[0], cols = 1;
    for (int i = 1; i < ndim; i++)
        cols *= shape[i];
    snprintf(key, sizeof key, "%s.weight_orig", base);
    DittoCatalogEntry *ew = expect(l, key, ndim, shape);
    snprintf(key, sizeof key, "%s.weight_u", base);
    DittoCatalogEntry *eu = ew ? expect(l, key, 1, &rows) : NULL;
    snprintf(key, sizeof key, "%s.weight_v", base);
    DittoCatalogEntry *ev = eu ? expect(l, key, 1, &cols) : NULL;
    if (!ev)
        return NULL;
    float *w = read_host(l, ew), *u = w ? read_host(l, eu) : NULL, *v = u ? read_host(l, ev) : NULL;
    bool ok = false;
    if (v) {
        /* sigma = u . (W v), accumulated in double */
        double sigma = 0;
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < cols; c++)
                s += (double)w[r * cols + c] * v[c];
            sigma += (double)u[r] * s;
        }
        if (!(fabs(sigma) > 1e-30) || !isfinite(sigma)) {
            ditto_loader_fail(l, DITTO_ERR_FORMAT, "spectral norm of '%s' is %g (u, v do not fit the weight)", base, sigma);
        } else {
            /* PyTorch divides in float32 by the float32 sigma */
            float fs = (float)sigma;
            for (int64_t i = 0; i < rows * cols; i++)
                w[i] = w[i] / fs;
            ok = true;
        }
    }
    ditto_free_aligned(u);
    ditto_free_aligned(v);
    if (!ok) {
        ditto_free_aligned(w);
        return NULL;
    }
    return w;
}

int ditto_loader_get_sn(DittoLoader *l, DittoTensor *out, int ndim, const int64_t *shape, const char *fmt, ...)
{
    memset(out, 0, sizeof *out);
    if (l->err)
        return l->err;
    char base[200];
    va_list ap;
    va_start(ap, fmt);
    vkey(l, base, sizeof base, fmt, ap);
    va_end(ap);
    float *w = sn_host(l, ndim, shape, base);
    if (w)
        bind(l, out, ndim, shape, w, l->dtype);   /* folded in fp32, then rounded once */
    ditto_free_aligned(w);
    return l->err;
}

int ditto_loader_get_sn_product(DittoLoader *l, DittoTensor *w, DittoTensor *b, int64_t o, const char *k1, int ndim2, const int64_t *shape2,
                                const char *k2w, const char *k2b)
{
    memset(w, 0, sizeof *w);
    memset(b, 0, sizeof *b);
    if (l->err)
        return l->err;
    if (ndim2 < 1 || ndim2 > DITTO_MAX_DIMS || o < 1)
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "bad shape of a folded convolution");
    const int64_t m = shape2[0];
    int64_t rest = 1;
    for (int i = 1; i < ndim2; i++)
        rest *= shape2[i];
    char key1[256], keyw[256], keyb[256];
    key_of(l, key1, sizeof key1, "%s", k1);
    key_of(l, keyw, sizeof keyw, "%s", k2w);
    key_of(l, keyb, sizeof keyb, "%s", k2b);
    float *w1 = sn_host(l, DITTO_SHAPE(o, m, 1, 1), key1);   /* (o, m) */
    DittoCatalogEntry *ew = w1 ? expect(l, keyw, ndim2, shape2) : NULL;
    DittoCatalogEntry *eb = ew ? expect(l, keyb, 1, &m) : NULL;
    float *w2 = eb ? read_host(l, ew) : NULL, *b2 = w2 ? read_host(l, eb) : NULL;
    float *pw = b2 ? ditto_malloc_aligned((size_t)(o * rest + o) * sizeof(float)) : NULL;
    if (b2 && !pw)
        ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
    if (pw) {
        /* pw (o, rest) = w1 (o, m) w2 (m, rest), pb (o) = w1 b2: sums in double, rounded once */
        float *pb = pw + o * rest;
        for (int64_t r = 0; r < o; r++) {
            for (int64_t j = 0; j < rest; j++) {
                double s = 0;
                for (int64_t k = 0; k < m; k++)
                    s += (double)w1[r * m + k] * w2[k * rest + j];
                pw[r * rest + j] = (float)s;
            }
            double s = 0;
            for (int64_t k = 0; k < m; k++)
                s += (double)w1[r * m + k] * b2[k];
            pb[r] = (float)s;
        }
        int64_t wshape[DITTO_MAX_DIMS];
        memcpy(wshape, shape2, sizeof(int64_t) * (size_t)ndim2);
        wshape[0] = o;
        if (bind(l, w, ndim2, wshape, pw, l->dtype) >= 0)
            bind(l, b, 1, &o, pb, l->dtype);
    }
    ditto_free_aligned(pw);
    ditto_free_aligned(b2);
    ditto_free_aligned(w2);
    ditto_free_aligned(w1);
    return l->err;
}

int ditto_loader_get_bn(DittoLoader *l, DittoBatchNorm *bn, int64_t c, const char *fmt, ...)
{
    char base[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    char key[sizeof l->prefix + 200 + 16];
    ditto_loader_get(l, &bn->weight, DITTO_SHAPE(c), "%s.weight", base);
    ditto_loader_get(l, &bn->bias, DITTO_SHAPE(c), "%s.bias", base);
    /* running statistics stay float32 whatever l->dtype */
    snprintf(key, sizeof key, "%s%s.running_mean", l->prefix, base);
    get_key(l, &bn->mean, DITTO_SHAPE(c), key, DITTO_F32);
    snprintf(key, sizeof key, "%s%s.running_var", l->prefix, base);
    get_key(l, &bn->var, DITTO_SHAPE(c), key, DITTO_F32);
    /* an int64 scalar only used in training; absent in some exports */
    if (ditto_loader_peek(l, "%s.num_batches_tracked", base))
        ditto_loader_skip(l, "%s.num_batches_tracked", base);
    return l->err;
}

int ditto_loader_get_conv_bn(DittoLoader *l, DittoTensor *w, DittoTensor *b, int ndim, const int64_t *shape, double eps, const char *conv_w,
                             const char *conv_b, const char *bn)
{
    return ditto_loader_get_conv_bn_map(l, w, b, ndim, shape, eps, conv_w, conv_b, bn, 0, NULL, NULL, NULL);
}

int ditto_loader_get_conv_bn_map(DittoLoader *l, DittoTensor *w, DittoTensor *b, int ndim, const int64_t *shape, double eps,
                                 const char *conv_w, const char *conv_b, const char *bn, int out_ndim, const int64_t *out_shape,
                                 DittoLoaderMap fn, void *ctx)
{
    memset(w, 0, sizeof *w);
    memset(b, 0, sizeof *b);
    if (l->err)
        return l->err;
    if (ndim < 2 || ndim > DITTO_MAX_DIMS || (fn && (out_ndim < 1 || out_ndim > DITTO_MAX_DIMS)))
        return ditto_loader_fail(l, DITTO_ERR_INVAL, "'%s': a convolution weight needs 2 to %d dims", conv_w, DITTO_MAX_DIMS);
    const int64_t out = shape[0];
    int64_t per = 1;
    for (int i = 1; i < ndim; i++)
        per *= shape[i];
    static const char *const parts[4] = { "weight", "bias", "running_mean", "running_var" };
    char key[256];
    key_of(l, key, sizeof key, "%s", conv_w);
    DittoCatalogEntry *ew = expect(l, key, ndim, shape), *eb = NULL, *en[4] = { NULL };
    if (ew && conv_b) {
        key_of(l, key, sizeof key, "%s", conv_b);
        eb = expect(l, key, 1, &out);
    }
    for (int i = 0; i < 4 && !l->err; i++) {
        key_of(l, key, sizeof key, "%s.%s", bn, parts[i]);
        en[i] = expect(l, key, 1, &out);
    }
    if (!l->err && ditto_loader_peek(l, "%s.num_batches_tracked", bn))
        ditto_loader_skip(l, "%s.num_batches_tracked", bn);
    if (l->err)
        return l->err;
    float *hw = read_host(l, ew), *hb = hw && eb ? read_host(l, eb) : NULL, *hn[4] = { NULL };
    for (int i = 0; i < 4 && !l->err; i++)
        hn[i] = read_host(l, en[i]);
    float *fb = l->err ? NULL : ditto_malloc_aligned((size_t)out * sizeof(float));
    if (!l->err && !fb)
        ditto_loader_fail(l, DITTO_ERR_NOMEM, "out of memory for parameters");
    if (!l->err) {
        /* s = gamma / sqrt(var + eps); w' = w s, b' = (b - mean) s + beta; in double, rounded once */
        for (int64_t o = 0; o < out; o++) {
            const double sc = (double)hn[0][o] / sqrt((double)hn[3][o] + eps);
            for (int64_t k = 0; k < per; k++)
                hw[o * per + k] = (float)((double)hw[o * per + k] * sc);
            fb[o] = (float)(((hb ? (double)hb[o] : 0.0) - (double)hn[2][o]) * sc + (double)hn[1][o]);
        }
        if (fn) {   /* the folded weight through fn (rounded to float once before it) */
            bind_mapped(l, w, out_ndim, out_shape, fn, ctx, hw);
        } else {
            bind(l, w, ndim, shape, hw, l->dtype);
        }
        if (!l->err)
            bind(l, b, 1, &out, fb, l->dtype);
    }
    ditto_free_aligned(fb);
    ditto_free_aligned(hw);
    ditto_free_aligned(hb);
    for (int i = 0; i < 4; i++)
        ditto_free_aligned(hn[i]);
    return l->err;
}

int ditto_loader_finish(DittoLoader *l)
{
    if (l->err)
        return l->err;
    size_t plen = strlen(l->prefix), unknown = 0;
    const char *first = NULL;
    for (size_t i = 0; i < l->cat->n; i++) {
        const DittoCatalogEntry *e = &l->cat->entries[i];
        if (e->used || strncmp(e->name, l->prefix, plen))
            continue;
        if (!first)
            first = e->name;
        unknown++;
    }
    if (unknown)
        return ditto_loader_fail(l, DITTO_ERR_KEY, "unknown key '%s'%s (%zu key%s not used by the network; is this the right checkpoint?)", first,
                        unknown > 1 ? " and others" : "", unknown, unknown > 1 ? "s" : "");
    return 0;
}
