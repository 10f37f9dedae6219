/*
 * Audio front end (ditto-architecture.md 3.2, 5.8): 16 kHz mono PCM ->
 * 1024-d HuBERT features at 25 fps, one row per video frame.
 *
 * The encoder (DittoHubert) runs hubert_streaming_fix_kv.onnx through the
 * ONNX executor: one call takes 6480 samples (0.405 s) and gives T = 20
 * rows of (T, 1024); rows [-14, -4) (6..15) are kept and consecutive pairs
 * averaged, so every call yields 5 frames:
 *   frame j = (row 6+2j + row 7+2j) / 2, j = 0..4.
 *
 * Offline chunking (upstream Wav2FeatHubert.wav2feat):
 *   speech_pad = 2000 zeros | audio | 6480 zeros
 *   for i = 0, 5, 10, ... while i < num_f:
 *     start = int(i * 0.04 * 16000)   (double, truncated: not always 640 i)
 *     frames i..i+4 = call(speech_pad[start, start + 6480))
 *   truncated to num_f = ceil(len / 16000 * 25) (double).
 * Online chunking (upstream inference.py, streaming):
 *   audio' = 1920 zeros | audio
 *   for i = 0, 3200, 6400, ... while i < len(audio'):
 *     5 frames = call(audio'[i, i + 6480), zero-padded to 6480)
 *   which gives 5 ceil((len + 1920) / 3200) frames, 80 samples (5 ms)
 *   later than offline.
 *
 * Both run incrementally (DittoAudioFeatures): push PCM in any pieces; a
 * call runs as soon as its samples are there, and frames are handed out in
 * order. Offline frames are only emitted once they are known to be below
 * num_f, which the samples pushed so far already guarantee for every
 * frame a completed call produces, so nothing waits for the end of the
 * stream except the last calls (which read the zero padding).
 *
 * Synthetic encoder. Without an ONNX file (--weights synthetic) the encoder
 * is a tiny HuBERT-SHAPED graph that this file builds in memory as
 * DittoOnnxModel structs and runs through the same executor: the real
 * 7-layer conv front end's kernels (10,3,3,3,3,2,2) and strides
 * (5,2,2,2,2,2,2) at 8 channels with GELU, so 6480 samples give exactly 20
 * rows, then LayerNormalization and a projection to 1024 with seeded random
 * weights. It has no transformer, no pretrained weights and no relation to
 * speech: its features are a deterministic function of the waveform and
 * nothing more. It exists so the whole pipeline (executor path included)
 * runs without downloads.
 *
 * Threading: one DittoHubert / DittoAudioFeatures is used from one thread
 * at a time.
 */
#ifndef DITTO_PIPELINE_AUDIO_FEATURES_H
#define DITTO_PIPELINE_AUDIO_FEATURES_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ditto/ditto_types.h"

#define DITTO_HUBERT_RATE 16000
#define DITTO_HUBERT_CHUNK 6480          /* samples per encoder call */
#define DITTO_HUBERT_ROWS 20             /* rows of one call: floor((6480 - 400) / 320) + 1 */
#define DITTO_HUBERT_KEEP 6              /* first row kept: rows [-14, -4) */
#define DITTO_HUBERT_FRAMES 5            /* frames per call */
#define DITTO_HUBERT_DIM 1024
#define DITTO_AUDIO_PAD_OFFLINE 2000     /* 6480 - int(7 * 0.04 * 16000) */
#define DITTO_AUDIO_PAD_ONLINE 1920      /* 3 * 640 */
#define DITTO_AUDIO_HOP_ONLINE 3200      /* samples between online calls */

/* ---- the encoder ---- */

typedef struct DittoHubert DittoHubert;

/*
 * Open the encoder on be: onnx_path names hubert_streaming_fix_kv.onnx (or
 * any graph with input "input_values" (1, L) and output "encoding_out"
 * (T, 1024)); NULL builds the synthetic graph from seed. Errors: the ONNX
 * reader's and executor's (one log line naming the file), DITTO_ERR_NOMEM.
 */
int ditto_hubert_open(DittoHubert **out, DittoBackend *be, const char *onnx_path, uint64_t seed, const DittoLogger *log);
/* Accepts NULL and *h == NULL; sets *h to NULL. */
void ditto_hubert_close(DittoHubert **h);
bool ditto_hubert_is_synthetic(const DittoHubert *h);

/*
 * One call: chunk (6480 samples) -> frames (5, 1024) row-major host
 * floats. DITTO_ERR_SHAPE when the graph does not give (20, 1024).
 */
int ditto_hubert_run(DittoHubert *h, const float *chunk, float *frames);

/*
 * Optional hooks called around every encoder run (the pipeline uses them to
 * make the CPU network stages take turns). enter/leave may be NULL.
 */
void ditto_hubert_set_gate(DittoHubert *h, void (*enter)(void *ctx), void (*leave)(void *ctx), void *ctx);

/* Find hubert_streaming_fix_kv.onnx (or hubert.onnx) for a weights folder: aux_models/, the folder, ../ditto_onnx/. 1 when found. */
int ditto_hubert_find(const char *dir, char *path, size_t cap);

/* ---- chunking arithmetic ---- */

/* num_f = ceil(n / 16000 * 25), computed in double as upstream. */
int64_t ditto_audio_num_frames(int64_t n_samples);
/* start = int(i * 0.04 * 16000) in double, truncated toward zero. */
int64_t ditto_audio_offline_start(int64_t i);
/* Frames the online chunking gives for n samples: 5 ceil((n + 1920) / 3200). */
int64_t ditto_audio_online_frames(int64_t n_samples);

/* ---- incremental extraction ---- */

/*
 * Receive n feature rows feat (n, 1024), frames first .. first+n-1. Valid
 * only during the call. Return 0 or a negative code (aborts).
 */
typedef int (*DittoFeatEmitFn)(void *ctx, int64_t first, const float *feat, int64_t n);

typedef struct DittoAudioFeatures DittoAudioFeatures;

/* h is borrowed (it must outlive af). online selects the chunking above. */
int ditto_audio_features_open(DittoAudioFeatures **out, DittoHubert *h, bool online, DittoFeatEmitFn emit, void *emit_ctx,
                              const DittoLogger *log);
void ditto_audio_features_close(DittoAudioFeatures **af);
/* Append n samples (16 kHz mono float); runs every call they complete. DITTO_ERR_AGAIN after finish. */
int ditto_audio_features_push(DittoAudioFeatures *af, const float *pcm, int64_t n);
/*
 * End of the audio: run the remaining calls on the zero padding and emit
 * the last frames (offline: up to num_f). DITTO_ERR_INVAL when no sample
 * was pushed, AGAIN when called twice.
 */
int ditto_audio_features_finish(DittoAudioFeatures *af);
/* Samples pushed, frames emitted so far. */
int64_t ditto_audio_features_samples(const DittoAudioFeatures *af);
int64_t ditto_audio_features_frames(const DittoAudioFeatures *af);

/* Whole clip, offline chunking: pcm (n) -> feat (ditto_audio_num_frames(n), 1024). */
int ditto_audio_features_offline(DittoHubert *h, const float *pcm, int64_t n, float *feat);

#endif
