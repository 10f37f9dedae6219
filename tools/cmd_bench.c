/*
 * ditto bench: times the per-frame render path (stitch -> warp -> decode) at
 * the official network sizes with synthetic weights (no checkpoint needed),
 * for several batch sizes, on the CPU or the GPU. Prints a table and,
 * with --json, writes the numbers as JSON. With --fp16 (cuda) the warp and
 * decoder networks store activations and weights in float16; f_s, the warp
 * output and the image are then float16 too, keypoints stay float32.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/profile.h"
#include "core/log.h"
#include "core/rng.h"
#include "models/models.h"
#include "pipeline/putback.h"
#include "nn/weights.h"
#include "tools/cli.h"
#include "weights/synthetic.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto bench [OPTIONS]\n\n"
            "Times the per-frame render networks (stitching, warp, decoder) at their\n"
            "official sizes with synthetic random weights; no checkpoint is needed.\n"
            "As a session does, each batch is queued before the host waits for the one\n"
            "before it; the stage columns are device times, the total is wall time.\n\n"
            "options:\n"
            "  --backend NAME   cpu or cuda (default cpu)\n"
            "  --batch LIST     comma-separated batch sizes (default 1; e.g. 1,4,8,16)\n"
            "  --iters N        timed iterations per batch size (default 2 on cpu, 20 on cuda)\n"
            "  --warmup N       untimed iterations first (default 1)\n"
            "  --threads N      CPU threads (default: all cores)\n"
            "  --fp16           cuda: float16 activations and weights (fp32 math inside each op)\n"
            "  --small          use the small synthetic configuration (quick smoke run)\n"
            "  --json FILE      also write the results as JSON to FILE\n"
            "  --loop           also time the output path after the decoder: paste-back into\n"
            "                   a 1432x1432 frame and yuv420p in one pass, planes to the\n"
            "                   host (the full render loop of an image avatar; as in a\n"
            "                   session, a batch's planes are copied while the next batch\n"
            "                   is computed)\n"
            "  --graph          cuda: capture each stage once as a CUDA graph after the\n"
            "                   warm-up and time graph replays (no per-op launch cost)\n"
            "  --fidelity       also run B = 1 on the cpu backend (the float32 reference) with\n"
            "                   the same weights and inputs; print rel-L2 and cosine of the\n"
            "                   warp output and of the image\n"
            "  --profile[=N]    after the timed runs of each batch size, one more run with\n"
            "                   per-op timing; prints the N most expensive op/shape groups\n"
            "                   (default 40) and the time per op type\n"
            "  --lanes N        1 or 2: with 2, warp and decoder run as one stage, the first\n"
            "                   half of the batch on the backend's main stream and the second\n"
            "                   on a second one, so the GPU overlaps them (on the cpu the\n"
            "                   halves run in turn), and the images are checked against a\n"
            "                   serial run; default: as a render session (2 on cuda, 1 on the\n"
            "                   cpu; DITTO_LANES=1|2 overrides); --lanes 1 times warp and\n"
            "                   decoder apart\n"
            "  --skip-ops LIST  measurement only: do not run the ops LIST names, so each\n"
            "                   stage time drops by what they cost in it (the images are\n"
            "                   wrong); LIST is NAME[:TEXT];... and TEXT must occur in the\n"
            "                   op's shapes as --profile prints them, e.g.\n"
            "                   'conv:w(512,512,3,3);copy'\n"
            "  --quiet          print only the table\n"
            "  --verbose        log backend decisions (e.g. which convolutions run batched)\n"
            "  -h, --help       this text\n\n"
            "ditto bench --e2e AVATAR [...] times the whole pipeline instead (--e2e --help);\n"
            "ditto bench --lmdm [...] times the motion sampler (--lmdm --help).\n");
}

static int alloc_t(DittoBackend *be, DittoBuffer *buf, DittoTensor *t, DittoDType dt, int ndim, const int64_t *shape)
{
    *t = ditto_tensor(NULL, dt, ndim, shape);
    int rc = ditto_buffer_alloc(buf, &be->allocator, ditto_tensor_nbytes(t));
    t->data = buf->ptr;
    t->device = be->device;
    return rc;
}

typedef struct Stage { double stitch, warp, decode, post, total; } Stage;

/* Wait for the run that recorded k, and add its stage times to sum when it was a timed one. */
static int bench_collect(DittoBackend *be, const DittoMarks *k, bool timed, Stage *sum)
{
    DITTO_TRY(ditto_marks_wait(be, k, 4));
    if (timed) {
        sum->stitch += ditto_marks_seconds(be, k, 0, 1);
        sum->warp += ditto_marks_seconds(be, k, 1, 2);
        sum->decode += ditto_marks_seconds(be, k, 2, 3);
        sum->post += ditto_marks_seconds(be, k, 3, 4);
    }
    return 0;
}

/*
 * --loop: the output path after the decoder, as `ditto render` runs it for
 * an image avatar: the faces pasted into B copies of a LOOP_SIDE^2 frame (a
 * fixed crop matrix) and converted to yuv420p in one pass from the decoder's
 * output (ditto_putback_yuv, no RGB kept), and the planes downloaded to the
 * host, the copy overlapping the next batch.
 */
#define LOOP_SIDE 1432

typedef struct BenchPost {
    DittoPutback *pb;
    DittoBuffer frame_b, yuv_b;
    DittoTensor frame;              /* (H,W,3) u8 */
    uint8_t *host;                  /* B frames of planes: page-locked where the backend has it, as a session's frame ring */
    bool host_pinned;
    size_t plane_bytes;             /* one frame: Y, U, V */
    float *M;                       /* B copies of the crop -> frame matrix */
    bool bg_written;                /* a full pass has run: the frames hold the background */
} BenchPost;

static void post_close(BenchPost *p, DittoBackend *be)
{
    ditto_putback_close(&p->pb);
    ditto_buffer_free(&p->frame_b);
    ditto_buffer_free(&p->yuv_b);
    if (p->host_pinned)
        be->host_free(be, p->host);
    else
        free(p->host);
    free(p->M);
    memset(p, 0, sizeof *p);
}

static int post_open(BenchPost *p, DittoBackend *be, int64_t B)
{
    const int64_t S = LOOP_SIDE, cs = (S + 1) / 2;
    memset(p, 0, sizeof *p);
    p->plane_bytes = (size_t)(S * S + 2 * cs * cs);
    /* crop -> frame: scale 1.05, a slight rotation, the face left of centre */
    const float s = 1.05f, th = 0.05f;
    const float M[9] = { s * cosf(th), -s * sinf(th), 450.0f, s * sinf(th), s * cosf(th), 330.0f, 0, 0, 1 };
    if (!(p->M = malloc((size_t)B * sizeof M)))
        return DITTO_ERR_NOMEM;
    for (int64_t b = 0; b < B; b++)
        memcpy(p->M + 9 * b, M, sizeof M);
    int rc = ditto_putback_open_fused(&p->pb, be, S, S, &be->log);
    if (!rc) rc = alloc_t(be, &p->frame_b, &p->frame, DITTO_U8, DITTO_SHAPE(S, S, 3));
    if (!rc) rc = ditto_buffer_alloc(&p->yuv_b, &be->allocator, p->plane_bytes * (size_t)B);
    if (!rc && be->host_alloc && (p->host = be->host_alloc(be, p->plane_bytes * (size_t)B)))
        p->host_pinned = true;
    if (!rc && !p->host && !(p->host = malloc(p->plane_bytes * (size_t)B)))
        rc = DITTO_ERR_NOMEM;
    if (!rc) {   /* a frame of random pixels */
        uint8_t *h = malloc((size_t)(S * S * 3));
        if (!h) {
            rc = DITTO_ERR_NOMEM;
        } else {
            uint64_t x = 88172645463325252ull;
            for (int64_t i = 0; i < S * S * 3; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h[i] = (uint8_t)(x >> 56);
            }
            rc = be->upload(be, p->frame.data, h, (size_t)(S * S * 3));
            free(h);
        }
    }
    if (rc < 0)
        post_close(p, be);
    return rc;
}

/*
 * Device part of the output path for the B images in img (B,3,512,512): no
 * host transfer, so it can be captured. As a session: a full pass first,
 * then only the blocks that meet the box (the background is in place).
 */
static int post_run(BenchPost *p, DittoBackend *be, const DittoTensor *img)
{
    const int64_t B = img->shape[0], S = LOOP_SIDE, cs = (S + 1) / 2, fb = (int64_t)p->plane_bytes;
    uint8_t *base = p->yuv_b.ptr;
    DittoTensor y = ditto_tensor(base, DITTO_U8, DITTO_SHAPE(B, S, S));
    DittoTensor u = ditto_tensor(base + S * S, DITTO_U8, DITTO_SHAPE(B, cs, cs));
    DittoTensor v = ditto_tensor(base + S * S + cs * cs, DITTO_U8, DITTO_SHAPE(B, cs, cs));
    y.device = u.device = v.device = be->device;
    y.stride[0] = u.stride[0] = v.stride[0] = fb;
    DITTO_TRY(ditto_putback_yuv(p->pb, &p->frame, img, p->M, NULL, &y, &u, &v, p->bg_written, NULL));
    p->bg_written = true;
    return 0;
}

/* Queue the copy of the B frames' planes to the host: it runs during the next batch's work (download_fence before post overwrites them). */
static int post_download(BenchPost *p, DittoBackend *be, int64_t B)
{
    return be->download_async(be, p->host, p->yuv_b.ptr, p->plane_bytes * (size_t)B);
}

/* Normal(0, scale) values from (seed, stream); round16: rounded to float16 precision even in an f32 tensor. */
static int fill_random_r(DittoBackend *be, DittoTensor *t, uint64_t stream, float scale, bool round16)
{
    size_t n = (size_t)ditto_tensor_numel(t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        return DITTO_ERR_NOMEM;
    ditto_rng_fill_normal(1234, stream, 0, h, n);
    for (size_t i = 0; i < n; i++)
        h[i] *= scale;
    if (round16) {
        uint16_t *r = malloc((n ? n : 1) * sizeof *r);
        if (!r) {
            free(h);
            return DITTO_ERR_NOMEM;
        }
        ditto_convert(r, DITTO_F16, h, DITTO_F32, n);
        ditto_convert(h, DITTO_F32, r, DITTO_F16, n);
        free(r);
    }
    void *src = h, *conv = NULL;
    if (t->dtype != DITTO_F32) {   /* f16 tensors: the same values, rounded on the host */
        conv = malloc(ditto_tensor_nbytes(t) + 1);
        if (!conv) {
            free(h);
            return DITTO_ERR_NOMEM;
        }
        ditto_convert(conv, t->dtype, h, DITTO_F32, n);
        src = conv;
    }
    int rc = be->upload(be, t->data, src, ditto_tensor_nbytes(t));
    free(conv);
    free(h);
    return rc;
}

static int fill_random(DittoBackend *be, DittoTensor *t, uint64_t stream, float scale)
{
    return fill_random_r(be, t, stream, scale, false);
}


/* The bench's tensors for B frames: inputs (filled), the warp output and the image; activations in the backend's dtype. */
typedef struct BenchIO {
    DittoBuffer bufs[6];
    DittoTensor f_s, kp_s, kp_d, kp_n, wout, img;
} BenchIO;

static void io_free(BenchIO *io)
{
    for (int i = 0; i < 6; i++)
        ditto_buffer_free(&io->bufs[i]);
}

/* round16: f_s values rounded to float16 precision even when stored as f32 (the reference for an f16 backend). */
static int io_alloc(BenchIO *io, DittoBackend *be, DittoWarp *warp, DittoDecoder *dec, int64_t B, bool full, bool round16)
{
    const int64_t C = full ? 32 : 8, D = 16, HW = 64;
    const DittoDType act = be->act_dtype;
    int64_t wshape[4], ishape[4];
    memset(io, 0, sizeof *io);
    int rc = alloc_t(be, &io->bufs[0], &io->f_s, act, DITTO_SHAPE(B, C, D, HW, HW));
    if (!rc) rc = alloc_t(be, &io->bufs[1], &io->kp_s, DITTO_F32, DITTO_SHAPE(B, 21, 3));
    if (!rc) rc = alloc_t(be, &io->bufs[2], &io->kp_d, DITTO_F32, DITTO_SHAPE(B, 21, 3));
    if (!rc) rc = alloc_t(be, &io->bufs[3], &io->kp_n, DITTO_F32, DITTO_SHAPE(B, 21, 3));
    if (!rc) rc = ditto_warp_out_shape(warp, &io->f_s, wshape);
    if (!rc) rc = alloc_t(be, &io->bufs[4], &io->wout, act, 4, wshape);
    if (!rc) rc = ditto_decoder_out_shape(dec, &io->wout, ishape);
    if (!rc) rc = alloc_t(be, &io->bufs[5], &io->img, act, 4, ishape);
    if (!rc) rc = fill_random_r(be, &io->f_s, 1, 0.5f, round16);
    if (!rc) rc = fill_random(be, &io->kp_s, 2, 0.3f);
    if (!rc) rc = fill_random(be, &io->kp_d, 3, 0.3f);
    if (rc < 0)
        io_free(io);
    return rc;
}

/* Download t as float32 into a new host array of its numel. */
static float *download_f32(DittoBackend *be, const DittoTensor *t)
{
    size_t n = (size_t)ditto_tensor_numel(t), nb = ditto_tensor_nbytes(t);
    float *out = malloc((n ? n : 1) * sizeof *out);
    void *raw = malloc(nb ? nb : 1);
    if (!out || !raw || be->download(be, raw, t->data, nb) < 0) {
        free(out);
        free(raw);
        return NULL;
    }
    ditto_convert(out, DITTO_F32, raw, t->dtype, n);
    free(raw);
    return out;
}

/* One forward (stitch, warp, decode) at B = 1 with the bench's inputs; host float32 copies of the warp output and the image. */
static int forward_once(DittoBackend *be, DittoStitch *st, DittoWarp *warp, DittoDecoder *dec, bool full, bool round16, float **wout_h,
                        float **img_h, size_t *nw, size_t *ni)
{
    BenchIO io;
    DittoArena ws;
    ditto_arena_init(&ws, &be->allocator, 0);
    int rc = io_alloc(&io, be, warp, dec, 1, full, round16);
    if (rc < 0)
        return rc;
    rc = ditto_stitch_forward(st, &ws, &io.kp_s, &io.kp_d, &io.kp_n, NULL);
    if (!rc) rc = ditto_warp_forward(warp, &ws, &io.f_s, &io.kp_s, &io.kp_n, &io.wout, NULL);
    if (!rc) rc = ditto_decoder_forward(dec, &ws, &io.wout, &io.img, NULL);
    if (!rc) rc = be->sync(be);
    if (!rc) {
        *wout_h = download_f32(be, &io.wout);
        *img_h = download_f32(be, &io.img);
        *nw = (size_t)ditto_tensor_numel(&io.wout);
        *ni = (size_t)ditto_tensor_numel(&io.img);
        if (!*wout_h || !*img_h)
            rc = DITTO_ERR_NOMEM;
    }
    ditto_arena_free(&ws);
    io_free(&io);
    return rc;
}

static void compare(const char *what, const float *a, const float *ref, size_t n, double *rel_l2, double *cosine, double *max_abs)
{
    double d2 = 0, r2 = 0, a2 = 0, ar = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
        a2 += (double)a[i] * a[i];
        ar += (double)a[i] * ref[i];
        if (fabs(d) > mx)
            mx = fabs(d);
    }
    *rel_l2 = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    *cosine = a2 > 0 && r2 > 0 ? ar / sqrt(a2 * r2) : 1.0;
    *max_abs = mx;
    printf("fidelity %-14s rel_l2 %.3e  cosine %.8f  max|diff| %.3e  (%zu values)\n", what, *rel_l2, *cosine, mx, n);
}

/*
 * --fidelity: the same synthetic networks and inputs through this backend and
 * the CPU backend (float32 storage, double-precision statistics, the
 * reference implementation) at B = 1; rel-L2 and cosine of the warp output
 * and of the image. f16 inputs are rounded the same way on both sides.
 */
static int fidelity(DittoBackend *be, DittoStitch *st, DittoWarp *warp, DittoDecoder *dec, bool full, int threads, FILE *jf)
{
    DittoBackendParams cp;
    ditto_backend_params_default(&cp);
    cp.nthreads = threads;
    cp.log = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoBackend *cpu = NULL;
    DittoCatalog *cw = NULL, *cg = NULL, *cs = NULL;
    DittoWarp *warp_c = NULL;
    DittoDecoder *dec_c = NULL;
    DittoStitch *st_c = NULL;
    float *w_a = NULL, *i_a = NULL, *w_r = NULL, *i_r = NULL;
    size_t nw = 0, ni = 0, nw2 = 0, ni2 = 0;
    int rc = ditto_backend_open(&cpu, "cpu", &cp);
    if (!rc) rc = ditto_synthetic_catalog(&cw, DITTO_NET_WARP, full, 1, &cp.log);
    if (!rc) rc = ditto_synthetic_catalog(&cg, DITTO_NET_DECODER, full, 2, &cp.log);
    if (!rc) rc = ditto_synthetic_catalog(&cs, DITTO_NET_STITCH, full, 3, &cp.log);
    if (!rc) rc = ditto_warp_load(&warp_c, cpu, cw);
    if (!rc) rc = ditto_decoder_load(&dec_c, cpu, cg);
    if (!rc) rc = ditto_stitch_load(&st_c, cpu, cs);
    /* f_s is stored as f16 on an f16 backend: the reference gets the same rounded values */
    const bool r16 = be->act_dtype == DITTO_F16;
    if (!rc) rc = forward_once(be, st, warp, dec, full, r16, &w_a, &i_a, &nw, &ni);
    if (!rc) {
        fprintf(stderr, "ditto bench: fidelity reference on the cpu backend (float32)...\n");
        rc = forward_once(cpu, st_c, warp_c, dec_c, full, r16, &w_r, &i_r, &nw2, &ni2);
    }
    if (!rc && (nw != nw2 || ni != ni2))
        rc = DITTO_ERR_SHAPE;
    if (!rc) {
        double wr, wc, wm, ir, ic, im;
        compare("warp output", w_a, w_r, nw, &wr, &wc, &wm);
        compare("image", i_a, i_r, ni, &ir, &ic, &im);
        if (jf)
            fprintf(jf, ",\n  \"fidelity_vs_cpu_f32\": {\"warp_rel_l2\": %.4e, \"warp_cosine\": %.8f, \"image_rel_l2\": %.4e, "
                        "\"image_cosine\": %.8f, \"image_max_abs\": %.4e}", wr, wc, ir, ic, im);
    }
    if (rc < 0)
        fprintf(stderr, "ditto bench: fidelity run failed: %s\n", ditto_strerror(rc));
    free(w_a);
    free(i_a);
    free(w_r);
    free(i_r);
    ditto_warp_free(&warp_c);
    ditto_decoder_free(&dec_c);
    ditto_stitch_free(&st_c);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cs);
    ditto_backend_close(&cpu);
    return rc;
}

/* --lanes 2: warp then decoder of the items [first, first + count) of the bench tensors. */
typedef struct WdHalf {
    DittoWarp *warp;
    DittoDecoder *dec;
    BenchIO *io;
} WdHalf;

static int wd_half(void *ctx, int64_t first, int64_t count, DittoArena *ws)
{
    WdHalf *w = ctx;
    BenchIO *io = w->io;
    return ditto_warp_decode_items(w->warp, w->dec, ws, &io->f_s, &io->kp_s, &io->kp_n, &io->wout, &io->img, first, count);
}

int ditto_cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--e2e") || !strncmp(argv[i], "--e2e=", 6))
            return ditto_bench_e2e(argc, argv);
        else if (!strcmp(argv[i], "--lmdm"))
            return ditto_bench_lmdm(argc, argv);
    const char *backend = "cpu", *json = NULL, *batches = "1", *skip_ops = NULL;
    int iters = -1, warmup = 1, threads = 0, small = 0, quiet = 0, fp16 = 0, profile = 0, graph = 0, verbose = 0, fid = 0, loop = 0;
    int lanes = 0;
    static const struct option opts[] = {
        { "backend", required_argument, 0, 'b' }, { "batch", required_argument, 0, 'B' }, { "iters", required_argument, 0, 'n' },
        { "warmup", required_argument, 0, 'w' },  { "threads", required_argument, 0, 't' }, { "small", no_argument, 0, 's' },
        { "json", required_argument, 0, 'j' },    { "quiet", no_argument, 0, 'q' },         { "help", no_argument, 0, 'h' },
        { "fp16", no_argument, 0, 'f' },          { "profile", optional_argument, 0, 'P' },
        { "graph", no_argument, 0, 'g' },         { "verbose", no_argument, 0, 'v' },     { "fidelity", no_argument, 0, 'F' },
        { "loop", no_argument, 0, 'L' },         { "lanes", required_argument, 0, 'l' },   { "skip-ops", required_argument, 0, 'S' },
        { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': backend = optarg; break;
        case 'B': batches = optarg; break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 's': small = 1; break;
        case 'j': json = optarg; break;
        case 'q': quiet = 1; break;
        case 'f': fp16 = 1; break;
        case 'g': graph = 1; break;
        case 'v': verbose = 1; break;
        case 'F': fid = 1; break;
        case 'L': loop = 1; break;
        case 'l': lanes = atoi(optarg); break;
        case 'S': skip_ops = optarg; break;
        case 'P': profile = optarg ? atoi(optarg) : 40; if (profile <= 0) profile = 40; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ditto bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.nthreads = threads;
    bp.fp16 = fp16;
    bp.log = ditto_logger_stderr(verbose ? DITTO_LOG_DEBUG : DITTO_LOG_WARN);
    if (lanes < 0 || lanes > 2) {
        fprintf(stderr, "ditto bench: --lanes takes 1 or 2\n");
        return 2;
    }
    DittoBackend *be = NULL;
    if (ditto_backend_open(&be, backend, &bp) < 0)
        return 1;
    if (iters < 0)
        iters = be->device == DITTO_DEVICE_CPU ? 2 : 20;
    if (graph && !be->capture_begin) {
        fprintf(stderr, "ditto bench: --graph needs a backend with graph capture (cuda)\n");
        ditto_backend_close(&be);
        return 2;
    }
    if (graph && warmup < 1)
        warmup = 1;   /* capture needs settled sizes: one run first */
    if (!lanes)   /* as a session chooses */
        lanes = ditto_backend_lanes(be);

    int rc = 0;
    DittoMarks mks[2];   /* two runs in flight: stage boundaries 0-4 of each */
    memset(mks, 0, sizeof mks);
    DittoCatalog *cw = NULL, *cg = NULL, *cs = NULL;
    DittoWarp *warp = NULL;
    DittoDecoder *dec = NULL;
    DittoStitch *st = NULL;
    if ((rc = ditto_marks_init(be, &mks[0], 5)) < 0 || (rc = ditto_marks_init(be, &mks[1], 5)) < 0) {
        fprintf(stderr, "ditto bench: cannot make timing marks: %s\n", ditto_strerror(rc));
        goto done;
    }
    bool full = !small;
    double t0 = now_s();
    if ((rc = ditto_synthetic_catalog(&cw, DITTO_NET_WARP, full, 1, &bp.log)) < 0 ||
        (rc = ditto_synthetic_catalog(&cg, DITTO_NET_DECODER, full, 2, &bp.log)) < 0 ||
        (rc = ditto_synthetic_catalog(&cs, DITTO_NET_STITCH, full, 3, &bp.log)) < 0 || (rc = ditto_warp_load(&warp, be, cw)) < 0 ||
        (rc = ditto_decoder_load(&dec, be, cg)) < 0 || (rc = ditto_stitch_load(&st, be, cs)) < 0) {
        fprintf(stderr, "ditto bench: cannot build the synthetic networks: %s\n", ditto_strerror(rc));
        goto done;
    }
    double load_s = now_s() - t0;
    /* device bytes held right after loading: the three networks' parameters */
    DittoMemInfo mi_load = { 0 };
    if (be->mem_info && be->mem_info(be, &mi_load) < 0)
        memset(&mi_load, 0, sizeof mi_load);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cs);
    if (!quiet)
        fprintf(stderr, "ditto bench: %s backend, %s storage, %s networks with synthetic weights (built in %.2f s)\n", be->name,
                ditto_dtype_name(be->act_dtype), full ? "official-size" : "small", load_s);
    if (skip_ops && *skip_ops) {   /* after the load: the networks' own preparation runs in full */
        be->skip_ops = skip_ops;
        fprintf(stderr, "ditto bench: measurement only: ops matching '%s' are not run, the images are wrong\n", skip_ops);
    }

    FILE *jf = NULL;
    if (json && !(jf = fopen(json, "w"))) {
        fprintf(stderr, "ditto bench: cannot write %s\n", json);
        rc = 1;
        goto done;
    }
    if (jf)
        fprintf(jf, "{\n  \"backend\": \"%s\",\n  \"dtype\": \"%s\",\n  \"size\": \"%s\",\n  \"cuda_graph\": %s,\n  \"results\": [",
                be->name, ditto_dtype_name(be->act_dtype), full ? "official" : "small", graph ? "true" : "false");
    /* gpu peak: high-water mark of everything ditto holds on the device (weights, arena, buffers, workspace) so far */
    if (lanes > 1)
        printf("lanes 2: warp and decoder run as one stage, half of each batch on each lane (%s); the warp column is warp + decode\n",
               be->lane_select ? "two streams" : "in turn on this backend");
    printf("%-6s %12s %12s %12s %12s %12s %10s %10s%s\n", "batch", "stitch ms/f", "warp ms/f", "decode ms/f", "post ms/f", "total ms/f", "frames/s", "arena MB",
           be->mem_info ? "  gpu peak MB" : "");
    int first = 1;
    size_t dev_used_max = 0;
    /* item 0 gets the same inputs at every batch size (the random fills are index-addressed): its image must not depend on B */
    unsigned char *ref0 = NULL, *img0 = NULL;
    size_t item_bytes = 0;
    int ref_batch = 0;   /* cudaMemGetInfo after each batch's timed runs, arena still held */
    for (const char *p = batches; *p;) {
        int B = atoi(p);
        if (B < 1) {
            fprintf(stderr, "ditto bench: bad batch size in '%s'\n", batches);
            rc = 2;
            break;
        }
        BenchIO io;
        DittoArena ws, ws2;
        ditto_arena_init(&ws, &be->allocator, 0);
        ditto_arena_init(&ws2, &be->allocator, 0);
        DittoArena *const wss[2] = { &ws, &ws2 };
        rc = io_alloc(&io, be, warp, dec, B, full, false);
        WdHalf wdh = { warp, dec, &io };
        DittoTensor *f_s = &io.f_s, *kp_s = &io.kp_s, *kp_d = &io.kp_d, *kp_n = &io.kp_n, *wout = &io.wout, *img = &io.img;
        Stage sum = { 0 };
        void *gr[4] = { NULL, NULL, NULL, NULL };   /* --graph: stitch, warp, decode, post */
        BenchPost post;
        memset(&post, 0, sizeof post);
        if (!rc && loop)
            rc = post_open(&post, be, B);
        /*
         * As a session: stage boundaries are marks in stream order, and each
         * batch is queued before the host waits for the one before it (two
         * sets of marks), so the device always has the next batch.
         */
        int cur = 0;
        bool pend = false, timed[2] = { false, false };
        double t_start = 0;
        for (int it = 0; !rc && it < warmup + iters; it++) {
            if (it == warmup) {   /* the warm-up done (and untimed) */
                if (pend)
                    rc = ditto_marks_wait(be, &mks[cur ^ 1], 4);
                pend = false;
                if (!rc) rc = be->sync(be);
            }
            if (!rc && graph && it == warmup) {
                /* record each stage once; the arena hands out the same addresses as in the warm-up */
                for (int sgi = 0; !rc && sgi < (loop ? 4 : 3); sgi++) {
                    rc = be->capture_begin(be);
                    if (rc < 0)
                        break;
                    if (sgi == 0) rc = ditto_stitch_forward(st, &ws, kp_s, kp_d, kp_n, NULL);
                    if (sgi == 1) rc = lanes > 1 ? ditto_backend_halves(be, B, wss, wd_half, &wdh) : ditto_warp_forward(warp, &ws, f_s, kp_s, kp_n, wout, NULL);
                    if (sgi == 2 && lanes == 1) rc = ditto_decoder_forward(dec, &ws, wout, img, NULL);
                    if (sgi == 3) rc = post_run(&post, be, img);
                    int rc2 = be->capture_end(be, &gr[sgi]);
                    if (!rc) rc = rc2;
                }
                if (!rc) rc = ditto_arena_reset(&ws);
                if (!rc) rc = ditto_arena_reset(&ws2);
            }
            if (rc)
                break;
            if (it == warmup)
                t_start = now_s();
            bool replay = graph && it >= warmup;
            DittoMarks *k = &mks[cur];
            rc = ditto_marks_record(be, k, 0);
            if (!rc) rc = replay ? be->graph_launch(be, gr[0]) : ditto_stitch_forward(st, &ws, kp_s, kp_d, kp_n, NULL);
            if (!rc) rc = ditto_marks_record(be, k, 1);
            if (!rc) rc = replay ? be->graph_launch(be, gr[1])
                          : lanes > 1 ? ditto_backend_halves(be, B, wss, wd_half, &wdh)
                                      : ditto_warp_forward(warp, &ws, f_s, kp_s, kp_n, wout, NULL);
            if (!rc) rc = ditto_marks_record(be, k, 2);
            if (!rc && lanes == 1) rc = replay ? be->graph_launch(be, gr[2]) : ditto_decoder_forward(dec, &ws, wout, img, NULL);
            if (!rc) rc = ditto_marks_record(be, k, 3);
            if (!rc && loop) {
                /* the last batch's planes copied out before post overwrites them, this batch's copied during the next */
                rc = be->download_fence(be);
                if (!rc) rc = replay ? be->graph_launch(be, gr[3]) : post_run(&post, be, img);
            }
            if (!rc) rc = ditto_marks_record(be, k, 4);
            if (!rc && loop) rc = post_download(&post, be, B);
            if (!rc && !replay) rc = ditto_arena_reset(&ws);   /* the next run's scratch follows this one in stream order */
            if (!rc && !replay) rc = ditto_arena_reset(&ws2);
            /* this batch is queued: wait for the one before it */
            if (!rc && pend)
                rc = bench_collect(be, &mks[cur ^ 1], timed[cur ^ 1], &sum);
            pend = true;
            timed[cur] = it >= warmup;
            cur ^= 1;
        }
        if (!rc && pend)
            rc = bench_collect(be, &mks[cur ^ 1], timed[cur ^ 1], &sum);
        if (!rc && loop)   /* the last copy too */
            rc = be->download_wait(be);
        if (!rc) rc = be->sync(be);
        if (!rc && iters > 0)
            sum.total = now_s() - t_start;
        for (int sgi = 0; sgi < 4; sgi++)
            if (gr[sgi])
                be->graph_free(be, gr[sgi]);
        if (!rc) {
            size_t ib = ditto_tensor_nbytes(img) / (size_t)B;
            if (!ref0) {
                ref0 = malloc(ib);
                img0 = malloc(ib);
                item_bytes = ib;
                ref_batch = B;
                if (!ref0 || !img0)
                    rc = DITTO_ERR_NOMEM;
                else
                    rc = be->download(be, ref0, img->data, ib);
            } else if (ib == item_bytes) {
                rc = be->download(be, img0, img->data, ib);
                if (!rc && !quiet) {
                    size_t diff = 0;
                    for (size_t i = 0; i < ib; i++)
                        diff += ref0[i] != img0[i];
                    fprintf(stderr, "ditto bench: batch %d: image of item 0 %s the batch-%d image%s\n", B,
                            diff ? "DIFFERS from" : "is bit-identical to", ref_batch, diff ? " (bytes differ)" : "");
                }
            }
        }
        if (!rc && lanes > 1) {
            /* every item of the two-lane batch against one serial run of the whole batch */
            size_t nb = ditto_tensor_nbytes(img);
            unsigned char *h1 = malloc(nb), *h2 = malloc(nb);
            if (!h1 || !h2)
                rc = DITTO_ERR_NOMEM;
            if (!rc) rc = be->download(be, h1, img->data, nb);
            if (!rc) rc = wd_half(&wdh, 0, B, &ws);
            if (!rc) rc = be->download(be, h2, img->data, nb);
            if (!rc) rc = ditto_arena_reset(&ws);
            if (!rc && !quiet)
                fprintf(stderr, "ditto bench: batch %d: the two lanes' images %s one serial run's (all %d items)\n", B,
                        memcmp(h1, h2, nb) ? "DIFFER from" : "are bit-identical to", B);
            free(h1);
            free(h2);
        }
        if (!rc && profile) {
            /* one more run with per-op timing marks (not part of the timed numbers above) */
            rc = ditto_profile_start(be);
            if (!rc) rc = ditto_stitch_forward(st, &ws, kp_s, kp_d, kp_n, NULL);
            if (!rc) rc = ditto_warp_forward(warp, &ws, f_s, kp_s, kp_n, wout, NULL);
            if (!rc) rc = ditto_decoder_forward(dec, &ws, wout, img, NULL);
            double ms = 0;
            if (!rc) {
                printf("--- batch %d: per-op profile of one stitch+warp+decode run ---\n", B);
                rc = ditto_profile_report(be, stdout, profile, &ms);
                printf("--- %.3f ms in ops = %.3f ms/frame ---\n", ms, ms / B);
            }
            if (!rc) rc = ditto_arena_reset(&ws);
        }
        if (rc < 0) {
            fprintf(stderr, "ditto bench: batch %d failed: %s\n", B, ditto_strerror(rc));
        } else {
            double n = (double)iters * B;
            DittoMemInfo mi = { 0 };
            bool have_mi = be->mem_info && be->mem_info(be, &mi) >= 0;
            char gpu[32] = "";
            if (have_mi) {
                snprintf(gpu, sizeof gpu, " %12.0f", mi.peak / 1048576.0);
                if (mi.device_used > dev_used_max)
                    dev_used_max = mi.device_used;
            }
            char postc[32] = "           -";
            if (loop)
                snprintf(postc, sizeof postc, "%12.2f", 1e3 * sum.post / n);
            char decc[32] = "           -";   /* lanes: the decoder ran in the warp's stage */
            if (lanes < 2)
                snprintf(decc, sizeof decc, "%12.2f", 1e3 * sum.decode / n);
            printf("%-6d %12.2f %12.2f %s %s %12.2f %10.2f %10.0f%s\n", B, 1e3 * sum.stitch / n, 1e3 * sum.warp / n, decc,
                   postc, 1e3 * sum.total / n, n / sum.total, (ws.peak + ws2.peak) / 1048576.0, gpu);
            if (jf) {
                fprintf(jf, "%s\n    {\"batch\": %d, \"iters\": %d, \"stitch_ms_per_frame\": %.4f, \"warp_ms_per_frame\": %.4f, "
                            "\"decode_ms_per_frame\": %.4f, \"total_ms_per_frame\": %.4f, \"fps\": %.3f, \"arena_mb\": %.1f",
                        first ? "" : ",", B, iters, 1e3 * sum.stitch / n, 1e3 * sum.warp / n, 1e3 * sum.decode / n, 1e3 * sum.total / n,
                        n / sum.total, (ws.peak + ws2.peak) / 1048576.0);
                fprintf(jf, ", \"lanes\": %d, \"warp_decode_ms_per_frame\": %.4f", lanes, 1e3 * (sum.warp + sum.decode) / n);
                if (loop)
                    fprintf(jf, ", \"post_ms_per_frame\": %.4f, \"loop_side\": %d", 1e3 * sum.post / n, LOOP_SIDE);
                if (have_mi)
                    fprintf(jf, ", \"gpu_peak_mb\": %.1f, \"gpu_device_used_mb\": %.1f", mi.peak / 1048576.0, mi.device_used / 1048576.0);
                fprintf(jf, "}");
            }
            first = 0;
        }
        ditto_arena_free(&ws);
        ditto_arena_free(&ws2);
        io_free(&io);
        post_close(&post, be);
        if (rc < 0)
            break;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    printf("peak host memory (RSS): %.0f MB\n", peak_rss_mb());
    DittoMemInfo mi = { 0 };
    bool have_mi = be->mem_info && be->mem_info(be, &mi) >= 0;
    if (have_mi)
        printf("peak GPU memory: %.0f MB held by ditto (weights %.0f MB, arenas, buffers, workspace); device in use up to %.0f of %.0f MB"
               " (cudaMemGetInfo after each batch: also the CUDA context and library handles)\n",
               mi.peak / 1048576.0, mi_load.used / 1048576.0, dev_used_max / 1048576.0, mi.device_total / 1048576.0);
    if (jf)
        fprintf(jf, "\n  ]");
    if (fid && rc >= 0 && fidelity(be, st, warp, dec, full, threads, jf) < 0)
        rc = 1;
    if (jf) {
        fprintf(jf, ",\n  \"peak_rss_mb\": %.1f", peak_rss_mb());
        if (have_mi)
            fprintf(jf, ",\n  \"gpu_weights_mb\": %.1f,\n  \"gpu_peak_mb\": %.1f,\n  \"gpu_device_used_max_mb\": %.1f,\n  \"gpu_device_total_mb\": %.1f",
                    mi_load.used / 1048576.0, mi.peak / 1048576.0, dev_used_max / 1048576.0, mi.device_total / 1048576.0);
        fprintf(jf, "\n}\n");
        fclose(jf);
    }
    free(ref0);
    free(img0);
done:
    ditto_marks_free(be, &mks[0]);
    ditto_marks_free(be, &mks[1]);
    ditto_warp_free(&warp);
    ditto_decoder_free(&dec);
    ditto_stitch_free(&st);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cs);
    ditto_backend_close(&be);
    return rc < 0 ? 1 : rc;
}
