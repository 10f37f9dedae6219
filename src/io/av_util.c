/* FFmpeg helpers shared by the src/io files; see av_util.h. */
#include "io/av_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"

#ifdef DITTO_HAVE_FFMPEG
#include <pthread.h>
#endif

int ditto_io_check_file(const char *path, const char *what, const DittoLogger *log)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ditto_fail(log, errno == ENOENT ? DITTO_ERR_NOENT : DITTO_ERR_IO, "%s: cannot open %s file: %s", path, what, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return ditto_fail(log, DITTO_ERR_INVAL, "%s: is a directory, not an input %s file", path, what);
    if (S_ISREG(st.st_mode) && st.st_size == 0)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: the %s file is empty (0 bytes)", path, what);
    return 0;
}

#ifndef DITTO_HAVE_FFMPEG

void ditto_io_ffmpeg_quiet(void)
{
}

const char *ditto_io_av_strerror(int averr, char *buf, size_t n)
{
    if (n)
        snprintf(buf, n, "error %d", averr);
    return buf;
}

int ditto_io_av_code(int averr)
{
    (void)averr;
    return DITTO_ERR_UNSUPPORTED;
}

#else /* DITTO_HAVE_FFMPEG */

/* Consecutive undecodable frames tolerated before the input counts as broken. */
#define MAX_BAD_FRAMES 1000

static void av_log_drop(void *avcl, int level, const char *fmt, va_list vl)
{
    (void)avcl;
    (void)level;
    (void)fmt;
    (void)vl;
}

static void install_quiet(void)
{
    av_log_set_callback(av_log_drop);
}

void ditto_io_ffmpeg_quiet(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_quiet);
}

const char *ditto_io_av_strerror(int averr, char *buf, size_t n)
{
    if (av_strerror(averr, buf, n) < 0)
        snprintf(buf, n, "FFmpeg error %d", averr);
    return buf;
}

int ditto_io_av_code(int averr)
{
    switch (averr) {
    case AVERROR(ENOENT): return DITTO_ERR_NOENT;
    case AVERROR(ENOSPC): return DITTO_ERR_NOSPC;
    case AVERROR(ENOMEM): return DITTO_ERR_NOMEM;
    case AVERROR(EINVAL): return DITTO_ERR_INVAL;
    case AVERROR_INVALIDDATA:
    case AVERROR_EOF: return DITTO_ERR_FORMAT;
    case AVERROR_DECODER_NOT_FOUND:
    case AVERROR_DEMUXER_NOT_FOUND:
    case AVERROR_ENCODER_NOT_FOUND:
    case AVERROR_PATCHWELCOME: return DITTO_ERR_UNSUPPORTED;
    default: return DITTO_ERR_IO;
    }
}

int ditto_io_av_open_input(const char *path, const AVInputFormat *ifmt, enum AVMediaType type, const char *what, const char *file_kind,
                           AVFormatContext **fmt, int *stream, const AVCodec **codec, AVCodecContext **dec, AVPacket **pkt,
                           AVFrame **frame, const DittoLogger *log)
{
    char eb[128];
    int av = avformat_open_input(fmt, path, ifmt, NULL);
    if (av < 0)
        return ditto_fail(log, ditto_io_av_code(av), "%s: not a readable %s: %s", path, file_kind, ditto_io_av_strerror(av, eb, sizeof eb));
    av = avformat_find_stream_info(*fmt, NULL);
    if (av < 0)
        return ditto_fail(log, ditto_io_av_code(av), "%s: cannot read stream information: %s", path, ditto_io_av_strerror(av, eb, sizeof eb));
    *codec = NULL;
    *stream = av_find_best_stream(*fmt, type, -1, -1, codec, 0);
    if (*stream == AVERROR_STREAM_NOT_FOUND)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: no %s stream (container '%s')", path, what, (*fmt)->iformat->name);
    if (*stream < 0 || !*codec) {
        const AVCodecDescriptor *d = *stream >= 0 ? avcodec_descriptor_get((*fmt)->streams[*stream]->codecpar->codec_id) : NULL;
        return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: no decoder for its %s codec %s", path, what, d ? d->name : "(unknown)");
    }
    if (!(*dec = avcodec_alloc_context3(*codec)) || !(*pkt = av_packet_alloc()) || !(*frame = av_frame_alloc()))
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    av = avcodec_parameters_to_context(*dec, (*fmt)->streams[*stream]->codecpar);
    if (av < 0)
        return ditto_fail(log, ditto_io_av_code(av), "%s: cannot open the %s decoder: %s", path, (*codec)->name, ditto_io_av_strerror(av, eb, sizeof eb));
    return 0;
}

int ditto_io_av_next_frame(AVFormatContext *fmt, AVCodecContext *dec, AVPacket *pkt, AVFrame *frame, int stream, bool *flushing,
                           bool *done, int *bad, const char *path, const char *what, const DittoLogger *log)
{
    char eb[128];
    while (!*done) {
        int av = avcodec_receive_frame(dec, frame);
        if (av >= 0) {
            *bad = 0;
            return 1;
        }
        if (av == AVERROR_EOF) {
            *done = true;
            break;
        }
        if (av != AVERROR(EAGAIN)) {
            /* a corrupt frame: skip it, as ffmpeg does (but not forever) */
            if (av == AVERROR_INVALIDDATA && ++*bad < MAX_BAD_FRAMES)
                continue;
            return ditto_fail(log, ditto_io_av_code(av), "%s: %s decoding failed: %s", path, what, ditto_io_av_strerror(av, eb, sizeof eb));
        }
        if (*flushing)
            return ditto_fail(log, DITTO_ERR_IO, "%s: the %s decoder did not finish", path, what);
        av = av_read_frame(fmt, pkt);
        if (av == AVERROR_EOF) {
            *flushing = true;
            avcodec_send_packet(dec, NULL);
            continue;
        }
        if (av < 0)
            return ditto_fail(log, ditto_io_av_code(av), "%s: cannot read %s: %s", path, what, ditto_io_av_strerror(av, eb, sizeof eb));
        if (pkt->stream_index == stream) {
            av = avcodec_send_packet(dec, pkt);
            if (av < 0 && av != AVERROR_INVALIDDATA && av != AVERROR(EAGAIN)) {
                av_packet_unref(pkt);
                return ditto_fail(log, ditto_io_av_code(av), "%s: %s decoding failed: %s", path, what, ditto_io_av_strerror(av, eb, sizeof eb));
            }
        }
        av_packet_unref(pkt);
    }
    return 0;
}

#endif /* DITTO_HAVE_FFMPEG */
