/*
 * The MP4 writer (ditto-architecture.md 3.10, DESIGN.md): H.264 video at a
 * constant frame rate (25) from yuv420p frames the caller converts
 * (color.h; swscale is not involved), plus the original audio file
 * re-encoded as AAC, muxed in one pass into an MP4 with +faststart (the
 * index at the front, so players start at once).
 *
 * Video stream tags: colour range MPEG (limited, "tv"), matrix, primaries
 * and transfer SMPTE 170M (BT.601 525), which is what color.h produces and
 * what upstream's libx264/yuv420p output declares implicitly.
 *
 * Encoder: "auto" tries h264_nvenc (NVENC, when the GPU and driver allow
 * it), then libx264, then any other H.264 encoder FFmpeg has; a name picks
 * that encoder only. Rate control: crf (libx264 -crf, NVENC -cq with VBR)
 * unless a bitrate is given. NVENC runs in the CUDA device's primary
 * context when cuda_device is given (the one the renderer already holds):
 * on its own it creates a context first, about 0.5 s on an H200, which has
 * no NVENC and then fails. Once h264_nvenc has failed to open, "auto" skips
 * it for the rest of the process.
 *
 * Audio: decoded with audio.h's reader, converted with libswresample to the
 * AAC encoder's sample format and a rate it supports (the file's own rate
 * when allowed), mono or stereo (more channels are downmixed to stereo).
 * Upstream muxes without -shortest, so the whole audio is written even
 * when the video is shorter, and vice versa.
 *
 * Files: everything goes to a temporary file next to the destination
 * (".<name>.<random>.part"), renamed over the destination by
 * ditto_video_writer_finish. Any error removes the temporary file; the
 * destination is never created or modified unless the whole file was
 * written. An unwritable destination folder, a missing folder or a full
 * disk give one error line naming the path and the reason.
 *
 * Without FFmpeg (DITTO_FFMPEG=OFF) open returns DITTO_ERR_UNSUPPORTED.
 * A writer is used from one thread at a time.
 */
#ifndef DITTO_IO_VIDEO_OUT_H
#define DITTO_IO_VIDEO_OUT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/thread.h"
#include "ditto/ditto_types.h"
#include "io/color.h"

/*
 * libx264 presets when none is given: x264_fast for frames that come faster
 * than superfast encodes them (a GPU render), else the default one.
 */
#define DITTO_X264_DEFAULT_PRESET "superfast"
#define DITTO_X264_FAST_PRESET "ultrafast"

typedef struct DittoVideoWriterParams {
    int fps;                  /* frames per second (25) */
    const char *encoder;      /* NULL or "auto" (see above), or an FFmpeg encoder name */
    int crf;                  /* constant quality 0..51 (18); used when bitrate == 0 */
    int64_t bitrate;          /* video bits per second; > 0 selects average-bitrate mode (0) */
    const char *preset;       /* encoder preset, NULL: DITTO_X264_DEFAULT_PRESET (x264_fast: _FAST_) for libx264, else the encoder's default ("p4") */
    bool x264_fast;           /* the frames come from a GPU: libx264's default preset is DITTO_X264_FAST_PRESET */
    int threads;              /* encoder threads, 0: automatic */
    int cuda_device;          /* CUDA device of the frames (NVENC in its primary context), -1: none */
    const char *audio_path;   /* audio file to mux as AAC, or NULL for video only */
    int64_t audio_bitrate;    /* AAC bits per second, 0: 64 kb/s per channel */
    DittoLogger log;          /* errors and the chosen encoder (info) */
} DittoVideoWriterParams;

void ditto_video_writer_params_default(DittoVideoWriterParams *p);

typedef struct DittoVideoWriter DittoVideoWriter;

/*
 * Start writing path (".mp4" is not required; the container is MP4
 * regardless). width and height must be even and >= 2. Opens the encoders
 * and the audio input and writes the header to the temporary file.
 * Returns 0 or a negative code (DITTO_ERR_NOENT / DITTO_ERR_IO for the
 * destination folder, DITTO_ERR_NOSPC, DITTO_ERR_UNSUPPORTED for a missing
 * encoder, the audio reader's codes), with one error line.
 */
int ditto_video_writer_open(DittoVideoWriter **out, const char *path, int width, int height, const DittoVideoWriterParams *p);

/*
 * Whether h264_nvenc opens on cuda_device (in its primary context, on a
 * small frame), remembered for the process: a later "auto" writer skips
 * NVENC without trying when it did not. Meant for a thread running beside
 * the model load, so the first render does not pay for the try (0.2-0.5 s
 * where the GPU has no NVENC). Returns 1 usable, 0 not (or no FFmpeg).
 */
int ditto_video_writer_probe_nvenc(int cuda_device, const DittoLogger *log);

/* Encode one frame given as yuv420p planes (width x height luma, ceil/2 chroma). */
int ditto_video_writer_write(DittoVideoWriter *w, const DittoYuvPlanes *frame);
/* Encode one packed RGB24 frame (rows 3*width bytes apart), converted with color.h straight into the encoder's frame. */
int ditto_video_writer_write_rgb(DittoVideoWriter *w, DittoThreadPool *pool, const uint8_t *rgb);
/* Frames accepted so far. */
int64_t ditto_video_writer_frames(const DittoVideoWriter *w);

/*
 * Flush the encoders, write the rest of the audio and the index, close the
 * file and rename it to the destination. After an error nothing is left on
 * disk. Call ditto_video_writer_close afterwards in every case.
 */
int ditto_video_writer_finish(DittoVideoWriter *w);

/* Free the writer; without a successful finish the temporary file is deleted. Accepts NULL / *w == NULL; sets *w to NULL. */
void ditto_video_writer_close(DittoVideoWriter **w);

#endif
