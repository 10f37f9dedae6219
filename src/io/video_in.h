/*
 * Video input through FFmpeg's libraries: the avatar loop (ditto-
 * architecture.md 4.1, upstream imageio-ffmpeg) decoded to packed RGB24
 * frames, H x W x 3 uint8.
 *
 * Conversion to RGB is swscale's (bicubic, as the ffmpeg command line that
 * imageio drives), with the YUV matrix and range the stream declares
 * (BT.601 when unspecified, as ffmpeg assumes). Streams that carry a
 * display rotation of 90, 180 or 270 degrees are turned upright, as
 * ffmpeg's autorotation does (other angles and flips are ignored).
 *
 * Resizing to the loader's limits (max_size, even sides) is not done here.
 *
 * Without FFmpeg (DITTO_FFMPEG=OFF) every function returns
 * DITTO_ERR_UNSUPPORTED and logs why. Errors are one line through the
 * logger naming the file and the problem (see audio.h for the codes).
 */
#ifndef DITTO_IO_VIDEO_IN_H
#define DITTO_IO_VIDEO_IN_H

#include <stdint.h>

#include "ditto/ditto_types.h"

typedef struct DittoVideoReaderParams {
    int64_t max_frames;      /* stop after this many frames; <= 0: all */
    /*
     * libavformat demuxer to use instead of probing (e.g. "jpeg_pipe");
     * NULL: probe the content.
     */
    const char *format;
    int threads;             /* decoder threads; 0: automatic */
} DittoVideoReaderParams;

void ditto_video_reader_params_default(DittoVideoReaderParams *p);

typedef struct DittoVideoReader DittoVideoReader;

/* Open path's first video stream. p may be NULL (defaults); log may be NULL. */
int ditto_video_reader_open(DittoVideoReader **out, const char *path, const DittoVideoReaderParams *p, const DittoLogger *log);
/* Accepts NULL and *r == NULL; sets *r to NULL. */
void ditto_video_reader_close(DittoVideoReader **r);
/* Frame rate the container declares (its average or real base rate), or 0 when unknown. */
double ditto_video_reader_fps(const DittoVideoReader *r);
/* Frame count the container declares, or 0 when unknown (a hint only). */
int64_t ditto_video_reader_frame_hint(const DittoVideoReader *r);
/*
 * Next frame as packed RGB24 (*width x *height x 3, rows 3 * *width bytes
 * apart), owned by the reader and valid until the next call. *rgb is NULL
 * at the end of the stream (or after max_frames). Frames the decoder
 * rejects are skipped; a stream with no decodable frame at all is
 * DITTO_ERR_FORMAT.
 */
int ditto_video_reader_read(DittoVideoReader *r, const uint8_t **rgb, int *width, int *height);
/*
 * EXIF orientation (1..8) of the last frame read, from the decoder's
 * metadata (JPEG), or 1 when it has none. ditto_image_load applies it.
 */
int ditto_video_reader_orientation(const DittoVideoReader *r);

/* A whole clip in memory: n frames of h x w x 3 bytes, back to back. */
typedef struct DittoVideo {
    uint8_t *frames;         /* owned; free with ditto_video_free */
    int64_t n;
    int width, height;
    double fps;              /* as ditto_video_reader_fps */
} DittoVideo;

/*
 * Decode at most max_frames (<= 0: all) frames of path. Every frame must
 * have the size of the first (DITTO_ERR_FORMAT otherwise). On error *out is
 * zeroed.
 */
int ditto_video_load(const char *path, int64_t max_frames, DittoVideo *out, const DittoLogger *log);
/* Accepts NULL and a zeroed struct; zeroes *v. */
void ditto_video_free(DittoVideo *v);

/*
 * Apply EXIF orientation code o (1..8) to a packed w x h x 3 image: out
 * gets ow x oh pixels (sides swapped for 5..8). out must not overlap in.
 * Codes outside 1..8 copy the image.
 */
void ditto_rgb_orient(const uint8_t *in, int w, int h, int o, uint8_t *out, int *ow, int *oh);

#endif
