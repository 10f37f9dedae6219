/* Audio2Motion window driver and its LMDM sampler; see audio2motion.h for the algorithm. */
#include "pipeline/audio2motion.h"

#include <string.h>

#include "core/log.h"
#include "core/mem.h"

#define MDIM DITTO_MOTION_DIM

void ditto_a2m_params_default(DittoA2mParams *p)
{
    memset(p, 0, sizeof *p);
    p->seq_frames = DITTO_A2M_SEQ_FRAMES;
    p->overlap = DITTO_A2M_OVERLAP;
    p->smooth_k = DITTO_A2M_SMOOTH_K;
    p->cond_dim = 1103;
}

static int check_params(const DittoA2mParams *p, const DittoLogger *log)
{
    if (!p)
        return DITTO_ERR_INVAL;
    if (p->seq_frames < 1 || p->seq_frames > (1 << 20))
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: seq_frames %d out of range", p->seq_frames);
    if (p->overlap < 0 || p->overlap >= p->seq_frames)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: overlap %d must be in [0, seq_frames %d)", p->overlap, p->seq_frames);
    if (p->smooth_k < 0 || p->smooth_k > p->seq_frames)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: smooth_k %d must be in [0, seq_frames]", p->smooth_k);
    if (p->fix_kp_cond < 0)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: fix_kp_cond %d is negative", p->fix_kp_cond);
    if (p->fix_kp_cond_dim[0] < p->fix_kp_cond_dim[1] && (p->fix_kp_cond_dim[0] < 0 || p->fix_kp_cond_dim[1] > MDIM))
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: fix_kp_cond_dim [%d, %d) outside [0, %d)", p->fix_kp_cond_dim[0],
                          p->fix_kp_cond_dim[1], MDIM);
    if (p->cond_dim < 1 || p->cond_dim > (1 << 20))
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: cond_dim %lld out of range", (long long)p->cond_dim);
    return 0;
}

int64_t ditto_a2m_num_windows(const DittoA2mParams *p, int64_t n)
{
    DITTO_TRY(check_params(p, NULL));
    if (n < 0)
        return DITTO_ERR_INVAL;
    const int64_t S = p->seq_frames, V = S - p->overlap;
    if (!p->online)
        return (n + V - 1) / V;
    const int64_t rows = p->overlap + n;
    const int64_t full = rows >= S ? (rows - S) / V + 1 : 0;
    return full + (full * V < rows ? 1 : 0);
}

/* ---- the driver ---- */

struct DittoA2m {
    DittoA2mParams p;
    int64_t S, O, V, F, half, C;
    DittoA2mSampler sampler;
    DittoA2mEmit emit;
    DittoLogger log;
    float s_kp_cond[MDIM], kp_cond[MDIM], d0[MDIM];
    float v_min_max[2 * MDIM];
    bool has_clip, has_d0;

    /* condition rows [cond_base, cond_base + cond_n) of the stream; cond_base = start of the next window */
    float *cond;          /* (S, C) */
    float *win;           /* (S, C) padded window */
    int64_t cond_base, cond_n, rows;

    float *pred;          /* (S, MDIM) */
    /* res frames [res_base, res_len) at res[(i - res_base) * MDIM]; frames below res_base are final and emitted */
    float *res;           /* (cap, MDIM) */
    float *old;           /* (cap, MDIM) smoothing copy */
    float *out;           /* (cap, MDIM) emission scratch */
    int64_t cap, res_base, res_len;

    int64_t windows;      /* upstream clip_idx */
    int64_t emitted;      /* next res index to emit */
    int64_t start;        /* res index of output frame 0 (online: O) */
    bool finished;
    int err;              /* sticky */
};

static float *row(const DittoA2m *a, float *buf, int64_t i)
{
    DITTO_ASSERT(i >= a->res_base && i < a->res_base + a->cap);
    return buf + (i - a->res_base) * MDIM;
}

/*
 * upstream _smo(res, s, e) over the current res (n = res_len frames): dims
 * [0, 202) of frames s..e-1 become the mean of the copy's frames
 * [max(0, i-half), min(n, i+half+1)). Sums in double, rounded once.
 */
static void smooth_join(DittoA2m *a, int64_t s, int64_t e)
{
    if (a->p.smooth_k <= 1 || s >= e)
        return;
    const int64_t lo = s - a->half > 0 ? s - a->half : 0;
    const int64_t hi = e + a->half < a->res_len ? e + a->half : a->res_len;
    memcpy(row(a, a->old, lo), row(a, a->res, lo), (size_t)(hi - lo) * MDIM * sizeof(float));
    for (int64_t i = s; i < e; i++) {
        const int64_t ss = i - a->half > 0 ? i - a->half : 0;
        const int64_t ee = i + a->half + 1 < a->res_len ? i + a->half + 1 : a->res_len;
        float *dst = row(a, a->res, i);
        for (int d = 0; d < DITTO_A2M_SMOOTH_DIMS; d++) {
            double acc = 0.0;
            for (int64_t j = ss; j < ee; j++)
                acc += row(a, a->old, j)[d];
            dst[d] = (float)(acc / (double)(ee - ss));
        }
    }
}

/* Drop res frames that neither a later window nor the emission reads again. */
static void trim_res(DittoA2m *a)
{
    int64_t keep = a->res_len - a->F - a->half;           /* the next join reads from here */
    const int64_t kp_row = a->res_len + a->V - a->O - 1;  /* its kp_cond update reads res[len + V - O - 1] */
    const int64_t need = a->emitted - (a->p.online ? 0 : a->half);
    keep = keep < kp_row ? keep : kp_row;
    keep = keep < need ? keep : need;
    if (keep <= a->res_base)
        return;
    const int64_t n = a->res_len - keep;
    memmove(a->res, row(a, a->res, keep), (size_t)n * MDIM * sizeof(float));
    a->res_base = keep;
}

/*
 * Emit res frames [emitted, limit). Offline each gets the final full-track
 * smoothing, truncated at n_end (N once the stream has ended; the caller
 * guarantees the frames read are final).
 */
static int emit_upto(DittoA2m *a, int64_t limit, int64_t n_end)
{
    if (limit <= a->emitted)
        return 0;
    const int64_t n = limit - a->emitted;
    DITTO_ASSERT(n <= a->cap && limit <= a->res_len);
    for (int64_t k = 0; k < n; k++) {
        const int64_t i = a->emitted + k;
        float *dst = a->out + k * MDIM;
        const float *src = row(a, a->res, i);
        memcpy(dst, src, MDIM * sizeof(float));
        if (a->p.online || a->p.smooth_k <= 1)
            continue;
        const int64_t ss = i - a->half > 0 ? i - a->half : 0;
        const int64_t ee = i + a->half + 1 < n_end ? i + a->half + 1 : n_end;
        for (int d = 0; d < DITTO_A2M_SMOOTH_DIMS; d++) {
            double acc = 0.0;
            for (int64_t j = ss; j < ee; j++)
                acc += row(a, a->res, j)[d];
            dst[d] = (float)(acc / (double)(ee - ss));
        }
    }
    int rc = a->emit.fn ? a->emit.fn(a->emit.ctx, a->emitted - a->start, a->out, n) : 0;
    a->emitted = limit;
    return rc;
}

/* Run window a->windows over rows [cond_base, cond_base + real), padded to S. */
static int run_window(DittoA2m *a, int64_t real)
{
    const int64_t S = a->S, V = a->V, F = a->F, C = a->C;
    DITTO_ASSERT(real >= 1 && real <= S && real <= a->cond_n);
    const float *w = a->cond;
    if (real < S) {
        /* pad by repeating the last real row */
        memcpy(a->win, a->cond, (size_t)(real * C) * sizeof(float));
        for (int64_t j = real; j < S; j++)
            memcpy(a->win + j * C, a->cond + (real - 1) * C, (size_t)C * sizeof(float));
        w = a->win;
    }
    DITTO_TRY(a->sampler.fn(a->sampler.ctx, a->windows, a->kp_cond, w, a->pred));

    trim_res(a);
    if (a->windows == 0) {
        DITTO_ASSERT(S <= a->cap);
        memcpy(a->res, a->pred, (size_t)(S * MDIM) * sizeof(float));
        a->res_base = 0;
        a->res_len = S;
        smooth_join(a, 0, S);
        memcpy(a->d0, a->res, sizeof a->d0);
        a->has_d0 = true;
    } else {
        const int64_t L = a->res_len;
        DITTO_ASSERT(L + V - a->res_base <= a->cap && (L - F - a->half < 0 || L - F - a->half >= a->res_base));
        /* cross-fade res[L-F .. L) into pred[S-V-F .. S-V) with a = float32(k/F) */
        for (int64_t k = 0; k < F; k++) {
            const double al = (double)((float)k / (float)F);
            float *r1 = row(a, a->res, L - F + k);
            const float *r2 = a->pred + (S - V - F + k) * MDIM;
            for (int d = 0; d < MDIM; d++)
                r1[d] = (float)((double)r1[d] * (1.0 - al) + (double)r2[d] * al);
        }
        a->res_len = L + V;
        memcpy(row(a, a->res, L), a->pred + (S - V) * MDIM, (size_t)(V * MDIM) * sizeof(float));
        smooth_join(a, L - F, L + 1);
    }
    a->windows++;

    /* kp_cond of the next window: res[idx - 1], idx = len(res) - O */
    const float *prev = row(a, a->res, a->res_len - a->O - 1);
    const int K = a->p.fix_kp_cond;
    if (K > 0 && a->windows % K == 0) {
        memcpy(a->kp_cond, a->s_kp_cond, sizeof a->kp_cond);
        const int ds = a->p.fix_kp_cond_dim[0], de = a->p.fix_kp_cond_dim[1];
        if (ds < de)
            memcpy(a->kp_cond + ds, prev + ds, (size_t)(de - ds) * sizeof(float));
    } else {
        memcpy(a->kp_cond, prev, sizeof a->kp_cond);
    }

    /* rows of the next window start V later */
    const int64_t drop = V < a->cond_n ? V : a->cond_n;
    memmove(a->cond, a->cond + drop * C, (size_t)((a->cond_n - drop) * C) * sizeof(float));
    a->cond_n -= drop;
    a->cond_base += V;
    return 0;
}

int ditto_a2m_open(DittoA2m **out, const DittoA2mParams *p, const float *s_kp_cond, DittoA2mSampler sampler, DittoA2mEmit emit,
                   const DittoLogger *log)
{
    if (!out)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DITTO_TRY(check_params(p, log));
    if (!s_kp_cond || !sampler.fn)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: no s_kp_cond or no sampler");
    if ((sampler.seq_frames && sampler.seq_frames != p->seq_frames) || (sampler.cond_dim && sampler.cond_dim != p->cond_dim))
        return ditto_fail(log, DITTO_ERR_SHAPE, "audio2motion: the sampler makes windows of %lld frames from %lld-d conditions, the driver wants %d and %lld",
                          (long long)sampler.seq_frames, (long long)sampler.cond_dim, p->seq_frames, (long long)p->cond_dim);
    DittoA2m *a = ditto_calloc(1, sizeof *a);
    if (!a)
        return DITTO_ERR_NOMEM;
    a->p = *p;
    a->p.v_min_max = NULL;
    a->S = p->seq_frames;
    a->O = p->overlap;
    a->V = a->S - a->O;
    a->F = p->online ? (a->O < a->V ? a->O : a->V) : a->O;
    a->half = p->smooth_k > 1 ? p->smooth_k / 2 : 0;
    a->C = p->cond_dim;
    a->sampler = sampler;
    a->emit = emit;
    if (log)
        a->log = *log;
    memcpy(a->s_kp_cond, s_kp_cond, sizeof a->s_kp_cond);
    memcpy(a->kp_cond, s_kp_cond, sizeof a->kp_cond);
    if (p->v_min_max) {
        memcpy(a->v_min_max, p->v_min_max, sizeof a->v_min_max);
        a->has_clip = true;
    }
    a->start = p->online ? a->O : 0;
    a->emitted = a->start;
    /*
     * After a trim res holds at most max(the unemitted frames plus half, F +
     * half, O - V + 1) <= S + half frames, then the V appended ones: 2S + 2
     * half bounds it.
     */
    a->cap = 2 * a->S + 2 * a->half + 2;
    a->cond = ditto_malloc((size_t)(a->S * a->C) * sizeof(float));
    a->win = ditto_malloc((size_t)(a->S * a->C) * sizeof(float));
    a->pred = ditto_malloc((size_t)(a->S * MDIM) * sizeof(float));
    a->res = ditto_malloc((size_t)(a->cap * MDIM) * sizeof(float));
    a->old = ditto_malloc((size_t)(a->cap * MDIM) * sizeof(float));
    a->out = ditto_malloc((size_t)(a->cap * MDIM) * sizeof(float));
    if (!a->cond || !a->win || !a->pred || !a->res || !a->old || !a->out) {
        ditto_a2m_close(&a);
        return DITTO_ERR_NOMEM;
    }
    *out = a;
    return 0;
}

void ditto_a2m_close(DittoA2m **pa)
{
    if (!pa || !*pa)
        return;
    DittoA2m *a = *pa;
    ditto_free(a->cond);
    ditto_free(a->win);
    ditto_free(a->pred);
    ditto_free(a->res);
    ditto_free(a->old);
    ditto_free(a->out);
    ditto_free(a);
    *pa = NULL;
}

static int state_ok(const DittoA2m *a)
{
    if (!a)
        return DITTO_ERR_INVAL;
    if (a->err)
        return DITTO_ERR_BADSTATE;
    return a->finished ? DITTO_ERR_AGAIN : 0;
}

/* Frames final after a window while the stream goes on. */
static int64_t final_limit(const DittoA2m *a)
{
    return a->res_len - a->F - (a->p.online ? 0 : a->half);
}

int ditto_a2m_push(DittoA2m *a, const float *cond, int64_t n)
{
    DITTO_TRY(state_ok(a));
    if (n < 0 || (n > 0 && !cond))
        return DITTO_ERR_INVAL;
    while (n > 0) {
        int64_t take = a->S - a->cond_n;
        take = take < n ? take : n;
        memcpy(a->cond + a->cond_n * a->C, cond, (size_t)(take * a->C) * sizeof(float));
        a->cond_n += take;
        a->rows += take;
        cond += take * a->C;
        n -= take;
        if (a->cond_n < a->S)
            break;
        int rc = run_window(a, a->S);
        if (rc >= 0)
            rc = emit_upto(a, final_limit(a), INT64_MAX);
        if (rc < 0) {
            a->err = rc;
            return rc;
        }
    }
    return 0;
}

int ditto_a2m_finish(DittoA2m *a)
{
    DITTO_TRY(state_ok(a));
    if (!a->p.online && a->rows == 0)
        return ditto_fail(&a->log, DITTO_ERR_INVAL, "audio2motion: no frames");
    int rc = 0;
    /* offline: windows at 0, V, 2V, ... while the start is < N; online: one final window */
    while (rc >= 0 && a->cond_base < a->rows) {
        rc = run_window(a, a->rows - a->cond_base);
        if (rc >= 0 && !a->p.online) {
            int64_t lim = final_limit(a);
            rc = emit_upto(a, lim < a->rows ? lim : a->rows, a->rows);
        }
        if (a->p.online)
            break;
    }
    if (rc >= 0)
        rc = emit_upto(a, a->rows, a->rows);   /* res[:N] (online: the real rows) */
    if (rc < 0) {
        a->err = rc;
        return rc;
    }
    a->finished = true;
    return 0;
}

void ditto_a2m_status(const DittoA2m *a, DittoA2mStatus *st)
{
    st->rows = a->rows;
    st->windows = a->windows;
    st->emitted = a->emitted - a->start;
    st->res_len = a->res_len;
    st->finished = a->finished;
}

const float *ditto_a2m_kp_cond(const DittoA2m *a)
{
    return a->kp_cond;
}

const float *ditto_a2m_d0(const DittoA2m *a)
{
    return a->has_d0 ? a->d0 : NULL;
}

void ditto_a2m_cvt_fmt(const DittoA2m *a, const float *motion, int64_t n, DittoXInfo *out)
{
    ditto_motion_to_xinfo(motion, n, a->has_clip ? a->v_min_max : NULL, out);
}

typedef struct CollectCtx {
    float *motion;
    int64_t n;
} CollectCtx;

static int collect(void *ctx, int64_t first, const float *motion, int64_t n)
{
    CollectCtx *c = ctx;
    if (first < 0 || first + n > c->n)
        return DITTO_ERR_RANGE;
    memcpy(c->motion + first * MDIM, motion, (size_t)(n * MDIM) * sizeof(float));
    return 0;
}

int ditto_a2m_offline(const DittoA2mParams *p, const float *s_kp_cond, DittoA2mSampler sampler, const float *cond, int64_t n, float *motion,
                      const DittoLogger *log)
{
    if (!p || p->online || n < 1 || !cond || !motion)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio2motion: offline driver wants n >= 1 frames, conditions and an output");
    CollectCtx cc = { motion, n };
    DittoA2m *a = NULL;
    DITTO_TRY(ditto_a2m_open(&a, p, s_kp_cond, sampler, (DittoA2mEmit){ collect, &cc }, log));
    int rc = ditto_a2m_push(a, cond, n);
    if (rc >= 0)
        rc = ditto_a2m_finish(a);
    DITTO_ASSERT(rc < 0 || a->emitted == n);
    ditto_a2m_close(&a);
    return rc;
}

/* ---- LMDM sampler ---- */

struct DittoA2mLmdm {
    DittoLmdm *m;
    DittoBackend *be;
    DittoA2mLmdmParams p;
    DittoDdimSchedule sched;
    DittoArena ws;
    bool ws_init;
    DittoBuffer kp_buf, cond_buf, out_buf, noise_buf;
    DittoTensor kp, cond, out;       /* (1, F), (1, L, Cc), (1, L, F) */
    DittoTensor noise;               /* (S + 1, 1, L, F): x_T, then z of every step (DittoDdimNoise.all) */
    int64_t n_xT;                    /* windows the injected x_T covers */
    int64_t runs;                    /* windows sampled so far */
    void *graph;                     /* captured window, replayed; NULL: op by op */
    bool graph_failed;               /* capture did not work here: stay op by op */
};

void ditto_a2m_lmdm_params_default(DittoA2mLmdmParams *p)
{
    memset(p, 0, sizeof *p);
    p->steps = DITTO_DDIM_DEFAULT_STEPS;
    p->coef = DITTO_DDIM_COEF_EXACT;
    p->graph = true;
}

static int device_tensor(DittoBackend *be, DittoBuffer *buf, int ndim, const int64_t *shape, DittoTensor *t)
{
    *t = ditto_tensor(NULL, DITTO_F32, ndim, shape);
    DITTO_TRY(ditto_buffer_alloc(buf, &be->allocator, ditto_tensor_nbytes(t)));
    t->data = buf->ptr;
    t->device = be->allocator.device;
    return 0;
}

/* Injected z (S-1, 1, L, F) into noise slots 1 .. S-1, once: it is the same for every window. */
static int copy_step_noise(DittoA2mLmdm *s)
{
    const int S = s->p.steps;
    DittoTensor dst;
    DITTO_TRY(ditto_tensor_slice(&s->noise, 0, 1, S, 1, &dst));
    const DittoTensor *z = s->p.z;
    if (z->ndim != 4 || z->shape[0] != S - 1 || z->shape[1] != 1 || z->shape[2] != dst.shape[2] || z->shape[3] != dst.shape[3] ||
        z->dtype != DITTO_F32 || z->device != s->be->allocator.device)
        return ditto_fail(&s->be->log, DITTO_ERR_SHAPE, "audio2motion: injected z must be a float32 (%d, 1, %lld, %lld) on the %s backend", S - 1,
                          (long long)dst.shape[2], (long long)dst.shape[3], s->be->name);
    return ditto_op_copy(s->be, z, &dst);
}

int ditto_a2m_lmdm_open(DittoA2mLmdm **out, DittoLmdm *m, const DittoA2mLmdmParams *p)
{
    if (!out || !m || !p)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoBackend *be = ditto_lmdm_backend(m);
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const int64_t L = d->seq_len, F = d->nfeats;
    if (F != MDIM)
        return ditto_fail(&be->log, DITTO_ERR_SHAPE, "audio2motion: the LMDM makes %lld-d motion, the layout has %d", (long long)F, MDIM);
    int64_t n_xT = 0;
    if (p->x_T) {
        const DittoTensor *x = p->x_T;
        bool ok = x->dtype == DITTO_F32 && x->device == be->allocator.device && ditto_tensor_is_contiguous(x);
        ok &= (x->ndim == 3 && x->shape[1] == L && x->shape[2] == F) || (x->ndim == 4 && x->shape[1] == 1 && x->shape[2] == L && x->shape[3] == F);
        if (!ok)
            return ditto_fail(&be->log, DITTO_ERR_SHAPE, "audio2motion: injected x_T must be a contiguous float32 (W, [1,] %lld, %lld) on the %s backend",
                              (long long)L, (long long)F, be->name);
        n_xT = x->shape[0];
    }
    DittoA2mLmdm *s = ditto_calloc(1, sizeof *s);
    if (!s)
        return DITTO_ERR_NOMEM;
    s->m = m;
    s->be = be;
    s->p = *p;
    s->n_xT = n_xT;
    int rc = ditto_ddim_schedule_init(&s->sched, p->steps, p->coef);
    if (rc < 0)
        ditto_fail(&be->log, rc, "audio2motion: bad DDIM settings (%d steps)", p->steps);
    if (rc >= 0 && p->x_T && p->steps > 1 && !p->z)
        rc = ditto_fail(&be->log, DITTO_ERR_INVAL, "audio2motion: injected x_T without step noise z");
    if (rc >= 0)
        rc = ditto_arena_init(&s->ws, &be->allocator, 0);
    s->ws_init = rc >= 0;
    if (rc >= 0)
        rc = device_tensor(be, &s->kp_buf, 2, (const int64_t[]){ 1, F }, &s->kp);
    if (rc >= 0)
        rc = device_tensor(be, &s->cond_buf, 3, (const int64_t[]){ 1, L, d->cond_dim }, &s->cond);
    if (rc >= 0)
        rc = device_tensor(be, &s->out_buf, 3, (const int64_t[]){ 1, L, F }, &s->out);
    if (rc >= 0)
        rc = device_tensor(be, &s->noise_buf, 4, (const int64_t[]){ p->steps + 1, 1, L, F }, &s->noise);
    if (rc >= 0 && p->x_T && p->steps > 1)
        rc = copy_step_noise(s);
    if (rc < 0) {
        ditto_a2m_lmdm_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void ditto_a2m_lmdm_close(DittoA2mLmdm **ps)
{
    if (!ps || !*ps)
        return;
    DittoA2mLmdm *s = *ps;
    if (s->graph)
        s->be->graph_free(s->be, s->graph);
    ditto_buffer_free(&s->noise_buf);
    ditto_buffer_free(&s->kp_buf);
    ditto_buffer_free(&s->cond_buf);
    ditto_buffer_free(&s->out_buf);
    if (s->ws_init)
        ditto_arena_free(&s->ws);
    ditto_free(s);
    *ps = NULL;
}

/*
 * One window's device work with every address fixed: the first window runs
 * op by op (the arena reaches its size), then the arena is folded into one
 * block and the second window is captured; later windows replay it. The
 * capture is kept only if nothing was allocated while recording.
 */
static int run_window_device(DittoA2mLmdm *s)
{
    DittoBackend *be = s->be;
    DittoDdimNoise nz = { .all = &s->noise };
    const bool want = s->p.graph && be->capture_begin && !s->graph_failed;
    if (s->graph)
        return be->graph_launch(be, s->graph);
    if (!want || s->runs == 0)
        return ditto_ddim_sample(s->m, &s->ws, &s->sched, &s->kp, &s->cond, &nz, &s->out, NULL);
    DITTO_TRY(be->sync(be));
    DITTO_TRY(ditto_arena_reset(&s->ws));
    const int grows = s->ws.grows;
    DITTO_TRY(be->capture_begin(be));
    int rc = ditto_ddim_sample(s->m, &s->ws, &s->sched, &s->kp, &s->cond, &nz, &s->out, NULL);
    void *g = NULL;
    int rc2 = be->capture_end(be, &g);
    if (rc >= 0 && rc2 >= 0 && g && s->ws.grows == grows) {
        s->graph = g;
        ditto_log(&be->log, DITTO_LOG_DEBUG, "audio2motion: window of %d DDIM steps captured as a graph", s->sched.steps);
        return be->graph_launch(be, g);
    }
    if (g)
        be->graph_free(be, g);
    s->graph_failed = true;
    ditto_log(&be->log, DITTO_LOG_WARN, "audio2motion: graph capture of the DDIM loop failed (%s); running op by op",
              ditto_strerror(rc < 0 ? rc : rc2 < 0 ? rc2 : DITTO_ERR_NOMEM));
    return ditto_ddim_sample(s->m, &s->ws, &s->sched, &s->kp, &s->cond, &nz, &s->out, NULL);
}

static int lmdm_sample(void *ctx, int64_t window, const float *kp_cond, const float *cond, float *pred)
{
    DittoA2mLmdm *s = ctx;
    DittoBackend *be = s->be;
    DittoTensor slot0;
    DITTO_TRY(ditto_tensor_select(&s->noise, 0, 0, &slot0));               /* (1, L, F) */
    if (s->p.x_T) {
        /* upstream order: x_T[w] per window, the same z for every window (copied at open) */
        if (window >= s->n_xT)
            return ditto_fail(&be->log, DITTO_ERR_RANGE, "audio2motion: injected x_T holds %lld windows, window %lld wanted", (long long)s->n_xT,
                              (long long)window);
        DittoTensor xT;
        DITTO_TRY(ditto_tensor_slice(s->p.x_T, 0, window, window + 1, 1, &xT));
        DITTO_TRY(ditto_tensor_reshape(&xT, 3, s->out.shape, &xT));
        DITTO_TRY(ditto_op_copy(be, &xT, &slot0));
    } else {
        if (window < 0 || window >= (1 << 24))
            return ditto_fail(&be->log, DITTO_ERR_RANGE, "audio2motion: window %lld beyond the RNG stream layout", (long long)window);
        DITTO_TRY(ditto_ddim_draw_noise(be, &s->sched, s->p.seed, (uint32_t)window, &s->noise));   /* on the device: no host draw, no upload */
    }
    DITTO_TRY(be->upload(be, s->kp.data, kp_cond, ditto_tensor_nbytes(&s->kp)));
    DITTO_TRY(be->upload(be, s->cond.data, cond, ditto_tensor_nbytes(&s->cond)));
    DITTO_TRY(run_window_device(s));
    s->runs++;
    DITTO_TRY(be->sync(be));
    return be->download(be, pred, s->out.data, ditto_tensor_nbytes(&s->out));
}

void ditto_a2m_lmdm_set_seed(DittoA2mLmdm *s, uint64_t seed)
{
    s->p.seed = seed;
}

int ditto_a2m_lmdm_steps(const DittoA2mLmdm *s)
{
    return s->p.steps;
}

DittoA2mSampler ditto_a2m_lmdm_sampler(DittoA2mLmdm *s)
{
    const DittoLmdmDims *d = ditto_lmdm_dims(s->m);
    return (DittoA2mSampler){ lmdm_sample, s, d->seq_len, d->cond_dim };
}
