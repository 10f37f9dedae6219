/*
 * Internal helpers shared by the FFmpeg users of src/io (audio, image,
 * video_in, video_out). Not part of the public API.
 */
#ifndef DITTO_IO_AV_UTIL_H
#define DITTO_IO_AV_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "ditto/ditto_types.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#endif

/*
 * Send FFmpeg's own log output nowhere (installed once per process): the
 * library does not print, and its error lines already carry the file and
 * the problem. No-op without FFmpeg.
 */
void ditto_io_ffmpeg_quiet(void);
/* Text of an FFmpeg error code (AVERROR) in buf; returns buf. */
const char *ditto_io_av_strerror(int averr, char *buf, size_t n);
/*
 * Check that path names a non-empty file before FFmpeg sees it, so the
 * first error line says "missing", "a directory" or "empty" plainly. what:
 * "audio", "image", "video".
 */
int ditto_io_check_file(const char *path, const char *what, const DittoLogger *log);
/* Our code for an FFmpeg error code: ENOENT -> NOENT, ENOSPC -> NOSPC, ENOMEM, EACCES/EIO -> IO, INVALIDDATA -> FORMAT. */
int ditto_io_av_code(int averr);

#ifdef DITTO_HAVE_FFMPEG

/*
 * Open path (demuxer ifmt, NULL: probe), read its stream information, find
 * the best stream of `type` and a decoder for it, allocate the decoder
 * context (with the stream's parameters), a packet and a frame. The decoder
 * is not opened: the caller sets its options and calls avcodec_open2.
 * what: "audio" / "video" (the stream's kind in messages); file_kind: what
 * the file should be ("audio file", "image or video file"). On error (one
 * line logged) the outputs allocated so far are left for the caller to free.
 */
int ditto_io_av_open_input(const char *path, const AVInputFormat *ifmt, enum AVMediaType type, const char *what, const char *file_kind,
                           AVFormatContext **fmt, int *stream, const AVCodec **codec, AVCodecContext **dec, AVPacket **pkt,
                           AVFrame **frame, const DittoLogger *log);

/*
 * Decode the next frame of `stream` into frame: 1 when frame holds one, 0 at
 * the end of the stream (*done set), < 0 on an error (one line logged).
 * Frames the decoder rejects are skipped, as ffmpeg does, up to a limit;
 * *flushing, *done and *bad are the caller's decode state (start false,
 * false, 0). what: "audio" / "video".
 */
int ditto_io_av_next_frame(AVFormatContext *fmt, AVCodecContext *dec, AVPacket *pkt, AVFrame *frame, int stream, bool *flushing,
                           bool *done, int *bad, const char *path, const char *what, const DittoLogger *log);

#endif

#endif
