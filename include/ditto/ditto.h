/*
 * ditto.c — public API.
 *
 * Speech + a portrait (or a short video loop, or a baked .avatar file) ->
 * lip-synced talking-head frames, and from them an MP4.
 *
 * Objects:
 *   DittoModels   the model set (immutable after open): the networks, the
 *                 HuBERT encoder, the avatar registrar. Open once, use for
 *                 many clips.
 *   DittoSession  one clip for one avatar: push 16 kHz audio (the whole
 *                 file or chunks), pull finished frames in order. The
 *                 pipeline runs on worker threads connected by bounded
 *                 queues (audio + motion -> stitch/warp/decode in batches
 *                 -> paste-back + colour conversion), so the motion of the
 *                 next window is computed while the current one renders.
 *
 * Conventions: functions return 0 (or a count) on success and a negative
 * DITTO_ERR_* code on failure, with one message naming the file and the
 * problem through the log callback of the params. Objects are opened with
 * *_open(&obj, &params) (params filled by *_params_default first) and
 * closed with *_close(&obj), which accepts NULL and sets obj to NULL. The
 * library never prints and never exits.
 *
 * A minimal offline render:
 *
 *   DittoModelsParams mp;  ditto_models_params_default(&mp);  mp.weights = dir;
 *   DittoModels *m;        ditto_models_open(&m, &mp);
 *   DittoRenderParams rp;  ditto_render_params_default(&rp);
 *   rp.audio = "speech.wav"; rp.output = "out.mp4"; rp.session.avatar = "face.jpg";
 *   ditto_render_file(m, &rp, NULL);
 *   ditto_models_close(&m);
 */
#ifndef DITTO_H
#define DITTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ditto/ditto_error.h"
#include "ditto/ditto_types.h"
#include "ditto/ditto_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Output frame rate of every clip. */
#define DITTO_FPS 25
/** Sample rate of the audio a session takes (HuBERT). */
#define DITTO_SAMPLE_RATE 16000

/* ---- model set ------------------------------------------------------------------ */

typedef struct DittoModels DittoModels;

typedef struct DittoModelsParams {
    /**
     * The official ditto_pytorch folder (models/<net>.pth, aux_models/<aux>.onnx;
     * blaze_face.onnx, face_mesh.onnx and hubert.onnx are also looked for
     * in ../ditto_onnx), or "synthetic" for deterministic random networks
     * generated in C at the tiny size ("synthetic:small" and
     * "synthetic:full" pick the larger synthetic configurations). Synthetic
     * output is noise where the face would be: for tests and demos only.
     */
    const char *weights;
    /** Folder of the auxiliary ONNX models when they are not under weights (NULL). */
    const char *aux;
    /** "cpu" (default) or "cuda". */
    const char *backend;
    /**
     * Storage of the render networks (stitch, warp, decoder) on the backend:
     * DITTO_PRECISION_AUTO (default: float16 on "cuda", float32 on "cpu"),
     * DITTO_PRECISION_FP32, or DITTO_PRECISION_FP16 (GPU backends only; fp32
     * maths inside every op, coordinates and statistics in fp32). Avatar
     * registration and HuBERT stay float32; the motion model: motion_precision.
     */
    int precision;
    /**
     * The motion model's (LMDM) decoder linears, 50 steps a window:
     * DITTO_PRECISION_AUTO (default) and DITTO_PRECISION_FP32: float32, the
     * motion equals the CPU's to float rounding, and GPU frames a CPU
     * render's to fp16 rounding (PSNR 53 dB on the H200). About 45 ms a
     * window on an H200, but the motion runs beside the render: the 15.8 s
     * test clip took 2.13 s against 2.10 s with fp16. DITTO_PRECISION_FP16:
     * TF32 products of operands held as float16 on a GPU, about 24 ms a
     * window, the motion within rel-L2 1e-3 of float32; the sampler
     * amplifies that, so frames can differ from a float32 render of the
     * same seed (PSNR down to ~28 dB with synthetic weights). On the CPU
     * FP16 rounds the same operands in float32, as the GPU's reference.
     */
    int motion_precision;
    /** CPU threads of each pipeline stage; <= 0: all cores (default). */
    int threads;
    /** Seed of the synthetic weights (0). */
    uint64_t synthetic_seed;
    /**
     * GPU backends: prepare at open what the first session would otherwise
     * set up while the clock runs: the convolution plans of the render
     * networks for this batch size, the motion sampler of the default 50
     * DDIM steps (captured as a CUDA graph). 8 (the default session batch);
     * 0: no warm-up. Ignored on the CPU.
     */
    int warmup_batch;
    /** Errors, warnings (a synthetic model set warns once) and information. */
    DittoLogger log;
} DittoModelsParams;

enum { DITTO_PRECISION_AUTO = 0, DITTO_PRECISION_FP32 = 1, DITTO_PRECISION_FP16 = 2 };

/** weights NULL (must be set), backend "cpu", automatic precision, all cores, no logger. */
DITTO_API void ditto_models_params_default(DittoModelsParams *p);

/**
 * Load every network (strict: a missing or mis-shaped key is an error
 * naming the file and the key). Errors: DITTO_ERR_NOENT (missing folder
 * or file), DITTO_ERR_KEY / DITTO_ERR_FORMAT (bad checkpoint),
 * DITTO_ERR_UNSUPPORTED (backend not built in), DITTO_ERR_NOMEM.
 * A model set serves one session at a time. On the CPU backend the
 * network stages (audio + motion, render batches) take turns, each using
 * every core; paste-back, colour conversion and encoding overlap with them.
 */
DITTO_API int ditto_models_open(DittoModels **out, const DittoModelsParams *p);
DITTO_API void ditto_models_close(DittoModels **m);
/** Whether the networks are synthetic (random): the output is then noise. */
DITTO_API bool ditto_models_synthetic(const DittoModels *m);
/** Name of the backend the networks run on ("cpu", "cuda"). */
DITTO_API const char *ditto_models_backend(const DittoModels *m);

/* ---- frames and statistics ----------------------------------------------------- */

/** One output frame; the planes stay valid until the next pull or close. */
typedef struct DittoFrame {
    int64_t index;               /**< 0-based frame number (25 fps) */
    int width, height;           /**< the avatar's full resolution */
    const uint8_t *y, *u, *v;    /**< yuv420p, BT.601 limited range */
    ptrdiff_t y_stride, uv_stride;
    const uint8_t *rgb;          /**< the same frame as packed RGB24; NULL with DittoSessionParams.yuv_only */
    ptrdiff_t rgb_stride;
} DittoFrame;

/** Pipeline stages, for the per-stage times. */
typedef enum DittoStage {
    DITTO_STAGE_AVATAR = 0,      /**< avatar registration or .avatar load */
    DITTO_STAGE_AUDIO,           /**< audio decode + HuBERT */
    DITTO_STAGE_MOTION,          /**< conditions + LMDM (DDIM) windows */
    DITTO_STAGE_STITCH,          /**< motion stitch + stitching network */
    DITTO_STAGE_WARP,            /**< warping network (on a GPU with two render lanes: warp and decoder, run as one stage) */
    DITTO_STAGE_DECODE,          /**< SPADE decoder (0 when it ran in the warp's stage) */
    DITTO_STAGE_PUTBACK,         /**< paste-back into the full frame (on a GPU: and RGB -> YUV, one pass) */
    DITTO_STAGE_COLOR,           /**< RGB -> YUV (on a GPU: queueing the finished frames' copies to the host) */
    DITTO_STAGE_ENCODE,          /**< H.264 + AAC + mux */
    DITTO_STAGE_COUNT
} DittoStage;

/** Short name of a stage ("avatar", "audio", ...). */
DITTO_API const char *ditto_stage_name(DittoStage s);

typedef struct DittoStats {
    int64_t frames;              /**< frames produced */
    int64_t total;               /**< frames the audio gives (-1 until its end is known) */
    double seconds[DITTO_STAGE_COUNT];  /**< busy time of each stage (stages overlap) */
    double wall;                 /**< wall time since the session opened */
    int width, height;           /**< frame size */
    int batch;                   /**< render batch size */
    /* milestones, seconds since the session opened (ditto_render_file: since the call began); 0 = not reached */
    double t_ready;              /**< session set up: avatar registered, renderer ready */
    double t_first_frame;        /**< the first finished frame was ready */
    double t_last_frame;         /**< the last frame was handed out */
    double t_audio;              /**< ditto_render_file only: the audio file decoded */
    double t_closed;             /**< ditto_render_file only: the MP4 closed and in place */
} DittoStats;

/* ---- session ---------------------------------------------------------------------- */

typedef struct DittoSession DittoSession;

typedef struct DittoSessionParams {
    /** Portrait image, video loop (played back and forth) or .avatar file. */
    const char *avatar;
    uint64_t seed;               /**< drives every random draw (diffusion noise) [0] */
    int steps;                   /**< DDIM steps, 1..1000 [50] */
    int emo;                     /**< emotion label 0..7: angry, disgust, fear, happy, neutral, sad, surprise, contempt [4] */
    int batch;                   /**< frames per render batch, >= 1 [8] */
    int max_size;                /**< longer side limit of the avatar frames [1920] */
    int fade_in;                 /**< frames over which the expression eases in from the avatar's own [0] */
    int fade_out;                /**< frames over which it eases back at the end [0] */
    bool yuv_only;               /**< frames without the RGB copy (DittoFrame.rgb NULL): less to move off the GPU [false] */
    DittoLogger log;
} DittoSessionParams;

DITTO_API void ditto_session_params_default(DittoSessionParams *p);

/**
 * Register (or load) the avatar and start the workers. Errors:
 * DITTO_ERR_NOENT (missing avatar), DITTO_ERR_FORMAT (unreadable),
 * DITTO_ERR_NOFACE (no face found), DITTO_ERR_SHAPE (a .avatar baked with
 * other networks), DITTO_ERR_AGAIN (the model set already has a session),
 * DITTO_ERR_NOMEM. Every buffer of the clip is allocated here.
 */
DITTO_API int ditto_session_open(DittoSession **out, DittoModels *m, const DittoSessionParams *p);

/**
 * Append n samples of 16 kHz mono audio in [-1, 1] (copied; any chunk
 * size). Never waits for the renderer. Returns 0, DITTO_ERR_AGAIN after
 * ditto_session_end_audio, or the pipeline's first error.
 */
DITTO_API int ditto_session_push_audio(DittoSession *s, const float *pcm, int64_t n);

/**
 * No more audio: the last frames are produced and the clip ends after
 * ceil(samples / 16000 * 25) frames. DITTO_ERR_INVAL when no audio was
 * pushed (zero-length audio).
 */
DITTO_API int ditto_session_end_audio(DittoSession *s);

/**
 * Wait for the next frame. Returns 1 and fills *f, 0 after the last frame,
 * or the pipeline's first error (every stage stops at the first error;
 * it is reported once through the log).
 */
DITTO_API int ditto_session_pull_frame(DittoSession *s, DittoFrame *f);

/** Stop the workers (also mid-clip) and free the session. */
DITTO_API void ditto_session_close(DittoSession **s);

DITTO_API void ditto_session_stats(const DittoSession *s, DittoStats *st);

/* ---- helpers ------------------------------------------------------------------------ */

/**
 * Decode an audio file (any format FFmpeg reads) to 16 kHz mono float, as
 * the model consumes it. *pcm is freed with ditto_pcm_release. Errors name
 * the file: DITTO_ERR_NOENT, DITTO_ERR_FORMAT (not audio, empty, no
 * samples), DITTO_ERR_UNSUPPORTED (built without FFmpeg).
 */
DITTO_API int ditto_audio_decode(const char *path, float **pcm, int64_t *n, const DittoLogger *log);
DITTO_API void ditto_pcm_release(float *pcm);

/** SHA-256 of a frame's Y, U and V planes (rows without padding), 64 hex digits + NUL. */
DITTO_API int ditto_frame_sha256(const DittoFrame *f, char hex[65]);

/* ---- one-call render to MP4 ------------------------------------------------------- */

/** Progress of a render, reported after every frame written. */
typedef struct DittoProgress {
    int64_t done, total;         /**< frames written / in the clip */
    double elapsed;              /**< seconds since the render started */
} DittoProgress;

typedef struct DittoRenderParams {
    const char *audio;           /**< speech file (any format FFmpeg reads) */
    const char *output;          /**< MP4 to write (temporary file + rename) */
    DittoSessionParams session;  /**< avatar, seed, steps, emotion, batch, ... */
    const char *encoder;         /**< NULL/"auto": h264_nvenc when usable, else libx264 */
    int crf;                     /**< constant quality 0..51 [18] (when bitrate is 0) */
    int64_t bitrate;             /**< video bits per second; > 0 selects it over crf [0] */
    const char *preset;          /**< encoder preset; NULL: for libx264 "ultrafast" on a GPU backend, "superfast" on the CPU; else the encoder's default */
    /** Called after each frame is written (may be NULL). */
    void (*progress)(void *cookie, const DittoProgress *p);
    /** Called with each frame before it is encoded (may be NULL); a negative return aborts. */
    int (*on_frame)(void *cookie, const DittoFrame *f);
    void *cookie;
    DittoLogger log;             /**< also used by the session when session.log has no callback */
} DittoRenderParams;

DITTO_API void ditto_render_params_default(DittoRenderParams *p);

/**
 * audio + avatar -> MP4: H.264 yuv420p (BT.601 limited range, tagged) at
 * 25 fps with ceil(seconds * 25) frames, plus the original audio as AAC,
 * in one pass with +faststart. The file appears under p->output only when
 * complete. stats may be NULL. Errors as the session's, plus those of the
 * audio file and the output (DITTO_ERR_NOENT / DITTO_ERR_IO for a missing
 * or unwritable folder, DITTO_ERR_NOSPC).
 */
DITTO_API int ditto_render_file(DittoModels *m, const DittoRenderParams *p, DittoStats *stats);

#ifdef __cplusplus
}
#endif
#endif /* DITTO_H */
