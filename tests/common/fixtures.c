#include "fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ditto/ditto_error.h"

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

char *test_read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *s = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
            if (fread(s, 1, (size_t)n, f) == (size_t)n) {
                s[n] = 0;
            } else {
                free(s);
                s = NULL;
            }
        }
    }
    fclose(f);
    return s;
}

bool fixtures_load(Fixtures *fx, DittoLogger log)
{
    memset(fx, 0, sizeof *fx);
    fx->log = log;
    const char *shared = test_shared_dir();
    if (!shared)
        return false;
    snprintf(fx->dir, sizeof fx->dir, "%s/fixtures/ditto", shared);
    char path[4200];
    char *text = test_read_text(fixture_path(fx, "manifest.json", path, sizeof path));
    fx->manifest = text ? cJSON_Parse(text) : NULL;
    free(text);
    return fx->manifest != NULL;
}

void fixtures_free(Fixtures *fx)
{
    cJSON_Delete(fx->manifest);
    fx->manifest = NULL;
}

const cJSON *fixture_case(const Fixtures *fx, const char *name)
{
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItemCaseSensitive(fx->manifest, "cases"))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cs, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return cs;
    }
    return NULL;
}

const cJSON *json_path(const cJSON *o, const char *const *keys, int n)
{
    for (int i = 0; i < n && o; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    return o;
}

void fixture_tol(const cJSON *cs, const char *out, double *rel, double *mx)
{
    *rel = FIXTURE_NET_TOL_REL_L2;
    *mx = FIXTURE_NET_TOL_MAX;
    const char *const k[3] = { "tolerance", out, "fp32" };
    const cJSON *t = json_path(cs, k, 3);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "rel_l2");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "max_abs_over_max_ref");
    if (cJSON_IsNumber(r))
        *rel = r->valuedouble;
    if (cJSON_IsNumber(m))
        *mx = m->valuedouble;
}

const char *fixture_path(const Fixtures *fx, const char *file, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", fx->dir, file);
    return buf;
}

static DittoCatalog *open_rc(const Fixtures *fx, const char *file, char *path, size_t cap, int *rc)
{
    DittoCatalog *cat = NULL;
    *rc = ditto_catalog_open_pth(&cat, fixture_path(fx, file, path, cap), &fx->log);
    return *rc < 0 ? NULL : cat;
}

DittoCatalog *fixture_open(TestCtx *c, const Fixtures *fx, const char *file)
{
    char path[4200];
    int rc;
    DittoCatalog *cat = open_rc(fx, file, path, sizeof path, &rc);
    if (!cat)
        test_report(c, file, false, "cannot open %s: %s", path, ditto_strerror(rc));
    return cat;
}

DittoCatalog *fixture_try_open(const Fixtures *fx, const char *file)
{
    char path[4200];
    int rc;
    return open_rc(fx, file, path, sizeof path, &rc);
}

DittoLmdm *fixture_load_lmdm(TestCtx *c, const Fixtures *fx, const char *file, int heads)
{
    DittoCatalog *cat = fixture_open(c, fx, file);
    if (!cat)
        return NULL;
    DittoLmdmParams p;
    ditto_lmdm_params_default(&p);
    if (heads > 0)
        p.num_heads = heads;
    DittoLmdm *m = NULL;
    int rc = ditto_lmdm_load(&m, c->be, cat, &p);
    ditto_catalog_close(&cat);
    if (rc < 0)
        test_report(c, file, false, "load failed: %s", ditto_strerror(rc));
    return m;
}

float *io_read(DittoCatalog *io, const char *name, size_t *n)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, name);
    if (!e)
        return NULL;
    *n = (size_t)ditto_catalog_entry_numel(e);
    float *h = xmalloc(*n * sizeof *h);
    if (ditto_catalog_read_f32(io, e, h) < 0) {
        free(h);
        h = NULL;
    }
    return h;
}

/* n floats as doubles (free) */
static double *to_f64(const float *f, size_t n)
{
    double *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    return d;
}

/* Entry e as float64 (free), or NULL when unreadable. */
static double *read_f64(DittoCatalog *io, const DittoCatalogEntry *e)
{
    size_t n = (size_t)ditto_catalog_entry_numel(e);
    float *f = xmalloc(n * sizeof *f);
    double *d = ditto_catalog_read_f32(io, e, f) < 0 ? NULL : to_f64(f, n);
    free(f);
    return d;
}

static bool same_shape(const DittoCatalogEntry *e, int ndim, const int64_t *shape)
{
    return e->ndim == ndim && !memcmp(e->shape, shape, (size_t)ndim * sizeof(int64_t));
}

double *io_ref(DittoCatalog *io, const char *name, const DittoTensor *want)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, name);
    if (!e || !same_shape(e, want->ndim, want->shape))
        return NULL;
    return read_f64(io, e);
}

TT *io_input(TestCtx *c, DittoCatalog *io, const char *name)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, name);
    if (!e)
        return NULL;
    TT *t = tt_new(c, DITTO_F32, e->ndim, e->shape);
    if (ditto_catalog_read_f32(io, e, tt_f32(t)) < 0 || tt_to_dev(t) < 0) {
        tt_free(t);
        return NULL;
    }
    return t;
}

TT *io_input_required(TestCtx *c, DittoCatalog *io, const char *name)
{
    if (!ditto_catalog_find(io, name)) {
        test_report(c, name, false, "input missing from the io file");
        return NULL;
    }
    return io_input(c, io, name);
}

bool check_values(TestCtx *c, const char *label, const float *out, const double *ref, size_t n, double tol, double tol_max)
{
    TestErr e = test_compare(out, ref, n);
    double rmax = e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs;
    bool ok = e.nonfinite == 0 && e.rel_l2 <= tol && rmax <= tol_max;
    return test_report(c, label, ok, "rel_l2 %.3g (tol %.2g) max_abs/max_ref %.3g (tol %.2g)%s", e.rel_l2, tol, rmax, tol_max,
                       e.nonfinite ? " NON-FINITE" : "");
}

static bool check_ref_n(TestCtx *c, const char *label, const float *out, size_t n, DittoCatalog *io, const char *ref, bool prefix, double tol,
                        double tol_max)
{
    size_t nr = 0;
    float *rf = io_read(io, ref, &nr);
    if (!rf || nr < n || (!prefix && nr != n)) {
        free(rf);
        return test_report(c, label, false, "reference '%s' missing or of %zu elements, expected %zu", ref, nr, n);
    }
    double *rd = to_f64(rf, n);
    bool ok = check_values(c, label, out, rd, n, tol, tol_max);
    free(rf);
    free(rd);
    return ok;
}

bool check_ref(TestCtx *c, const char *label, const float *out, size_t n, DittoCatalog *io, const char *ref, double tol, double tol_max)
{
    return check_ref_n(c, label, out, n, io, ref, false, tol, tol_max);
}

bool check_ref_prefix(TestCtx *c, const char *label, const float *out, size_t n, DittoCatalog *io, const char *ref, double tol,
                      double tol_max)
{
    return check_ref_n(c, label, out, n, io, ref, true, tol, tol_max);
}

bool check_ref_shape(TestCtx *c, const char *label, const float *out, int ndim, const int64_t *shape, DittoCatalog *io, const char *ref,
                     double tol, double tol_max)
{
    const DittoCatalogEntry *e = ditto_catalog_find(io, ref);
    if (!e)
        return test_report(c, label, false, "reference '%s' missing from the io file", ref);
    char have[DITTO_SHAPE_STR_MAX], want[DITTO_SHAPE_STR_MAX];
    if (!same_shape(e, ndim, shape))
        return test_report(c, label, false, "shape %s, reference %s", ditto_shape_str(shape, ndim, have, sizeof have),
                           ditto_shape_str(e->shape, e->ndim, want, sizeof want));
    double *rd = read_f64(io, e);
    if (!rd)
        return test_report(c, label, false, "cannot read reference '%s'", ref);
    bool ok = check_values(c, label, out, rd, (size_t)ditto_catalog_entry_numel(e), tol, tol_max);
    free(rd);
    return ok;
}

bool check_out(TestCtx *c, const char *label, TT *t, DittoCatalog *io, const cJSON *cs, const char *ref)
{
    double tol, tol_max;
    fixture_tol(cs, ref, &tol, &tol_max);
    if (tt_to_host(t) < 0)
        return test_report(c, label, false, "download failed");
    if (!tt_guards_ok(t))
        return test_report(c, label, false, "guard bytes overwritten");
    return check_ref_shape(c, label, tt_f32(t), t->host.ndim, t->host.shape, io, ref, tol, tol_max);
}

TT *tt_item(TestCtx *c, TT *src, int64_t i)
{
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, src->host.shape, sizeof shape);
    shape[0] = 1;
    TT *t = tt_new(c, DITTO_F32, src->host.ndim, shape);
    size_t n = (size_t)ditto_tensor_numel(&t->host);
    memcpy(tt_f32(t), tt_f32(src) + (size_t)i * n, n * sizeof(float));
    tt_to_dev(t);
    return t;
}

size_t item_diff(const float *batched, int64_t i, const float *single, size_t n, double *max_diff)
{
    size_t diff = 0;
    for (size_t k = 0; k < n; k++) {
        float a = batched[(size_t)i * n + k], b = single[k];
        if (memcmp(&a, &b, sizeof a)) {
            diff++;
            double d = fabs((double)a - (double)b);
            if (d > *max_diff || d != d)
                *max_diff = d;
        }
    }
    return diff;
}
