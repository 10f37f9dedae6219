/*
 * Per-batch render: motion stitch -> warp -> decode -> HWC x 255, then to
 * the host or, with device_post, paste-back and yuv420p on the device
 * (pipeline_internal.h).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/color.h"
#include "nn/weights.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/putback.h"

/* Capture attempts before graphs are given up for the session (a capture is dropped when the arena had to grow). */
#define GRAPH_TRIES 3

/* Stage boundaries of a batch: start, after the stitch, the warp, the decoder, the paste-back. */
enum { M_START, M_STITCH, M_WARP, M_DECODE, M_POST, STAGES };

struct DittoRenderer {
    DittoBackend *be;
    DittoWarp *warp;
    DittoDecoder *decoder;
    DittoMotionStitch *ms;
    const DittoAvatar *av;
    DittoLogger log;
    DittoDType act;              /* f_s, warp output and image: the networks' storage (be->act_dtype) */
    int batch;
    int64_t fs_numel;            /* elements of one frame's f_s */
    bool fs_filled;              /* image: the batch f_s holds B copies already */

    DittoArena ws;               /* network scratch (lane 0's) */
    DittoArena ws2;              /* lanes: lane 1's */
    int lanes;                   /* 2: warp + decode as one stage, half the batch on each backend lane */
    DittoBuffer fs_all_buf;      /* (n_src, C, D, H, W): every source frame's f_s */
    DittoBuffer fs_buf;          /* (B, C, D, H, W) */
    DittoBuffer kp_buf;          /* x_s, x_d (B, 21, 3) each */
    DittoBuffer feat_buf;        /* warp output (B, C', H, W) */
    DittoBuffer img_buf;         /* decoder output (B, 3, 512, 512) */
    DittoBuffer hwc_buf;         /* (B, 512, 512, 3) float32 x 255 for the host (not with device_post) */
    int64_t feat_shape[4];
    const DittoXInfo **xs;       /* (B) source infos of a batch */

    /* device_post: paste-back and yuv420p in one pass from img_buf (ditto_putback_yuv) */
    bool post;
    DittoPutback *pb;
    DittoBuffer src_buf;         /* (H, W, 3) u8: the image avatar's frame, or one video frame at a time */
    float *m_rep;                /* image avatar: its crop -> frame matrix B times, one per render */
    int64_t bg_frames;           /* image avatar: out_buf's first bg_frames frames hold the background (a full pass wrote them) */
    DittoBuffer out_buf;         /* B finished frames, frame_bytes each: RGB24 (rgb_bytes, 0 with yuv_only), Y, U, V */
    int64_t W, H, cw, ch;
    size_t frame_bytes, rgb_bytes;

    /* graphs */
    bool graphs;
    bool pad_tail;               /* short batches run as full ones (with graphs: no new plans or captures) */
    void *g_warp, *g_dec;        /* full-batch warp / decoder (+ HWC x 255); lanes: g_warp is both, g_dec unused */
    void *g_base, *g_base2;      /* the arena blocks their scratch lies in (ws, ws2) */
    int tries;
    int last_n;                  /* frames of the previous batch (the arena has settled for a full one) */
    bool presized;               /* the arena was made at a full batch's size: capture at once */

    /*
     * Stage times, two sets of marks. With device_post a batch is queued and
     * run returns once the batch before it is done (its set is read then):
     * the device always has the next batch.
     */
    DittoMarks marks[2];
    int set;                     /* the set the next batch records */
    bool pending;                /* the other set's batch is queued, its times unread */
    int64_t pending_g0;
    int pending_n;
};

double ditto_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static DittoTensor dev_tensor(DittoBackend *be, const DittoBuffer *b, DittoDType dt, int ndim, const int64_t *shape)
{
    DittoTensor t = ditto_tensor(b->ptr, dt, ndim, shape);
    t.device = be->device;
    return t;
}

static int alloc_dt(DittoBackend *be, DittoBuffer *b, DittoDType dt, int64_t numel)
{
    return ditto_buffer_alloc(b, &be->allocator, (size_t)numel * ditto_dtype_size(dt));
}

int ditto_renderer_open(DittoRenderer **out, const DittoRendererConfig *c)
{
    *out = NULL;
    if (!c->be || !c->warp || !c->decoder || !c->avatar || c->batch < 1)
        return DITTO_ERR_INVAL;
    DittoRenderer *r = ditto_calloc(1, sizeof *r);
    if (!r)
        return DITTO_ERR_NOMEM;
    r->be = c->be;
    r->warp = c->warp;
    r->decoder = c->decoder;
    r->av = c->avatar;
    r->log = c->log;
    r->act = c->be->act_dtype;
    r->batch = c->batch;
    r->lanes = c->lanes == 2 && c->batch > 1 ? 2 : 1;
    const DittoAvatar *av = c->avatar;
    const int64_t B = c->batch, n_src = av->n_frames;
    int rc;

    /* shapes: the avatar's f_s must be what this warp network takes */
    r->fs_numel = ditto_avatar_fs_numel(av);
    DittoTensor fs_probe = ditto_tensor(NULL, DITTO_F32, DITTO_SHAPE(B, av->fs_shape[0], av->fs_shape[1], av->fs_shape[2], av->fs_shape[3]));
    /* the warp's own message would name only shapes: say what it means instead (no worker runs on be yet) */
    DittoLogger quiet = { 0 }, keep = r->be->log;
    r->be->log = quiet;
    rc = ditto_warp_out_shape(r->warp, &fs_probe, r->feat_shape);
    r->be->log = keep;
    if (rc < 0) {
        ditto_renderer_close(&r);
        return ditto_fail(&c->log, DITTO_ERR_SHAPE,
                          "the avatar's appearance features f_s (%lld,%lld,%lld,%lld) do not fit this warp network: it was registered "
                          "with other weights (bake it again, or render with the weights it was baked with)",
                          (long long)av->fs_shape[0], (long long)av->fs_shape[1], (long long)av->fs_shape[2], (long long)av->fs_shape[3]);
    }
    int64_t img_shape[4];
    DittoTensor feat_probe = ditto_tensor(NULL, DITTO_F32, 4, r->feat_shape);
    if ((rc = ditto_decoder_out_shape(r->decoder, &feat_probe, img_shape)) < 0 || img_shape[2] != DITTO_RENDER_SIDE ||
        img_shape[3] != DITTO_RENDER_SIDE) {
        ditto_renderer_close(&r);
        return ditto_fail(&c->log, DITTO_ERR_SHAPE, "the decoder does not render %dx%d faces from the warp network's output",
                          DITTO_RENDER_SIDE, DITTO_RENDER_SIDE);
    }

    DittoMotionStitchParams mp;
    ditto_motion_stitch_params_default(&mp, c->is_image);
    mp.fade_type = c->fade_type;
    mp.flag_stitching = c->stitch != NULL;
    if ((rc = ditto_motion_stitch_open(&r->ms, &mp, &av->x_s_info[0], c->stitch, &c->log)) < 0)
        goto fail;
    r->xs = ditto_calloc((size_t)B, sizeof *r->xs);
    if (!r->xs) {
        rc = DITTO_ERR_NOMEM;
        goto fail;
    }
    const int64_t side = DITTO_RENDER_SIDE;
    const DittoDType act = r->act;
    r->presized = c->arena_bytes > 0;
    if ((rc = ditto_arena_init(&r->ws, &r->be->allocator, c->arena_bytes)) < 0 ||
        (rc = ditto_arena_init(&r->ws2, &r->be->allocator, r->lanes > 1 ? c->arena_bytes : 0)) < 0 ||
        (rc = alloc_dt(r->be, &r->fs_all_buf, act, n_src * r->fs_numel)) < 0 ||
        (rc = alloc_dt(r->be, &r->fs_buf, act, B * r->fs_numel)) < 0 || (rc = alloc_dt(r->be, &r->kp_buf, DITTO_F32, 2 * B * DITTO_KP_DIM)) < 0 ||
        (rc = alloc_dt(r->be, &r->feat_buf, act, B * r->feat_shape[1] * r->feat_shape[2] * r->feat_shape[3])) < 0 ||
        (rc = alloc_dt(r->be, &r->img_buf, act, B * 3 * side * side)) < 0 ||
        (!c->device_post && (rc = alloc_dt(r->be, &r->hwc_buf, DITTO_F32, B * 3 * side * side)) < 0))
        goto fail;
    if ((rc = ditto_marks_init(r->be, &r->marks[0], STAGES)) < 0 || (rc = ditto_marks_init(r->be, &r->marks[1], STAGES)) < 0)
        goto fail;
    r->graphs = c->graphs && r->be->capture_begin;
    if (r->lanes > 1)
        ditto_log(&r->log, DITTO_LOG_INFO, "render: warp and decoder of each batch in two halves of %d and %d frames%s", (c->batch + 1) / 2,
                  c->batch / 2, r->be->lane_select ? " on two streams" : ", one after the other");
    /* DITTO_PAD_TAIL=1 pads short batches without graphs too (the tests check it changes no frame on the cpu) */
    const char *pad_env = getenv("DITTO_PAD_TAIL");
    r->pad_tail = r->graphs || (pad_env && !strcmp(pad_env, "1"));
    r->W = av->width;
    r->H = av->height;
    r->cw = ditto_yuv420_chroma_size(av->width);
    r->ch = ditto_yuv420_chroma_size(av->height);
    r->rgb_bytes = c->yuv_only ? 0 : (size_t)(r->W * r->H * 3);
    r->frame_bytes = r->rgb_bytes + (size_t)(r->W * r->H + 2 * r->cw * r->ch);
    r->post = c->device_post;
    if (r->post) {
        const size_t src_bytes = (size_t)(r->W * r->H * 3);
        if ((rc = ditto_putback_open_fused(&r->pb, r->be, r->W, r->H, &c->log)) < 0 || (rc = ditto_buffer_alloc(&r->src_buf, &r->be->allocator, src_bytes)) < 0 ||
            (rc = ditto_buffer_alloc(&r->out_buf, &r->be->allocator, r->frame_bytes * (size_t)B)) < 0)
            goto fail;
        if (n_src == 1 && (rc = r->be->upload(r->be, r->src_buf.ptr, av->img_rgb, src_bytes)) < 0)   /* resident for the clip */
            goto fail;
        if (n_src == 1 && !(r->m_rep = ditto_malloc((size_t)B * 9 * sizeof(float)))) {
            rc = DITTO_ERR_NOMEM;
            goto fail;
        }
        for (int64_t b = 0; r->m_rep && b < B; b++)
            memcpy(r->m_rep + 9 * b, av->m_c2o, 9 * sizeof(float));
    }
    if (r->pad_tail) {   /* rows a short first batch leaves unset still hold finite inputs */
        DittoTensor kp0 = dev_tensor(r->be, &r->kp_buf, DITTO_F32, DITTO_SHAPE(2 * B * DITTO_KP_DIM));
        DittoTensor fs0 = dev_tensor(r->be, &r->fs_buf, act, DITTO_SHAPE(B * r->fs_numel));
        if ((rc = ditto_op_fill(r->be, 0.0f, &kp0)) < 0 || (rc = ditto_op_fill(r->be, 0.0f, &fs0)) < 0)
            goto fail;
    }
    /* every source frame's f_s, once: rounded to the networks' storage dtype on the host */
    const size_t n_fs = (size_t)(n_src * r->fs_numel);
    if (act == DITTO_F32) {
        rc = r->be->upload(r->be, r->fs_all_buf.ptr, av->f_s, n_fs * sizeof(float));
    } else {
        void *tmp = ditto_malloc(n_fs * ditto_dtype_size(act) + 1);
        if (!tmp) {
            rc = DITTO_ERR_NOMEM;
            goto fail;
        }
        ditto_convert(tmp, act, av->f_s, DITTO_F32, n_fs);
        rc = r->be->upload(r->be, r->fs_all_buf.ptr, tmp, n_fs * ditto_dtype_size(act));
        ditto_free(tmp);
    }
    if (rc < 0)
        goto fail;
    *out = r;
    return 0;
fail:
    ditto_renderer_close(&r);
    return ditto_fail(&c->log, rc, "render: cannot set up batches of %d frames on the %s backend: %s", c->batch, c->be->name,
                      ditto_strerror(rc));
}

void ditto_renderer_close(DittoRenderer **pr)
{
    if (!pr || !*pr)
        return;
    DittoRenderer *r = *pr;
    r->be->download_wait(r->be);   /* no copy out of out_buf still running */
    r->be->sync(r->be);            /* nor a queued batch */
    if (r->g_warp)
        r->be->graph_free(r->be, r->g_warp);
    if (r->g_dec)
        r->be->graph_free(r->be, r->g_dec);
    ditto_marks_free(r->be, &r->marks[0]);
    ditto_marks_free(r->be, &r->marks[1]);
    ditto_putback_close(&r->pb);
    ditto_free(r->m_rep);
    ditto_buffer_free(&r->src_buf);
    ditto_buffer_free(&r->out_buf);
    ditto_motion_stitch_close(&r->ms);
    ditto_arena_free(&r->ws);
    ditto_arena_free(&r->ws2);
    ditto_buffer_free(&r->fs_all_buf);
    ditto_buffer_free(&r->fs_buf);
    ditto_buffer_free(&r->kp_buf);
    ditto_buffer_free(&r->feat_buf);
    ditto_buffer_free(&r->img_buf);
    ditto_buffer_free(&r->hwc_buf);
    ditto_free(r->xs);
    ditto_free(r);
    *pr = NULL;
}

/* Copy the f_s of source frame src into batch slot b. */
static int put_fs(DittoRenderer *r, int64_t b, int64_t src)
{
    const int64_t n = r->fs_numel;
    const size_t esz = ditto_dtype_size(r->act);
    DittoTensor from = dev_tensor(r->be, &r->fs_all_buf, r->act, DITTO_SHAPE(n));
    DittoTensor to = dev_tensor(r->be, &r->fs_buf, r->act, DITTO_SHAPE(n));
    from.data = (char *)from.data + (size_t)(src * n) * esz;
    to.data = (char *)to.data + (size_t)(b * n) * esz;
    return ditto_op_copy(r->be, &from, &to);
}

#define TRY(expr) do { rc = (expr); if (rc < 0) goto done; } while (0)

/* Frames [a, a + n) of a full-batch tensor (the batch buffers hold r->batch frames). */
static DittoTensor frames(DittoTensor all, int64_t a, int64_t n)
{
    DittoTensor t = all;
    ditto_tensor_slice(&all, 0, a, a + n, 1, &t);   /* cannot fail: 0 <= a < a + n <= batch */
    return t;
}

/* Warp of frames [a, a + n) of the batch buffers: f_s, x_s, x_d -> feat. */
static int warp_items(DittoRenderer *r, int64_t a, int64_t n, DittoArena *ws)
{
    const int64_t *fs = r->av->fs_shape, *fe = r->feat_shape, B = r->batch;
    DittoTensor kp = dev_tensor(r->be, &r->kp_buf, DITTO_F32, DITTO_SHAPE(2, B, DITTO_NUM_KP, 3)), kp_s, kp_d;
    DITTO_TRY(ditto_tensor_select(&kp, 0, 0, &kp_s));
    DITTO_TRY(ditto_tensor_select(&kp, 0, 1, &kp_d));
    DittoTensor x_s = frames(kp_s, a, n), x_d = frames(kp_d, a, n);
    DittoTensor f_s = frames(dev_tensor(r->be, &r->fs_buf, r->act, DITTO_SHAPE(B, fs[0], fs[1], fs[2], fs[3])), a, n);
    DittoTensor feat = frames(dev_tensor(r->be, &r->feat_buf, r->act, DITTO_SHAPE(B, fe[1], fe[2], fe[3])), a, n);
    return ditto_warp_forward(r->warp, ws, &f_s, &x_s, &x_d, &feat, NULL);
}

static int run_warp(DittoRenderer *r, int64_t N)
{
    return warp_items(r, 0, N, &r->ws);
}

/* Decoder of frames [a, a + n): feat -> img (n,3,512,512); for the host also -> hwc (n,512,512,3) float32 x 255. */
static int decode_items(DittoRenderer *r, int64_t a, int64_t N, DittoArena *ws)
{
    const int64_t *fe = r->feat_shape, side = DITTO_RENDER_SIDE, B = r->batch;
    DittoTensor feat = frames(dev_tensor(r->be, &r->feat_buf, r->act, DITTO_SHAPE(B, fe[1], fe[2], fe[3])), a, N);
    DittoTensor img = frames(dev_tensor(r->be, &r->img_buf, r->act, DITTO_SHAPE(B, 3, side, side)), a, N);
    DITTO_TRY(ditto_decoder_forward(r->decoder, ws, &feat, &img, NULL));
    if (r->post)   /* the paste-back reads img itself */
        return 0;
    DittoTensor hwc = frames(dev_tensor(r->be, &r->hwc_buf, DITTO_F32, DITTO_SHAPE(B, side, side, 3)), a, N);   /* the copy converts */
    DittoTensor img_p;
    DITTO_TRY(ditto_tensor_permute(&img, (const int[]){ 0, 2, 3, 1 }, &img_p));
    DITTO_TRY(ditto_op_copy(r->be, &img_p, &hwc));
    const DittoUnaryParams x255 = { DITTO_UNARY_AFFINE, 255.0f, 0.0f };
    return ditto_op_unary(r->be, &x255, &hwc, &hwc);
}

static int run_decode(DittoRenderer *r, int64_t N)
{
    return decode_items(r, 0, N, &r->ws);
}

static int wd_half(void *ctx, int64_t a, int64_t n, DittoArena *ws)
{
    DittoRenderer *r = ctx;
    int rc = warp_items(r, a, n, ws);
    return rc < 0 ? rc : decode_items(r, a, n, ws);
}

/*
 * Lanes: warp and decoder of the first half of the batch on the backend's
 * lane 0, of the second half on lane 1 (arena ws2), so the GPU overlaps
 * them; every op is per item, so the frames are those of one lane.
 */
static int run_wd(DittoRenderer *r, int64_t N)
{
    DittoArena *const ws[2] = { &r->ws, &r->ws2 };
    return ditto_backend_halves(r->be, N, ws, wd_half, r);
}

/* The arenas are one block each, where the graphs already captured have their scratch (ws2: unless lanes are off). */
static bool arenas_in_place(const DittoRenderer *r)
{
    return r->ws.nblocks == 1 && (!r->g_base || r->g_base == r->ws.blocks[0].ptr) &&
           (r->lanes < 2 || (r->ws2.nblocks == 1 && (!r->g_base2 || r->g_base2 == r->ws2.blocks[0].ptr)));
}

/*
 * Capture one stage of N frames as *graph (nothing runs): 1 when kept, 0
 * when dropped (the arena grew while recording, or the stage failed in the
 * capture: try again later, at most GRAPH_TRIES times), or an error.
 */
static int capture_stage(DittoRenderer *r, int64_t N, void **graph, int (*fn)(DittoRenderer *, int64_t))
{
    DittoBackend *be = r->be;
    const int grows = r->ws.grows, grows2 = r->ws2.grows;
    DittoArenaMark mark = ditto_arena_mark(&r->ws), mark2 = ditto_arena_mark(&r->ws2);
    DITTO_TRY(be->capture_begin(be));
    int rc = fn(r, N);
    void *g = NULL;
    int rc2 = be->capture_end(be, &g);
    if (rc >= 0 && rc2 >= 0 && g && r->ws.grows == grows && r->ws2.grows == grows2 && arenas_in_place(r)) {
        *graph = g;
        r->g_base = r->ws.blocks[0].ptr;
        if (r->lanes > 1)
            r->g_base2 = r->ws2.blocks[0].ptr;
        ditto_log(&r->log, DITTO_LOG_DEBUG, "render: a stage of %lld frames captured as a graph", (long long)N);
        return 1;
    }
    if (g)
        be->graph_free(be, g);
    r->tries++;
    ditto_log(&r->log, DITTO_LOG_DEBUG, "render: graph capture dropped (%s); op by op", rc < 0 ? ditto_strerror(rc) : rc2 < 0 ? ditto_strerror(rc2) : "the arena grew");
    ditto_arena_release(&r->ws, mark);
    ditto_arena_release(&r->ws2, mark2);
    return 0;
}

/*
 * One stage op by op, or from its graph. A full batch after a full batch
 * (the arena has its size), or the first one when the arena was presized,
 * is captured once (if ditto_renderer_prepare has not already done it).
 */
static int run_stage(DittoRenderer *r, int64_t N, void **graph, int (*fn)(DittoRenderer *, int64_t))
{
    DittoBackend *be = r->be;
    if ((r->g_warp || r->g_dec) && !arenas_in_place(r)) {
        /* the arena was re-folded (it grew in a stage that runs op by op): the captured scratch is gone */
        if (r->g_warp)
            be->graph_free(be, r->g_warp);
        if (r->g_dec)
            be->graph_free(be, r->g_dec);
        r->g_warp = r->g_dec = r->g_base = r->g_base2 = NULL;
        r->tries++;
    }
    if (*graph && N == r->batch)
        return be->graph_launch(be, *graph);
    if (!r->graphs || N != r->batch || (r->last_n != r->batch && !r->presized) || r->tries >= GRAPH_TRIES)
        return fn(r, N);
    int rc = capture_stage(r, N, graph, fn);
    return rc < 0 ? rc : rc ? be->graph_launch(be, *graph) : fn(r, N);
}

int ditto_renderer_prepare(DittoRenderer *r)
{
    if (!r)
        return DITTO_ERR_INVAL;
    if (!r->graphs || !r->presized || r->g_warp || r->g_dec || r->tries >= GRAPH_TRIES)
        return 0;
    /* the stages' scratch as a batch lays it out: the warp's, then the decoder's on top (a batch's stitch scratch is dead by then) */
    int rc = capture_stage(r, r->batch, &r->g_warp, r->lanes > 1 ? run_wd : run_warp);
    if (rc > 0 && r->lanes < 2)
        rc = capture_stage(r, r->batch, &r->g_dec, run_decode);
    if ((ditto_arena_reset(&r->ws) < 0 || ditto_arena_reset(&r->ws2) < 0) && rc >= 0)
        rc = DITTO_ERR_NOMEM;
    return rc < 0 ? rc : 0;
}

/* Add the stage times of the batch that recorded set k (done) to t. */
static void add_times(const DittoRenderer *r, int k, int64_t g0, int n, DittoRenderTimes *t)
{
    if (!t)
        return;
    const DittoMarks *m = &r->marks[k];
    t->stitch += ditto_marks_seconds(r->be, m, M_START, M_STITCH);
    t->warp += ditto_marks_seconds(r->be, m, M_STITCH, M_WARP);
    t->decode += ditto_marks_seconds(r->be, m, M_WARP, M_DECODE);
    t->putback += ditto_marks_seconds(r->be, m, M_DECODE, M_POST);   /* the paste-back and the colour conversion are one pass */
    t->g0 = g0;
    t->n = n;
}

int ditto_renderer_flush(DittoRenderer *r, DittoRenderTimes *t)
{
    if (!r || !r->pending)
        return 0;
    DITTO_TRY(ditto_marks_wait(r->be, &r->marks[r->set ^ 1], M_POST));
    r->pending = false;
    add_times(r, r->set ^ 1, r->pending_g0, r->pending_n, t);
    return 0;
}

/* Paste-back and yuv420p of the N renders in img_buf on the device, into out_buf (rgb | y | u | v a frame). */
static int run_post(DittoRenderer *r, int64_t g0, int64_t N)
{
    DittoBackend *be = r->be;
    const DittoAvatar *av = r->av;
    const int64_t side = DITTO_RENDER_SIDE, W = r->W, H = r->H, fb = (int64_t)r->frame_bytes;
    uint8_t *base = (uint8_t *)r->out_buf.ptr + r->rgb_bytes;
    DittoTensor img = dev_tensor(be, &r->img_buf, r->act, DITTO_SHAPE(N, 3, side, side));
    DittoTensor src = dev_tensor(be, &r->src_buf, DITTO_U8, DITTO_SHAPE(H, W, 3));
    DittoTensor rgb = dev_tensor(be, &r->out_buf, DITTO_U8, DITTO_SHAPE(N, H, W, 3));
    DittoTensor y = ditto_tensor(base, DITTO_U8, DITTO_SHAPE(N, H, W));
    DittoTensor u = ditto_tensor(base + H * W, DITTO_U8, DITTO_SHAPE(N, r->ch, r->cw));
    DittoTensor v = ditto_tensor(base + H * W + r->ch * r->cw, DITTO_U8, DITTO_SHAPE(N, r->ch, r->cw));
    y.device = u.device = v.device = be->device;
    rgb.stride[0] = y.stride[0] = u.stride[0] = v.stride[0] = fb;
    DITTO_TRY(be->download_fence(be));   /* the last batch's frames copied out of out_buf before it is overwritten */
    DittoTensor *prgb = r->rgb_bytes ? &rgb : NULL;
    if (av->n_frames == 1) {
        /*
         * One frame and one map under every render: all of them in one pass,
         * and once out_buf's frames hold the background (outside the box it
         * never changes) only the blocks that meet the box.
         */
        const bool box_only = N <= r->bg_frames;
        DITTO_TRY(ditto_putback_yuv(r->pb, &src, &img, r->m_rep, prgb, &y, &u, &v, box_only, NULL));
        if (!box_only)
            r->bg_frames = N > r->bg_frames ? N : r->bg_frames;
        return 0;
    }
    for (int64_t b = 0; b < N; b++) {
        int64_t k = ditto_mirror_index(g0 + b, av->n_frames);
        /* stream-ordered: the previous frame's paste-back has read the buffer */
        DITTO_TRY(be->upload(be, r->src_buf.ptr, av->img_rgb + k * H * W * 3, (size_t)(H * W * 3)));
        DittoTensor ib = frames(img, b, 1), rb = frames(rgb, b, 1), yb = frames(y, b, 1), ub = frames(u, b, 1), vb = frames(v, b, 1);
        DITTO_TRY(ditto_putback_yuv(r->pb, &src, &ib, av->m_c2o + k * 9, prgb ? &rb : NULL, &yb, &ub, &vb, false, NULL));
    }
    return 0;
}

int ditto_renderer_fetch(DittoRenderer *r, int k, void *rgb, void *yuv)
{
    if (!r || !r->post || k < 0 || k >= r->batch || !yuv || (rgb && !r->rgb_bytes))
        return DITTO_ERR_INVAL;
    /* the device frame is rgb | y u v, packed */
    const uint8_t *src = (const uint8_t *)r->out_buf.ptr + (size_t)k * r->frame_bytes;
    const size_t rgb_bytes = r->rgb_bytes;
    DittoBackend *be = r->be;
    if (rgb && (uint8_t *)yuv == (uint8_t *)rgb + rgb_bytes)
        return be->download_async(be, rgb, src, r->frame_bytes);
    if (rgb)
        DITTO_TRY(be->download_async(be, rgb, src, rgb_bytes));
    return be->download_async(be, yuv, src + rgb_bytes, r->frame_bytes - rgb_bytes);
}

int ditto_renderer_fetch_notify(DittoRenderer *r, void (*fn)(void *arg), void *arg)
{
    if (!r || !fn)
        return DITTO_ERR_INVAL;
    return r->be->download_notify(r->be, fn, arg);
}

int ditto_renderer_fetch_wait(DittoRenderer *r)
{
    return r ? r->be->download_wait(r->be) : 0;
}

int ditto_renderer_run(DittoRenderer *r, int64_t g0, int n, const DittoXInfo *x_d_info, const DittoCtrl *const *ctrl, void *out,
                       DittoRenderTimes *t)
{
    if (!r || n < 1 || n > r->batch || !x_d_info || !out != r->post)
        return DITTO_ERR_INVAL;
    DittoBackend *be = r->be;
    const DittoAvatar *av = r->av;
    const int64_t N = n, side = DITTO_RENDER_SIDE;
    int rc = 0;
    TRY(ditto_marks_record(be, &r->marks[r->set], M_START));

    /* source frame of every generated frame: ping-pong over the loop */
    for (int b = 0; b < n; b++)
        r->xs[b] = &av->x_s_info[ditto_mirror_index(g0 + b, av->n_frames)];

    /* motion stitch -> x_s, x_d (n,21,3) */
    DittoTensor x_s = dev_tensor(be, &r->kp_buf, DITTO_F32, DITTO_SHAPE(N, DITTO_NUM_KP, 3));
    DittoTensor x_d = x_s;
    x_d.data = (float *)x_s.data + (int64_t)r->batch * DITTO_KP_DIM;
    TRY(ditto_motion_stitch_run(r->ms, be, &r->ws, g0, N, r->xs, x_d_info, ctrl, &x_s, &x_d, NULL));

    /* f_s of each frame's source frame */
    if (av->n_frames > 1 || !r->fs_filled) {
        int64_t count = av->n_frames > 1 ? N : r->batch;
        for (int64_t b = 0; b < count; b++)
            TRY(put_fs(r, b, av->n_frames > 1 ? ditto_mirror_index(g0 + b, av->n_frames) : 0));
        r->fs_filled = av->n_frames == 1;
    }
    TRY(ditto_marks_record(be, &r->marks[r->set], M_STITCH));

    /*
     * With graphs a short (tail) batch runs as a full one: the rows past n
     * hold the previous batch's inputs, every item's result is independent
     * of the others (batch-invariant ops), and the full-batch graph and
     * convolution plans serve it instead of new ones for a new size.
     */
    const int64_t Nr = r->pad_tail ? r->batch : N;
    TRY(run_stage(r, Nr, &r->g_warp, r->lanes > 1 ? run_wd : run_warp));
    TRY(ditto_marks_record(be, &r->marks[r->set], M_WARP));
    if (r->lanes < 2)   /* with lanes the decoder ran in the warp's stage */
        TRY(run_stage(r, Nr, &r->g_dec, run_decode));
    TRY(ditto_marks_record(be, &r->marks[r->set], M_DECODE));
    if (r->post)
        TRY(run_post(r, g0, N));
    TRY(ditto_marks_record(be, &r->marks[r->set], M_POST));
    r->last_n = (int)Nr;
    if (!r->post) {   /* the frames to the host: the batch is done after this */
        TRY(be->download(be, out, r->hwc_buf.ptr, (size_t)(N * side * side * 3) * sizeof(float)));
        add_times(r, r->set, g0, n, t);
    } else if (r->marks[0].m[0]) {
        /* queued: wait for the batch before it instead, so the device has this one meanwhile */
        TRY(ditto_renderer_flush(r, t));
        r->pending = true;
        r->pending_g0 = g0;
        r->pending_n = n;
        r->set ^= 1;
    } else {
        TRY(be->sync(be));
        add_times(r, r->set, g0, n, t);
    }
done:
    if ((ditto_arena_reset(&r->ws) < 0 || ditto_arena_reset(&r->ws2) < 0) && rc >= 0)
        rc = DITTO_ERR_NOMEM;
    if (rc < 0 && rc != DITTO_ERR_NOMEM)
        ditto_log(&r->log, DITTO_LOG_DEBUG, "render: batch at frame %lld failed: %s", (long long)g0, ditto_strerror(rc));
    return rc;
}
