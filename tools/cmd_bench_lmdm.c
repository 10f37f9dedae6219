/*
 * ditto bench --lmdm: the motion sampler alone (one 80-frame window = one
 * DDIM run of the guided LMDM, ditto-architecture.md 3.5 and 5.7) at the
 * official size with synthetic weights. Times windows op by op and, where
 * the backend captures, replayed as one CUDA graph per window; checks that
 * both give the same motion and, with --parity, compares with the cpu
 * backend (float32) on the same inputs and noise.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/profile.h"
#include "core/log.h"
#include "core/rng.h"
#include "pipeline/audio2motion.h"
#include "pipeline/ddim.h"
#include "pipeline/pipeline_internal.h"
#include "tools/cli.h"
#include "weights/catalog.h"
#include "weights/synthetic.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto bench --lmdm [OPTIONS]\n\n"
            "Times the motion sampler: windows of 80 frames, each one DDIM run of the\n"
            "guided LMDM denoiser (two passes per step), official size, synthetic\n"
            "weights. Windows run op by op, then (cuda) as one replayed CUDA graph each;\n"
            "the two must give the same motion.\n\n"
            "options:\n"
            "  --backend NAME   cpu or cuda (default cpu)\n"
            "  --windows N      timed windows per mode (default 3 on cpu, 12 on cuda)\n"
            "  --steps N        DDIM steps per window (default 50)\n"
            "  --threads N      CPU threads (default: all cores)\n"
            "  --small          the small synthetic configuration (quick smoke run)\n"
            "  --parity N       also sample the first N windows on the cpu backend and\n"
            "                   print the rel-L2 of the motion against it (default 0; a\n"
            "                   float32 reference, also with --tf32, unless --parity-tf32);\n"
            "                   exit status 1 when it is above 1e-3\n"
            "  --tf32           the decoder's linears with TF32 products (tensor cores on\n"
            "                   cuda, operands held as float16), as the pipeline runs them\n"
            "                   with fp16 models\n"
            "  --parity-tf32    the cpu reference with TF32 linears too (the oracle of\n"
            "                   --tf32: agreement to float32 rounding expected)\n"
            "  --profile[=N]    one more window op by op with per-op timing; prints the N\n"
            "                   most expensive op/shape groups (default 40)\n"
            "  --json FILE      also write the numbers as JSON\n"
            "  -h, --help       this text\n");
}

typedef struct Run {
    double *ms;          /* per window */
    float *pred;         /* (W, L, F) */
} Run;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the windows from `from` on (steady state). */
static double median_from(const double *v, int n, int from)
{
    if (from >= n)
        from = n - 1;
    int k = n - from;
    double *t = malloc((size_t)k * sizeof *t);
    if (!t)
        return NAN;
    memcpy(t, v + from, (size_t)k * sizeof *t);
    qsort(t, (size_t)k, sizeof *t, cmp_double);
    double m = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
    free(t);
    return m;
}

/* Sample windows 0..W-1 of the same inputs with sampler settings lp on model m. */
static int run_windows(DittoLmdm *m, const DittoA2mLmdmParams *lp, int W, const float *kp, const float *cond, Run *r)
{
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const size_t win = (size_t)(d->seq_len * d->nfeats);
    DittoA2mLmdm *smp = NULL;
    int rc = ditto_a2m_lmdm_open(&smp, m, lp);
    if (rc < 0)
        return rc;
    DittoA2mSampler sa = ditto_a2m_lmdm_sampler(smp);
    for (int w = 0; w < W && rc >= 0; w++) {
        double t0 = ditto_now();
        rc = sa.fn(sa.ctx, w, kp, cond, r->pred + (size_t)w * win);
        r->ms[w] = (ditto_now() - t0) * 1e3;
    }
    ditto_a2m_lmdm_close(&smp);
    return rc;
}

static int load_model(DittoBackend *be, bool small, bool tf32, DittoCatalog **cat, DittoLmdm **m)
{
    DittoSyntheticSize sz = small ? DITTO_SYNTH_SMALL : DITTO_SYNTH_FULL;
    DittoLmdmParams p;
    ditto_lmdm_params_default(&p);
    p.num_heads = ditto_synthetic_lmdm_heads(sz);
    p.tf32 = tf32;
    int rc = ditto_synthetic_lmdm_catalog(cat, sz, 7, &be->log);
    if (rc >= 0)
        rc = ditto_lmdm_load(m, be, *cat, &p);
    return rc;
}

static void rel_l2(const float *a, const float *ref, size_t n, double *rel, double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)ref[i];
        num += e * e;
        den += (double)ref[i] * (double)ref[i];
        if (!(fabs(e) <= mx))
            mx = fabs(e);
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
    *max_abs = mx;
}

int ditto_bench_lmdm(int argc, char **argv)
{
    const char *backend = "cpu", *json = NULL;
    int windows = -1, steps = 50, threads = 0, small = 0, parity = 0, profile = 0, tf32 = 0, parity_tf32 = 0;
    bool parity_fail = false;
    static const struct option opts[] = {
        { "lmdm", no_argument, 0, 'l' },          { "backend", required_argument, 0, 'b' }, { "windows", required_argument, 0, 'W' },
        { "steps", required_argument, 0, 'n' },   { "threads", required_argument, 0, 't' }, { "small", no_argument, 0, 's' },
        { "parity", required_argument, 0, 'p' },  { "json", required_argument, 0, 'j' },    { "help", no_argument, 0, 'h' },
        { "profile", optional_argument, 0, 'P' }, { "tf32", no_argument, 0, 'T' }, { "parity-tf32", no_argument, 0, 'R' },
        { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': break;
        case 'b': backend = optarg; break;
        case 'W': windows = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 's': small = 1; break;
        case 'T': tf32 = 1; break;
        case 'R': parity_tf32 = 1; break;
        case 'p': parity = atoi(optarg); break;
        case 'j': json = optarg; break;
        case 'P': profile = optarg ? atoi(optarg) : 40; if (profile <= 0) profile = 40; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || steps < 1 || steps > DITTO_DDIM_MAX_STEPS || windows == 0 || windows > 1000 || parity < 0) {
        usage(stderr);
        return 2;
    }
    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.nthreads = threads;
    bp.log = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoBackend *be = NULL, *cpu = NULL;
    if (ditto_backend_open(&be, backend, &bp) < 0)
        return 1;
    if (windows < 0)
        windows = be->device == DITTO_DEVICE_CPU ? 3 : 12;
    if (parity > windows)
        parity = windows;
    const bool graphs = be->capture_begin != NULL;

    DittoCatalog *cat = NULL, *cat_c = NULL;
    DittoLmdm *m = NULL, *m_c = NULL;
    float *kp = NULL, *cond = NULL;
    Run eager = { 0 }, graph = { 0 }, ref = { 0 };
    int rc = load_model(be, small, tf32, &cat, &m);
    if (rc < 0) {
        fprintf(stderr, "ditto bench: cannot build the synthetic LMDM: %s\n", ditto_strerror(rc));
        goto out;
    }
    const DittoLmdmDims *d = ditto_lmdm_dims(m);
    const size_t win = (size_t)(d->seq_len * d->nfeats), ncond = (size_t)(d->seq_len * d->cond_dim);
    kp = malloc((size_t)d->nfeats * sizeof *kp);
    cond = malloc(ncond * sizeof *cond);
    eager.ms = calloc((size_t)windows, sizeof(double));
    eager.pred = calloc((size_t)windows * win, sizeof(float));
    graph.ms = calloc((size_t)windows, sizeof(double));
    graph.pred = calloc((size_t)windows * win, sizeof(float));
    ref.ms = calloc((size_t)windows, sizeof(double));
    ref.pred = calloc((size_t)windows * win, sizeof(float));
    if (!kp || !cond || !eager.ms || !eager.pred || !graph.ms || !graph.pred || !ref.ms || !ref.pred) {
        rc = DITTO_ERR_NOMEM;
        goto out;
    }
    /* motion-like conditioning frame and audio-feature-like conditions (unit normals, scaled) */
    ditto_rng_fill_normal(11, 1, 0, kp, (size_t)d->nfeats);
    ditto_rng_fill_normal(11, 2, 0, cond, ncond);
    for (int64_t i = 0; i < d->nfeats; i++)
        kp[i] *= 0.5f;

    DittoA2mLmdmParams lp;
    ditto_a2m_lmdm_params_default(&lp);
    lp.steps = steps;
    lp.seed = 5;
    printf("LMDM sampler on %s: %d windows of %lld frames, %d DDIM steps, latent %lld, %d layers, %s linears\n", be->name, windows,
           (long long)d->seq_len, steps, (long long)d->latent, d->layers,
           !tf32 ? "float32" : ditto_lmdm_f16_operands(m) ? "tf32 (float16 operands)" : "tf32");
    lp.graph = false;
    rc = run_windows(m, &lp, windows, kp, cond, &eager);
    if (rc >= 0 && graphs) {
        lp.graph = true;
        rc = run_windows(m, &lp, windows, kp, cond, &graph);
    }
    if (rc < 0) {
        fprintf(stderr, "ditto bench: sampling failed: %s\n", ditto_strerror(rc));
        goto out;
    }
    const double e_ms = median_from(eager.ms, windows, 1);
    printf("%-22s %12s %12s %12s\n", "mode", "first (ms)", "window (ms)", "step (ms)");
    printf("%-22s %12.2f %12.2f %12.3f\n", "op by op", eager.ms[0], e_ms, e_ms / steps);
    double g_ms = NAN, g_rel = NAN, g_max = NAN;
    if (graphs) {
        g_ms = median_from(graph.ms, windows, 2);
        printf("%-22s %12.2f %12.2f %12.3f   (capture window %.2f ms)\n", "cuda graph", graph.ms[0], g_ms, g_ms / steps,
               windows > 1 ? graph.ms[1] : NAN);
        rel_l2(graph.pred, eager.pred, (size_t)windows * win, &g_rel, &g_max);
        printf("graph vs op by op: max |diff| %.3g over %d windows%s\n", g_max, windows, g_max == 0 ? " (bit-identical)" : "");
    }
    if (profile) {
        /* one more window op by op with timing marks (not part of the numbers above) */
        lp.graph = false;
        rc = ditto_profile_start(be);
        if (rc >= 0)
            rc = run_windows(m, &lp, 1, kp, cond, &ref);
        double ms = 0;
        if (rc >= 0) {
            printf("--- per-op profile of one window (%d steps) ---\n", steps);
            rc = ditto_profile_report(be, stdout, profile, &ms);
            printf("--- %.3f ms in ops = %.3f ms/step ---\n", ms, ms / steps);
        }
        if (rc < 0) {
            fprintf(stderr, "ditto bench: profile run failed: %s\n", ditto_strerror(rc));
            goto out;
        }
    }
    double p_rel = NAN, p_max = NAN;
    if (parity > 0) {
        fprintf(stderr, "ditto bench: parity reference, %d window(s) on the cpu backend (%s)...\n", parity,
                parity_tf32 ? "tf32 linears" : "float32");
        DittoBackendParams cp;
        ditto_backend_params_default(&cp);
        cp.nthreads = threads;
        cp.log = bp.log;
        rc = ditto_backend_open(&cpu, "cpu", &cp);
        if (rc >= 0)
            rc = load_model(cpu, small, parity_tf32, &cat_c, &m_c);
        lp.graph = false;
        if (rc >= 0)
            rc = run_windows(m_c, &lp, parity, kp, cond, &ref);
        if (rc < 0) {
            fprintf(stderr, "ditto bench: parity run failed: %s\n", ditto_strerror(rc));
            goto out;
        }
        rel_l2(graphs ? graph.pred : eager.pred, ref.pred, (size_t)parity * win, &p_rel, &p_max);
        /* the bound on the sampled motion against the CPU path, same noise */
        const bool ok = p_rel <= 1e-3;
        printf("vs cpu %s (%d windows, same noise): rel-L2 %.3e, max |diff| %.3g (bound 1e-3: %s)\n", parity_tf32 ? "tf32" : "float32", parity,
               p_rel, p_max, ok ? "ok" : "EXCEEDED");
        parity_fail = !ok;
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "ditto bench: %s: cannot write\n", json);
            rc = DITTO_ERR_IO;
            goto out;
        }
        fprintf(f, "{\n  \"backend\": \"%s\", \"steps\": %d, \"windows\": %d, \"frames_per_window\": %lld, \"tf32\": %s,\n", be->name, steps,
                windows, (long long)d->seq_len, tf32 ? "true" : "false");
        fprintf(f, "  \"eager_first_ms\": %.3f, \"eager_window_ms\": %.3f", eager.ms[0], e_ms);
        if (graphs)
            fprintf(f, ",\n  \"graph_window_ms\": %.3f, \"graph_step_ms\": %.4f, \"graph_vs_eager_max_abs\": %.3e", g_ms, g_ms / steps, g_max);
        if (parity > 0)
            fprintf(f, ",\n  \"parity_windows\": %d, \"parity_tf32\": %s, \"vs_cpu_rel_l2\": %.4e, \"vs_cpu_max_abs\": %.4e", parity,
                    parity_tf32 ? "true" : "false", p_rel, p_max);
        fprintf(f, "\n}\n");
        if (fclose(f) != 0)
            rc = DITTO_ERR_IO;
    }
out:
    free(kp);
    free(cond);
    free(eager.ms);
    free(eager.pred);
    free(graph.ms);
    free(graph.pred);
    free(ref.ms);
    free(ref.pred);
    ditto_lmdm_free(&m);
    ditto_lmdm_free(&m_c);
    ditto_catalog_close(&cat);
    ditto_catalog_close(&cat_c);
    ditto_backend_close(&cpu);
    ditto_backend_close(&be);
    return rc < 0 || parity_fail ? 1 : 0;
}
