/*
 * Internals of the pipeline behind include/ditto/ditto.h: the per-batch
 * render path (render.c) and a few helpers pipeline.c and the tests share.
 */
#ifndef DITTO_PIPELINE_PIPELINE_INTERNAL_H
#define DITTO_PIPELINE_PIPELINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ditto/ditto.h"
#include "models/models.h"
#include "pipeline/avatar_file.h"
#include "pipeline/motion_stitch.h"

/* Side of the rendered face (the decoder's output) that paste-back takes. */
#define DITTO_RENDER_SIDE 512

/*
 * The render path of B frames (DESIGN.md "Batching"):
 *   motion stitch (host math + stitching network)  -> x_s, x_d (B,21,3)
 *   f_s of each frame's source frame (mirror index) -> (B,C,D,H,W)
 *   warp -> (B,C',H,W) -> decoder -> (B,3,512,512) in [0,1]
 *   -> HWC * 255 (the float32 render paste-back takes)
 * then either to the host (paste-back follows there, pipeline.c), or, with
 * device_post, paste-back into the full avatar frame and BT.601 yuv420p on
 * the same backend, and only the finished frames go to the host.
 * Every buffer is allocated at open for `batch` frames (the source f_s of
 * every avatar frame is uploaded once, and an image avatar's frame too),
 * scratch comes from one arena that settles after the first batch; nothing
 * is allocated per frame. A batch of n < batch frames (the tail) uses the
 * leading part of the buffers. Frames must come in order (the motion
 * stitch carries state: d0, fades).
 *
 * CUDA graphs (graphs and a backend that captures): once a full batch has
 * run op by op, the warp and the decoder (+ HWC x 255) of a full batch are
 * captured and replayed from then on; they read and write fixed buffers,
 * so the frames are those of op-by-op execution. With lanes = 2 the warp
 * and the decoder are one stage over two half batches (two arenas, one
 * graph), and the stage times report it as the warp's.
 */
typedef struct DittoRenderer DittoRenderer;

typedef struct DittoRendererConfig {
    DittoBackend *be;                       /* the networks' backend */
    DittoWarp *warp;
    DittoDecoder *decoder;
    DittoStitch *stitch;
    const DittoAvatar *avatar;              /* borrowed; must outlive the renderer */
    bool is_image;                          /* image source (motion stitch defaults) */
    int batch;                              /* B >= 1 */
    DittoFadeType fade_type;                /* for the fade controls */
    bool device_post;                       /* paste-back + yuv420p on be: run gives finished frames */
    bool yuv_only;                          /* device_post: the planes alone, no RGB frames to fetch */
    bool graphs;                            /* replay full batches as CUDA graphs where be captures */
    size_t arena_bytes;                     /* 0, or the activation arena a full batch needs (from a warm-up of
                                               the same batch and lanes): then the first full batch is captured already */
    int lanes;                              /* 2: warp + decoder as one stage, the two half batches on the backend's
                                               two lanes (ditto_backend_halves); else 1 */
    DittoLogger log;
} DittoRendererConfig;

int ditto_renderer_open(DittoRenderer **out, const DittoRendererConfig *c);
void ditto_renderer_close(DittoRenderer **r);

/*
 * With graphs and an arena presized at open, capture the full-batch warp
 * and decoder graphs now, before the first batch (nothing runs): the render
 * worker calls it while the first motion window is computed, so the first
 * batch replays graphs instead of recording them. 0 also when there is
 * nothing to do or the capture was dropped (the first batch then tries).
 */
int ditto_renderer_prepare(DittoRenderer *r);

/* Busy time of the render stages, seconds (backend synchronised). */
typedef struct DittoRenderTimes {
    double stitch, warp, decode, putback, color;
    int64_t g0;                  /* the batch they are of: frames [g0, g0 + n); n 0: none yet */
    int n;
} DittoRenderTimes;

/*
 * Frames g0 .. g0+n-1 (1 <= n <= batch): x_d_info (n) from cvt_fmt, ctrl
 * (n entries, each may be NULL) or NULL. Without device_post -> out, host
 * memory: n renders (n, 512, 512, 3) float32 in 0..255. With device_post
 * out must be NULL: the n finished frames stay on the device for
 * ditto_renderer_fetch() (their copies finish before the next run
 * overwrites them), and where the backend has marks the batch is only
 * queued: run returns once the batch before it is done, so the device
 * has this one meanwhile. Adds the stage times of the batch that is done
 * to *t (may be NULL; t->n 0 when none is).
 */
int ditto_renderer_run(DittoRenderer *r, int64_t g0, int n, const DittoXInfo *x_d_info, const DittoCtrl *const *ctrl, void *out,
                       DittoRenderTimes *t);
/* Wait for a queued batch (device_post) and add its stage times to *t (t->n 0 when none was queued). */
int ditto_renderer_flush(DittoRenderer *r, DittoRenderTimes *t);
/*
 * device_post: queue the copy of finished frame k (< n) of the last run:
 * RGB24 (H,W,3) into rgb unless NULL, and the yuv420p planes Y (H,W), U and
 * V (ch,cw each, ditto_yuv420_chroma_size), packed in that order, into yuv
 * (host_alloc memory where the backend has it). The copies run while the
 * next batch is computed: the host memory holds the frame only once
 * ditto_renderer_fetch_notify's fn has run (or ditto_renderer_fetch_wait
 * returned).
 */
int ditto_renderer_fetch(DittoRenderer *r, int k, void *rgb, void *yuv);
/* fn(arg) once the copies queued so far are done, on another thread (backend.h's download_notify): fn must not call the backend. */
int ditto_renderer_fetch_notify(DittoRenderer *r, void (*fn)(void *arg), void *arg);
/* Block until every queued copy and notification is done. */
int ditto_renderer_fetch_wait(DittoRenderer *r);

/*
 * ditto_now() when the session's first motion frame reached the render
 * queue and when its first render batch was done (0: not yet), for
 * ditto bench --e2e.
 */
void ditto_session_milestones(const DittoSession *s, double *motion0, double *batch0);

/* Monotonic clock in seconds. */
double ditto_now(void);

/*
 * Device memory of a model set's backends (backend.h DittoMemInfo): the
 * render networks' and the motion / audio / registration one's.
 * DITTO_ERR_UNSUPPORTED on backends without accounting (the CPU).
 */
int ditto_models_mem(const DittoModels *m, DittoMemInfo *render, DittoMemInfo *motion);

#endif
