/*
 * Audio2Motion window driver (src/pipeline/audio2motion.c).
 *
 * Without fixtures, with a fake sampler (window-, row- and kp_cond-dependent
 * values, so every mix-up shows):
 *  - offline on 1, 79, 80, 81, 150 and 1000 frames, pushed at once, row by
 *    row and in chunks, against a reference written the way upstream's
 *    Python is (whole arrays, truncation, final smoothing): bit-identical
 *    motion, kp_cond per window = res[idx-1], ceil(N/70) windows, padding of
 *    the last window(s) by the last row, in-order emission;
 *  - hand-computed values with a sampler that returns the constant w+1 for
 *    window w: the k/F cross-fade, the 3-tap smoothing of dims [0:202) only,
 *    the double smoothing at joins, the truncated smoothing at the end;
 *  - fix_kp_cond K (with and without fix_kp_cond_dim);
 *  - online (overlap 75, 40, 10) pushed in 5-row chunks against a
 *    simulation of upstream's streaming worker: motion, window count, the
 *    frames emitted after each window, d0, no final smoothing;
 *  - errors and the sticky failed state.
 * With shared/fixtures/ditto: a2m_offline_n150 (the whole driver with the
 * LMDM and injected noise in upstream's order) and seeded sampling with
 * lmdm_a2m.pth (same seed -> bit-identical, other seed -> different, push
 * pattern does not matter).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "fixtures.h"
#include "models/lmdm.h"
#include "pipeline/audio2motion.h"
#include "pipeline/conditions.h"
#include "pipeline/ddim.h"
#include "pipeline/motion.h"
#include "test_util.h"
#include "weights/catalog.h"

#define MD DITTO_MOTION_DIM
#define SMO DITTO_A2M_SMOOTH_DIMS
#define CD 3             /* condition width of the fake sampler */
#define MAX_WIN 512

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* ---- fake sampler ---- */

typedef enum FakeKind { FAKE_MIXED, FAKE_CONST } FakeKind;

typedef struct Fake {
    FakeKind kind;
    int64_t S;
    int64_t calls;
    int fail_at;                    /* window index that fails (-1: none) */
    float *kp;                      /* (MAX_WIN, MD) kp_cond per window */
    float *col0;                    /* (MAX_WIN, S) cond[:, 0] per window */
} Fake;

static void fake_init(Fake *f, FakeKind kind, int64_t S)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->S = S;
    f->fail_at = -1;
    f->kp = xmalloc(MAX_WIN * MD * sizeof(float));
    f->col0 = xmalloc((size_t)(MAX_WIN * S) * sizeof(float));
}

static void fake_free(Fake *f)
{
    free(f->kp);
    free(f->col0);
}

/* The fake prediction of window w, shared by the driver's sampler and the references. */
static void fake_pred(FakeKind kind, int64_t S, int64_t w, const float *kp, const float *cond, float *pred)
{
    for (int64_t j = 0; j < S; j++) {
        for (int d = 0; d < MD; d++) {
            float v;
            if (kind == FAKE_CONST)
                v = (float)(w + 1);
            else   /* row value, a per-window offset, a per-dim slope and a bit of kp_cond */
                v = 0.25f * cond[j * CD] + 0.5f * cond[j * CD + 1] + 3.0f * (float)w + 0.01f * (float)d + 0.125f * kp[d] +
                    (float)((j * 7 + d * 3 + w) % 11) * 0.0625f;
            pred[j * MD + d] = v;
        }
    }
}

static int fake_sample(void *ctx, int64_t w, const float *kp, const float *cond, float *pred)
{
    Fake *f = ctx;
    if (w != f->calls || w >= MAX_WIN)
        return DITTO_ERR_RANGE;   /* windows must come in order */
    if (w == f->fail_at)
        return DITTO_ERR_IO;
    memcpy(f->kp + w * MD, kp, MD * sizeof(float));
    for (int64_t j = 0; j < f->S; j++)
        f->col0[w * f->S + j] = cond[j * CD];
    fake_pred(f->kind, f->S, w, kp, cond, pred);
    f->calls++;
    return 0;
}

static DittoA2mSampler fake_sampler(Fake *f)
{
    return (DittoA2mSampler){ fake_sample, f, f->S, CD };
}

/* Condition rows: column 0 = the row index (so padding is visible), columns 1, 2 smooth functions of it. */
static float *make_cond(int64_t n)
{
    float *c = xmalloc((size_t)(n * CD) * sizeof(float));
    for (int64_t g = 0; g < n; g++) {
        c[g * CD] = (float)g;
        c[g * CD + 1] = (float)sin(0.3 * (double)g);
        c[g * CD + 2] = (float)cos(0.1 * (double)g);
    }
    return c;
}

static void make_s_kp(float *s)
{
    for (int d = 0; d < MD; d++)
        s[d] = (float)((d % 13) - 6) * 0.5f;
}

/* ---- reference: upstream's Audio2Motion on whole arrays ---- */

typedef struct Ref {
    int64_t S, O, V, F, half;
    int K, ds, de;
    FakeKind kind;
    float s_kp[MD], kp[MD];
    float *res;                   /* (cap, MD) */
    int64_t len, cap, clip_idx;
    float *kps;                   /* (MAX_WIN, MD) kp_cond per window */
    float d0[MD];
} Ref;

static void ref_init(Ref *r, const DittoA2mParams *p, FakeKind kind, const float *s_kp, int64_t cap)
{
    memset(r, 0, sizeof *r);
    r->S = p->seq_frames;
    r->O = p->overlap;
    r->V = r->S - r->O;
    r->F = p->online ? (r->O < r->V ? r->O : r->V) : r->O;
    r->half = p->smooth_k > 1 ? p->smooth_k / 2 : 0;
    r->K = p->fix_kp_cond;
    r->ds = p->fix_kp_cond_dim[0];
    r->de = p->fix_kp_cond_dim[1];
    r->kind = kind;
    memcpy(r->s_kp, s_kp, sizeof r->s_kp);
    memcpy(r->kp, s_kp, sizeof r->kp);
    r->cap = cap;
    r->res = xmalloc((size_t)(cap * MD) * sizeof(float));
    r->kps = xmalloc(MAX_WIN * MD * sizeof(float));
}

static void ref_free(Ref *r)
{
    free(r->res);
    free(r->kps);
}

/* _smo(res, s, e) over n frames, k = 2 half + 1 */
static void ref_smo(float *res, int64_t n, int64_t s, int64_t e, int64_t half)
{
    if (half == 0 || s >= e)
        return;
    float *old = xmalloc((size_t)(n * MD) * sizeof(float));
    memcpy(old, res, (size_t)(n * MD) * sizeof(float));
    for (int64_t i = s; i < e; i++) {
        int64_t ss = i - half < 0 ? 0 : i - half, ee = i + half + 1 > n ? n : i + half + 1;
        for (int d = 0; d < SMO; d++) {
            double acc = 0;
            for (int64_t j = ss; j < ee; j++)
                acc += old[j * MD + d];
            res[i * MD + d] = (float)(acc / (double)(ee - ss));
        }
    }
    free(old);
}

/* res = A(window, res), window (S, CD) */
static void ref_call(Ref *r, const float *window)
{
    const int64_t S = r->S, V = r->V, F = r->F;
    float *pred = xmalloc((size_t)(S * MD) * sizeof(float));
    if (r->clip_idx < MAX_WIN)
        memcpy(r->kps + r->clip_idx * MD, r->kp, sizeof r->kp);
    fake_pred(r->kind, S, r->clip_idx, r->kp, window, pred);
    if (r->len == 0) {
        memcpy(r->res, pred, (size_t)(S * MD) * sizeof(float));
        r->len = S;
        ref_smo(r->res, r->len, 0, S, r->half);
        memcpy(r->d0, r->res, sizeof r->d0);
    } else {
        if (r->len + V > r->cap)
            abort();
        int64_t L = r->len;
        for (int64_t k = 0; k < F; k++) {
            double a = (double)((float)k / (float)F);
            for (int d = 0; d < MD; d++) {
                float *x = &r->res[(L - F + k) * MD + d];
                *x = (float)((double)*x * (1.0 - a) + (double)pred[(S - V - F + k) * MD + d] * a);
            }
        }
        memcpy(r->res + L * MD, pred + (S - V) * MD, (size_t)(V * MD) * sizeof(float));
        r->len = L + V;
        ref_smo(r->res, r->len, L - F, L + 1, r->half);
    }
    r->clip_idx++;
    int64_t idx = r->len - r->O;
    const float *prev = r->res + (idx - 1) * MD;
    if (r->K > 0 && r->clip_idx % r->K == 0) {
        memcpy(r->kp, r->s_kp, sizeof r->kp);
        if (r->ds < r->de)
            memcpy(r->kp + r->ds, prev + r->ds, (size_t)(r->de - r->ds) * sizeof(float));
    } else {
        memcpy(r->kp, prev, sizeof r->kp);
    }
    free(pred);
}

/* window = rows[start, start+S) of cond (n rows), padded with the last row; returns real rows */
static int64_t ref_window(const float *cond, int64_t n, int64_t start, int64_t S, float *win)
{
    int64_t real = n - start < S ? n - start : S;
    for (int64_t j = 0; j < S; j++) {
        int64_t g = start + (j < real ? j : real - 1);
        memcpy(win + j * CD, cond + g * CD, CD * sizeof(float));
    }
    return real;
}

/* _audio2motion_offline: motion (n, MD) */
static void ref_offline(Ref *r, const float *cond, int64_t n, float *motion)
{
    float *win = xmalloc((size_t)(r->S * CD) * sizeof(float));
    for (int64_t idx = 0; idx < n; idx += r->V) {
        ref_window(cond, n, idx, r->S, win);
        ref_call(r, win);
    }
    memcpy(motion, r->res, (size_t)(n * MD) * sizeof(float));
    ref_smo(motion, n, 0, n, r->half);
    free(win);
}

/* One emission of upstream's online worker: res rows [s, e) after window `win`. */
typedef struct Span {
    int64_t win, s, e;
} Span;

/*
 * Upstream's online _audio2motion_worker, conditions arriving in chunks of
 * `chunk` rows (rows 0..O-1 are the warm-up). spans: what it emits.
 */
static int ref_online(Ref *r, const float *cond, int64_t rows, int64_t chunk, Span *spans, int max_spans)
{
    const int64_t S = r->S, V = r->V;
    float *win = xmalloc((size_t)(S * CD) * sizeof(float));
    int64_t have = r->O < rows ? r->O : rows;   /* audio_feat starts with the warm-up rows */
    int64_t pos = have, buffered = 0, local = 0, valid_start = -1;
    int nspans = 0;
    bool end = false;
    while (!end) {
        if (pos < rows) {
            int64_t take = rows - pos < chunk ? rows - pos : chunk;
            buffered += take;
            pos += take;
            if (buffered < V)
                continue;
        } else {
            end = true;
        }
        have += buffered;
        buffered = 0;
        for (;;) {
            int64_t avail = have - local;
            if (avail <= 0)
                break;
            if (avail < S && !end)
                break;
            int64_t real = avail < S ? avail : V;
            ref_window(cond, have, local, S, win);
            ref_call(r, win);
            if (valid_start < 0) {
                valid_start = r->len - r->F;
                local += real;
                continue;
            }
            int64_t e = valid_start + real < r->len ? valid_start + real : r->len;
            if (nspans < max_spans)
                spans[nspans++] = (Span){ r->clip_idx - 1, valid_start, e };
            valid_start += real;
            local += real;
            if (local >= have)
                break;
        }
    }
    free(win);
    return nspans;
}

/* ---- driver runs ---- */

typedef struct Sink {
    float *motion;        /* (cap, MD) */
    int64_t cap, next;
    bool order_ok;
    Span spans[MAX_WIN * 2];
    int nspans;
    DittoA2m *a;          /* for the window count at emission time */
} Sink;

static int sink_emit(void *ctx, int64_t first, const float *motion, int64_t n)
{
    Sink *s = ctx;
    if (first != s->next || n < 1 || first + n > s->cap) {
        s->order_ok = false;
        return DITTO_ERR_RANGE;
    }
    memcpy(s->motion + first * MD, motion, (size_t)(n * MD) * sizeof(float));
    s->next += n;
    if (s->nspans < MAX_WIN * 2) {
        DittoA2mStatus st;
        ditto_a2m_status(s->a, &st);
        s->spans[s->nspans++] = (Span){ st.windows - 1, first, first + n };
    }
    return 0;
}

static void sink_init(Sink *s, int64_t cap)
{
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->order_ok = true;
    s->motion = xmalloc((size_t)(cap * MD) * sizeof(float));
    for (int64_t i = 0; i < cap * MD; i++)
        s->motion[i] = NAN;
}

/* Open a driver that emits into sk, a new sink of cap rows. */
static int sink_open(Sink *sk, int64_t cap, DittoA2m **a, const DittoA2mParams *p, const float *s_kp, DittoA2mSampler smp)
{
    sink_init(sk, cap);
    *a = NULL;
    int rc = ditto_a2m_open(a, p, s_kp, smp, (DittoA2mEmit){ sink_emit, sk }, NULL);
    sk->a = *a;
    return rc;
}

/* Push rows in chunks (chunk <= 0: all at once) and finish. */
static int drive(DittoA2m *a, const float *cond, int64_t rows, int64_t chunk)
{
    if (chunk <= 0)
        chunk = rows > 0 ? rows : 1;
    for (int64_t g = 0; g < rows; g += chunk) {
        int64_t n = rows - g < chunk ? rows - g : chunk;
        int rc = ditto_a2m_push(a, cond + g * CD, n);
        if (rc < 0)
            return rc;
    }
    return ditto_a2m_finish(a);
}

static DittoA2mParams test_params(bool online, int overlap, int k)
{
    DittoA2mParams p;
    ditto_a2m_params_default(&p);
    p.online = online;
    p.overlap = overlap;
    p.smooth_k = k;
    p.cond_dim = CD;
    return p;
}

static int64_t first_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)))
            return i;
    return -1;
}

/* ---- offline with the fake sampler ---- */

static void test_offline_sizes(TestCtx *c)
{
    static const int64_t sizes[] = { 1, 79, 80, 81, 150, 1000 };
    static const int64_t chunks[] = { 0, 1, 7 };
    float s_kp[MD];
    make_s_kp(s_kp);
    for (int ks = 0; ks < 2; ks++) {
        const int k = ks ? 1 : 3;
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const int64_t N = sizes[si];
            DittoA2mParams p = test_params(false, 10, k);
            float *cond = make_cond(N);
            Ref r;
            ref_init(&r, &p, FAKE_MIXED, s_kp, N + 2 * p.seq_frames);
            float *want = xmalloc((size_t)(N * MD) * sizeof(float));
            ref_offline(&r, cond, N, want);
            const int64_t W = (N + 69) / 70;
            for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
                Fake f;
                fake_init(&f, FAKE_MIXED, p.seq_frames);
                Sink sk;
                DittoA2m *a;
                int rc = sink_open(&sk, N, &a, &p, s_kp, fake_sampler(&f));
                if (rc == 0)
                    rc = drive(a, cond, N, chunks[ci]);
                DittoA2mStatus st = { 0 };
                if (a)
                    ditto_a2m_status(a, &st);
                char name[96];
                snprintf(name, sizeof name, "a2m.offline.n%lld.k%d.chunk%lld", (long long)N, k, (long long)chunks[ci]);
                int64_t fd = rc == 0 ? first_diff(sk.motion, want, N * MD) : -2;
                bool ok = rc == 0 && fd < 0 && sk.order_ok && sk.next == N && st.emitted == N && st.windows == W && f.calls == W &&
                          ditto_a2m_num_windows(&p, N) == W && st.finished;
                /* kp_cond per window: s_kp_cond, then res[idx-1] of the reference */
                ok &= first_diff(f.kp, r.kps, W * MD) < 0 && !memcmp(f.kp, s_kp, sizeof s_kp);
                /* padding: window w holds rows w*70 .. min(N, w*70+80)-1, then the last row again */
                int bad_pad = 0;
                for (int64_t w = 0; w < W; w++) {
                    for (int64_t j = 0; j < p.seq_frames; j++) {
                        int64_t g = w * 70 + j < N ? w * 70 + j : N - 1;
                        bad_pad += f.col0[w * p.seq_frames + j] != (float)g;
                    }
                }
                ok &= bad_pad == 0;
                test_report(c, name, ok, "rc %d, first differing value %lld (%lld frames), windows %lld/%lld (want %lld), emitted %lld, pad errors %d", rc,
                            (long long)fd, (long long)(fd >= 0 ? fd / MD : -1), (long long)st.windows, (long long)f.calls, (long long)W,
                            (long long)sk.next, bad_pad);
                ditto_a2m_close(&a);
                free(sk.motion);
                fake_free(&f);
            }
            /* the one-call driver */
            Fake f;
            fake_init(&f, FAKE_MIXED, p.seq_frames);
            float *got = xmalloc((size_t)(N * MD) * sizeof(float));
            int rc = ditto_a2m_offline(&p, s_kp, fake_sampler(&f), cond, N, got, NULL);
            char name[96];
            snprintf(name, sizeof name, "a2m.offline.n%lld.k%d.oneshot", (long long)N, k);
            test_report(c, name, rc == 0 && first_diff(got, want, N * MD) < 0 && f.calls == W, "rc %d", rc);
            free(got);
            fake_free(&f);
            free(want);
            free(cond);
            ref_free(&r);
        }
    }
}

static bool near(double v, double want)
{
    return fabs(v - want) <= 2e-6 * (1.0 + fabs(want));
}

/* Hand-computed values: window w predicts the constant w+1 everywhere. */
static void test_offline_hand(TestCtx *c)
{
    float s_kp[MD];
    for (int d = 0; d < MD; d++)
        s_kp[d] = 7.0f;
    const int64_t N = 150;
    float *cond = make_cond(N);
    for (int ks = 0; ks < 2; ks++) {
        const int k = ks ? 3 : 1;
        DittoA2mParams p = test_params(false, 10, k);
        Fake f;
        fake_init(&f, FAKE_CONST, 80);
        float *m = xmalloc(N * MD * sizeof(float));
        int rc = ditto_a2m_offline(&p, s_kp, fake_sampler(&f), cond, N, m, NULL);
        int bad = 0;
        char why[200] = "";
#define EXPECT(frame, dim, want)                                                                                   \
    do {                                                                                                           \
        double v_ = m[(frame) * MD + (dim)];                                                                       \
        if (!near(v_, (want)) && !bad++)                                                                           \
            snprintf(why, sizeof why, "frame %d dim %d: %.7f, want %.7f", (int)(frame), (int)(dim), v_, (double)(want)); \
    } while (0)
        if (k == 1) {
            /* fusion only: res[70+j] = 1 (1 - j/10) + 2 j/10, res[140+j] = 2 (1 - j/10) + 3 j/10 */
            for (int d = 0; d < MD; d += 66) {
                for (int i = 0; i < 70; i++)
                    EXPECT(i, d, 1.0);
                for (int j = 0; j < 10; j++) {
                    EXPECT(70 + j, d, 1.0 + j / 10.0);
                    EXPECT(140 + j, d, 2.0 + j / 10.0);
                }
                for (int i = 80; i < 140; i++)
                    EXPECT(i, d, 2.0);
            }
        } else {
            /*
             * After the fusion of window 1: f = 1 (i < 70), 1 + (i-70)/10 (70..79), 2 (80..149).
             * Join smoothing [70, 81): s70 = (1 + 1 + 1.1)/3, s80 = (1.9 + 2 + 2)/3, linear frames unchanged.
             * Then the final smoothing over the whole track, of dims [0, 202) only.
             */
            const double s70 = 3.1 / 3, s80 = 5.9 / 3;
            for (int d = 0; d < SMO; d += 67) {
                EXPECT(0, d, 1.0);
                EXPECT(68, d, 1.0);
                EXPECT(69, d, (1.0 + 1.0 + s70) / 3);            /* smoothed once: its neighbour changed */
                EXPECT(70, d, (1.0 + s70 + 1.1) / 3);            /* smoothed twice */
                EXPECT(71, d, (s70 + 1.1 + 1.2) / 3);
                EXPECT(75, d, 1.5);
                EXPECT(79, d, (1.8 + 1.9 + s80) / 3);
                EXPECT(80, d, (1.9 + s80 + 2.0) / 3);
                EXPECT(81, d, (s80 + 2.0 + 2.0) / 3);
                EXPECT(100, d, 2.0);
                /* window 2 fades 2 -> 3 over 140..149; join [140, 151) reads res[150] = 3 */
                const double t140 = (2.0 + 2.0 + 2.1) / 3, t148 = 2.8, t149 = (2.8 + 2.9 + 3.0) / 3;
                EXPECT(139, d, (2.0 + 2.0 + t140) / 3);
                EXPECT(140, d, (2.0 + t140 + 2.1) / 3);
                EXPECT(149, d, (t148 + t149) / 2);               /* truncated at N */
            }
            EXPECT(0, SMO - 1, 1.0);
            /* exp dims [202, 265): never smoothed, the raw cross-fade */
            for (int d = SMO; d < MD; d += 20) {
                EXPECT(69, d, 1.0);
                EXPECT(70, d, 1.0);
                EXPECT(71, d, 1.1);
                EXPECT(79, d, 1.9);
                EXPECT(80, d, 2.0);
                EXPECT(149, d, 2.9);
            }
            EXPECT(70, MD - 1, 1.0);
        }
        /* kp_cond: window 0 s_kp_cond, window 1 res[69] = 1, window 2 res[139] = 2 (before the final smoothing) */
        bool kp_ok = f.calls == 3 && f.kp[0] == 7.0f && f.kp[MD + 5] == 1.0f && f.kp[MD + 230] == 1.0f && near(f.kp[2 * MD + 5], 2.0) &&
                     near(f.kp[2 * MD + 230], 2.0);
#undef EXPECT
        char name[64];
        snprintf(name, sizeof name, "a2m.offline.hand.k%d", k);
        test_report(c, name, rc == 0 && bad == 0 && kp_ok, "rc %d, %d wrong values (%s), kp_cond %s", rc, bad, why, kp_ok ? "ok" : "wrong");
        free(m);
        fake_free(&f);
    }
    free(cond);
}

/* fix_kp_cond: reset to s_kp_cond after every K-th window, optionally keeping [ds, de) of res[idx-1]. */
static void test_fix_kp_cond(TestCtx *c)
{
    float s_kp[MD];
    for (int d = 0; d < MD; d++)
        s_kp[d] = 7.0f;
    const int64_t N = 300;   /* 5 windows */
    float *cond = make_cond(N);
    static const int cfg[][3] = { { 1, 0, 0 }, { 2, 0, 0 }, { 2, 0, 202 }, { 3, 1, 67 } };
    for (size_t t = 0; t < sizeof cfg / sizeof *cfg; t++) {
        DittoA2mParams p = test_params(false, 10, 1);
        p.fix_kp_cond = cfg[t][0];
        p.fix_kp_cond_dim[0] = cfg[t][1];
        p.fix_kp_cond_dim[1] = cfg[t][2];
        Fake f;
        fake_init(&f, FAKE_CONST, 80);
        float *m = xmalloc(N * MD * sizeof(float));
        int rc = ditto_a2m_offline(&p, s_kp, fake_sampler(&f), cond, N, m, NULL);
        /* constant windows, no smoothing: res[idx-1] of window w-1's result is w (its own constant) */
        int bad = 0;
        for (int64_t w = 0; w < f.calls; w++) {
            bool reset = w == 0 || w % p.fix_kp_cond == 0;
            for (int d = 0; d < MD; d++) {
                float want = !reset ? (float)w : (d >= p.fix_kp_cond_dim[0] && d < p.fix_kp_cond_dim[1] && w > 0 ? (float)w : 7.0f);
                bad += f.kp[w * MD + d] != want;
            }
        }
        /* and the reference (mixed sampler) */
        Fake g;
        fake_init(&g, FAKE_MIXED, 80);
        Ref r;
        ref_init(&r, &p, FAKE_MIXED, s_kp, N + 160);
        float *want = xmalloc(N * MD * sizeof(float));
        ref_offline(&r, cond, N, want);
        int rc2 = ditto_a2m_offline(&p, s_kp, fake_sampler(&g), cond, N, m, NULL);
        bool same = rc2 == 0 && first_diff(m, want, N * MD) < 0 && first_diff(g.kp, r.kps, g.calls * MD) < 0;
        char name[64];
        snprintf(name, sizeof name, "a2m.fix_kp_cond.K%d.dims%d_%d", cfg[t][0], cfg[t][1], cfg[t][2]);
        test_report(c, name, rc == 0 && f.calls == 5 && bad == 0 && same, "rc %d %d, %lld windows, %d wrong kp_cond values, reference %s", rc, rc2,
                    (long long)f.calls, bad, same ? "ok" : "differs");
        ref_free(&r);
        free(want);
        free(m);
        fake_free(&f);
        fake_free(&g);
    }
    free(cond);
}

/* ---- online ---- */

static void test_online(TestCtx *c)
{
    static const int overlaps[] = { 75, 40, 10 };
    static const int64_t sizes[] = { 1, 79, 80, 81, 150, 1000 };
    float s_kp[MD];
    make_s_kp(s_kp);
    for (size_t oi = 0; oi < sizeof overlaps / sizeof *overlaps; oi++) {
        const int O = overlaps[oi];
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
            const int64_t n = sizes[si], rows = O + n;
            DittoA2mParams p = test_params(true, O, 3);
            const int64_t S = p.seq_frames, V = S - O, F = O < V ? O : V;
            float *cond = make_cond(rows);
            Ref r;
            ref_init(&r, &p, FAKE_MIXED, s_kp, rows + 2 * S);
            Span *up = xmalloc(MAX_WIN * sizeof *up);
            int nup = ref_online(&r, cond, rows, 5, up, MAX_WIN);

            Fake f;
            fake_init(&f, FAKE_MIXED, S);
            Sink sk;
            DittoA2m *a;
            int rc = sink_open(&sk, n, &a, &p, s_kp, fake_sampler(&f));
            if (rc == 0)
                rc = drive(a, cond, rows, 5);
            DittoA2mStatus st = { 0 };
            if (a)
                ditto_a2m_status(a, &st);
            /* frame a is res[O + a] of upstream's run, and no final smoothing */
            int64_t fd = rc == 0 ? first_diff(sk.motion, r.res + O * MD, n * MD) : -2;
            bool ok = rc == 0 && fd < 0 && sk.order_ok && sk.next == n && st.emitted == n && st.windows == r.clip_idx && f.calls == r.clip_idx &&
                      ditto_a2m_num_windows(&p, n) == r.clip_idx;
            ok &= first_diff(f.kp, r.kps, f.calls * MD) < 0;
            const float *d0 = a ? ditto_a2m_d0(a) : NULL;
            ok &= d0 && !memcmp(d0, r.d0, sizeof r.d0);
            /*
             * Emission schedule. O >= S/2: exactly upstream's (its spans cut at the end of the audio).
             * O < S/2: upstream starts at res[S-F] and loses audio frames 0 .. S-2O-1; we emit them
             * after the first window, then follow upstream.
             */
            int bad_span = 0;
            int k0 = 0;
            if (rows < S) {
                /* one window, the final one: upstream emits nothing (it is its warm-up window), we emit the audio */
                bad_span += nup != 0 || sk.nspans != 1 || sk.spans[0].win != 0 || sk.spans[0].s != 0 || sk.spans[0].e != n;
                k0 = sk.nspans;
            } else if (S - F > O) {
                bad_span += sk.nspans < 1 || sk.spans[0].win != 0 || sk.spans[0].s != 0 || sk.spans[0].e != (S - F - O < n ? S - F - O : n);
                k0 = 1;
            }
            int ku = 0;
            for (int k = k0; k < sk.nspans; k++, ku++) {
                while (ku < nup && up[ku].s >= rows)
                    ku++;
                if (ku >= nup) {
                    bad_span++;
                    break;
                }
                int64_t e = up[ku].e < rows ? up[ku].e : rows;
                bad_span += sk.spans[k].win != up[ku].win || sk.spans[k].s + O != up[ku].s || sk.spans[k].e + O != e;
            }
            for (; ku < nup; ku++)
                bad_span += up[ku].s < rows;   /* upstream emitted real frames we did not */
            ok &= bad_span == 0;
            char name[96];
            snprintf(name, sizeof name, "a2m.online.o%d.n%lld", O, (long long)n);
            test_report(c, name, ok, "rc %d, first differing value %lld, windows %lld (upstream %lld), emitted %lld, %d emission spans (upstream %d), %d wrong",
                        rc, (long long)fd, (long long)st.windows, (long long)r.clip_idx, (long long)sk.next, sk.nspans, nup, bad_span);
            ditto_a2m_close(&a);
            free(sk.motion);
            fake_free(&f);
            free(up);
            ref_free(&r);
            free(cond);
        }
    }

    /* O = 75: one window per 5-row chunk, 5 frames emitted per window after the warm-up window */
    DittoA2mParams p = test_params(true, 75, 3);
    const int64_t n = 40, rows = 75 + n;
    float *cond = make_cond(rows);
    Fake f;
    fake_init(&f, FAKE_MIXED, 80);
    Sink sk;
    DittoA2m *a;
    int rc = sink_open(&sk, n, &a, &p, s_kp, fake_sampler(&f));
    bool ok = rc == 0;
    if (ok)
        ok = ditto_a2m_push(a, cond, 75) == 0 && f.calls == 0 && ditto_a2m_d0(a) == NULL;   /* warm-up rows alone: no window */
    for (int64_t g = 75; ok && g < rows; g += 5) {
        int64_t before = sk.next;
        ok = ditto_a2m_push(a, cond + g * CD, 5) == 0 && f.calls == (g - 75) / 5 + 1 && sk.next == (g == 75 ? 0 : before + 5);
    }
    /* after the chunk of frames 35..39, frames 0..34 are out; finish runs the final window and emits 35..39 */
    ok = ok && sk.next == n - 5 && ditto_a2m_finish(a) == 0 && sk.next == n && f.calls == n / 5 + 1;
    test_report(c, "a2m.online.o75.per_chunk", ok, "windows %lld, emitted %lld", (long long)f.calls, (long long)sk.next);
    ditto_a2m_close(&a);
    free(sk.motion);
    fake_free(&f);
    free(cond);
}

/* Every overlap / smoothing width corner, both modes, odd push chunks: the sliding buffer never loses a frame. */
static void test_sweep(TestCtx *c)
{
    static const int overlaps[] = { 0, 1, 39, 40, 41, 79 };
    static const int ks[] = { 0, 2, 3, 5, 13 };
    static const int64_t sizes[] = { 1, 37, 200 };
    float s_kp[MD];
    make_s_kp(s_kp);
    int runs = 0, bad = 0;
    char first[160] = "";
    for (int online = 0; online < 2; online++) {
        for (size_t oi = 0; oi < sizeof overlaps / sizeof *overlaps; oi++) {
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
                    const int O = overlaps[oi];
                    const int64_t n = sizes[si], rows = online ? O + n : n;
                    DittoA2mParams p = test_params(online, O, ks[ki]);
                    float *cond = make_cond(rows);
                    Ref r;
                    ref_init(&r, &p, FAKE_MIXED, s_kp, rows + 3 * p.seq_frames);
                    float *want = xmalloc((size_t)(n * MD) * sizeof(float));
                    if (online) {
                        Span sp[1];
                        ref_online(&r, cond, rows, 1 + (int64_t)(si * 3 + ki) % 6, sp, 0);
                        memcpy(want, r.res + O * MD, (size_t)(n * MD) * sizeof(float));
                    } else {
                        ref_offline(&r, cond, n, want);
                    }
                    Fake f;
                    fake_init(&f, FAKE_MIXED, p.seq_frames);
                    Sink sk;
                    DittoA2m *a;
                    int rc = sink_open(&sk, n, &a, &p, s_kp, fake_sampler(&f));
                    if (rc == 0)
                        rc = drive(a, cond, rows, 1 + (int64_t)(oi * 5 + si) % 9);
                    int64_t fd = rc == 0 ? first_diff(sk.motion, want, n * MD) : -2;
                    bool ok = rc == 0 && fd < 0 && sk.next == n && f.calls == r.clip_idx && ditto_a2m_num_windows(&p, n) == r.clip_idx;
                    runs++;
                    if (!ok && !bad++)
                        snprintf(first, sizeof first, "%s O %d k %d n %lld: rc %d, first diff %lld, windows %lld/%lld", online ? "online" : "offline", O,
                                 ks[ki], (long long)n, rc, (long long)fd, (long long)f.calls, (long long)r.clip_idx);
                    ditto_a2m_close(&a);
                    free(sk.motion);
                    fake_free(&f);
                    free(want);
                    ref_free(&r);
                    free(cond);
                }
            }
        }
    }
    test_report(c, "a2m.sweep", bad == 0, "%d of %d runs wrong; first: %s", bad, runs, first);
}

/* ---- errors ---- */

static void test_errors(TestCtx *c)
{
    float s_kp[MD];
    make_s_kp(s_kp);
    float *cond = make_cond(200);
    DittoLogger quiet = { 0 };
    DittoA2mParams p = test_params(false, 10, 3);
    Fake f;
    fake_init(&f, FAKE_MIXED, 80);
    DittoA2m *a = NULL;

    DittoA2mParams bad = p;
    bad.overlap = 80;
    bool ok = ditto_a2m_open(&a, &bad, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == DITTO_ERR_INVAL && !a;
    bad = p;
    bad.smooth_k = -1;
    ok &= ditto_a2m_open(&a, &bad, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == DITTO_ERR_INVAL;
    bad = p;
    bad.fix_kp_cond_dim[0] = 200;
    bad.fix_kp_cond_dim[1] = 300;
    ok &= ditto_a2m_open(&a, &bad, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == DITTO_ERR_INVAL;
    DittoA2mSampler wrong = fake_sampler(&f);
    wrong.seq_frames = 20;
    ok &= ditto_a2m_open(&a, &p, s_kp, wrong, (DittoA2mEmit){ 0 }, &quiet) == DITTO_ERR_SHAPE && !a;
    ok &= ditto_a2m_num_windows(&bad, 10) < 0 && ditto_a2m_num_windows(&p, 0) == 0;
    test_report(c, "a2m.errors.params", ok, "");

    /* finish with no rows, push after finish */
    ok = ditto_a2m_open(&a, &p, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == 0 && ditto_a2m_finish(a) == DITTO_ERR_INVAL;
    ditto_a2m_close(&a);
    ok &= ditto_a2m_open(&a, &p, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == 0 && ditto_a2m_push(a, cond, 10) == 0 && ditto_a2m_finish(a) == 0 &&
          ditto_a2m_push(a, cond, 1) == DITTO_ERR_AGAIN && ditto_a2m_finish(a) == DITTO_ERR_AGAIN;
    ditto_a2m_close(&a);
    ditto_a2m_close(&a);   /* NULL is fine */
    test_report(c, "a2m.errors.state", ok, "");

    /* a failing sampler leaves the driver in a failed state */
    fake_free(&f);
    fake_init(&f, FAKE_MIXED, 80);
    f.fail_at = 1;
    ok = ditto_a2m_open(&a, &p, s_kp, fake_sampler(&f), (DittoA2mEmit){ 0 }, &quiet) == 0 && ditto_a2m_push(a, cond, 200) == DITTO_ERR_IO &&
         ditto_a2m_push(a, cond, 1) == DITTO_ERR_BADSTATE && ditto_a2m_finish(a) == DITTO_ERR_BADSTATE;
    ditto_a2m_close(&a);
    test_report(c, "a2m.errors.sticky", ok, "");
    fake_free(&f);
    free(cond);
}

/* ---- fixtures ---- */

/* A sampler wrapper that records what every window got and gave. */
typedef struct Rec {
    DittoA2mSampler inner;
    int64_t S, calls;
    float *kp;       /* (MAX_WIN, MD) */
    float *pred;     /* (MAX_WIN, S, MD) or NULL */
} Rec;

static int rec_sample(void *ctx, int64_t w, const float *kp, const float *cond, float *pred)
{
    Rec *r = ctx;
    int rc = r->inner.fn(r->inner.ctx, w, kp, cond, pred);
    if (rc >= 0 && w < MAX_WIN) {
        memcpy(r->kp + w * MD, kp, MD * sizeof(float));
        if (r->pred && w < 8)
            memcpy(r->pred + w * r->S * MD, pred, (size_t)(r->S * MD) * sizeof(float));
        r->calls++;
    }
    return rc;
}

/* Source data of the a2m case: s_kp_cond and the conditions of every frame. */
typedef struct A2mInputs {
    int64_t N;
    float s_kp[MD];
    float *cond;          /* (N, 1103) */
    float *v_min_max;     /* (2, MD) */
} A2mInputs;

static int a2m_inputs(DittoCatalog *io, A2mInputs *in)
{
    static const char *const keys[7] = { "x_s_scale", "x_s_pitch", "x_s_yaw", "x_s_roll", "x_s_t", "x_s_exp", "x_s_kp" };
    static const size_t dims[7] = { 1, 66, 66, 66, 3, 63, 63 };
    float *v[7] = { 0 };
    size_t n;
    int rc = 0;
    memset(in, 0, sizeof *in);
    for (int i = 0; i < 7; i++)
        if (!(v[i] = io_read(io, keys[i], &n)) || n < dims[i])
            rc = DITTO_ERR_NOENT;
    size_t na = 0, ne = 0, nb = 0, nv = 0;
    float *aud = io_read(io, "aud_feat", &na), *eo = io_read(io, "eye_open", &ne), *eb = io_read(io, "eye_ball", &nb);
    in->v_min_max = io_read(io, "v_min_max_for_clip", &nv);
    if (!aud || !eo || !eb || !in->v_min_max || na % DITTO_AUD_DIM || ne < 2 || nb < 6 || nv != 2 * MD)
        rc = DITTO_ERR_NOENT;
    if (rc == 0) {
        DittoXInfo x;
        memset(&x, 0, sizeof x);
        x.scale = v[0][0];
        memcpy(x.pitch.v, v[1], sizeof x.pitch.v);
        memcpy(x.yaw.v, v[2], sizeof x.yaw.v);
        memcpy(x.roll.v, v[3], sizeof x.roll.v);
        memcpy(x.t, v[4], sizeof x.t);
        memcpy(x.exp, v[5], sizeof x.exp);
        rc = ditto_xinfo_to_motion(&x, 1, in->s_kp);
    }
    if (rc == 0) {
        in->N = (int64_t)(na / DITTO_AUD_DIM);
        DittoConditionsParams cp;
        memset(&cp, 0, sizeof cp);
        ditto_emo_default(&cp.emo);
        cp.eye_open = eo;
        cp.eye_ball = eb;
        cp.n_src = 1;
        cp.sc = v[6];
        DittoConditions cd;
        memset(&cd, 0, sizeof cd);
        in->cond = xmalloc((size_t)in->N * DITTO_COND_DIM * sizeof(float));
        rc = ditto_conditions_init(&cd, &cp, NULL);
        if (rc == 0)
            rc = ditto_conditions_build(&cd, aud, in->N, 0, in->cond);
        ditto_conditions_free(&cd);
    }
    for (int i = 0; i < 7; i++)
        free(v[i]);
    free(aud);
    free(eo);
    free(eb);
    return rc;
}

static void a2m_inputs_free(A2mInputs *in)
{
    free(in->cond);
    free(in->v_min_max);
}

static DittoLmdm *load_a2m_model(TestCtx *c, const Fixtures *fx)
{
    const char *const k[6] = { "weights", "lmdm_a2m.pth", "submodule_overrides", "model", "kwargs", "num_heads" };
    const cJSON *h = json_path(fx->manifest, k, 6);
    return fixture_load_lmdm(c, fx, "lmdm_a2m.pth", cJSON_IsNumber(h) ? h->valueint : 0);
}

static DittoA2mParams case_params(const cJSON *cs)
{
    DittoA2mParams p;
    ditto_a2m_params_default(&p);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cs, "setup");
    const cJSON *v;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "seq_frames")))
        p.seq_frames = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "overlap_v2")))
        p.overlap = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "smo_k_d")))
        p.smooth_k = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(st, "fix_kp_cond")))
        p.fix_kp_cond = v->valueint;
    p.online = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "online_mode"));
    p.cond_dim = DITTO_COND_DIM;
    return p;
}

/* a2m_offline_n150: the whole offline driver with injected noise, upstream's draw order. */
static void test_a2m_case(TestCtx *c, const Fixtures *fx, DittoLmdm *m)
{
    const char *name = "a2m_offline_n150";
    const cJSON *cs = fixture_case(fx, name);
    const cJSON *iof = cJSON_GetObjectItemCaseSensitive(cs, "io_file");
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(cs, "sampling_timesteps");
    if (!cs || !cJSON_IsString(iof) || !cJSON_IsNumber(sj)) {
        test_report(c, name, false, "case missing from the manifest");
        return;
    }
    DittoCatalog *io = fixture_open(c, fx, iof->valuestring);
    if (!io)
        return;
    A2mInputs in;
    int rc = a2m_inputs(io, &in);
    TT *xT = io_input(c, io, "x_T"), *z = io_input(c, io, "noise");
    DittoA2mParams p = case_params(cs);
    if (rc < 0 || !xT || !z) {
        test_report(c, name, false, "inputs missing (%s)", ditto_strerror(rc));
        goto out;
    }
    const int64_t N = in.N, S = p.seq_frames;
    double tol, tmax;
    fixture_tol(cs, "res_kp_seq", &tol, &tmax);
    check_ref(c, "a2m_offline_n150.s_kp_cond", in.s_kp, MD, io, "s_kp_cond", 1e-6, 1e-5);

    DittoA2mLmdmParams lp;
    ditto_a2m_lmdm_params_default(&lp);
    lp.steps = sj->valueint;
    lp.x_T = &xT->dev;
    lp.z = &z->dev;
    DittoA2mLmdm *smp = NULL;
    rc = ditto_a2m_lmdm_open(&smp, m, &lp);
    Rec rec = { .S = S, .kp = xmalloc(MAX_WIN * MD * sizeof(float)), .pred = xmalloc((size_t)(8 * S * MD) * sizeof(float)) };
    float *motion = xmalloc((size_t)(N * MD) * sizeof(float));
    if (rc == 0) {
        rec.inner = ditto_a2m_lmdm_sampler(smp);
        rc = ditto_a2m_offline(&p, in.s_kp, (DittoA2mSampler){ rec_sample, &rec, S, DITTO_COND_DIM }, in.cond, N, motion, NULL);
    }
    const int64_t W = (N + (S - p.overlap) - 1) / (S - p.overlap);
    if (test_report(c, "a2m_offline_n150.run", rc == 0 && rec.calls == W, "rc %d (%s), %lld windows", rc, ditto_strerror(rc), (long long)rec.calls)) {
        check_ref(c, "a2m_offline_n150.windows_kp_cond", rec.kp, (size_t)(W * MD), io, "windows_kp_cond", tol, tmax);
        check_ref(c, "a2m_offline_n150.windows_pred", rec.pred, (size_t)(W * S * MD), io, "windows_pred", tol, tmax);
        check_ref(c, "a2m_offline_n150.res_kp_seq", motion, (size_t)(N * MD), io, "res_kp_seq", tol, tmax);
        /* cvt_fmt with the clip, per key */
        DittoXInfo *xi = xmalloc((size_t)N * sizeof *xi);
        ditto_motion_to_xinfo(motion, N, in.v_min_max, xi);
        static const char *const outs[6] = { "x_d_scale", "x_d_pitch", "x_d_yaw", "x_d_roll", "x_d_t", "x_d_exp" };
        static const int dims[6] = { 1, 66, 66, 66, 3, 63 };
        for (int k = 0; k < 6; k++) {
            float *o = xmalloc((size_t)(N * dims[k]) * sizeof(float));
            for (int64_t g = 0; g < N; g++) {
                const float *src = k == 0 ? &xi[g].scale : k == 1 ? xi[g].pitch.v : k == 2 ? xi[g].yaw.v : k == 3 ? xi[g].roll.v : k == 4 ? xi[g].t : xi[g].exp;
                memcpy(o + g * dims[k], src, (size_t)dims[k] * sizeof(float));
            }
            char label[96];
            snprintf(label, sizeof label, "a2m_offline_n150.%s", outs[k]);
            fixture_tol(cs, outs[k], &tol, &tmax);
            check_ref(c, label, o, (size_t)(N * dims[k]), io, outs[k], tol, tmax);
            free(o);
        }
        free(xi);
    }
    free(motion);
    free(rec.kp);
    free(rec.pred);
    ditto_a2m_lmdm_close(&smp);
out:
    tt_free(xT);
    tt_free(z);
    a2m_inputs_free(&in);
    ditto_catalog_close(&io);
}

/* Seeded noise: same seed twice bit-identical, another seed different; pushing in chunks changes nothing. */
static void test_seeded(TestCtx *c, const Fixtures *fx, DittoLmdm *m)
{
    const cJSON *cs = fixture_case(fx, "a2m_offline_n150");
    const cJSON *iof = cJSON_GetObjectItemCaseSensitive(cs, "io_file");
    if (!cs || !cJSON_IsString(iof))
        return;
    DittoCatalog *io = fixture_open(c, fx, iof->valuestring);
    if (!io)
        return;
    A2mInputs in;
    int rc = a2m_inputs(io, &in);
    ditto_catalog_close(&io);
    if (rc < 0) {
        test_report(c, "a2m.seeded", false, "inputs: %s", ditto_strerror(rc));
        a2m_inputs_free(&in);
        return;
    }
    const int64_t N = in.N;
    DittoA2mParams p = case_params(cs);
    float *out[4];
    int rcs[4];
    const uint64_t seeds[4] = { 1234, 1234, 1235, 1234 };
    for (int k = 0; k < 4; k++) {
        out[k] = xmalloc((size_t)(N * MD) * sizeof(float));
        DittoA2mLmdmParams lp;
        ditto_a2m_lmdm_params_default(&lp);
        lp.steps = 3;
        lp.seed = seeds[k];
        DittoA2mLmdm *smp = NULL;
        rcs[k] = ditto_a2m_lmdm_open(&smp, m, &lp);
        if (rcs[k] == 0 && k < 3) {
            rcs[k] = ditto_a2m_offline(&p, in.s_kp, ditto_a2m_lmdm_sampler(smp), in.cond, N, out[k], NULL);
        } else if (rcs[k] == 0) {
            /* incremental, 13 rows at a time */
            Sink sk;
            DittoA2m *a;
            rcs[k] = sink_open(&sk, N, &a, &p, in.s_kp, ditto_a2m_lmdm_sampler(smp));
            for (int64_t g = 0; rcs[k] == 0 && g < N; g += 13)
                rcs[k] = ditto_a2m_push(a, in.cond + g * DITTO_COND_DIM, N - g < 13 ? N - g : 13);
            if (rcs[k] == 0)
                rcs[k] = ditto_a2m_finish(a);
            memcpy(out[k], sk.motion, (size_t)(N * MD) * sizeof(float));
            free(sk.motion);
            ditto_a2m_close(&a);
        }
        ditto_a2m_lmdm_close(&smp);
    }
    bool ran = rcs[0] == 0 && rcs[1] == 0 && rcs[2] == 0 && rcs[3] == 0;
    double diff = 0;
    bool finite = true;
    for (int64_t i = 0; ran && i < N * MD; i++) {
        diff = fmax(diff, fabs((double)out[0][i] - out[2][i]));
        finite &= isfinite(out[0][i]);
    }
    test_report(c, "a2m.seeded.same_seed_identical", ran && finite && first_diff(out[0], out[1], N * MD) < 0, "rc %d %d", rcs[0], rcs[1]);
    test_report(c, "a2m.seeded.other_seed_differs", ran && diff > 1e-2, "max |diff| %.3g", diff);
    test_report(c, "a2m.seeded.push_pattern_identical", ran && first_diff(out[0], out[3], N * MD) < 0, "rc %d", rcs[3]);
    for (int k = 0; k < 4; k++)
        free(out[k]);
    a2m_inputs_free(&in);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    if (test_selected(&c, "a2m.offline")) {
        test_offline_sizes(&c);
        test_offline_hand(&c);
    }
    if (test_selected(&c, "a2m.fix_kp_cond"))
        test_fix_kp_cond(&c);
    if (test_selected(&c, "a2m.online"))
        test_online(&c);
    if (test_selected(&c, "a2m.sweep"))
        test_sweep(&c);
    if (test_selected(&c, "a2m.errors"))
        test_errors(&c);

    Fixtures fx;
    if (!fixtures_load(&fx, ditto_logger_stderr(DITTO_LOG_WARN))) {
        printf("SKIP audio2motion fixture tests: no shared/fixtures/ditto/manifest.json\n");
        c.skipped++;
    } else if (test_selected(&c, "a2m_offline_n150") || test_selected(&c, "a2m.seeded")) {
        DittoLmdm *m = load_a2m_model(&c, &fx);
        if (m) {
            if (test_selected(&c, "a2m_offline_n150"))
                test_a2m_case(&c, &fx, m);
            if (test_selected(&c, "a2m.seeded"))
                test_seeded(&c, &fx, m);
            ditto_lmdm_free(&m);
        }
    }
    fixtures_free(&fx);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
