/*
 * ditto verify --fixtures DIR [--case PATTERN]... [--backend cpu|cuda] [--fp16]
 *
 * Runs the cases of a fixture manifest (manifest.json + weights + io files,
 * ../shared/fixtures/ditto/README.md) on one backend and prints one line per
 * (case, output): max |out - ref|, ||out - ref|| / ||ref||, cosine, the
 * manifest tolerance and PASS/FAIL. Exit status: 0 when every selected case
 * passed, 1 when one failed or has no runner in this build, 2 on usage or
 * manifest errors.
 */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "ditto/ditto.h"
#include "tools/cli.h"
#include "tools/verify.h"

#define MANIFEST_MAX_BYTES (256u << 20)
#define BATCH_TOL_REL_L2 1e-6

/* ---- options -------------------------------------------------------------- */

typedef struct Options {
    const char *fixtures;
    const char **patterns;    /* fnmatch globs, split at commas */
    int npatterns;
    const char *backend;
    int threads;
    bool intermediates;
    bool strict_intermediates;
    bool list;
    bool fp16;
} Options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ditto verify --fixtures DIR [OPTIONS]\n"
        "\n"
        "Run the cases of a fixture manifest (DIR/manifest.json with its weights and\n"
        "io files) and compare every output with its reference. One line per case and\n"
        "output:\n"
        "  max_abs    max |out - ref|\n"
        "  rel_l2     ||out - ref|| / ||ref||\n"
        "  cosine     <out, ref> / (||out|| ||ref||)\n"
        "  tolerance  from the manifest: rel_l2<=X and max/ref<=Y (max_abs / max|ref|)\n"
        "             must both hold; abs<=Z is a bound on max_abs; NaN/Inf always fail\n"
        "Cases with batch > 1 also run every item alone and check that it matches the\n"
        "batched result (batch-consistency, rel_l2 <= %.0e).\n"
        "\n"
        "options:\n"
        "  -f, --fixtures DIR      fixture folder holding manifest.json (or the manifest itself)\n"
        "  -c, --case PATTERN      run only cases matching PATTERN: comma-separated shell\n"
        "                          globs, e.g. 'warp_*,decoder_b1'; repeatable (default: all)\n"
        "  -b, --backend NAME      cpu (default; fp32 tolerances) or cuda (fp16_or_mixed\n"
        "                          tolerances where the manifest has them, else fp32)\n"
        "      --fp16              with --backend cuda: the renderer networks store activations\n"
        "                          and weights in float16 (fp32 math; keypoints, grids and\n"
        "                          statistics float32); their inputs are uploaded and their\n"
        "                          outputs read back in the dtype the network uses, compared\n"
        "                          as float32 at the fp16_or_mixed tolerances\n"
        "  -t, --threads N         CPU worker threads (default: all cores)\n"
        "  -v, --intermediates     also compare the intermediates a network reports with the\n"
        "                          io tensors of the same name (informational sub-lines,\n"
        "                          judged against the case's first output tolerance)\n"
        "      --strict-intermediates\n"
        "                          like -v, and an intermediate out of tolerance fails the case\n"
        "  -l, --list              list the cases and whether this build can run them\n"
        "  -h, --help              show this help\n"
        "\n"
        "Exit status: 0 all selected cases passed; 1 a case failed or is unsupported;\n"
        "2 bad usage, or the manifest could not be read.\n",
        BATCH_TOL_REL_L2);
}

/* "--opt VALUE" or "--opt=VALUE"; advances *i. NULL when the option does not match. */
static const char *opt_value(int argc, char **argv, int *i, const char *shrt, const char *lng, bool *missing)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (!strncmp(a, lng, n) && a[n] == '=')
        return a + n + 1;
    if (strcmp(a, lng) && (!shrt || strcmp(a, shrt)))
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* Split a comma-separated list of patterns into opt->patterns (points into a strdup'd copy). */
static int add_patterns(Options *o, const char *list, char ***owned, int *nowned)
{
    char *copy = ditto_strdup(list);
    char **ow = ditto_realloc(*owned, (size_t)(*nowned + 1) * sizeof *ow);
    if (!copy || !ow) {
        ditto_free(copy);
        if (ow)
            *owned = ow;
        return DITTO_ERR_NOMEM;
    }
    *owned = ow;
    ow[(*nowned)++] = copy;
    for (char *s = copy;;) {
        char *comma = strchr(s, ',');
        if (comma)
            *comma = '\0';
        if (*s) {
            const char **p = ditto_realloc(o->patterns, (size_t)(o->npatterns + 1) * sizeof *p);
            if (!p)
                return DITTO_ERR_NOMEM;
            o->patterns = p;
            p[o->npatterns++] = s;
        }
        if (!comma)
            break;
        s = comma + 1;
    }
    return 0;
}

/* ---- manifest ------------------------------------------------------------- */

typedef struct Tol {
    double rel_l2;      /* < 0: not given */
    double max_rel;     /* max_abs / max|ref| */
    double max_abs;
} Tol;

typedef struct CaseOut {
    const char *name;
    Tol tol;
    bool has_tol;
} CaseOut;

typedef struct Case {
    const cJSON *json;
    const char *name;
    const char *kind;
    const char *target;          /* module / function / stage / model_file, or "" */
    char key[64];                /* short target, the runner key */
    const char *weights_file;    /* NULL when none */
    const char *io_file;
    int64_t batch;
    CaseOut *outs;
    int nouts;
    const char **inters;         /* manifest intermediates */
    int ninters;
    const DittoVerifyRunner *runner;
    bool selected;
    bool failed;                 /* after the run */
} Case;

typedef struct Manifest {
    char *path;
    char *dir;
    cJSON *root;
    Case *cases;
    int ncases;
} Manifest;

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 ? v->valuedouble : -1.0;
}

/* Runner key: the last component of "a.b.C", "path/x.py:fn", "torch.f.fn as called in ...". */
static void target_key(const char *target, char *key, size_t n)
{
    size_t len = strcspn(target, " \t");
    const char *end = target + len, *start = target;
    for (const char *p = target; p < end; p++)
        if (*p == ':')
            start = p + 1;
    if (start == target)
        for (const char *p = target; p < end; p++)
            if (*p == '.' || *p == '/')
                start = p + 1;
    snprintf(key, n, "%.*s", (int)(end - start), start);
}

/* tolerance.<out>: {"fp32": {...}, "fp16_or_mixed": {...}} (ditto) or the level itself (onnx). */
static bool parse_tol(const cJSON *t, bool mixed, Tol *tol)
{
    if (!cJSON_IsObject(t))
        return false;
    const cJSON *lv = NULL;
    if (mixed)
        lv = cJSON_GetObjectItemCaseSensitive(t, "fp16_or_mixed");
    if (!cJSON_IsObject(lv))
        lv = cJSON_GetObjectItemCaseSensitive(t, "fp32");
    if (!cJSON_IsObject(lv))
        lv = t;
    tol->rel_l2 = json_num(lv, "rel_l2");
    tol->max_rel = json_num(lv, "max_abs_over_max_ref");
    tol->max_abs = json_num(lv, "max_abs");
    return tol->rel_l2 >= 0 || tol->max_rel >= 0 || tol->max_abs >= 0;
}

static const DittoVerifyRunner *find_runner(const char *kind, const char *key)
{
    for (size_t t = 0; ditto_verify_tables[t]; t++) {
        for (const DittoVerifyRunner *r = ditto_verify_tables[t]; r->kind; r++) {
            if (!strcmp(r->kind, kind) && (!r->target || !strcmp(r->target, key)))
                return r;
        }
    }
    return NULL;
}

static void manifest_free(Manifest *m)
{
    for (int i = 0; i < m->ncases; i++) {
        ditto_free(m->cases[i].outs);
        ditto_free(m->cases[i].inters);
    }
    ditto_free(m->cases);
    cJSON_Delete(m->root);
    ditto_free(m->path);
    ditto_free(m->dir);
    memset(m, 0, sizeof *m);
}

static char *path_join(const char *dir, const char *file)
{
    size_t a = strlen(dir), b = strlen(file);
    char *p = ditto_malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s%s%s", dir, (a && dir[a - 1] != '/') ? "/" : "", file);
    return p;
}

/* Errors: one line on stderr naming the file; returns 2 (the exit status). */
static int manifest_load(Manifest *m, const char *fixtures, bool mixed)
{
    memset(m, 0, sizeof *m);
    struct stat st;
    if (stat(fixtures, &st) != 0) {
        fprintf(stderr, "ditto verify: cannot open fixtures folder '%s': %s\n", fixtures, strerror(errno));
        return 2;
    }
    if (S_ISDIR(st.st_mode)) {
        m->dir = ditto_strdup(fixtures);
        m->path = path_join(fixtures, "manifest.json");
    } else {
        m->path = ditto_strdup(fixtures);
        const char *slash = strrchr(fixtures, '/');
        m->dir = slash ? ditto_malloc((size_t)(slash - fixtures) + 2) : ditto_strdup(".");
        if (slash && m->dir)
            snprintf(m->dir, (size_t)(slash - fixtures) + 2, "%.*s", slash == fixtures ? 1 : (int)(slash - fixtures), fixtures);
    }
    if (!m->dir || !m->path) {
        fprintf(stderr, "ditto verify: out of memory\n");
        return 2;
    }

    FILE *f = fopen(m->path, "rb");
    if (!f) {
        fprintf(stderr, "ditto verify: cannot open manifest '%s': %s\n", m->path, strerror(errno));
        return 2;
    }
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || (unsigned long)size > MANIFEST_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        fprintf(stderr, "ditto verify: cannot read manifest '%s': %s\n", m->path,
                size < 0 ? strerror(errno) : "larger than 256 MiB");
        return 2;
    }
    text = ditto_malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        ditto_free(text);
        fprintf(stderr, "ditto verify: cannot read manifest '%s': %s\n", m->path, text ? "short read" : "out of memory");
        return 2;
    }
    fclose(f);
    text[size] = '\0';

    const char *err_at = NULL;
    m->root = cJSON_ParseWithLengthOpts(text, (size_t)size, &err_at, false);
    if (!m->root) {
        long line = 1;
        const char *at = err_at && err_at >= text && err_at <= text + size ? err_at : text + size;
        for (const char *p = text; p < at; p++)
            line += *p == '\n';
        ditto_free(text);
        fprintf(stderr, "ditto verify: manifest '%s' is not valid JSON (error near line %ld)\n", m->path, line);
        return 2;
    }
    ditto_free(text);

    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(m->root, "cases");
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "ditto verify: manifest '%s' has no \"cases\" list\n", m->path);
        return 2;
    }
    int n = cJSON_GetArraySize(cases);
    m->cases = ditto_calloc(n > 0 ? (size_t)n : 1, sizeof *m->cases);
    if (!m->cases) {
        fprintf(stderr, "ditto verify: out of memory\n");
        return 2;
    }
    const cJSON *cj;
    cJSON_ArrayForEach(cj, cases) {
        Case *c = &m->cases[m->ncases];
        int idx = m->ncases + 1;
        c->json = cj;
        c->name = json_str(cj, "name");
        c->kind = json_str(cj, "kind");
        if (!cJSON_IsObject(cj) || !c->name || !c->kind) {
            fprintf(stderr, "ditto verify: manifest '%s': case %d has no \"name\" or \"kind\"\n", m->path, idx);
            return 2;
        }
        m->ncases++;
        const char *t = json_str(cj, "module");
        if (!t)
            t = json_str(cj, "function");
        if (!t)
            t = json_str(cj, "stage");
        c->target = t ? t : "";
        target_key(c->target, c->key, sizeof c->key);
        if (!t && (t = json_str(cj, "model_file"))) {
            /* onnx cases: the key is the model's file name without ".onnx" */
            const char *base = strrchr(t, '/') ? strrchr(t, '/') + 1 : t;
            const char *dot = strrchr(base, '.');
            c->target = t;
            snprintf(c->key, sizeof c->key, "%.*s", dot ? (int)(dot - base) : (int)strlen(base), base);
        }
        c->weights_file = json_str(cj, "weights_file");
        c->io_file = json_str(cj, "io_file");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cj, "batch");
        c->batch = cJSON_IsNumber(b) && b->valuedouble >= 1 && b->valuedouble < 1e9 ? (int64_t)b->valuedouble : 0;

        const cJSON *outs = cJSON_GetObjectItemCaseSensitive(cj, "outputs");
        const cJSON *tols = cJSON_GetObjectItemCaseSensitive(cj, "tolerance");
        int no = cJSON_IsObject(outs) ? cJSON_GetArraySize(outs) : 0;
        c->outs = ditto_calloc(no > 0 ? (size_t)no : 1, sizeof *c->outs);
        const cJSON *inter = cJSON_GetObjectItemCaseSensitive(cj, "intermediates");
        int ni = cJSON_IsObject(inter) ? cJSON_GetArraySize(inter) : 0;
        c->inters = ditto_calloc(ni > 0 ? (size_t)ni : 1, sizeof *c->inters);
        if (!c->outs || !c->inters) {
            fprintf(stderr, "ditto verify: out of memory\n");
            return 2;
        }
        const cJSON *o;
        if (no > 0)
            cJSON_ArrayForEach(o, outs) {
                CaseOut *co = &c->outs[c->nouts++];
                co->name = o->string;
                co->has_tol = parse_tol(cJSON_GetObjectItemCaseSensitive(tols, o->string), mixed, &co->tol);
            }
        if (no == 0) {
            fprintf(stderr, "ditto verify: manifest '%s': case '%s' has no \"outputs\"\n", m->path, c->name);
            return 2;
        }
        if (ni > 0)
            cJSON_ArrayForEach(o, inter)
                c->inters[c->ninters++] = o->string;
        c->runner = find_runner(c->kind, c->key);
    }
    return 0;
}

/* ---- metrics -------------------------------------------------------------- */

typedef struct Metrics {
    double max_abs, rel_l2, cosine, max_rel;
    int64_t nonfinite;           /* NaN/Inf in the output */
} Metrics;

static Metrics compare(const float *out, const float *ref, int64_t n)
{
    Metrics m = { 0, 0, 0, 0, 0 };
    double d2 = 0, r2 = 0, o2 = 0, dot = 0, max_ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double o = out[i], r = ref[i];
        if (!isfinite(o)) {
            m.nonfinite++;
            continue;
        }
        double d = fabs(o - r);
        if (d > m.max_abs)
            m.max_abs = d;
        if (fabs(r) > max_ref)
            max_ref = fabs(r);
        d2 += d * d;
        r2 += r * r;
        o2 += o * o;
        dot += o * r;
    }
    if (m.nonfinite) {
        m.max_abs = m.rel_l2 = m.max_rel = NAN;
        m.cosine = NAN;
        return m;
    }
    m.rel_l2 = r2 > 0 ? sqrt(d2 / r2) : (d2 > 0 ? INFINITY : 0.0);
    m.max_rel = max_ref > 0 ? m.max_abs / max_ref : (m.max_abs > 0 ? INFINITY : 0.0);
    if (o2 > 0 && r2 > 0)
        m.cosine = dot / (sqrt(o2) * sqrt(r2));
    else
        m.cosine = (o2 == 0 && r2 == 0) ? 1.0 : 0.0;
    return m;
}

/* True when m is within tol; otherwise why says which bound failed. */
static bool judge(const Metrics *m, const Tol *tol, char *why, size_t n)
{
    why[0] = '\0';
    if (m->nonfinite) {
        snprintf(why, n, "%lld NaN/Inf value%s", (long long)m->nonfinite, m->nonfinite == 1 ? "" : "s");
        return false;
    }
    if (tol->rel_l2 >= 0 && !(m->rel_l2 <= tol->rel_l2)) {
        snprintf(why, n, "rel_l2 %.2e > %.1e", m->rel_l2, tol->rel_l2);
        return false;
    }
    if (tol->max_rel >= 0 && !(m->max_rel <= tol->max_rel)) {
        snprintf(why, n, "max/ref %.2e > %.1e", m->max_rel, tol->max_rel);
        return false;
    }
    if (tol->max_abs >= 0 && !(m->max_abs <= tol->max_abs)) {
        snprintf(why, n, "max_abs %.2e > %.1e", m->max_abs, tol->max_abs);
        return false;
    }
    return true;
}

static const char *tol_str(const Tol *t, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    if (t->rel_l2 >= 0)
        k += (size_t)snprintf(buf + k, n - k, "rel_l2<=%.1e", t->rel_l2);
    if (t->max_rel >= 0 && k < n)
        k += (size_t)snprintf(buf + k, n - k, "%smax/ref<=%.1e", k ? " " : "", t->max_rel);
    if (t->max_abs >= 0 && k < n)
        k += (size_t)snprintf(buf + k, n - k, "%sabs<=%.1e", k ? " " : "", t->max_abs);
    if (!buf[0])
        snprintf(buf, n, "exact");
    return buf;
}

/* ---- per-case state ------------------------------------------------------- */

typedef enum RowType { ROW_OUTPUT, ROW_INTER, ROW_INTER_MISSING, ROW_BATCH } RowType;

typedef struct Row {
    RowType type;
    char name[80];
    bool measured;           /* metrics valid */
    Metrics m;
    Tol tol;
    bool pass;
    char why[512];
} Row;

typedef struct Saved {       /* batched output, for the batch-consistency runs */
    char *name;
    float *data;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
} Saved;

typedef struct State {
    const Options *opt;
    DittoBackend *be;
    const Case *c;
    Row *rows;
    int nrows, caprows;
    Saved *saved;
    int nsaved;
    DittoBuffer *bufs;       /* inputs/outputs of the current forward */
    int nbufs, capbufs;
    bool *submitted;         /* per case output, whole-batch run */
    int64_t item;
    /* batch-consistency: worst over items and outputs */
    Metrics bc;
    bool bc_fail;
    char bc_why[512];
    char bc_worst[120];      /* where the largest rel_l2 was (shown when not 0) */
    int bc_items;
    char err[400];           /* first error logged during the case */
} State;

static void capture_log(void *cookie, DittoLogLevel level, const char *msg)
{
    State *s = cookie;
    if (level == DITTO_LOG_ERROR) {
        if (!s->err[0])
            snprintf(s->err, sizeof s->err, "%s", msg);
    } else {
        fprintf(stderr, "ditto: %s: %s\n", level == DITTO_LOG_WARN ? "warning" : "info", msg);
    }
}

static Row *add_row(State *s, RowType type, const char *name)
{
    Row *rows = ditto_grow(s->rows, s->nrows, &s->caprows, 16, sizeof *rows);
    if (!rows)
        return NULL;
    s->rows = rows;
    Row *r = &s->rows[s->nrows++];
    memset(r, 0, sizeof *r);
    r->type = type;
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static int track_buffer(State *s, size_t bytes, DittoBuffer **out)
{
    DittoBuffer *bufs = ditto_grow(s->bufs, s->nbufs, &s->capbufs, 16, sizeof *bufs);
    if (!bufs)
        return DITTO_ERR_NOMEM;
    s->bufs = bufs;
    DittoBuffer *b = &s->bufs[s->nbufs];
    int rc = ditto_buffer_alloc(b, &s->be->allocator, bytes ? bytes : 1);
    if (rc < 0)
        return rc;
    s->nbufs++;
    *out = b;
    return 0;
}

static void free_buffers(State *s)
{
    for (int i = 0; i < s->nbufs; i++)
        ditto_buffer_free(&s->bufs[i]);
    s->nbufs = 0;
}

static void free_saved(State *s)
{
    for (int i = 0; i < s->nsaved; i++) {
        ditto_free(s->saved[i].name);
        ditto_free(s->saved[i].data);
    }
    ditto_free(s->saved);
    s->saved = NULL;
    s->nsaved = 0;
}

static const CaseOut *case_out(const Case *c, const char *name, int *index)
{
    for (int i = 0; i < c->nouts; i++)
        if (!strcmp(c->outs[i].name, name)) {
            if (index)
                *index = i;
            return &c->outs[i];
        }
    return NULL;
}

/* Copy any tensor (device, dtype, strides >= 0) to contiguous host float32. */
static int fetch_f32(State *s, const DittoTensor *t, float **out, int64_t *numel)
{
    DittoBackend *be = s->be;
    int64_t n = ditto_tensor_numel(t);
    size_t es = ditto_dtype_size(t->dtype);
    *out = NULL;
    *numel = n;
    if (n < 0 || es == 0)
        return DITTO_ERR_INVAL;
    float *dst = ditto_malloc((size_t)(n ? n : 1) * sizeof *dst);
    if (!dst)
        return DITTO_ERR_NOMEM;
    int64_t span = n ? 1 : 0;   /* elements from data to the last one, +1 */
    for (int i = 0; i < t->ndim && n; i++) {
        if (t->stride[i] < 0) {
            ditto_free(dst);
            return DITTO_ERR_UNSUPPORTED;
        }
        span += (t->shape[i] - 1) * t->stride[i];
    }
    unsigned char *raw = ditto_malloc((size_t)(span ? span : 1) * es);
    if (!raw) {
        ditto_free(dst);
        return DITTO_ERR_NOMEM;
    }
    int rc = be->sync ? be->sync(be) : 0;
    if (rc >= 0 && span)
        rc = be->download(be, raw, t->data, (size_t)span * es);
    if (rc < 0) {
        ditto_free(raw);
        ditto_free(dst);
        return rc;
    }
    if (ditto_tensor_is_contiguous(t)) {
        ditto_convert(dst, DITTO_F32, raw, t->dtype, (size_t)n);
    } else {
        int64_t idx[DITTO_MAX_DIMS] = { 0 };
        for (int64_t k = 0; k < n; k++) {
            int64_t off = 0;
            for (int i = 0; i < t->ndim; i++)
                off += idx[i] * t->stride[i];
            ditto_convert(dst + k, DITTO_F32, raw + (size_t)off * es, t->dtype, 1);
            for (int i = t->ndim - 1; i >= 0; i--) {
                if (++idx[i] < t->shape[i])
                    break;
                idx[i] = 0;
            }
        }
    }
    ditto_free(raw);
    *out = dst;
    return 0;
}

static bool shape_equal(int na, const int64_t *a, int nb, const int64_t *b)
{
    if (na != nb)
        return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* Read io tensor `name` as float32 (all of it): verify.h. */
int ditto_verify_read_io(DittoVerifyRun *r, const char *name, const DittoCatalogEntry **entry, float **data)
{
    *data = NULL;
    const DittoCatalogEntry *e = ditto_catalog_find(r->io, name);
    *entry = e;
    if (!e)
        return DITTO_ERR_NOENT;
    int64_t n = ditto_catalog_entry_numel(e);
    float *d = ditto_malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d)
        return DITTO_ERR_NOMEM;
    int rc = ditto_catalog_read_f32(r->io, e, d);
    if (rc < 0) {
        ditto_free(d);
        return rc;
    }
    *data = d;
    return 0;
}

/* ---- the runner API (verify.h) -------------------------------------------- */

/* float or integer dtypes the runners may ask for: float32, float16 */
static int check_io_dtype(DittoVerifyRun *r, DittoDType dt)
{
    if (dt == DITTO_F32 || dt == DITTO_F16)
        return 0;
    return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: io tensors are float32 or float16, not %s", r->name, ditto_dtype_name(dt));
}

int ditto_verify_input_as(DittoVerifyRun *r, const char *name, DittoDType dt, DittoTensor *t)
{
    State *s = r->priv;
    DITTO_TRY(check_io_dtype(r, dt));
    const DittoCatalogEntry *e;
    float *host;
    int rc = ditto_verify_read_io(r, name, &e, &host);
    if (rc == DITTO_ERR_NOENT)
        return ditto_fail(&r->log, rc, "%s: no input '%s' in the io file", r->name, name);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot read input '%s' of the io file: %s", r->name, name, ditto_strerror(rc));
    int64_t shape[DITTO_MAX_DIMS];
    int ndim = e->ndim;
    int64_t n = ditto_catalog_entry_numel(e);
    const float *src = host;
    for (int i = 0; i < ndim; i++)
        shape[i] = e->shape[i];
    if (r->item >= 0 && ndim >= 1 && shape[0] == r->batch && r->batch > 1) {
        n /= shape[0];
        src += r->item * n;
        shape[0] = 1;
    }
    size_t es = ditto_dtype_size(dt);
    void *conv = NULL;
    if (dt != DITTO_F32) {   /* rounded once on the host (nearest even) */
        conv = ditto_malloc((size_t)(n ? n : 1) * es);
        if (!conv) {
            ditto_free(host);
            return DITTO_ERR_NOMEM;
        }
        ditto_convert(conv, dt, src, DITTO_F32, (size_t)n);
    }
    DittoBuffer *b;
    rc = track_buffer(s, (size_t)n * es, &b);
    if (rc >= 0)
        rc = r->be->upload(r->be, b->ptr, conv ? (const void *)conv : (const void *)src, (size_t)n * es);
    ditto_free(conv);
    ditto_free(host);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot place input '%s' on the %s backend: %s", r->name, name, r->be->name, ditto_strerror(rc));
    *t = ditto_tensor(b->ptr, dt, ndim, shape);
    t->device = r->be->allocator.device;
    return 0;
}

int ditto_verify_input(DittoVerifyRun *r, const char *name, DittoTensor *t)
{
    return ditto_verify_input_as(r, name, DITTO_F32, t);
}

int ditto_verify_input_act(DittoVerifyRun *r, const char *name, DittoTensor *t)
{
    return ditto_verify_input_as(r, name, r->be->act_dtype, t);
}

int ditto_verify_output_as(DittoVerifyRun *r, DittoDType dt, int ndim, const int64_t *shape, DittoTensor *t)
{
    State *s = r->priv;
    if (ndim < 0 || ndim > DITTO_MAX_DIMS)
        return DITTO_ERR_INVAL;
    DITTO_TRY(check_io_dtype(r, dt));
    DittoTensor v = ditto_tensor(NULL, dt, ndim, shape);
    int64_t n = ditto_tensor_numel(&v);
    if (n < 0)
        return DITTO_ERR_INVAL;
    /* Poison with NaN so that elements the network never writes fail. */
    float *nan = ditto_malloc((size_t)(n ? n : 1) * sizeof *nan);
    if (!nan)
        return DITTO_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++)
        nan[i] = NAN;
    if (dt == DITTO_F16) {   /* a quiet float16 NaN */
        uint16_t *h = (uint16_t *)nan;
        for (int64_t i = 0; i < n; i++)
            h[i] = 0x7e00;
    }
    size_t bytes = ditto_tensor_nbytes(&v);
    DittoBuffer *b;
    int rc = track_buffer(s, bytes, &b);
    if (rc >= 0)
        rc = r->be->upload(r->be, b->ptr, nan, bytes);
    ditto_free(nan);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot allocate an output on the %s backend: %s", r->name, r->be->name, ditto_strerror(rc));
    v.data = b->ptr;
    v.device = r->be->allocator.device;
    *t = v;
    return 0;
}

int ditto_verify_output(DittoVerifyRun *r, int ndim, const int64_t *shape, DittoTensor *t)
{
    return ditto_verify_output_as(r, DITTO_F32, ndim, shape, t);
}

int ditto_verify_output_act(DittoVerifyRun *r, int ndim, const int64_t *shape, DittoTensor *t)
{
    return ditto_verify_output_as(r, r->be->act_dtype, ndim, shape, t);
}

static void shape_mismatch(Row *row, const char *what, int na, const int64_t *a, int nb, const int64_t *b)
{
    char sa[DITTO_SHAPE_STR_MAX], sb[DITTO_SHAPE_STR_MAX];
    snprintf(row->why, sizeof row->why, "shape %s, %s %s", ditto_shape_str(a, na, sa, sizeof sa), what,
             ditto_shape_str(b, nb, sb, sizeof sb));
    row->pass = false;
}

/* Item run: compare with the batched result. */
static int submit_item(State *s, const char *name, const float *out, const DittoTensor *t)
{
    const Saved *sv = NULL;
    for (int i = 0; i < s->nsaved; i++)
        if (!strcmp(s->saved[i].name, name))
            sv = &s->saved[i];
    if (!sv)
        return 0;   /* the batched run failed for this output; already reported */
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, sv->shape, sizeof shape);
    shape[0] = 1;
    if (!shape_equal(t->ndim, t->shape, sv->ndim, shape)) {
        if (!s->bc_fail) {
            char sa[DITTO_SHAPE_STR_MAX], sb[DITTO_SHAPE_STR_MAX];
            snprintf(s->bc_why, sizeof s->bc_why, "item %lld: %s shape %s, batched item %s", (long long)s->item, name,
                     ditto_shape_str(t->shape, t->ndim, sa, sizeof sa), ditto_shape_str(shape, sv->ndim, sb, sizeof sb));
        }
        s->bc_fail = true;
        return 0;
    }
    int64_t n = ditto_tensor_numel(t);
    Metrics m = compare(out, sv->data + s->item * n, n);
    Tol tol = { BATCH_TOL_REL_L2, -1, -1 };
    char why[160];
    if (!judge(&m, &tol, why, sizeof why)) {
        if (!s->bc_fail)
            snprintf(s->bc_why, sizeof s->bc_why, "item %lld, %s: %s", (long long)s->item, name, why);
        s->bc_fail = true;
    }
    if (m.nonfinite || isnan(s->bc.max_abs)) {
        s->bc.max_abs = s->bc.rel_l2 = s->bc.max_rel = s->bc.cosine = NAN;
        s->bc.nonfinite += m.nonfinite;
    } else {
        if (m.max_abs > s->bc.max_abs)
            s->bc.max_abs = m.max_abs;
        if (m.rel_l2 > s->bc.rel_l2) {
            s->bc.rel_l2 = m.rel_l2;
            snprintf(s->bc_worst, sizeof s->bc_worst, "largest: %s, item %lld", name, (long long)s->item);
        }
        if (m.cosine < s->bc.cosine)
            s->bc.cosine = m.cosine;
    }
    return 0;
}

int ditto_verify_submit(DittoVerifyRun *r, const char *name, const DittoTensor *t)
{
    State *s = r->priv;
    const Case *c = s->c;
    float *out;
    int64_t n;
    int rc = fetch_f32(s, t, &out, &n);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot read output '%s' back from the %s backend: %s", r->name, name, r->be->name,
                          ditto_strerror(rc));
    if (r->item >= 0) {
        rc = submit_item(s, name, out, t);
        ditto_free(out);
        return rc;
    }

    int oi = -1;
    const CaseOut *co = case_out(c, name, &oi);
    if (oi >= 0)
        s->submitted[oi] = true;
    Row *row = add_row(s, ROW_OUTPUT, name);
    if (!row) {
        ditto_free(out);
        return DITTO_ERR_NOMEM;
    }
    row->tol = co ? co->tol : c->outs[0].tol;
    if (co && !co->has_tol)
        row->tol = (Tol){ -1, -1, -1 };   /* no tolerance given: exact */

    const DittoCatalogEntry *e;
    float *ref;
    rc = ditto_verify_read_io(r, name, &e, &ref);
    if (rc < 0) {
        snprintf(row->why, sizeof row->why, rc == DITTO_ERR_NOENT ? "no reference '%s' in the io file" : "cannot read reference '%s'", name);
        ditto_free(out);
        return 0;
    }
    if (!shape_equal(t->ndim, t->shape, e->ndim, e->shape)) {
        shape_mismatch(row, "reference", t->ndim, t->shape, e->ndim, e->shape);
    } else {
        row->measured = true;
        row->m = compare(out, ref, n);
        row->pass = judge(&row->m, &row->tol, row->why, sizeof row->why);
        if (c->batch > 1 && !row->m.nonfinite) {
            Saved *sv = ditto_realloc(s->saved, (size_t)(s->nsaved + 1) * sizeof *sv);
            if (sv) {
                s->saved = sv;
                sv = &sv[s->nsaved];
                sv->name = ditto_strdup(name);
                sv->ndim = t->ndim;
                memcpy(sv->shape, t->shape, sizeof sv->shape);
                sv->data = out;
                out = NULL;
                if (sv->name)
                    s->nsaved++;
                else
                    ditto_free(sv->data);
            }
        }
    }
    ditto_free(ref);
    ditto_free(out);
    return 0;
}

int ditto_verify_param_int(const DittoVerifyRun *r, const char *key, int i, int64_t *v)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(r->params, key);
    if (cJSON_IsArray(p))
        p = cJSON_GetArrayItem(p, i);
    else if (i != 0)
        p = NULL;
    if (!cJSON_IsNumber(p) || p->valuedouble != floor(p->valuedouble) || fabs(p->valuedouble) > 9e15)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: manifest params.%s[%d] is not an integer", r->name, key, i);
    *v = (int64_t)p->valuedouble;
    return 0;
}

/* Tap: compare an intermediate with the io tensor of the same name. */
static void tap_fn(void *ctx, const char *name, const DittoTensor *t)
{
    DittoVerifyRun *r = ctx;
    State *s = r->priv;
    const DittoCatalogEntry *e = ditto_catalog_find(r->io, name);
    if (!e)
        return;   /* the fixture has no reference for it */
    Row *row = add_row(s, ROW_INTER, name);
    if (!row)
        return;
    row->tol = s->c->outs[0].tol;
    float *out = NULL, *ref = NULL;
    int64_t n;
    int rc = fetch_f32(s, t, &out, &n);
    if (rc < 0) {
        snprintf(row->why, sizeof row->why, "cannot read back: %s", ditto_strerror(rc));
    } else if (!shape_equal(t->ndim, t->shape, e->ndim, e->shape)) {
        shape_mismatch(row, "reference", t->ndim, t->shape, e->ndim, e->shape);
    } else if (ditto_verify_read_io(r, name, &e, &ref) < 0) {
        snprintf(row->why, sizeof row->why, "cannot read reference '%s'", name);
    } else {
        row->measured = true;
        row->m = compare(out, ref, n);
        row->pass = judge(&row->m, &row->tol, row->why, sizeof row->why);
    }
    ditto_free(out);
    ditto_free(ref);
}

/* ---- report --------------------------------------------------------------- */

typedef struct Layout {
    int wcase, wout;
} Layout;

static void print_metrics(const Row *row)
{
    char tb[96];
    if (row->measured) {
        if (isnan(row->m.max_abs))
            printf("  %9s  %9s  %10s", "nan", "nan", "nan");
        else
            printf("  %9.2e  %9.2e  %10.8f", row->m.max_abs, row->m.rel_l2, row->m.cosine);
    } else {
        printf("  %9s  %9s  %10s", "-", "-", "-");
    }
    printf("  %-30s", tol_str(&row->tol, tb, sizeof tb));
}

static void print_header(const Layout *l)
{
    printf("%-*s  %-*s  %9s  %9s  %10s  %-30s  %s\n", l->wcase, "case", l->wout, "output", "max_abs", "rel_l2", "cosine",
           "tolerance", "result");
}

typedef enum Verdict { CASE_PASS, CASE_FAIL, CASE_UNSUPPORTED } Verdict;

static Verdict print_case(const Layout *l, const State *s, const char *error)
{
    const Case *c = s->c;
    bool any_fail = error != NULL;
    bool strict = s->opt->strict_intermediates;
    if (error) {
        printf("%-*s  %-*s  ERROR: %s\n", l->wcase, c->name, l->wout, "-", error);
    }
    for (int i = 0; i < s->nrows; i++) {
        const Row *row = &s->rows[i];
        if (row->type != ROW_OUTPUT)
            continue;
        printf("%-*s  %-*s", l->wcase, c->name, l->wout, row->name);
        print_metrics(row);
        printf("  %s%s%s\n", row->pass ? "PASS" : "FAIL", row->why[0] ? "  " : "", row->why);
        any_fail |= !row->pass;
    }
    int nin = 0;
    for (int i = 0; i < s->nrows; i++)
        nin += s->rows[i].type == ROW_INTER || s->rows[i].type == ROW_INTER_MISSING;
    if (nin)
        printf("  intermediates%s:\n", strict ? "" : " (informational)");
    for (int i = 0; i < s->nrows; i++) {
        const Row *row = &s->rows[i];
        if (row->type == ROW_INTER_MISSING) {
            printf("    %-*s  (not reported by the network)\n", l->wcase + l->wout - 2, row->name);
        } else if (row->type == ROW_INTER) {
            printf("    %-*s", l->wcase + l->wout - 2, row->name);
            print_metrics(row);
            if (strict)
                printf("  %s", row->pass ? "PASS" : "FAIL");
            else
                printf("  %s", row->pass ? "ok" : "over");
            printf("%s%s\n", row->why[0] ? "  " : "", row->why);
            if (strict)
                any_fail |= !row->pass;
        }
    }
    for (int i = 0; i < s->nrows; i++) {
        const Row *row = &s->rows[i];
        if (row->type != ROW_BATCH)
            continue;
        char label[64];
        snprintf(label, sizeof label, "batch-consistency (%d items)", s->bc_items);
        printf("  %-*s", l->wcase + l->wout, label);
        print_metrics(row);
        printf("  %s%s%s\n", row->pass ? "PASS" : "FAIL", row->why[0] ? "  " : "", row->why);
        any_fail |= !row->pass;
    }
    fflush(stdout);
    return any_fail ? CASE_FAIL : CASE_PASS;
}

/* ---- running -------------------------------------------------------------- */

static void reset_state(State *s, const Case *c)
{
    s->c = c;
    s->nrows = 0;
    free_saved(s);
    free_buffers(s);
    s->err[0] = '\0';
    s->bc = (Metrics){ 0, 0, 1.0, 0, 0 };
    s->bc_fail = false;
    s->bc_why[0] = '\0';
    s->bc_worst[0] = '\0';
    s->bc_items = 0;
    s->item = -1;
}

/* The logged error, prefixed with `what` (a path) unless it names it already; else what: strerror. */
static const char *err_text(State *s, int rc, char *buf, size_t n, const char *what)
{
    if (s->err[0] && strstr(s->err, what))
        snprintf(buf, n, "%s", s->err);
    else if (s->err[0])
        snprintf(buf, n, "%s: %s", what, s->err);
    else
        snprintf(buf, n, "%s: %s", what, ditto_strerror(rc));
    return buf;
}

/* Open a case's .pth; on failure msg = "<kind> <the error, naming the path>". */
static int open_case_file(State *s, const DittoLogger *lg, const char *kind, const char *path, DittoCatalog **cat, char *msg, size_t n)
{
    int rc = ditto_catalog_open_pth(cat, path, lg);
    if (rc < 0) {
        char tmp[700];
        snprintf(msg, n, "%s %s", kind, err_text(s, rc, tmp, sizeof tmp, path));
    }
    return rc;
}

static Verdict run_case(const Layout *l, State *s, const Manifest *mf, const Case *c, DittoTap *tap, DittoVerifyRun *r)
{
    char msg[768];
    DittoCatalog *io = NULL, *weights = NULL;
    DittoArena ws;
    void *model = NULL;
    bool arena = false, loaded = false;
    const char *error = NULL;
    reset_state(s, c);
    DittoLogger lg = { capture_log, s, DITTO_LOG_WARN };

    bool submitted[64] = { false };
    bool *sub = c->nouts <= 64 ? submitted : ditto_calloc((size_t)c->nouts, sizeof *sub);
    s->submitted = sub;

    char *io_path = c->io_file ? path_join(mf->dir, c->io_file) : NULL;
    char *w_path = c->weights_file ? path_join(mf->dir, c->weights_file) : NULL;
    int rc = 0;
    if (!sub || (c->io_file && !io_path) || (c->weights_file && !w_path)) {
        error = "out of memory";
        goto done;
    }
    if (!io_path) {
        error = "the manifest gives no io_file";
        goto done;
    }
    rc = open_case_file(s, &lg, "io file", io_path, &io, msg, sizeof msg);
    if (rc == 0 && w_path)
        rc = open_case_file(s, &lg, "weights", w_path, &weights, msg, sizeof msg);
    if (rc < 0) {
        error = msg;
        goto done;
    }
    rc = ditto_arena_init(&ws, &s->be->allocator, 0);
    if (rc < 0) {
        error = "cannot create the scratch arena";
        goto done;
    }
    arena = true;

    memset(r, 0, sizeof *r);
    r->be = s->be;
    r->ws = &ws;
    r->weights = weights;
    r->io = io;
    r->json = c->json;
    r->params = cJSON_GetObjectItemCaseSensitive(c->json, "params");
    r->dir = mf->dir;
    r->name = c->name;
    r->batch = c->batch;
    r->item = -1;
    r->log = lg;
    r->priv = s;
    tap->fn = tap_fn;
    tap->ctx = r;

    if (c->runner->load) {
        rc = c->runner->load(r, &model);
        if (rc < 0) {
            char tmp[700];
            snprintf(msg, sizeof msg, "cannot load %s", err_text(s, rc, tmp, sizeof tmp, w_path ? w_path : c->key));
            error = msg;
            goto done;
        }
    }
    loaded = true;

    r->tap = s->opt->intermediates ? tap : NULL;
    rc = ditto_arena_reset(&ws);
    if (rc >= 0)
        rc = c->runner->forward(r, model);
    free_buffers(s);
    if (rc < 0) {
        err_text(s, rc, msg, sizeof msg, "forward");
        error = msg;
        goto done;
    }
    for (int i = 0; i < c->nouts; i++) {
        if (sub[i])
            continue;
        Row *row = add_row(s, ROW_OUTPUT, c->outs[i].name);
        if (row) {
            row->tol = c->outs[i].tol;
            snprintf(row->why, sizeof row->why, "not produced by the runner");
        }
    }
    if (s->opt->intermediates) {
        for (int i = 0; i < c->ninters; i++) {
            bool seen = false;
            for (int k = 0; k < s->nrows && !seen; k++)
                seen = s->rows[k].type == ROW_INTER && !strcmp(s->rows[k].name, c->inters[i]);
            if (!seen)
                add_row(s, ROW_INTER_MISSING, c->inters[i]);
        }
    }

    /* Every item alone must give what it gave inside the batch (checked when the batch gave finite outputs). */
    if (!strcmp(c->kind, "module") && c->batch > 1 && s->nsaved > 0) {
        r->tap = NULL;
        for (int64_t i = 0; i < c->batch; i++) {
            s->item = r->item = i;
            s->err[0] = '\0';
            rc = ditto_arena_reset(&ws);
            if (rc >= 0)
                rc = c->runner->forward(r, model);
            free_buffers(s);
            if (rc < 0) {
                if (!s->bc_fail) {
                    char tmp[460];
                    snprintf(s->bc_why, sizeof s->bc_why, "item %lld: %s", (long long)i, err_text(s, rc, tmp, sizeof tmp, "forward"));
                }
                s->bc_fail = true;
                break;
            }
            s->bc_items++;
        }
        s->item = r->item = -1;
        Row *row = add_row(s, ROW_BATCH, "batch-consistency");
        if (row) {
            row->tol = (Tol){ BATCH_TOL_REL_L2, -1, -1 };
            row->measured = s->bc_items > 0;
            row->m = s->bc;
            row->pass = !s->bc_fail && s->bc_items == c->batch;
            snprintf(row->why, sizeof row->why, "%s", s->bc_why[0] ? s->bc_why : s->bc_worst);
        }
    }

done:
    if (loaded && c->runner->release)
        c->runner->release(model);
    free_buffers(s);
    if (arena)
        ditto_arena_free(&ws);
    ditto_catalog_close(&weights);
    ditto_catalog_close(&io);
    ditto_free(io_path);
    ditto_free(w_path);
    Verdict v = print_case(l, s, error);
    if (sub != submitted)
        ditto_free(sub);
    s->submitted = NULL;
    return v;
}

static bool case_selected(const Options *o, const Case *c, bool *pattern_hit)
{
    if (o->npatterns == 0)
        return true;
    bool sel = false;
    for (int i = 0; i < o->npatterns; i++)
        if (fnmatch(o->patterns[i], c->name, 0) == 0) {
            pattern_hit[i] = true;
            sel = true;
        }
    return sel;
}

static void print_list(const Manifest *m)
{
    int wn = 4, wk = 4, wt = 6;
    for (int i = 0; i < m->ncases; i++) {
        const Case *c = &m->cases[i];
        if (!c->selected)
            continue;
        wn = (int)strlen(c->name) > wn ? (int)strlen(c->name) : wn;
        wk = (int)strlen(c->kind) > wk ? (int)strlen(c->kind) : wk;
        wt = (int)strlen(c->key) > wt ? (int)strlen(c->key) : wt;
    }
    printf("%-*s  %-*s  %-*s  %5s  %-11s  %s\n", wn, "case", wk, "kind", wt, "target", "batch", "this build", "outputs");
    int nsup = 0, nsel = 0;
    for (int i = 0; i < m->ncases; i++) {
        const Case *c = &m->cases[i];
        if (!c->selected)
            continue;
        nsel++;
        nsup += c->runner != NULL;
        char batch[24] = "-";
        if (c->batch)
            snprintf(batch, sizeof batch, "%lld", (long long)c->batch);
        printf("%-*s  %-*s  %-*s  %5s  %-11s  ", wn, c->name, wk, c->kind, wt, c->key, batch,
               c->runner ? "supported" : "unsupported");
        for (int k = 0; k < c->nouts; k++)
            printf("%s%s", k ? ", " : "", c->outs[k].name);
        printf("\n");
    }
    printf("\n%d case%s, %d supported by this build, %d unsupported\n", nsel, nsel == 1 ? "" : "s", nsup, nsel - nsup);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_args(Options *o, int argc, char **argv, char ***owned, int *nowned)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-l") || !strcmp(a, "--list")) {
            o->list = true;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--intermediates")) {
            o->intermediates = true;
        } else if (!strcmp(a, "--strict-intermediates")) {
            o->intermediates = o->strict_intermediates = true;
        } else if (!strcmp(a, "--fp16")) {
            o->fp16 = true;
        } else if ((v = opt_value(argc, argv, &i, "-f", "--fixtures", &missing))) {
            o->fixtures = v;
        } else if ((v = opt_value(argc, argv, &i, "-c", "--case", &missing))) {
            if (add_patterns(o, v, owned, nowned) < 0) {
                fprintf(stderr, "ditto verify: out of memory\n");
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "-b", "--backend", &missing))) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "ditto verify: unknown backend '%s' (expected cpu or cuda)\n", v);
                return 2;
            }
            o->backend = v;
        } else if ((v = opt_value(argc, argv, &i, "-t", "--threads", &missing))) {
            char *end;
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 0 || n > 4096) {
                fprintf(stderr, "ditto verify: --threads expects a count from 0 to 4096, got '%s'\n", v);
                return 2;
            }
            o->threads = (int)n;
        } else if (missing) {
            fprintf(stderr, "ditto verify: option '%s' needs a value (see 'ditto verify --help')\n", a);
            return 2;
        } else {
            fprintf(stderr, "ditto verify: unknown option '%s' (see 'ditto verify --help')\n", a);
            return 2;
        }
    }
    if (!o->fixtures) {
        fprintf(stderr, "ditto verify: --fixtures DIR is required (see 'ditto verify --help')\n");
        return 2;
    }
    if (o->fp16 && strcmp(o->backend, "cuda")) {
        fprintf(stderr, "ditto verify: --fp16 needs --backend cuda (the CPU backend is the fp32 oracle)\n");
        return 2;
    }
    return -1;   /* go on */
}

int ditto_cmd_verify(int argc, char **argv)
{
    Options opt = { .backend = "cpu" };
    char **owned = NULL;
    int nowned = 0, status = 2;
    Manifest mf = { 0 };
    State st = { 0 };
    DittoBackend *be = NULL;
    bool *hit = NULL;

    int rc = parse_args(&opt, argc, argv, &owned, &nowned);
    if (rc >= 0) {
        status = rc;
        goto out;
    }
    bool mixed = !strcmp(opt.backend, "cuda");
    if ((status = manifest_load(&mf, opt.fixtures, mixed)) != 0)
        goto out;
    status = 2;

    hit = ditto_calloc(opt.npatterns ? (size_t)opt.npatterns : 1, sizeof *hit);
    if (!hit) {
        fprintf(stderr, "ditto verify: out of memory\n");
        goto out;
    }
    int nsel = 0, nrun = 0;
    for (int i = 0; i < mf.ncases; i++) {
        Case *c = &mf.cases[i];
        c->selected = case_selected(&opt, c, hit);
        nsel += c->selected;
        nrun += c->selected && c->runner;
    }
    for (int i = 0; i < opt.npatterns; i++)
        if (!hit[i]) {
            fprintf(stderr, "ditto verify: --case '%s' matches no case of %s (see --list)\n", opt.patterns[i], mf.path);
            goto out;
        }
    if (opt.list) {
        print_list(&mf);
        status = 0;
        goto out;
    }

    st.opt = &opt;
    if (nrun > 0) {
        DittoBackendParams bp;
        ditto_backend_params_default(&bp);
        bp.nthreads = opt.threads;
        bp.fp16 = opt.fp16;
        bp.log = (DittoLogger){ capture_log, &st, DITTO_LOG_WARN };
        rc = ditto_backend_open(&be, opt.backend, &bp);
        if (rc < 0) {
            fprintf(stderr, "ditto verify: cannot open the %s backend: %s\n", opt.backend, st.err[0] ? st.err : ditto_strerror(rc));
            goto out;
        }
        st.be = be;
    }

    Layout l = { 4, (int)strlen("output") };
    for (int i = 0; i < mf.ncases; i++) {
        const Case *c = &mf.cases[i];
        if (!c->selected)
            continue;
        if ((int)strlen(c->name) > l.wcase)
            l.wcase = (int)strlen(c->name);
        for (int k = 0; k < c->nouts; k++)
            if ((int)strlen(c->outs[k].name) > l.wout)
                l.wout = (int)strlen(c->outs[k].name);
        if (opt.intermediates)
            for (int k = 0; k < c->ninters; k++)
                if ((int)strlen(c->inters[k]) + 2 > l.wcase + l.wout)
                    l.wout = (int)strlen(c->inters[k]) + 2 - l.wcase;
    }
    if (l.wcase + l.wout < 28)
        l.wout = 28 - l.wcase;   /* room for "batch-consistency (N items)" */

    char threads[32] = "";
    if (!strcmp(opt.backend, "cpu")) {
        if (opt.threads > 0)
            snprintf(threads, sizeof threads, ", %d thread%s", opt.threads, opt.threads == 1 ? "" : "s");
        else
            snprintf(threads, sizeof threads, ", all cores");
    }
    printf("ditto verify: %s (%d of %d case%s), backend %s%s%s, %s tolerances\n\n", mf.path, nsel, mf.ncases, mf.ncases == 1 ? "" : "s",
           opt.backend, threads, opt.fp16 ? ", fp16 storage" : "", mixed ? "fp16_or_mixed (else fp32)" : "fp32");
    print_header(&l);

    int npass = 0, nfail = 0, nunsup = 0;
    double t0 = now_s();
    DittoTap tap = { NULL, NULL };
    DittoVerifyRun run;
    for (int i = 0; i < mf.ncases; i++) {
        Case *c = &mf.cases[i];
        if (!c->selected)
            continue;
        if (!c->runner) {
            printf("%-*s  %-*s  UNSUPPORTED  (no runner for %s '%s' in this build)\n", l.wcase, c->name, l.wout, "-", c->kind,
                   c->key[0] ? c->key : c->target);
            nunsup++;
            continue;
        }
        Verdict v = run_case(&l, &st, &mf, c, &tap, &run);
        npass += v == CASE_PASS;
        nfail += v == CASE_FAIL;
        c->failed = v == CASE_FAIL;
    }
    double secs = now_s() - t0;

    printf("\n%d passed, %d failed, %d unsupported  (%d case%s, backend %s%s, %.1f s)\n", npass, nfail, nunsup, nsel,
           nsel == 1 ? "" : "s", opt.backend, opt.fp16 ? " fp16" : "", secs);
    if (nfail) {
        printf("failed:");
        for (int i = 0; i < mf.ncases; i++)
            if (mf.cases[i].failed)
                printf(" %s", mf.cases[i].name);
        printf("\n");
    }
    status = (nfail || nunsup) ? 1 : 0;

out:
    reset_state(&st, NULL);
    ditto_free(st.rows);
    ditto_free(st.bufs);
    ditto_backend_close(&be);
    manifest_free(&mf);
    ditto_free(hit);
    for (int i = 0; i < nowned; i++)
        ditto_free(owned[i]);
    ditto_free(owned);
    ditto_free(opt.patterns);
    fflush(stdout);
    return status;
}
