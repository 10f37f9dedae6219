/*
 * The public API (include/ditto/ditto.h): model set, session, one-call
 * render to MP4.
 *
 * A session runs three workers next to the caller (upstream has six
 * single-frame workers, spec 3.12; the render stages here take batches):
 *
 *   caller --pcm--> [motion]  HuBERT (offline chunking, incremental) ->
 *                             conditions -> LMDM windows -> cvt_fmt
 *           --x_d_info (bounded ring, per frame)-->
 *                   [render]  B frames: motion stitch -> warp -> decode
 *           --renders (2 batch slots)-->
 *                   [post]    paste-back at full resolution -> RGB->YUV
 *           --frames (B + 2 slots)--> caller (pull)
 *
 * One mutex guards every queue and one condition variable announces every
 * change. The first error stops every stage (abort flag, all waits wake
 * up) and is the return value of the next push/pull; the stage that
 * failed logged it once. All buffers are allocated at open; the audio
 * input buffer grows with what the caller pushes ahead of the pipeline.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/audio.h"
#include "io/color.h"
#include "io/video_out.h"
#include "models/lmdm.h"
#include "nn/weights.h"
#include "pipeline/audio2motion.h"
#include "pipeline/audio_features.h"
#include "pipeline/avatar.h"
#include "pipeline/conditions.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/putback.h"
#include "weights/synthetic.h"

#define RENDER_SLOTS 2
#define PUB_SLOTS 4   /* batches whose frames may be in flight from the device at once: 2 (the fence), with room */
#define PCM_PIECE (4 * DITTO_HUBERT_CHUNK)

/* Seeds of the synthetic networks (added to DittoModelsParams.synthetic_seed). */
enum { SEED_WARP = 201, SEED_DECODER, SEED_STITCH, SEED_LMDM, SEED_HUBERT };

static const char *const stage_names[DITTO_STAGE_COUNT] = {
    "avatar", "audio", "motion", "stitch", "warp", "decode", "putback", "color", "encode",
};

const char *ditto_stage_name(DittoStage s)
{
    return (unsigned)s < DITTO_STAGE_COUNT ? stage_names[s] : "unknown";
}

/* ---- model set ------------------------------------------------------------------ */

struct DittoModels {
    DittoLogger log;
    DittoBackend *be;          /* warp, decoder, stitch, extractors */
    DittoBackend *be_motion;   /* LMDM and HuBERT: their own thread pool, so motion overlaps rendering */
    DittoBackend *be_post;     /* CPU: paste-back and colour conversion */
    pthread_t probe;           /* ditto_video_writer_probe_nvenc beside the load (probing: running) */
    int motion_precision;      /* DittoModelsParams.motion_precision */
    bool probing;
    DittoWarp *warp;
    DittoDecoder *decoder;
    DittoStitch *stitch;
    DittoLmdm *lmdm;
    DittoHubert *hubert;
    DittoRegistrar *reg;
    DittoA2mLmdm *warm;        /* sampler of DITTO_DDIM_DEFAULT_STEPS, captured at open (GPU); lent to sessions */
    int warm_batch;            /* batch of the render warm-up (0: none) */
    size_t warm_arena;         /* the activation arena that batch needed, plus the stitch stage's slack */
    int synthetic;             /* 0 or a DittoSyntheticSize */
    uint8_t *pinned;           /* page-locked frame ring memory of the sessions (m->be's host_alloc), grow-only */
    size_t pinned_size;
    pthread_mutex_t mu;
    bool busy;                 /* a session is open */
    bool serialize;            /* network stages take turns (CPU backend) */
    int lanes;                 /* 2: a batch's warp and decoder in two halves on the backend's two lanes (render.c) */
    pthread_mutex_t compute;   /* the turn */
    double gate_wait;          /* seconds HuBERT calls waited for their turn (the open session's) */
};

static void compute_enter(DittoModels *m)
{
    if (m->serialize)
        pthread_mutex_lock(&m->compute);
}

static void compute_leave(DittoModels *m)
{
    if (m->serialize)
        pthread_mutex_unlock(&m->compute);
}

static void gate_enter(void *ctx)
{
    DittoModels *m = ctx;
    double t = ditto_now();
    compute_enter(m);
    m->gate_wait += ditto_now() - t;
}

static void gate_leave(void *ctx)
{
    compute_leave(ctx);
}

void ditto_models_params_default(DittoModelsParams *p)
{
    memset(p, 0, sizeof *p);
    p->backend = "cpu";
    p->warmup_batch = 8;
}

static int is_dir(const char *p)
{
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

typedef int (*LoadFn)(void **out, DittoBackend *be, DittoCatalog *cat);

/* Open a catalog (checkpoint file or synthetic) and load one network from it. */
static int load_net(DittoModels *m, DittoBackend *be, const char *dir, DittoNetKind kind, uint64_t seed, LoadFn load, void **out)
{
    DittoCatalog *cat = NULL;
    int rc;
    const double t0 = ditto_now();
    if (m->synthetic) {
        rc = ditto_synthetic_catalog_size(&cat, kind, (DittoSyntheticSize)m->synthetic, seed, &m->log);
    } else {
        char path[4096];
        if (!ditto_net_find(dir, ditto_net_file_name(kind), path, sizeof path))
            return ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no models/%s (expected the official ditto_pytorch folder)", dir,
                              ditto_net_file_name(kind));
        rc = ditto_catalog_open_pth(&cat, path, &m->log);
    }
    const double t1 = ditto_now();
    if (rc >= 0)
        rc = load(out, be, cat);
    ditto_catalog_close(&cat);
    ditto_log(&m->log, DITTO_LOG_INFO, "models: %s read %.2f s, loaded onto %s %.2f s", ditto_net_file_name(kind), t1 - t0, be->name,
              ditto_now() - t1);
    return rc;
}

static int load_warp(void **o, DittoBackend *be, DittoCatalog *c) { return ditto_warp_load((DittoWarp **)o, be, c); }
static int load_decoder(void **o, DittoBackend *be, DittoCatalog *c) { return ditto_decoder_load((DittoDecoder **)o, be, c); }
static int load_stitch(void **o, DittoBackend *be, DittoCatalog *c) { return ditto_stitch_load((DittoStitch **)o, be, c); }

static int load_lmdm(DittoModels *m, const char *dir, uint64_t seed)
{
    DittoCatalog *cat = NULL;
    DittoLmdmParams lp;
    ditto_lmdm_params_default(&lp);
    /*
     * float32 unless asked (DittoModelsParams.motion_precision): the motion
     * runs beside the render, so its fp16 mode saves little wall time
     * (2.10 against 2.13 s for the test clip on the H200) and costs the
     * frames' agreement with a float32 render
     */
    lp.tf32 = m->motion_precision == DITTO_PRECISION_FP16;
    int rc;
    const double t0 = ditto_now();
    if (m->synthetic) {
        lp.num_heads = ditto_synthetic_lmdm_heads((DittoSyntheticSize)m->synthetic);
        rc = ditto_synthetic_lmdm_catalog(&cat, (DittoSyntheticSize)m->synthetic, seed, &m->log);
    } else {
        char path[4096];
        if (!ditto_net_find(dir, "lmdm_v0.4_hubert.pth", path, sizeof path))
            return ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no models/lmdm_v0.4_hubert.pth (expected the official ditto_pytorch folder)", dir);
        rc = ditto_catalog_open_pth(&cat, path, &m->log);
    }
    const double t1 = ditto_now();
    if (rc >= 0)
        rc = ditto_lmdm_load(&m->lmdm, m->be_motion, cat, &lp);
    ditto_catalog_close(&cat);
    ditto_log(&m->log, DITTO_LOG_INFO, "models: LMDM read %.2f s, loaded %.2f s (%s decoder linears)", t1 - t0, ditto_now() - t1,
              !lp.tf32 ? "float32" : ditto_lmdm_f16_operands(m->lmdm) ? "tf32, float16 operands" : "tf32");
    if (rc >= 0) {
        const DittoLmdmDims *d = ditto_lmdm_dims(m->lmdm);
        if (d->nfeats != DITTO_MOTION_DIM || d->cond_dim != DITTO_COND_DIM || d->seq_len != DITTO_A2M_SEQ_FRAMES)
            rc = ditto_fail(&m->log, DITTO_ERR_SHAPE, "LMDM: motion %lld, conditions %lld, window %lld; expected %d, %d, %d",
                            (long long)d->nfeats, (long long)d->cond_dim, (long long)d->seq_len, DITTO_MOTION_DIM, DITTO_COND_DIM,
                            DITTO_A2M_SEQ_FRAMES);
    }
    return rc;
}

static int open_registrar(DittoModels *m, const DittoModelsParams *p)
{
    DittoRegistrarConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.log = m->log;
    cfg.threads = p->threads;
    /* registration stays float32: on the render backend unless that one stores float16 */
    cfg.be = m->be->act_dtype == DITTO_F32 ? m->be : m->be_motion;
    cfg.synthetic = m->synthetic;
    const char *aux_dir = p->aux ? p->aux : m->synthetic ? NULL : p->weights;
    char paths[DITTO_AUX_COUNT][4096], app[4096], mot[4096];
    for (int i = 0; i < DITTO_AUX_COUNT; i++)
        if (aux_dir && ditto_aux_find(aux_dir, (DittoAuxRole)i, paths[i], sizeof paths[i]))
            cfg.paths[i] = paths[i];
    if (m->synthetic) {
        /* no detector: the centred square; half a set would fail */
        if (!cfg.paths[DITTO_AUX_DETECTOR] || !cfg.paths[DITTO_AUX_LMK106])
            for (int i = 0; i < DITTO_AUX_COUNT; i++)
                cfg.paths[i] = NULL;
    } else {
        if (!ditto_net_find(p->weights, ditto_net_file_name(DITTO_NET_APPEARANCE), app, sizeof app) ||
            !ditto_net_find(p->weights, ditto_net_file_name(DITTO_NET_MOTION), mot, sizeof mot))
            return ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no models/%s or models/%s (expected the official ditto_pytorch folder)",
                              p->weights, ditto_net_file_name(DITTO_NET_APPEARANCE), ditto_net_file_name(DITTO_NET_MOTION));
        cfg.appearance = app;
        cfg.motion = mot;
    }
    return ditto_registrar_open(&m->reg, &cfg);
}

/* One network's load, run on its own thread by load_networks(). */
typedef struct NetJob {
    DittoModels *m;
    const char *dir;
    DittoNetKind kind;         /* DITTO_NET_COUNT: the LMDM */
    uint64_t seed;
    LoadFn load;
    void **out;
    int rc;
} NetJob;

static void *net_job(void *arg)
{
    NetJob *j = arg;
    j->rc = j->kind == DITTO_NET_COUNT ? load_lmdm(j->m, j->dir, j->seed) : load_net(j->m, j->m->be, j->dir, j->kind, j->seed, j->load, j->out);
    return NULL;
}

/*
 * Warp, decoder, stitching network and LMDM, each on its own thread:
 * reading (or generating) and converting hundreds of MB is CPU work, and
 * the networks do not share state (the backends' allocators and uploads
 * are thread-safe). The first failure (in this order) is the result.
 */
static int load_networks(DittoModels *m, const char *dir, uint64_t s0)
{
    NetJob jobs[4] = {
        { m, dir, DITTO_NET_WARP, s0 + SEED_WARP, load_warp, (void **)&m->warp, 0 },
        { m, dir, DITTO_NET_DECODER, s0 + SEED_DECODER, load_decoder, (void **)&m->decoder, 0 },
        { m, dir, DITTO_NET_STITCH, s0 + SEED_STITCH, load_stitch, (void **)&m->stitch, 0 },
        { m, dir, DITTO_NET_COUNT, s0 + SEED_LMDM, NULL, NULL, 0 },
    };
    if (!m->synthetic) {
        /* a missing file is one error line, before any thread starts */
        char path[4096];
        for (int i = 0; i < 4; i++) {
            const char *f = jobs[i].kind == DITTO_NET_COUNT ? "lmdm_v0.4_hubert.pth" : ditto_net_file_name(jobs[i].kind);
            if (!ditto_net_find(dir, f, path, sizeof path))
                return ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no models/%s (expected the official ditto_pytorch folder)", dir, f);
        }
    }
    pthread_t th[4];
    bool started[4] = { false };
    for (int i = 0; i < 4; i++)
        started[i] = pthread_create(&th[i], NULL, net_job, &jobs[i]) == 0;
    for (int i = 0; i < 4; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            net_job(&jobs[i]);   /* no thread: load it here */
    }
    for (int i = 0; i < 4; i++)
        if (jobs[i].rc < 0)
            return jobs[i].rc;
    return 0;
}

/*
 * The model set's page-locked ring memory, at least n bytes (grow-only).
 * Allocating page-locked memory takes long (about 10 ms per 20 MB) and
 * holds up every other CUDA call of the process meanwhile, so the warm-up
 * makes it for common frame sizes and sessions reuse it.
 */
static int models_pinned(DittoModels *m, size_t n)
{
    if (m->pinned_size >= n)
        return 0;
    if (m->pinned)
        m->be->host_free(m->be, m->pinned);
    m->pinned_size = 0;
    if (!(m->pinned = m->be->host_alloc(m->be, n)))
        return DITTO_ERR_NOMEM;
    m->pinned_size = n;
    return 0;
}

/*
 * Slots of a session's frame ring at batch B: with device_post the frames go
 * straight into them, so room for two batches, as the render slots give otherwise.
 */
static int ring_slots(int B, bool device_post)
{
    return device_post ? 2 * B + 2 : B + 2;
}

/* Bytes of one frame ring slot: [RGB (rgb) |] YUV 4:2:0, rounded up to 64. */
static size_t ring_slot_bytes(int64_t W, int64_t H, bool rgb)
{
    const int64_t cw = ditto_yuv420_chroma_size(W), ch = ditto_yuv420_chroma_size(H);
    return ((rgb ? (size_t)(W * H * 3) : 0) + (size_t)(W * H + 2 * cw * ch) + 63) / 64 * 64;
}

/*
 * The device paste-back and colour conversion once on a small frame: the
 * CUDA kernels of a session's post stage are loaded on first launch
 * (lazy loading), which can wait for all the device's work, such as an
 * LMDM window on the motion stream (45 ms in the first batch on the H200).
 */
static int warm_post(DittoModels *m)
{
    enum { S = 64 };   /* frame side; the render is the real 512 x 512 */
    DittoBackend *be = m->be;
    const int64_t side = DITTO_RENDER_SIDE, cs = ditto_yuv420_chroma_size(S);
    DittoBuffer b_img = { 0 }, b_ren = { 0 }, b_yuv = { 0 };
    DittoPutback *pb = NULL;
    int rc = ditto_putback_open_fused(&pb, be, S, S, &m->log);
    if (rc >= 0 && (rc = ditto_buffer_alloc(&b_img, &be->allocator, S * S * 3)) >= 0 &&
        (rc = ditto_buffer_alloc(&b_ren, &be->allocator, (size_t)(3 * side * side) * ditto_dtype_size(be->act_dtype))) >= 0 &&
        (rc = ditto_buffer_alloc(&b_yuv, &be->allocator, (size_t)(S * S + 2 * cs * cs))) >= 0) {
        DittoTensor img = ditto_tensor(b_img.ptr, DITTO_U8, DITTO_SHAPE(S, S, 3));
        DittoTensor ren = ditto_tensor(b_ren.ptr, be->act_dtype, DITTO_SHAPE(1, 3, side, side));
        DittoTensor y = ditto_tensor(b_yuv.ptr, DITTO_U8, DITTO_SHAPE(1, S, S));
        DittoTensor u = ditto_tensor((uint8_t *)b_yuv.ptr + S * S, DITTO_U8, DITTO_SHAPE(1, cs, cs));
        DittoTensor v = ditto_tensor((uint8_t *)b_yuv.ptr + S * S + cs * cs, DITTO_U8, DITTO_SHAPE(1, cs, cs));
        img.device = ren.device = y.device = u.device = v.device = be->device;
        const float M_c2o[9] = { (float)S / side, 0, 0, 0, (float)S / side, 0, 0, 0, 1 };   /* the crop is the whole frame */
        if ((rc = ditto_op_fill(be, 0.0f, &ren)) >= 0 && (rc = ditto_op_fill(be, 0.0f, &img)) >= 0 &&
            (rc = ditto_putback_yuv(pb, &img, &ren, M_c2o, NULL, &y, &u, &v, false, NULL)) >= 0)
            rc = be->sync ? be->sync(be) : 0;
    }
    ditto_buffer_free(&b_img);
    ditto_buffer_free(&b_ren);
    ditto_buffer_free(&b_yuv);
    ditto_putback_close(&pb);
    return rc < 0 ? ditto_fail(&m->log, rc, "warm-up of the paste-back: %s", ditto_strerror(rc)) : 0;
}

typedef struct WarmHalf {
    DittoModels *m;
    const DittoTensor *f_s;
    DittoTensor x_s, x_d, *feat, *img;
} WarmHalf;

static int warm_half(void *ctx, int64_t a, int64_t n, DittoArena *ws)
{
    WarmHalf *w = ctx;
    return ditto_warp_decode_items(w->m->warp, w->m->decoder, ws, w->f_s, &w->x_s, &w->x_d, w->feat, w->img, a, n);
}

/* The render networks at batch B: their convolution plans, and the arena size a session's first batch needs. */
static int warm_render(DittoModels *m, int B)
{
    DittoBackend *be = m->be;
    const DittoDType act = be->act_dtype;
    const double t0 = ditto_now();
    int64_t fs[4], fe[4], im[4];
    DittoArena ws, ws2;
    DittoBuffer b_fs = { 0 }, b_kp = { 0 }, b_feat = { 0 }, b_img = { 0 };
    bool ws_ok = false;
    int rc = ditto_registrar_fs_shape(m->reg, fs);
    DittoTensor f_s = ditto_tensor(NULL, act, DITTO_SHAPE(B, fs[0], fs[1], fs[2], fs[3]));
    DittoTensor kp = ditto_tensor(NULL, DITTO_F32, DITTO_SHAPE(2, B, DITTO_NUM_KP, 3));
    if (rc >= 0)
        rc = ditto_warp_out_shape(m->warp, &f_s, fe);
    DittoTensor feat = ditto_tensor(NULL, act, 4, fe);
    if (rc >= 0)
        rc = ditto_decoder_out_shape(m->decoder, &feat, im);
    DittoTensor img = ditto_tensor(NULL, act, 4, im);
    DittoBuffer *bufs[4] = { &b_fs, &b_kp, &b_feat, &b_img };
    DittoTensor *ts[4] = { &f_s, &kp, &feat, &img };
    for (int i = 0; i < 4 && rc >= 0; i++) {
        if ((rc = ditto_buffer_alloc(bufs[i], &be->allocator, ditto_tensor_nbytes(ts[i]))) >= 0) {
            ts[i]->data = bufs[i]->ptr;
            ts[i]->device = be->device;
            rc = ditto_op_fill(be, 0.0f, ts[i]);
        }
    }
    if (rc >= 0 && (rc = ditto_arena_init(&ws, &be->allocator, 0)) >= 0) {
        ditto_arena_init(&ws2, &be->allocator, 0);
        ws_ok = true;
    }
    WarmHalf wh = { .m = m, .f_s = &f_s, .feat = &feat, .img = &img };
    if (rc >= 0 && (rc = ditto_tensor_select(&kp, 0, 0, &wh.x_s)) >= 0 && (rc = ditto_tensor_select(&kp, 0, 1, &wh.x_d)) >= 0) {
        DittoArena *const wss[2] = { &ws, &ws2 };   /* as a session's batches run: in halves with lanes */
        rc = m->lanes > 1 ? ditto_backend_halves(be, B, wss, warm_half, &wh) : warm_half(&wh, 0, B, &ws);
    }
    if (rc >= 0)
        rc = be->sync(be);
    if (rc >= 0 && ws_ok) {
        /* sessions at this batch start with arenas of this size (the stitch stage's few KB on top): their first batch is captured */
        const size_t peak = ws.peak > ws2.peak ? ws.peak : ws2.peak;
        m->warm_batch = B;
        m->warm_arena = (peak + ((size_t)1 << 20) + DITTO_ARENA_ALIGN - 1) / DITTO_ARENA_ALIGN * DITTO_ARENA_ALIGN;
    }
    if (ws_ok) {
        ditto_arena_free(&ws);
        ditto_arena_free(&ws2);
    }
    for (int i = 0; i < 4; i++)
        ditto_buffer_free(bufs[i]);
    if (rc < 0)
        return ditto_fail(&m->log, rc, "warm-up of the render networks (batch %d): %s", B, ditto_strerror(rc));

    ditto_log(&m->log, DITTO_LOG_INFO, "models: warm-up of the render networks at batch %d %.2f s", B, ditto_now() - t0);
    return 0;
}

/*
 * The motion backend's warm-up (sampler, HuBERT): its own stream, handles
 * and thread-local graph capture, so it runs beside the render warm-up.
 */
static int warm_motion(DittoModels *m)
{
    int rc;
    const double t1 = ditto_now();
    /* the motion sampler: window 0 op by op, window 1 captured */
    const DittoLmdmDims *d = ditto_lmdm_dims(m->lmdm);
    DittoA2mLmdmParams lp;
    ditto_a2m_lmdm_params_default(&lp);
    float *host = ditto_calloc((size_t)(d->nfeats + d->seq_len * d->cond_dim + d->seq_len * d->nfeats), sizeof(float));
    rc = host ? ditto_a2m_lmdm_open(&m->warm, m->lmdm, &lp) : DITTO_ERR_NOMEM;
    if (rc >= 0) {
        DittoA2mSampler sa = ditto_a2m_lmdm_sampler(m->warm);
        float *kpc = host, *cond = host + d->nfeats, *pred = cond + d->seq_len * d->cond_dim;
        for (int w = 0; w < 2 && rc >= 0; w++)
            rc = sa.fn(sa.ctx, w, kpc, cond, pred);
    }
    ditto_free(host);
    if (rc < 0) {
        ditto_a2m_lmdm_close(&m->warm);
        return ditto_fail(&m->log, rc, "warm-up of the motion sampler: %s", ditto_strerror(rc));
    }
    ditto_log(&m->log, DITTO_LOG_INFO, "models: warm-up of the motion sampler (2 windows, the second captured) %.2f s", ditto_now() - t1);
    /* one HuBERT call on silence: its first call makes the executor's plans (0.16 s on the H200, before the first frame) */
    const double t2 = ditto_now();
    float *chunk = ditto_calloc((size_t)DITTO_HUBERT_CHUNK + DITTO_HUBERT_FRAMES * DITTO_HUBERT_DIM, sizeof(float));
    rc = chunk ? ditto_hubert_run(m->hubert, chunk, chunk + DITTO_HUBERT_CHUNK) : DITTO_ERR_NOMEM;
    ditto_free(chunk);
    if (rc < 0)
        return ditto_fail(&m->log, rc, "warm-up of the HuBERT encoder: %s", ditto_strerror(rc));
    ditto_log(&m->log, DITTO_LOG_INFO, "models: warm-up of the HuBERT encoder (one call) %.3f s", ditto_now() - t2);
    return 0;
}

typedef struct WarmJob {
    DittoModels *m;
    int rc;
} WarmJob;

static void *warm_motion_main(void *arg)
{
    WarmJob *j = arg;
    j->rc = warm_motion(j->m);
    return NULL;
}

/*
 * GPU warm-up (DittoModelsParams.warmup_batch): one warp + decoder pass of
 * B frames of zeros creates and checks the convolution plans of that batch
 * size (kept by the backend), and the model set's own sampler of the
 * default step count samples two windows (op by op, then captured), so a
 * session's first frames do not wait for either. The render part and the
 * motion part (sampler, then HuBERT's first call) run at once on their own
 * backends; then the registration networks, the device paste-back and the
 * frame ring memory.
 */
static int models_warmup(DittoModels *m, int B)
{
    WarmJob job = { m, 0 };
    pthread_t th;
    const bool threaded = pthread_create(&th, NULL, warm_motion_main, &job) == 0;
    int rc = warm_render(m, B);
    if (threaded)
        pthread_join(th, NULL);
    else
        job.rc = warm_motion(m);
    DITTO_TRY(rc);
    DITTO_TRY(job.rc);
    const double t3 = ditto_now();
    DITTO_TRY(ditto_registrar_warmup(m->reg));
    DITTO_TRY(warm_post(m));
    ditto_log(&m->log, DITTO_LOG_INFO, "models: warm-up of the registration networks and the paste-back %.3f s", ditto_now() - t3);
    /* the frame ring of a GPU session at this batch, for frames of up to 1920x1080 pixels */
    const double t4 = ditto_now();
    if (m->be->host_alloc && models_pinned(m, ring_slot_bytes(1920, 1080, false) * (size_t)ring_slots(B, true)) < 0)
        return ditto_fail(&m->log, DITTO_ERR_NOMEM, "warm-up: out of page-locked memory for the frame ring");
    ditto_log(&m->log, DITTO_LOG_INFO, "models: page-locked frame ring of %.1f MB %.3f s", m->pinned_size / 1e6, ditto_now() - t4);
    return 0;
}

/* The CUDA device the models run on (their backends open device 0), or -1 off CUDA: where NVENC is tried. */
static int models_cuda_device(const DittoModels *m)
{
    return m->be->device == DITTO_DEVICE_CUDA ? 0 : -1;
}

static void *probe_main(void *arg)
{
    DittoModels *m = arg;
    const double t0 = ditto_now();
    const int ok = ditto_video_writer_probe_nvenc(models_cuda_device(m), &m->log);
    ditto_log(&m->log, DITTO_LOG_INFO, "models: NVENC %s (probed beside the load in %.2f s)", ok ? "usable" : "not usable", ditto_now() - t0);
    return NULL;
}

static void join_probe(DittoModels *m)
{
    if (m->probing) {
        pthread_join(m->probe, NULL);
        m->probing = false;
    }
}

int ditto_models_open(DittoModels **out, const DittoModelsParams *p)
{
    if (!out || !p)
        return DITTO_ERR_INVAL;
    *out = NULL;
    if (!p->weights || !p->weights[0])
        return ditto_fail(&p->log, DITTO_ERR_INVAL, "no weights given (a ditto_pytorch folder, or 'synthetic')");
    DittoModels *m = ditto_calloc(1, sizeof *m);
    if (!m)
        return ditto_fail(&p->log, DITTO_ERR_NOMEM, "out of memory");
    m->log = p->log;
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->compute, NULL);
    int rc = 0;
    const char *w = p->weights;
    if (!strcmp(w, "synthetic") || !strcmp(w, "synthetic:tiny"))
        m->synthetic = DITTO_SYNTH_TINY;
    else if (!strcmp(w, "synthetic:small"))
        m->synthetic = DITTO_SYNTH_SMALL;
    else if (!strcmp(w, "synthetic:full"))
        m->synthetic = DITTO_SYNTH_FULL;
    else if (!is_dir(w))
        rc = ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no such weights folder (expected the official ditto_pytorch folder, or 'synthetic')", w);
    if (rc < 0)
        goto fail;

    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.nthreads = p->threads;
    bp.log = m->log;
    const char *bname = p->backend ? p->backend : "cpu";
    if (p->precision < DITTO_PRECISION_AUTO || p->precision > DITTO_PRECISION_FP16) {
        rc = ditto_fail(&m->log, DITTO_ERR_INVAL, "precision %d: expected auto, fp32 or fp16", p->precision);
        goto fail;
    }
    if (p->motion_precision < DITTO_PRECISION_AUTO || p->motion_precision > DITTO_PRECISION_FP16) {
        rc = ditto_fail(&m->log, DITTO_ERR_INVAL, "motion precision %d: expected auto, fp32 or fp16", p->motion_precision);
        goto fail;
    }
    m->motion_precision = p->motion_precision;
    DittoBackendParams bp_render = bp;
    /* the render stages are the session's throughput; motion runs windows ahead of them in the gaps */
    bp_render.high_priority = true;
    bp_render.fp16 = p->precision == DITTO_PRECISION_FP16 || (p->precision == DITTO_PRECISION_AUTO && strcmp(bname, "cpu") != 0);
    if ((rc = ditto_backend_open(&m->be, bname, &bp_render)) < 0 || (rc = ditto_backend_open(&m->be_motion, bname, &bp)) < 0) {
        ditto_fail(&m->log, rc, "cannot open the %s backend%s: %s", bname, bp_render.fp16 ? " with float16 render networks" : "",
                   ditto_strerror(rc));
        goto fail;
    }
    if ((rc = ditto_backend_cpu_open(&m->be_post, &bp)) < 0)
        goto fail;
    /* whether NVENC opens, found beside the load instead of at the first render's writer */
    if (m->be->device == DITTO_DEVICE_CUDA)
        m->probing = pthread_create(&m->probe, NULL, probe_main, m) == 0;
    /*
     * On the CPU the network stages take turns (HuBERT and LMDM windows in
     * the motion worker, batches in the render worker): OpenBLAS threads
     * each GEMM over every core and serialises concurrent callers with
     * busy-waiting (measured on two cores: 2.5x the wall time, a fifth of
     * it in the kernel). Paste-back, colour conversion and encoding still
     * overlap with them. GPU stages run concurrently on their own streams.
     */
    m->serialize = m->be->device == DITTO_DEVICE_CPU;
    /*
     * Render lanes: on a backend with two streams a batch's warp and decoder
     * run as two half batches at once, which fills the GPU where one stream
     * leaves it idle (7 % more frames/s at B = 8 on the H200, docs/PERF.md).
     * DITTO_LANES=1 turns it off; DITTO_LANES=2 also splits on the CPU (in
     * turn: the tests check the frames do not change).
     */
    m->lanes = ditto_backend_lanes(m->be);

    const uint64_t s0 = p->synthetic_seed;
    double t = ditto_now(), t_nets, t_hub, t_reg;
    if ((rc = load_networks(m, w, s0)) < 0)
        goto fail;
    t_nets = ditto_now();

    char hub[4096];
    const char *hub_path = NULL;
    if (!m->synthetic) {
        if (!ditto_hubert_find(w, hub, sizeof hub) && !(p->aux && ditto_hubert_find(p->aux, hub, sizeof hub))) {
            rc = ditto_fail(&m->log, DITTO_ERR_NOENT, "%s: no aux_models/hubert_streaming_fix_kv.onnx (the HuBERT audio encoder)", w);
            goto fail;
        }
        hub_path = hub;
    }
    if ((rc = ditto_hubert_open(&m->hubert, m->be_motion, hub_path, s0 + SEED_HUBERT, &m->log)) < 0)
        goto fail;
    ditto_hubert_set_gate(m->hubert, gate_enter, gate_leave, m);
    t_hub = ditto_now();
    if ((rc = open_registrar(m, p)) < 0)
        goto fail;
    t_reg = ditto_now();
    if (m->be->device != DITTO_DEVICE_CPU && p->warmup_batch > 0 && (rc = models_warmup(m, p->warmup_batch)) < 0)
        goto fail;
    ditto_log(&m->log, DITTO_LOG_INFO, "models: render networks + LMDM %.2f s, HuBERT %.2f s, registration %.2f s, warm-up %.2f s", t_nets - t,
              t_hub - t_nets, t_reg - t_hub, ditto_now() - t_reg);
    join_probe(m);
    if (m->synthetic)
        ditto_log(&m->log, DITTO_LOG_WARN,
                  "SYNTHETIC WEIGHTS: every network (and the HuBERT encoder) is random; the video shows noise where the face would "
                  "be. For tests and demos only: point --weights at the official ditto_pytorch folder for real output.");
    *out = m;
    return 0;
fail:
    ditto_models_close(&m);
    return rc;
}

void ditto_models_close(DittoModels **pm)
{
    if (!pm || !*pm)
        return;
    DittoModels *m = *pm;
    join_probe(m);
    if (m->pinned)
        m->be->host_free(m->be, m->pinned);
    ditto_a2m_lmdm_close(&m->warm);
    ditto_registrar_close(&m->reg);
    ditto_hubert_close(&m->hubert);
    ditto_lmdm_free(&m->lmdm);
    ditto_stitch_free(&m->stitch);
    ditto_decoder_free(&m->decoder);
    ditto_warp_free(&m->warp);
    ditto_backend_close(&m->be_post);
    ditto_backend_close(&m->be_motion);
    ditto_backend_close(&m->be);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->compute);
    ditto_free(m);
    *pm = NULL;
}

bool ditto_models_synthetic(const DittoModels *m)
{
    return m && m->synthetic != 0;
}

const char *ditto_models_backend(const DittoModels *m)
{
    return m && m->be ? m->be->name : "none";
}

int ditto_models_mem(const DittoModels *m, DittoMemInfo *render, DittoMemInfo *motion)
{
    memset(render, 0, sizeof *render);
    memset(motion, 0, sizeof *motion);
    if (!m || !m->be || !m->be->mem_info)
        return DITTO_ERR_UNSUPPORTED;
    DITTO_TRY(m->be->mem_info(m->be, render));
    return m->be_motion->mem_info(m->be_motion, motion);
}

/* ---- session ---------------------------------------------------------------------- */

typedef struct RenderSlot {
    float *render;             /* (B, 512, 512, 3), for the host paste-back (not used with device_post) */
    int64_t g0;
    int n;
} RenderSlot;

typedef struct OutSlot {
    uint8_t *buf;              /* the allocation: [rgb] y u v */
    uint8_t *rgb;              /* H x W x 3, NULL when the GPU keeps it (yuv_only) */
    uint8_t *y, *u, *v;
    int64_t index;
} OutSlot;

struct DittoSession {
    DittoModels *m;
    DittoSessionParams p;
    DittoLogger log;
    DittoAvatar *av;
    bool is_image;
    int W, H, B;

    DittoConditions cond;
    DittoA2mLmdm *sampler;
    bool sampler_lent;         /* the model set's warm sampler: not ours to close */
    DittoA2mSampler lmdm;      /* the sampler, called through turn_sampler */
    DittoA2m *a2m;
    DittoAudioFeatures *af;
    DittoRenderer *rend;
    bool device_post;          /* paste-back and colour on the render backend: frames go straight to the out slots */
    DittoPutback *pb;          /* host paste-back (without device_post) */
    float *cond_rows;          /* (5, 1103): conditions of one HuBERT call */
    float *pcm_local;          /* PCM_PIECE samples handed to the motion worker */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int err;                   /* first error */
    bool abort;

    /* caller -> motion: PCM */
    float *pcm;
    int64_t pcm_len, pcm_cap, pcm_head, samples;
    bool audio_end;
    int64_t total;             /* frames of the clip; -1 until the end of the audio */

    /* motion -> render: one driving info per frame */
    DittoXInfo *mq;
    int64_t mq_cap, mq_head, mq_tail;
    bool mq_closed;

    /* render -> post */
    RenderSlot rs[RENDER_SLOTS];
    int64_t rs_head, rs_tail;
    bool rs_closed;

    /* post -> caller */
    OutSlot *os;
    int n_os;
    bool os_pooled;            /* the out slots are the model set's page-locked memory (else each its own malloc) */
    int64_t os_head, os_tail;
    bool os_closed, holding;
    /*
     * device_post: slots os_tail .. os_resv-1 are taken by copies from the
     * device still running; each batch's notification (published) moves
     * os_tail to its pub entry's tail when they are done.
     */
    int64_t os_resv;
    struct Published {
        DittoSession *s;
        int64_t tail;
    } pub[PUB_SLOTS];

    double t_open;
    double seconds[DITTO_STAGE_COUNT];
    double t_a2m, t_wait;      /* motion worker: inside a2m push, blocked on the queue */
    double t_motion0, t_batch0;   /* clock when the first motion frame / the first render batch was ready (0: not yet) */
    double t_push0, t_feat0, t_win0[2];   /* first audio pushed, first features, LMDM window 0 start / end (the first-frame log) */
    double t_ring[2], t_rb0;              /* the render worker's frame ring made (start / end), its first batch taken */
    double t_prep;                        /* the render worker's graphs recorded (ditto_renderer_prepare) */
    double t_ready, t_last;       /* clock when the setup finished / the last frame was handed out (0: not yet) */

    pthread_t th[3];
    bool started[3];
};

void ditto_session_params_default(DittoSessionParams *p)
{
    memset(p, 0, sizeof *p);
    p->steps = DITTO_DDIM_DEFAULT_STEPS;
    p->emo = DITTO_EMO_NEUTRAL;
    p->batch = 8;
    p->max_size = 1920;
}

/* Record the first error and stop every stage. Call with the mutex held. */
static void fail_locked(DittoSession *s, int rc)
{
    if (!s->err)
        s->err = rc < 0 ? rc : DITTO_ERR_BADSTATE;
    s->abort = true;
    pthread_cond_broadcast(&s->cv);
}

static void fail(DittoSession *s, int rc)
{
    pthread_mutex_lock(&s->mu);
    fail_locked(s, rc);
    pthread_mutex_unlock(&s->mu);
}

/* a2m emit: finished motion frames -> x_d_info -> the render queue (waits for room). */
static int on_motion(void *ctx, int64_t first, const float *motion, int64_t n)
{
    DittoSession *s = ctx;
    for (int64_t k = 0; k < n; k++) {
        double t = ditto_now();
        pthread_mutex_lock(&s->mu);
        while (!s->abort && s->mq_tail - s->mq_head >= s->mq_cap)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->abort) {
            pthread_mutex_unlock(&s->mu);
            return DITTO_ERR_BADSTATE;
        }
        DittoXInfo *slot = &s->mq[s->mq_tail % s->mq_cap];
        if (!s->t_motion0)
            s->t_motion0 = ditto_now();
        pthread_mutex_unlock(&s->mu);
        s->t_wait += ditto_now() - t;
        DITTO_ASSERT(first + k == s->mq_tail);
        ditto_a2m_cvt_fmt(s->a2m, motion + k * DITTO_MOTION_DIM, 1, slot);
        pthread_mutex_lock(&s->mu);
        s->mq_tail++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

/* One LMDM window, in the network stages' turn. */
static int turn_sampler(void *ctx, int64_t window, const float *kp_cond, const float *cond, float *pred)
{
    DittoSession *s = ctx;
    double t = ditto_now();
    compute_enter(s->m);
    s->t_wait += ditto_now() - t;
    if (window == 0)
        s->t_win0[0] = ditto_now();
    int rc = s->lmdm.fn(s->lmdm.ctx, window, kp_cond, cond, pred);
    if (window == 0)
        s->t_win0[1] = ditto_now();
    compute_leave(s->m);
    return rc;
}

/* audio features emit: HuBERT rows -> conditions -> LMDM windows. */
static int on_features(void *ctx, int64_t first, const float *feat, int64_t n)
{
    DittoSession *s = ctx;
    if (!s->t_feat0)
        s->t_feat0 = ditto_now();
    int rc = ditto_conditions_build(&s->cond, feat, n, first, s->cond_rows);
    if (rc < 0)
        return rc;
    double t = ditto_now();
    rc = ditto_a2m_push(s->a2m, s->cond_rows, n);
    s->t_a2m += ditto_now() - t;
    return rc;
}

static void *motion_main(void *arg)
{
    DittoSession *s = arg;
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->abort && s->pcm_head == s->pcm_len && !s->audio_end)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->abort) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        int64_t n = s->pcm_len - s->pcm_head;
        if (n > PCM_PIECE)
            n = PCM_PIECE;
        memcpy(s->pcm_local, s->pcm + s->pcm_head, (size_t)n * sizeof(float));
        s->pcm_head += n;
        bool end = s->audio_end && s->pcm_head == s->pcm_len;
        pthread_mutex_unlock(&s->mu);

        double t = ditto_now(), a2m0 = s->t_a2m, wait0 = s->t_wait, gate0 = s->m->gate_wait;
        if (n > 0)
            rc = ditto_audio_features_push(s->af, s->pcm_local, n);
        if (rc >= 0 && end)
            rc = ditto_audio_features_finish(s->af);
        if (rc >= 0 && end) {
            double t2 = ditto_now();
            rc = ditto_a2m_finish(s->a2m);
            s->t_a2m += ditto_now() - t2;
        }
        double a2m = s->t_a2m - a2m0, wait = s->t_wait - wait0, gate = s->m->gate_wait - gate0;
        pthread_mutex_lock(&s->mu);
        s->seconds[DITTO_STAGE_AUDIO] += ditto_now() - t - a2m - gate;
        s->seconds[DITTO_STAGE_MOTION] += a2m - wait;
        if (rc < 0) {
            fail_locked(s, rc);
        } else if (end) {
            s->mq_closed = true;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        if (rc < 0 || end)
            return NULL;
    }
}

/*
 * Log where the time to the first frame went, from the session's open (the
 * render worker, once, after setting t_batch0 and outside the lock: the
 * callback may take long). Every milestone is written once, before the
 * motion frames that the first batch took from the locked queue.
 */
static void log_first_frame(const DittoSession *s)
{
    const double o = s->t_open;
    ditto_log(&s->log, DITTO_LOG_INFO,
              "session: first frame at %.3f s: ready %.3f, audio pushed %.3f, first features %.3f, LMDM window 0 %.3f-%.3f, first motion %.3f, "
              "frame ring %.3f-%.3f, graphs recorded %.3f, first batch taken %.3f",
              s->t_batch0 - o, s->t_ready - o, s->t_push0 - o, s->t_feat0 - o, s->t_win0[0] - o, s->t_win0[1] - o, s->t_motion0 - o,
              s->t_ring[0] ? s->t_ring[0] - o : 0.0, s->t_ring[1] ? s->t_ring[1] - o : 0.0, s->t_prep - o, s->t_rb0 - o);
}

/* Fade controls of frame g (upstream setup_Nd): alpha rises over fade_in frames, falls over the last fade_out. */
static const DittoCtrl *fade_ctrl(const DittoSession *s, int64_t g, int64_t total, DittoCtrl *c)
{
    double alpha = -1;
    if (s->p.fade_in > 0 && g < s->p.fade_in)
        alpha = (double)g / s->p.fade_in;
    if (s->p.fade_out > 0 && total > 0) {
        int64_t ee = total - 1, ss = total - s->p.fade_out - 1;
        if (g >= ss && ee > ss) {
            double a = (double)(ee - g) / (double)(ee - ss);
            alpha = a > 0 ? a : 0;
        }
    }
    if (alpha < 0)
        return NULL;
    memset(c, 0, sizeof *c);
    c->has = DITTO_CTRL_FADE_ALPHA;
    c->fade_alpha = alpha;
    return c;
}

/*
 * The frame ring the caller pulls from. Frames fetched from the GPU go
 * faster into page-locked memory: the ring is carved from the model set's
 * (models_pinned), which the render worker grows, if it must, before its
 * first batch, overlapped with the first motion window.
 */
static int alloc_out_slots(DittoSession *s)
{
    const int64_t W = s->W, H = s->H, cw = ditto_yuv420_chroma_size(s->W), ch = ditto_yuv420_chroma_size(s->H);
    const bool pinned = s->device_post && s->m->be->host_alloc;
    /* the host paste-back writes the RGB frame first; from the device only what is fetched */
    const size_t rgb_bytes = s->device_post && s->p.yuv_only ? 0 : (size_t)(W * H * 3);
    const size_t fb = ring_slot_bytes(W, H, rgb_bytes > 0);
    if (pinned && models_pinned(s->m, fb * (size_t)s->n_os) < 0)
        return ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: out of page-locked memory for %d frames of %lldx%lld", s->n_os, (long long)W,
                          (long long)H);
    s->os_pooled = pinned;
    for (int i = 0; i < s->n_os; i++) {
        uint8_t *b = pinned ? s->m->pinned + fb * (size_t)i : ditto_malloc_aligned(fb);
        if (!b)
            return ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: out of memory for %d frames of %lldx%lld", s->n_os, (long long)W, (long long)H);
        s->os[i].buf = b;
        s->os[i].rgb = rgb_bytes ? b : NULL;
        s->os[i].y = b + rgb_bytes;
        s->os[i].u = s->os[i].y + W * H;
        s->os[i].v = s->os[i].u + cw * ch;
    }
    return 0;
}

/*
 * The frames of a batch reach the caller when their copies from the device
 * are done (ditto_renderer_fetch_notify: another thread, while the render
 * worker computes the next batch).
 */
static void published(void *arg)
{
    struct Published *p = arg;
    DittoSession *s = p->s;
    pthread_mutex_lock(&s->mu);
    if (p->tail > s->os_tail)
        s->os_tail = p->tail;
    if (!s->t_batch0)
        s->t_batch0 = ditto_now();
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* A batch's device stage times (ditto_renderer_run reports each once the batch is done) into the session's. */
static void add_render_times(DittoSession *s, const DittoRenderTimes *t)
{
    if (t->n && t->g0 == 0) {
        char post[64] = "";
        if (s->device_post)
            snprintf(post, sizeof post, ", paste-back and colour (one pass) %.3f s", t->putback);
        ditto_log(&s->log, DITTO_LOG_INFO, "render: first batch of %d: stitch %.3f s, warp %.3f s, decode %.3f s%s", t->n, t->stitch, t->warp,
                  t->decode, post);
    }
    pthread_mutex_lock(&s->mu);
    s->seconds[DITTO_STAGE_STITCH] += t->stitch;
    s->seconds[DITTO_STAGE_WARP] += t->warp;
    s->seconds[DITTO_STAGE_DECODE] += t->decode;
    s->seconds[DITTO_STAGE_PUTBACK] += t->putback;
    s->seconds[DITTO_STAGE_COLOR] += t->color;
    pthread_mutex_unlock(&s->mu);
}

static void *render_main(void *arg)
{
    DittoSession *s = arg;
    DittoXInfo *xd = ditto_calloc((size_t)s->B, sizeof *xd);
    DittoCtrl *ctrl = ditto_calloc((size_t)s->B, sizeof *ctrl);
    const DittoCtrl **cp = ditto_calloc((size_t)s->B, sizeof *cp);
    int64_t g = 0;
    int rc = (xd && ctrl && cp) ? 0 : DITTO_ERR_NOMEM;
    if (rc < 0)
        fail(s, ditto_fail(&s->log, rc, "render: out of memory"));
    else if (s->device_post) {
        s->t_ring[0] = ditto_now();
        if ((rc = alloc_out_slots(s)) < 0)
            fail(s, rc);
        s->t_ring[1] = ditto_now();
    }
    /* the batch graphs, recorded while the first motion window is computed */
    if (rc >= 0 && (rc = ditto_renderer_prepare(s->rend)) < 0)
        fail(s, ditto_fail(&s->log, rc, "render: capturing the batch graphs: %s", ditto_strerror(rc)));
    s->t_prep = ditto_now();
    double wait_motion = 0, wait_out = 0;   /* seconds blocked on the motion queue, on room for finished frames */
    bool first_logged = false;
    int64_t batches = 0;
    while (rc >= 0) {
        pthread_mutex_lock(&s->mu);
        const double w0 = ditto_now();
        const bool starved = s->mq_tail - s->mq_head < s->B && !s->mq_closed;
        while (!s->abort && ((!s->device_post && s->rs_tail - s->rs_head >= RENDER_SLOTS) ||
                             (s->mq_tail - s->mq_head < s->B && !s->mq_closed)))
            pthread_cond_wait(&s->cv, &s->mu);
        *(starved ? &wait_motion : &wait_out) += ditto_now() - w0;
        if (s->abort) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        int64_t avail = s->mq_tail - s->mq_head;
        int n = (int)(avail < s->B ? avail : s->B);
        if (n == 0) {   /* closed and drained: once the last frames are out of the device, the post worker closes the ring */
            pthread_mutex_unlock(&s->mu);
            DittoRenderTimes t = { 0 };
            if ((rc = ditto_renderer_flush(s->rend, &t)) >= 0) {
                add_render_times(s, &t);
                if (s->device_post)
                    rc = ditto_renderer_fetch_wait(s->rend);
            }
            if (rc < 0) {
                fail(s, rc);
                break;
            }
            pthread_mutex_lock(&s->mu);
            s->rs_closed = true;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        for (int k = 0; k < n; k++)
            xd[k] = s->mq[(s->mq_head + k) % s->mq_cap];
        s->mq_head += n;
        if (!s->t_rb0)
            s->t_rb0 = ditto_now();
        int64_t total = s->total;
        RenderSlot *slot = &s->rs[s->rs_tail % RENDER_SLOTS];
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);

        bool any = false, first = false;
        for (int k = 0; k < n; k++)
            any |= (cp[k] = fade_ctrl(s, g + k, total, &ctrl[k])) != NULL;
        DittoRenderTimes t = { 0 };
        compute_enter(s->m);
        rc = ditto_renderer_run(s->rend, g, n, xd, any ? cp : NULL, s->device_post ? NULL : slot->render, &t);
        compute_leave(s->m);

        if (rc >= 0 && s->device_post) {
            /*
             * Finished frames straight from the device into the caller's ring
             * (no render slot, no copy): a slot per frame is taken, its copy
             * queued, and published() hands the batch over once the copies are
             * done, while the next batch is computed. The renderer's next
             * paste-back waits for them (fence) before it overwrites its frames.
             */
            for (int k = 0; k < n && rc >= 0; k++) {
                pthread_mutex_lock(&s->mu);
                const double w1 = ditto_now();
                while (!s->abort && s->os_resv - s->os_head >= s->n_os)
                    pthread_cond_wait(&s->cv, &s->mu);
                wait_out += ditto_now() - w1;
                if (s->abort) {
                    pthread_mutex_unlock(&s->mu);
                    rc = DITTO_ERR_BADSTATE;
                    break;
                }
                OutSlot *o = &s->os[s->os_resv % s->n_os];
                o->index = g + k;
                s->os_resv++;
                pthread_mutex_unlock(&s->mu);
                double t0 = ditto_now();
                rc = ditto_renderer_fetch(s->rend, k, o->rgb, o->y);
                t.color += ditto_now() - t0;
            }
            if (rc >= 0) {
                /* pub[] entries: a batch's notification has run before the next batch's paste-back (the fence waits for it) */
                struct Published *p = &s->pub[batches % PUB_SLOTS];
                p->s = s;
                p->tail = s->os_resv;
                rc = ditto_renderer_fetch_notify(s->rend, published, p);
            }
            if (rc == DITTO_ERR_BADSTATE)   /* aborted while waiting: another stage's error, or close */
                break;
        }
        if (rc >= 0)
            add_render_times(s, &t);
        pthread_mutex_lock(&s->mu);
        if (rc < 0) {
            fail_locked(s, rc);
        } else if (!s->device_post) {
            slot->g0 = g;
            slot->n = n;
            if (!s->t_batch0) {
                s->t_batch0 = ditto_now();
                first = true;
            }
            s->rs_tail++;
            pthread_cond_broadcast(&s->cv);
        }
        if (s->device_post && !first_logged && s->t_batch0)   /* published() set it: log once, here */
            first = first_logged = true;
        pthread_mutex_unlock(&s->mu);
        g += n;
        batches++;
        if (first)
            log_first_frame(s);
    }
    /* no notification may run after the worker is gone (the session is freed after the join) */
    if (s->device_post) {
        int rw = ditto_renderer_fetch_wait(s->rend);
        if (rw < 0 && rc >= 0)
            fail(s, rc = rw);
        pthread_mutex_lock(&s->mu);
        const bool log_first = !first_logged && s->t_batch0 && !s->abort;
        pthread_mutex_unlock(&s->mu);
        if (log_first)   /* a clip of one batch */
            log_first_frame(s);
    }
    /* what held the render loop up: the first wait for motion includes the first window */
    if (rc >= 0 && g > 0)
        ditto_log(&s->log, DITTO_LOG_INFO, "render: %lld frames; waited %.3f s for motion, %.3f s for room for finished frames (the consumer)",
                  (long long)g, wait_motion, wait_out);
    ditto_free(xd);
    ditto_free(ctrl);
    ditto_free(cp);
    return NULL;
}

static void *post_main(void *arg)
{
    DittoSession *s = arg;
    const DittoAvatar *av = s->av;
    const int64_t W = s->W, H = s->H, side = DITTO_RENDER_SIDE;
    DittoBackend *cpu = s->m->be_post;
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->abort && s->rs_head == s->rs_tail && !s->rs_closed)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->abort || s->rs_head == s->rs_tail) {
            if (!s->abort) {
                s->os_closed = true;
                pthread_cond_broadcast(&s->cv);
            }
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        RenderSlot *slot = &s->rs[s->rs_head % RENDER_SLOTS];
        pthread_mutex_unlock(&s->mu);

        for (int k = 0; k < slot->n && rc >= 0; k++) {
            pthread_mutex_lock(&s->mu);
            while (!s->abort && s->os_tail - s->os_head >= s->n_os)
                pthread_cond_wait(&s->cv, &s->mu);
            if (s->abort) {
                pthread_mutex_unlock(&s->mu);
                return NULL;
            }
            OutSlot *o = &s->os[s->os_tail % s->n_os];
            pthread_mutex_unlock(&s->mu);

            int64_t g = slot->g0 + k, src = ditto_mirror_index(g, av->n_frames);
            double t0 = ditto_now();
            DittoTensor frame = ditto_tensor(av->img_rgb + src * H * W * 3, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
            DittoTensor render = ditto_tensor_f32(slot->render + (int64_t)k * side * side * 3, 3, (const int64_t[]){ side, side, 3 });
            DittoTensor outt = ditto_tensor(o->rgb, DITTO_U8, 3, (const int64_t[]){ H, W, 3 });
            rc = ditto_putback_run(s->pb, &frame, &render, av->m_c2o + src * 9, &outt, NULL);
            double t1 = ditto_now();
            if (rc >= 0) {
                DittoYuvPlanes yuv = { o->y, o->u, o->v, W, ditto_yuv420_chroma_size((int)W) };
                rc = ditto_rgb_to_yuv420(cpu->pool, o->rgb, (int)W, (int)H, W * 3, &yuv);
            }
            double t2 = ditto_now();
            pthread_mutex_lock(&s->mu);
            s->seconds[DITTO_STAGE_PUTBACK] += t1 - t0;
            s->seconds[DITTO_STAGE_COLOR] += t2 - t1;
            if (rc < 0) {
                fail_locked(s, rc);
            } else {
                o->index = g;
                s->os_tail++;
                pthread_cond_broadcast(&s->cv);
            }
            pthread_mutex_unlock(&s->mu);
        }
        if (rc < 0)
            return NULL;
        pthread_mutex_lock(&s->mu);
        s->rs_head++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* An image, a video or a .avatar file -> the registered avatar. */
static int load_avatar(DittoSession *s, const char *path)
{
    uint8_t head[8] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return ditto_fail(&s->log, DITTO_ERR_NOENT, "%s: cannot open the avatar: %s", path, strerror(errno));
    size_t nh = fread(head, 1, sizeof head, f);
    fclose(f);
    int rc;
    if (nh == sizeof head && !memcmp(head, DITTO_AVATAR_MAGIC, sizeof head)) {
        rc = ditto_avatar_read(&s->av, path, &s->log);
        if (rc >= 0) {
            const DittoKV *syn = ditto_avatar_kv_get(s->av, "synthetic");
            if (syn && syn->type == DITTO_KV_INT && syn->i && !s->m->synthetic)
                ditto_log(&s->log, DITTO_LOG_WARN, "%s was baked with synthetic networks: it is not a real registration", path);
        }
    } else {
        DittoRegisterParams rp;
        ditto_register_params_default(&rp);
        rp.max_size = s->p.max_size;
        rc = ditto_registrar_run_file(s->m->reg, &rp, path, &s->av);
    }
    if (rc < 0)
        return rc;
    const DittoKV *type = ditto_avatar_kv_get(s->av, "source.type");
    s->is_image = type && type->type == DITTO_KV_STRING ? !strcmp(type->s, "image") : s->av->n_frames == 1;
    if (s->av->n_frames < 1 || s->av->width < 2 || s->av->height < 2 || (s->av->width & 1) || (s->av->height & 1))
        return ditto_fail(&s->log, DITTO_ERR_FORMAT, "%s: the avatar frames are %dx%d; even sizes of at least 2 are needed", path,
                          s->av->width, s->av->height);
    return 0;
}

static int session_setup(DittoSession *s)
{
    DittoModels *m = s->m;
    const DittoSessionParams *p = &s->p;
    int rc;
    double t = ditto_now();
    if ((rc = load_avatar(s, p->avatar)) < 0)
        return rc;
    s->seconds[DITTO_STAGE_AVATAR] = ditto_now() - t;
    const DittoAvatar *av = s->av;
    s->W = av->width;
    s->H = av->height;

    /* conditions: emotion, eye state per source frame, sc */
    DittoConditionsParams cp;
    memset(&cp, 0, sizeof cp);
    ditto_emo_default(&cp.emo);
    cp.emo.label = p->emo;
    cp.eye_open = av->eye_open;
    cp.eye_ball = av->eye_ball;
    cp.n_src = av->n_frames;
    cp.sc = av->sc;
    if ((rc = ditto_conditions_init(&s->cond, &cp, &s->log)) < 0)
        return rc;

    /* LMDM windows: kp_cond of window 0 = the (smoothed) source frame-0 motion */
    float s_kp_cond[DITTO_MOTION_DIM];
    if ((rc = ditto_xinfo_to_motion(&av->x_s_info[0], 1, s_kp_cond)) < 0)
        return ditto_fail(&s->log, rc, "avatar: frame 0 has no motion in the LMDM layout");
    DittoA2mLmdmParams lp;
    ditto_a2m_lmdm_params_default(&lp);
    lp.steps = p->steps;
    lp.seed = p->seed;
    if (m->warm && ditto_a2m_lmdm_steps(m->warm) == p->steps) {
        s->sampler = m->warm;   /* warm, graph captured; the model set serves one session at a time */
        s->sampler_lent = true;
        ditto_a2m_lmdm_set_seed(s->sampler, p->seed);
    } else if ((rc = ditto_a2m_lmdm_open(&s->sampler, m->lmdm, &lp)) < 0) {
        return ditto_fail(&s->log, rc, "LMDM sampler: %s", ditto_strerror(rc));
    }
    DittoA2mParams ap;
    ditto_a2m_params_default(&ap);
    DittoA2mEmit emit = { on_motion, s };
    s->lmdm = ditto_a2m_lmdm_sampler(s->sampler);
    DittoA2mSampler turn = s->lmdm;
    turn.fn = turn_sampler;
    turn.ctx = s;
    if ((rc = ditto_a2m_open(&s->a2m, &ap, s_kp_cond, turn, emit, &s->log)) < 0)
        return rc;
    if ((rc = ditto_audio_features_open(&s->af, m->hubert, false, on_features, s, &s->log)) < 0)
        return rc;

    /*
     * On a GPU the paste-back and the colour conversion run there too (exact:
     * the same arithmetic as on the CPU, core/bt601.h), and full batches are
     * replayed as CUDA graphs. DITTO_POST=host and DITTO_GRAPHS=0 turn them
     * off, to compare frames or time the alternatives; DITTO_POST=device
     * takes that path on the CPU backend too (the tests compare the two).
     */
    const char *post_env = getenv("DITTO_POST"), *graphs_env = getenv("DITTO_GRAPHS");
    s->device_post = post_env && !strcmp(post_env, "device") ? true
                   : post_env && !strcmp(post_env, "host")   ? false
                                                             : m->be->device != DITTO_DEVICE_CPU;
    DittoRendererConfig rc_cfg = {
        .be = m->be, .warp = m->warp, .decoder = m->decoder, .stitch = m->stitch, .avatar = av, .is_image = s->is_image,
        .batch = s->B, .fade_type = (p->fade_in > 0 || p->fade_out > 0) ? DITTO_FADE_S : DITTO_FADE_NONE,
        .device_post = s->device_post, .yuv_only = s->p.yuv_only, .graphs = !(graphs_env && !strcmp(graphs_env, "0")), .log = s->log,
        .arena_bytes = m->warm_batch == s->B ? m->warm_arena : 0, .lanes = m->lanes,
    };
    const double t_rend = ditto_now();
    if ((rc = ditto_renderer_open(&s->rend, &rc_cfg)) < 0)
        return rc;
    const double t_bufs = ditto_now();
    if (!s->device_post && (rc = ditto_putback_open(&s->pb, m->be_post, s->W, s->H, &s->log)) < 0)
        return rc;

    /* queues */
    const int64_t side = DITTO_RENDER_SIDE;
    s->mq_cap = 2 * DITTO_A2M_SEQ_FRAMES + 2 * s->B;
    s->n_os = ring_slots(s->B, s->device_post);
    s->mq = ditto_calloc((size_t)s->mq_cap, sizeof *s->mq);
    s->os = ditto_calloc((size_t)s->n_os, sizeof *s->os);
    s->cond_rows = ditto_malloc((size_t)DITTO_HUBERT_FRAMES * DITTO_COND_DIM * sizeof(float));
    s->pcm_local = ditto_malloc((size_t)PCM_PIECE * sizeof(float));
    if (!s->mq || !s->os || !s->cond_rows || !s->pcm_local)
        return ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: out of memory");
    for (int i = 0; i < RENDER_SLOTS && !s->device_post; i++)
        if (!(s->rs[i].render = ditto_malloc_aligned((size_t)(s->B * side * side * 3) * sizeof(float))))
            return ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: out of memory for %d renders of %lldx%lld", s->B, (long long)side,
                              (long long)side);
    /* a GPU session's page-locked frame ring is made by the render worker, while the first motion is computed */
    if (!s->device_post && (rc = alloc_out_slots(s)) < 0)
        return rc;
    ditto_log(&s->log, DITTO_LOG_INFO, "session: avatar %.3f s, motion stages %.3f s, renderer %.3f s, frame buffers %.3f s",
              s->seconds[DITTO_STAGE_AVATAR], t_rend - t - s->seconds[DITTO_STAGE_AVATAR], t_bufs - t_rend, ditto_now() - t_bufs);
    return 0;
}

int ditto_session_open(DittoSession **out, DittoModels *m, const DittoSessionParams *p)
{
    if (!out || !m || !p)
        return DITTO_ERR_INVAL;
    *out = NULL;
    const DittoLogger *lg = &p->log;
    if (!p->avatar || !p->avatar[0])
        return ditto_fail(lg, DITTO_ERR_INVAL, "no avatar given");
    if (p->batch < 1 || p->batch > 256)
        return ditto_fail(lg, DITTO_ERR_RANGE, "batch %d out of range (1..256)", p->batch);
    if (p->steps < 1 || p->steps > DITTO_DDIM_MAX_STEPS)
        return ditto_fail(lg, DITTO_ERR_RANGE, "DDIM steps %d out of range (1..%d)", p->steps, DITTO_DDIM_MAX_STEPS);
    if (p->emo < 0 || p->emo >= DITTO_EMO_DIM)
        return ditto_fail(lg, DITTO_ERR_RANGE, "emotion %d out of range (0..7)", p->emo);
    if (p->max_size < 2 || p->fade_in < 0 || p->fade_out < 0)
        return ditto_fail(lg, DITTO_ERR_RANGE, "max_size must be >= 2 and the fades >= 0");
    pthread_mutex_lock(&m->mu);
    bool busy = m->busy;
    m->busy = true;
    pthread_mutex_unlock(&m->mu);
    if (busy)
        return ditto_fail(lg, DITTO_ERR_AGAIN, "the model set already serves a session");

    DittoSession *s = ditto_calloc(1, sizeof *s);
    if (!s) {
        pthread_mutex_lock(&m->mu);
        m->busy = false;
        pthread_mutex_unlock(&m->mu);
        return ditto_fail(lg, DITTO_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    s->p = *p;
    s->log = p->log;
    s->B = p->batch;
    s->total = -1;
    s->t_open = ditto_now();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = session_setup(s);
    s->t_ready = ditto_now();
    void *(*mains[3])(void *) = { motion_main, render_main, post_main };
    for (int i = 0; i < 3 && rc >= 0; i++) {
        if (pthread_create(&s->th[i], NULL, mains[i], s)) {
            rc = ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: cannot start a worker thread");
            break;
        }
        s->started[i] = true;
    }
    if (rc < 0) {
        ditto_session_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void ditto_session_close(DittoSession **ps)
{
    if (!ps || !*ps)
        return;
    DittoSession *s = *ps;
    pthread_mutex_lock(&s->mu);
    s->abort = true;   /* no error: just stop */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < 3; i++)
        if (s->started[i])
            pthread_join(s->th[i], NULL);
    ditto_audio_features_close(&s->af);
    ditto_a2m_close(&s->a2m);
    if (!s->sampler_lent)
        ditto_a2m_lmdm_close(&s->sampler);
    ditto_renderer_close(&s->rend);
    ditto_putback_close(&s->pb);
    ditto_conditions_free(&s->cond);
    ditto_avatar_free(&s->av);
    for (int i = 0; i < RENDER_SLOTS; i++)
        ditto_free_aligned(s->rs[i].render);
    for (int i = 0; s->os && i < s->n_os; i++) {
        if (!s->os_pooled)
            ditto_free_aligned(s->os[i].buf);
    }
    ditto_free(s->os);
    ditto_free(s->mq);
    ditto_free(s->pcm);
    ditto_free(s->pcm_local);
    ditto_free(s->cond_rows);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_lock(&s->m->mu);
    s->m->busy = false;
    pthread_mutex_unlock(&s->m->mu);
    ditto_free(s);
    *ps = NULL;
}

int ditto_session_push_audio(DittoSession *s, const float *pcm, int64_t n)
{
    if (!s || n < 0 || (n > 0 && !pcm))
        return DITTO_ERR_INVAL;
    pthread_mutex_lock(&s->mu);
    int rc = s->err;
    if (!rc && s->audio_end)
        rc = DITTO_ERR_AGAIN;
    if (!rc && n > 0) {
        /* drop what the motion worker consumed, then grow */
        if (s->pcm_head > 0 && (s->pcm_head >= s->pcm_len / 2 || s->pcm_len + n > s->pcm_cap)) {
            memmove(s->pcm, s->pcm + s->pcm_head, (size_t)(s->pcm_len - s->pcm_head) * sizeof(float));
            s->pcm_len -= s->pcm_head;
            s->pcm_head = 0;
        }
        if (s->pcm_len + n > s->pcm_cap) {
            int64_t cap = s->pcm_cap ? s->pcm_cap : 4 * PCM_PIECE;
            while (cap < s->pcm_len + n)
                cap *= 2;
            float *b = ditto_realloc(s->pcm, (size_t)cap * sizeof(float));
            if (!b) {
                rc = ditto_fail(&s->log, DITTO_ERR_NOMEM, "session: out of memory for %lld audio samples", (long long)(s->pcm_len + n));
                fail_locked(s, rc);
            } else {
                s->pcm = b;
                s->pcm_cap = cap;
            }
        }
        if (!rc) {
            if (!s->t_push0)
                s->t_push0 = ditto_now();
            memcpy(s->pcm + s->pcm_len, pcm, (size_t)n * sizeof(float));
            s->pcm_len += n;
            s->samples += n;
            pthread_cond_broadcast(&s->cv);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ditto_session_end_audio(DittoSession *s)
{
    if (!s)
        return DITTO_ERR_INVAL;
    pthread_mutex_lock(&s->mu);
    int rc = s->err;
    if (!rc && s->audio_end)
        rc = DITTO_ERR_AGAIN;
    if (!rc && s->samples == 0) {
        rc = ditto_fail(&s->log, DITTO_ERR_INVAL, "the audio is empty (0 samples): nothing to render");
        fail_locked(s, rc);
    }
    if (!rc) {
        s->audio_end = true;
        s->total = ditto_audio_num_frames(s->samples);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ditto_session_pull_frame(DittoSession *s, DittoFrame *f)
{
    if (!s || !f)
        return DITTO_ERR_INVAL;
    pthread_mutex_lock(&s->mu);
    if (s->holding) {
        s->holding = false;
        s->os_head++;
        pthread_cond_broadcast(&s->cv);
    }
    while (!s->abort && s->os_head == s->os_tail && !s->os_closed)
        pthread_cond_wait(&s->cv, &s->mu);
    int rc;
    if (s->err || s->abort) {
        rc = s->err ? s->err : DITTO_ERR_BADSTATE;
    } else if (s->os_head == s->os_tail) {
        rc = 0;
    } else {
        const OutSlot *o = &s->os[s->os_head % s->n_os];
        s->holding = true;
        f->index = o->index;
        if (s->total > 0 && o->index == s->total - 1)
            s->t_last = ditto_now();
        f->width = s->W;
        f->height = s->H;
        f->y = o->y;
        f->u = o->u;
        f->v = o->v;
        f->y_stride = s->W;
        f->uv_stride = ditto_yuv420_chroma_size(s->W);
        f->rgb = s->p.yuv_only ? NULL : o->rgb;
        f->rgb_stride = (ptrdiff_t)s->W * 3;
        rc = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void ditto_session_stats(const DittoSession *s, DittoStats *st)
{
    memset(st, 0, sizeof *st);
    if (!s)
        return;
    DittoSession *w = (DittoSession *)s;   /* the mutex only */
    pthread_mutex_lock(&w->mu);
    memcpy(st->seconds, s->seconds, sizeof st->seconds);
    st->frames = s->os_tail;
    st->total = s->total;
    st->wall = ditto_now() - s->t_open;
    st->width = s->W;
    st->height = s->H;
    st->batch = s->B;
    st->t_ready = s->t_ready ? s->t_ready - s->t_open : 0;
    st->t_first_frame = s->t_batch0 ? s->t_batch0 - s->t_open : 0;
    st->t_last_frame = s->t_last ? s->t_last - s->t_open : 0;
    pthread_mutex_unlock(&w->mu);
}

void ditto_session_milestones(const DittoSession *s, double *motion0, double *batch0)
{
    DittoSession *w = (DittoSession *)s;   /* the mutex only */
    pthread_mutex_lock(&w->mu);
    *motion0 = s->t_motion0;
    *batch0 = s->t_batch0;
    pthread_mutex_unlock(&w->mu);
}

/* ---- helpers ------------------------------------------------------------------------ */

int ditto_audio_decode(const char *path, float **pcm, int64_t *n, const DittoLogger *log)
{
    if (!path || !pcm || !n)
        return DITTO_ERR_INVAL;
    *pcm = NULL;
    *n = 0;
    DittoPcm a;
    int rc = ditto_audio_load(path, DITTO_SAMPLE_RATE, &a, log);
    if (rc < 0)
        return rc;
    *pcm = a.samples;
    *n = a.n;
    return 0;
}

void ditto_pcm_release(float *pcm)
{
    DittoPcm a = { .samples = pcm };
    ditto_pcm_free(&a);
}

int ditto_frame_sha256(const DittoFrame *f, char hex[65])
{
    if (!f || !hex || !f->y || !f->u || !f->v || f->width < 1 || f->height < 1)
        return DITTO_ERR_INVAL;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return DITTO_ERR_NOMEM;
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    const int cw = ditto_yuv420_chroma_size(f->width), ch = ditto_yuv420_chroma_size(f->height);
    for (int y = 0; ok && y < f->height; y++)
        ok = EVP_DigestUpdate(ctx, f->y + y * f->y_stride, (size_t)f->width);
    for (int y = 0; ok && y < ch; y++)
        ok = EVP_DigestUpdate(ctx, f->u + y * f->uv_stride, (size_t)cw);
    for (int y = 0; ok && y < ch; y++)
        ok = EVP_DigestUpdate(ctx, f->v + y * f->uv_stride, (size_t)cw);
    unsigned char md[32];
    unsigned int len = 0;
    if (ok)
        ok = EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    if (!ok || len != 32)
        return DITTO_ERR_BADSTATE;
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* ---- one-call render ------------------------------------------------------------- */

void ditto_render_params_default(DittoRenderParams *p)
{
    memset(p, 0, sizeof *p);
    ditto_session_params_default(&p->session);
    p->crf = 18;
}

/*
 * The audio decodes on its own thread while the session registers the
 * avatar. Its messages wait in a small buffer and are logged after the join,
 * so one failure still gives one error line.
 */
#define AUDIO_JOB_MSGS 4
typedef struct AudioJob {
    const char *path;
    DittoLogger log;          /* the buffer's */
    float *pcm;
    int64_t n;
    int rc;
    double secs, done;        /* decode time; ditto_now() when it finished */
    int nmsg;
    DittoLogLevel level[AUDIO_JOB_MSGS];
    char msg[AUDIO_JOB_MSGS][256];
} AudioJob;

static void audio_job_log(void *cookie, DittoLogLevel level, const char *msg)
{
    AudioJob *j = cookie;
    if (j->nmsg < AUDIO_JOB_MSGS) {
        j->level[j->nmsg] = level;
        snprintf(j->msg[j->nmsg++], sizeof j->msg[0], "%s", msg);
    }
}

static void *audio_job_main(void *arg)
{
    AudioJob *j = arg;
    const double t = ditto_now();
    j->rc = ditto_audio_decode(j->path, &j->pcm, &j->n, &j->log);
    j->done = ditto_now();
    j->secs = j->done - t;
    return NULL;
}

/* Replay the job's messages into lg (after the join: one thread logs). */
static void audio_job_flush(const AudioJob *j, const DittoLogger *lg)
{
    for (int i = 0; i < j->nmsg; i++)
        if (lg->cb && j->level[i] <= lg->level)
            lg->cb(lg->cookie, j->level[i], j->msg[i]);
}

int ditto_render_file(DittoModels *m, const DittoRenderParams *p, DittoStats *stats)
{
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!m || !p)
        return DITTO_ERR_INVAL;
    const DittoLogger *lg = &p->log;
    if (!p->audio || !p->output)
        return ditto_fail(lg, DITTO_ERR_INVAL, "render: the audio and the output file are required");
    const double t0 = ditto_now();
    AudioJob aj;
    memset(&aj, 0, sizeof aj);
    aj.path = p->audio;
    aj.log = (DittoLogger){ audio_job_log, &aj, lg->level };
    pthread_t ath;
    const bool threaded = pthread_create(&ath, NULL, audio_job_main, &aj) == 0;
    if (!threaded)
        audio_job_main(&aj);

    DittoSessionParams sp = p->session;
    sp.yuv_only = true;   /* the encoder takes the planes */
    if (!sp.log.cb)
        sp.log = p->log;
    DittoSession *s = NULL;
    DittoVideoWriter *w = NULL;
    double t_encode = 0;
    const double t_sess = ditto_now();
    int rc = ditto_session_open(&s, m, &sp);
    if (threaded)
        pthread_join(ath, NULL);
    float *pcm = aj.pcm;
    const int64_t n = aj.n;
    if (rc >= 0) {
        /* the session's error, if any, is the one reported */
        audio_job_flush(&aj, lg);
        rc = aj.rc;
        if (rc >= 0 && n <= 0)
            rc = ditto_fail(lg, DITTO_ERR_FORMAT, "%s: the audio is empty (0 samples): nothing to render", p->audio);
    }
    /* motion starts on the pushed audio while the output opens */
    if (rc >= 0)
        rc = ditto_session_push_audio(s, pcm, n);
    ditto_pcm_release(pcm);
    if (rc >= 0)
        rc = ditto_session_end_audio(s);
    if (rc >= 0) {
        /* a bad output folder still fails at once: nothing heavy has finished yet */
        DittoVideoWriterParams wp;
        ditto_video_writer_params_default(&wp);
        wp.fps = DITTO_FPS;
        wp.encoder = p->encoder;
        wp.crf = p->crf;
        wp.bitrate = p->bitrate;
        wp.preset = p->preset;
        wp.x264_fast = m->be->device != DITTO_DEVICE_CPU;
        wp.cuda_device = models_cuda_device(m);
        wp.audio_path = p->audio;
        wp.log = p->log;
        DittoStats st;
        ditto_session_stats(s, &st);
        rc = ditto_video_writer_open(&w, p->output, st.width, st.height, &wp);
    }
    int64_t total = ditto_audio_num_frames(n), done = 0;
    double t_pull = 0;   /* waiting for finished frames */
    while (rc >= 0) {
        DittoFrame f;
        const double tp = ditto_now();
        rc = ditto_session_pull_frame(s, &f);
        t_pull += ditto_now() - tp;
        if (rc <= 0)
            break;
        if (p->on_frame && (rc = p->on_frame(p->cookie, &f)) < 0)
            break;
        double te = ditto_now();
        DittoYuvPlanes yuv = { (uint8_t *)(uintptr_t)f.y, (uint8_t *)(uintptr_t)f.u, (uint8_t *)(uintptr_t)f.v, f.y_stride, f.uv_stride };
        rc = ditto_video_writer_write(w, &yuv);
        t_encode += ditto_now() - te;
        done++;
        if (p->progress && rc >= 0) {
            DittoProgress pr = { done, total, ditto_now() - t0 };
            p->progress(p->cookie, &pr);
        }
    }
    if (rc >= 0 && done != total)
        rc = ditto_fail(lg, DITTO_ERR_BADSTATE, "render: %lld frames produced, %lld expected", (long long)done, (long long)total);
    if (rc >= 0)
        ditto_log(lg, DITTO_LOG_INFO, "render: the encoding thread waited %.3f s for finished frames and spent %.3f s in the writer", t_pull,
                  t_encode);
    if (rc >= 0) {
        double te = ditto_now();
        rc = ditto_video_writer_finish(w);
        t_encode += ditto_now() - te;
    }
    ditto_video_writer_close(&w);
    if (stats && s) {
        ditto_session_stats(s, stats);
        /* milestones since the call began, not since the session opened */
        const double off = t_sess - t0;
        double *ms[3] = { &stats->t_ready, &stats->t_first_frame, &stats->t_last_frame };
        for (int i = 0; i < 3; i++)
            if (*ms[i] > 0)
                *ms[i] += off;
        stats->t_audio = aj.done - t0;
        stats->t_closed = rc >= 0 ? ditto_now() - t0 : 0;
        stats->seconds[DITTO_STAGE_AUDIO] += aj.secs;
        stats->seconds[DITTO_STAGE_ENCODE] += t_encode;
        stats->frames = done;
        stats->total = total;
        stats->wall = ditto_now() - t0;
    }
    ditto_session_close(&s);
    return rc < 0 ? rc : 0;
}
