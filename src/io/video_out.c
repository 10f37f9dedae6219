/* H.264 + AAC in MP4 through libavformat/libavcodec/libswresample; see video_out.h. */
#include "io/video_out.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/audio.h"
#include "io/av_util.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libavutil/hwcontext.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#endif

void ditto_video_writer_params_default(DittoVideoWriterParams *p)
{
    memset(p, 0, sizeof *p);
    p->fps = 25;
    p->encoder = NULL;
    p->crf = 18;
    p->bitrate = 0;
    p->preset = NULL;
    p->threads = 0;
    p->cuda_device = -1;
    p->audio_path = NULL;
    p->audio_bitrate = 0;
}

#ifndef DITTO_HAVE_FFMPEG

int ditto_video_writer_open(DittoVideoWriter **out, const char *path, int width, int height, const DittoVideoWriterParams *p)
{
    (void)width;
    (void)height;
    *out = NULL;
    return ditto_fail(p ? &p->log : NULL, DITTO_ERR_UNSUPPORTED, "%s: cannot write video: this build has no FFmpeg (DITTO_FFMPEG=OFF)",
                      path ? path : "(null)");
}

int ditto_video_writer_write(DittoVideoWriter *w, const DittoYuvPlanes *frame)
{
    (void)w;
    (void)frame;
    return DITTO_ERR_UNSUPPORTED;
}

int ditto_video_writer_probe_nvenc(int cuda_device, const DittoLogger *log)
{
    (void)cuda_device;
    (void)log;
    return 0;
}

int ditto_video_writer_write_rgb(DittoVideoWriter *w, DittoThreadPool *pool, const uint8_t *rgb)
{
    (void)w;
    (void)pool;
    (void)rgb;
    return DITTO_ERR_UNSUPPORTED;
}

int64_t ditto_video_writer_frames(const DittoVideoWriter *w)
{
    (void)w;
    return 0;
}

int ditto_video_writer_finish(DittoVideoWriter *w)
{
    (void)w;
    return DITTO_ERR_UNSUPPORTED;
}

void ditto_video_writer_close(DittoVideoWriter **w)
{
    if (w)
        *w = NULL;
}

#else /* DITTO_HAVE_FFMPEG */

struct DittoVideoWriter {
    DittoLogger log;
    char *path;                /* destination */
    char *tmp;                 /* temporary file beside it */
    bool tmp_exists;
    int width, height, fps;
    AVFormatContext *oc;
    AVCodecContext *venc, *aenc;
    AVStream *vst, *ast;
    AVFrame *vframe, *aframe;
    AVPacket *pkt;
    int64_t frames;            /* video frames sent */
    /* audio */
    DittoAudioReader *ar;
    SwrContext *swr;
    AVAudioFifo *fifo;
    uint8_t **abuf;            /* converted samples before the fifo */
    int abuf_cap;
    int64_t apts;              /* samples sent to the AAC encoder */
    bool audio_eof;            /* input read and the resampler drained */
    bool audio_done;           /* the AAC encoder flushed */
    /* state */
    bool failed, finished;
    int err;
};

/* ---- errors and the temporary file ---- */

/* Close and delete the temporary file (the destination is never touched). */
static void discard_file(DittoVideoWriter *w)
{
    if (w->oc && w->oc->pb)
        avio_closep(&w->oc->pb);
    if (w->tmp_exists) {
        unlink(w->tmp);
        w->tmp_exists = false;
    }
}

/* The one error line of a failure; later calls return the same code silently. */
static int writer_fail(DittoVideoWriter *w, int err, const char *fmt, ...) DITTO_PRINTF(3, 4);
static int writer_fail(DittoVideoWriter *w, int err, const char *fmt, ...)
{
    if (w->failed)
        return w->err;
    va_list ap;
    va_start(ap, fmt);
    ditto_logv(&w->log, DITTO_LOG_ERROR, fmt, ap);
    va_end(ap);
    w->failed = true;
    w->err = err;
    discard_file(w);
    return err;
}

/* A failure already logged by the callee (the audio reader): no second line. */
static int writer_fail_quiet(DittoVideoWriter *w, int err)
{
    if (w->failed)
        return w->err;
    w->failed = true;
    w->err = err;
    discard_file(w);
    return err;
}

static int write_error(DittoVideoWriter *w, int av)
{
    char eb[128];
    return writer_fail(w, ditto_io_av_code(av) == DITTO_ERR_FORMAT ? DITTO_ERR_IO : ditto_io_av_code(av), "%s: writing the video failed: %s",
                       w->path, ditto_io_av_strerror(av, eb, sizeof eb));
}

static int errno_code(int e)
{
    return e == ENOENT || e == ENOTDIR ? DITTO_ERR_NOENT : e == ENOSPC || e == EDQUOT ? DITTO_ERR_NOSPC : e == ENOMEM ? DITTO_ERR_NOMEM : DITTO_ERR_IO;
}

/* Reserve ".<name>.<random>.part" beside the destination (O_EXCL, mode 0666 less the umask). */
static int make_temp(DittoVideoWriter *w)
{
    const char *slash = strrchr(w->path, '/');
    const char *base = slash ? slash + 1 : w->path;
    size_t dlen = slash ? (size_t)(slash - w->path) : 0;
    if (!*base)
        return writer_fail(w, DITTO_ERR_INVAL, "%s: the output path names a folder, not a file", w->path);
    char *dir = ditto_malloc(dlen + 2);
    if (!dir)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    if (slash)
        snprintf(dir, dlen + 2, "%.*s", dlen ? (int)dlen : 1, dlen ? w->path : "/");
    else
        snprintf(dir, dlen + 2, ".");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        int e = stat(dir, &st) != 0 ? errno : ENOTDIR;
        int rc = writer_fail(w, errno_code(e), "%s: cannot write the video: output folder '%s': %s", w->path, dir, strerror(e));
        ditto_free(dir);
        return rc;
    }
    size_t n = strlen(dir) + strlen(base) + 32;
    w->tmp = ditto_malloc(n);
    if (!w->tmp) {
        ditto_free(dir);
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    }
    static atomic_uint counter;
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL) ^ (unsigned)(uintptr_t)w;
    int rc = 0;
    for (int attempt = 0;; attempt++) {
        unsigned r = (seed + atomic_fetch_add_explicit(&counter, 1u, memory_order_relaxed) * 0x9E3779B9u) & 0xFFFFFFu;
        snprintf(w->tmp, n, "%s%s.%s.%06x.part", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", base, r);
        int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            close(fd);
            w->tmp_exists = true;
            break;
        }
        if (errno != EEXIST || attempt >= 100) {
            int e = errno;
            rc = writer_fail(w, errno_code(e), "%s: cannot write the video: cannot create a file in '%s': %s", w->path, dir, strerror(e));
            break;
        }
    }
    ditto_free(dir);
    return rc;
}

/* ---- encoding ---- */

/* Send frame (NULL: flush) and write every packet the encoder returns. */
static int encode(DittoVideoWriter *w, AVCodecContext *enc, AVStream *st, AVFrame *frame)
{
    char eb[128];
    int av = avcodec_send_frame(enc, frame);
    if (av < 0 && av != AVERROR_EOF)
        return writer_fail(w, DITTO_ERR_IO, "%s: the %s encoder failed: %s", w->path, enc->codec->name, ditto_io_av_strerror(av, eb, sizeof eb));
    for (;;) {
        av = avcodec_receive_packet(enc, w->pkt);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return writer_fail(w, DITTO_ERR_IO, "%s: the %s encoder failed: %s", w->path, enc->codec->name, ditto_io_av_strerror(av, eb, sizeof eb));
        av_packet_rescale_ts(w->pkt, enc->time_base, st->time_base);
        w->pkt->stream_index = st->index;
        av = av_interleaved_write_frame(w->oc, w->pkt);   /* takes the packet's reference */
        if (av < 0)
            return write_error(w, av);
    }
}

static bool is_auto(const char *name)
{
    return !name || !*name || !strcmp(name, "auto");
}

/* Configure and open one H.264 encoder; < 0 when it cannot be used (reason in why). */
static int try_video_encoder(DittoVideoWriter *w, const AVCodec *codec, const DittoVideoWriterParams *p, char *why, size_t nwhy)
{
    char eb[128];
    AVCodecContext *c = avcodec_alloc_context3(codec);
    if (!c) {
        snprintf(why, nwhy, "out of memory");
        return DITTO_ERR_NOMEM;
    }
    c->width = w->width;
    c->height = w->height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = (AVRational){ 1, w->fps };
    c->framerate = (AVRational){ w->fps, 1 };
    c->sample_aspect_ratio = (AVRational){ 1, 1 };
    c->color_range = AVCOL_RANGE_MPEG;
    c->colorspace = AVCOL_SPC_SMPTE170M;
    c->color_primaries = AVCOL_PRI_SMPTE170M;
    c->color_trc = AVCOL_TRC_SMPTE170M;
    c->thread_count = p->threads > 0 ? p->threads : 0;
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER)
        c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    bool nvenc = strstr(codec->name, "nvenc") != NULL;
    if (nvenc && p->cuda_device >= 0) {
        /* the device's primary context (already made by the renderer), not a context of NVENC's own */
        char dev[16];
        AVDictionary *o = NULL;
        AVBufferRef *hw = NULL;
        snprintf(dev, sizeof dev, "%d", p->cuda_device);
        av_dict_set(&o, "primary_ctx", "1", 0);
        if (av_hwdevice_ctx_create(&hw, AV_HWDEVICE_TYPE_CUDA, dev, o, 0) >= 0)
            c->hw_device_ctx = hw;   /* owned by c now */
        av_dict_free(&o);
    }
    int rc = 0;
    if (p->bitrate > 0) {
        c->bit_rate = p->bitrate;
        if (nvenc)
            av_opt_set(c->priv_data, "rc", "vbr", 0);
    } else if (nvenc) {
        /* constant quality: VBR with a target quality level and no bitrate cap */
        c->bit_rate = 0;
        if (av_opt_set(c->priv_data, "rc", "vbr", 0) < 0 || av_opt_set_int(c->priv_data, "cq", p->crf, 0) < 0)
            rc = -1;
    } else if (av_opt_set_int(c->priv_data, "crf", p->crf, 0) < 0 && av_opt_set_double(c->priv_data, "crf", p->crf, 0) < 0) {
        rc = -1;
    }
    if (rc < 0) {
        snprintf(why, nwhy, "it has no constant-quality option; give a bitrate");
        avcodec_free_context(&c);
        return DITTO_ERR_UNSUPPORTED;
    }
    /*
     * libx264's own default (medium) encodes a 1432x1432 clip much slower
     * than a GPU renders it, veryfast on 16 cores at about 140 frames/s and
     * superfast still below the H200's 210 frames/s: the 15.8 s test clip
     * took 2.55-2.61 s with superfast, 2.10 s with ultrafast, whose render
     * then runs at the GPU's pace (files about a third larger at the same
     * crf). So GPU frames get ultrafast, CPU ones (a few frames/s)
     * superfast; --preset chooses another.
     */
    const char *preset = p->preset && *p->preset      ? p->preset
                         : strcmp(codec->name, "libx264") ? NULL
                         : p->x264_fast                   ? DITTO_X264_FAST_PRESET
                                                          : DITTO_X264_DEFAULT_PRESET;
    if (preset && av_opt_set(c->priv_data, "preset", preset, 0) < 0) {
        snprintf(why, nwhy, "it has no preset '%s'", preset);
        avcodec_free_context(&c);
        return DITTO_ERR_INVAL;
    }
    int av = avcodec_open2(c, codec, NULL);
    if (av < 0) {
        snprintf(why, nwhy, "%s%s", ditto_io_av_strerror(av, eb, sizeof eb), nvenc ? " (NVENC needs an NVIDIA GPU and driver that allow it)" : "");
        avcodec_free_context(&c);
        return av == AVERROR(ENOMEM) ? DITTO_ERR_NOMEM : av == AVERROR(EINVAL) ? DITTO_ERR_INVAL : DITTO_ERR_UNSUPPORTED;
    }
    w->venc = c;
    return 0;
}

/* h264_nvenc failed to open in this process: "auto" does not try it again (each try can cost a CUDA context) */
static _Atomic bool nvenc_unusable;

int ditto_video_writer_probe_nvenc(int cuda_device, const DittoLogger *log)
{
    ditto_io_ffmpeg_quiet();   /* its failure is a result here, not a message */
    const AVCodec *codec = avcodec_find_encoder_by_name("h264_nvenc");
    if (!codec || nvenc_unusable)
        return 0;
    /* try_video_encoder's settings on a small frame; no file is involved */
    DittoVideoWriter w;
    memset(&w, 0, sizeof w);
    if (log)
        w.log = *log;
    w.width = w.height = 256;
    w.fps = 25;
    AVFormatContext *oc = NULL;
    if (avformat_alloc_output_context2(&oc, NULL, "mp4", NULL) < 0 || !oc)
        return 0;
    w.oc = oc;
    DittoVideoWriterParams p;
    ditto_video_writer_params_default(&p);
    p.cuda_device = cuda_device;
    char why[160] = "";
    const int rc = try_video_encoder(&w, codec, &p, why, sizeof why);
    if (rc < 0) {
        nvenc_unusable = true;
        ditto_log(&w.log, DITTO_LOG_DEBUG, "writer: h264_nvenc is not usable: %s", why);
    }
    avcodec_free_context(&w.venc);
    avformat_free_context(oc);
    return rc >= 0;
}

static int open_video(DittoVideoWriter *w, const DittoVideoWriterParams *p)
{
    static const char *const auto_list[] = { "h264_nvenc", "libx264", NULL };
    char why[160] = "";
    if (!is_auto(p->encoder)) {
        const AVCodec *codec = avcodec_find_encoder_by_name(p->encoder);
        if (!codec || codec->type != AVMEDIA_TYPE_VIDEO)
            return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: this FFmpeg has no video encoder named '%s'", w->path, p->encoder);
        if (codec->id != AV_CODEC_ID_H264)
            return writer_fail(w, DITTO_ERR_INVAL, "%s: encoder '%s' does not produce H.264", w->path, p->encoder);
        int rc = try_video_encoder(w, codec, p, why, sizeof why);
        if (rc < 0)
            return writer_fail(w, rc, "%s: cannot open the %s encoder: %s", w->path, p->encoder, why);
    } else {
        for (int i = 0; auto_list[i] && !w->venc; i++) {
            const bool nv = !strcmp(auto_list[i], "h264_nvenc");
            if (nv && nvenc_unusable)
                continue;
            const AVCodec *codec = avcodec_find_encoder_by_name(auto_list[i]);
            if (codec && try_video_encoder(w, codec, p, why, sizeof why) < 0) {
                ditto_log(&w->log, DITTO_LOG_DEBUG, "writer: %s is not usable: %s", auto_list[i], why);
                if (nv)
                    nvenc_unusable = true;
            }
        }
        const AVCodec *any = w->venc ? NULL : avcodec_find_encoder(AV_CODEC_ID_H264);
        if (any && try_video_encoder(w, any, p, why, sizeof why) < 0)
            ditto_log(&w->log, DITTO_LOG_DEBUG, "writer: %s is not usable: %s", any->name, why);
        if (!w->venc)
            return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: no usable H.264 encoder (tried h264_nvenc, libx264%s)", w->path,
                               avcodec_find_encoder(AV_CODEC_ID_H264) ? " and the default one" : "");
    }
    uint8_t *preset = NULL;
    if (av_opt_get(w->venc->priv_data, "preset", 0, &preset) < 0)
        preset = NULL;
    ditto_log(&w->log, DITTO_LOG_INFO, "writer: %s, %dx%d at %d fps, %s %lld, preset %s", w->venc->codec->name, w->width, w->height, w->fps,
              p->bitrate > 0 ? "bitrate" : "crf", p->bitrate > 0 ? (long long)p->bitrate : (long long)p->crf,
              preset && *preset ? (const char *)preset : "(the encoder's default)");
    av_free(preset);
    w->vst = avformat_new_stream(w->oc, NULL);
    if (!w->vst)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->vst->time_base = w->venc->time_base;
    w->vst->avg_frame_rate = w->venc->framerate;
    w->vst->r_frame_rate = w->venc->framerate;
    if (avcodec_parameters_from_context(w->vst->codecpar, w->venc) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->vframe = av_frame_alloc();
    if (!w->vframe)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->vframe->format = AV_PIX_FMT_YUV420P;
    w->vframe->width = w->width;
    w->vframe->height = w->height;
    w->vframe->color_range = AVCOL_RANGE_MPEG;
    w->vframe->colorspace = AVCOL_SPC_SMPTE170M;
    w->vframe->color_primaries = AVCOL_PRI_SMPTE170M;
    w->vframe->color_trc = AVCOL_TRC_SMPTE170M;
    if (av_frame_get_buffer(w->vframe, 0) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory for a %dx%d frame", w->path, w->width, w->height);
    return 0;
}

/* A rate the AAC encoder takes: the input's own when listed, else the nearest listed one. */
static int aac_rate(const AVCodec *codec, int want)
{
    const int *r = codec->supported_samplerates;
    if (!r)
        return want;
    int best = r[0];
    for (; *r; r++) {
        if (*r == want)
            return want;
        if (abs(*r - want) < abs(best - want))
            best = *r;
    }
    return best;
}

static int open_audio(DittoVideoWriter *w, const DittoVideoWriterParams *p)
{
    char eb[128];
    int rc = ditto_audio_reader_open(&w->ar, p->audio_path, &w->log);
    if (rc < 0)
        return writer_fail_quiet(w, rc);
    int in_rate = ditto_audio_reader_rate(w->ar), in_ch = ditto_audio_reader_channels(w->ar);
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_AAC);
    if (!codec)
        return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: this FFmpeg has no AAC encoder", w->path);
    AVCodecContext *c = w->aenc = avcodec_alloc_context3(codec);
    if (!c)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    c->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_FLTP;
    c->sample_rate = aac_rate(codec, in_rate);
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO, stereo = AV_CHANNEL_LAYOUT_STEREO;
    av_channel_layout_copy(&c->ch_layout, in_ch == 1 ? &mono : &stereo);
    c->bit_rate = p->audio_bitrate > 0 ? p->audio_bitrate : 64000 * (int64_t)c->ch_layout.nb_channels;
    c->time_base = (AVRational){ 1, c->sample_rate };
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER)
        c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int av = avcodec_open2(c, codec, NULL);
    if (av < 0)
        return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: cannot open the AAC encoder: %s", w->path, ditto_io_av_strerror(av, eb, sizeof eb));
    w->ast = avformat_new_stream(w->oc, NULL);
    if (!w->ast || avcodec_parameters_from_context(w->ast->codecpar, c) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->ast->time_base = c->time_base;

    /* interleaved float at the file's rate and channels -> the encoder's format, rate and layout */
    AVChannelLayout in_layout;
    av_channel_layout_default(&in_layout, in_ch);
    av = swr_alloc_set_opts2(&w->swr, &c->ch_layout, c->sample_fmt, c->sample_rate, &in_layout, AV_SAMPLE_FMT_FLT, in_rate, 0, NULL);
    av_channel_layout_uninit(&in_layout);
    if (av >= 0)
        av = swr_init(w->swr);
    if (av < 0)
        return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: cannot convert %d Hz %d-channel audio for AAC: %s", w->path, in_rate, in_ch,
                           ditto_io_av_strerror(av, eb, sizeof eb));
    int fs = c->frame_size > 0 ? c->frame_size : 1024;
    w->fifo = av_audio_fifo_alloc(c->sample_fmt, c->ch_layout.nb_channels, 4 * fs);
    w->aframe = av_frame_alloc();
    if (!w->fifo || !w->aframe)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->aframe->format = c->sample_fmt;
    w->aframe->sample_rate = c->sample_rate;
    w->aframe->nb_samples = fs;
    if (av_channel_layout_copy(&w->aframe->ch_layout, &c->ch_layout) < 0 || av_frame_get_buffer(w->aframe, 0) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    return 0;
}

/* Encode k samples from the fifo as one AAC frame. */
static int audio_frame(DittoVideoWriter *w, int k)
{
    if (av_frame_make_writable(w->aframe) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    w->aframe->nb_samples = k;
    if (av_audio_fifo_read(w->fifo, (void **)w->aframe->data, k) != k)
        return writer_fail(w, DITTO_ERR_IO, "%s: audio buffering failed", w->path);
    w->aframe->pts = w->apts;
    w->apts += k;
    return encode(w, w->aenc, w->ast, w->aframe);
}

/* Convert n input frames (NULL: drain the resampler) into the fifo. */
static int audio_convert(DittoVideoWriter *w, const float *x, int64_t n)
{
    int need = swr_get_out_samples(w->swr, (int)n);
    if (need < 0)
        return writer_fail(w, DITTO_ERR_IO, "%s: audio conversion failed", w->path);
    if (need > w->abuf_cap) {
        if (w->abuf)
            av_freep(&w->abuf[0]);
        av_freep(&w->abuf);
        w->abuf_cap = 0;
        if (av_samples_alloc_array_and_samples(&w->abuf, NULL, w->aenc->ch_layout.nb_channels, need, w->aenc->sample_fmt, 0) < 0)
            return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
        w->abuf_cap = need;
    }
    const uint8_t *in = (const uint8_t *)x;
    int k = swr_convert(w->swr, w->abuf, w->abuf_cap, x ? &in : NULL, x ? (int)n : 0);
    if (k < 0)
        return writer_fail(w, DITTO_ERR_IO, "%s: audio conversion failed", w->path);
    if (k > 0 && av_audio_fifo_write(w->fifo, (void **)w->abuf, k) != k)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    return k;
}

/* Encode audio up to `until` seconds (INFINITY: all of it, then flush the encoder). */
static int audio_pump(DittoVideoWriter *w, double until)
{
    if (!w->aenc)
        return 0;
    int fs = w->aenc->frame_size > 0 ? w->aenc->frame_size : 1024;
    while (!w->audio_done) {
        while (av_audio_fifo_size(w->fifo) >= fs)
            DITTO_TRY(audio_frame(w, fs));
        if (w->audio_eof) {
            int rest = av_audio_fifo_size(w->fifo);
            if (rest > 0)
                DITTO_TRY(audio_frame(w, rest));   /* the encoder takes a short last frame */
            DITTO_TRY(encode(w, w->aenc, w->ast, NULL));
            w->audio_done = true;
            break;
        }
        if ((double)w->apts / w->aenc->sample_rate >= until)
            break;
        const float *x;
        int64_t n;
        int rc = ditto_audio_reader_read(w->ar, &x, &n);
        if (rc < 0)
            return writer_fail_quiet(w, rc);
        if (n > 0) {
            DITTO_TRY(audio_convert(w, x, n));
        } else {
            while ((rc = audio_convert(w, NULL, 0)) > 0)
                ;
            if (rc < 0)
                return rc;
            w->audio_eof = true;
        }
    }
    return 0;
}

/* ---- public ---- */

int ditto_video_writer_open(DittoVideoWriter **out, const char *path, int width, int height, const DittoVideoWriterParams *p)
{
    *out = NULL;
    DittoVideoWriterParams def;
    if (!p) {
        ditto_video_writer_params_default(&def);
        p = &def;
    }
    if (!path || !*path)
        return ditto_fail(&p->log, DITTO_ERR_INVAL, "writer: no output file name");
    if (width < 2 || height < 2 || width % 2 || height % 2 || width > 16384 || height > 16384)
        return ditto_fail(&p->log, DITTO_ERR_INVAL, "%s: frame size %dx%d must be even, 2..16384 (yuv420p)", path, width, height);
    if (p->fps < 1 || p->fps > 1000 || p->crf < 0 || p->crf > 63 || p->bitrate < 0)
        return ditto_fail(&p->log, DITTO_ERR_INVAL, "%s: bad writer options (fps %d, crf %d, bitrate %lld)", path, p->fps, p->crf, (long long)p->bitrate);
    ditto_io_ffmpeg_quiet();
    DittoVideoWriter *w = ditto_calloc(1, sizeof *w);
    if (!w || !(w->path = ditto_strdup(path))) {
        ditto_free(w);
        return ditto_fail(&p->log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    }
    w->log = p->log;
    w->width = width;
    w->height = height;
    w->fps = p->fps;
    char eb[128];
    int rc = make_temp(w);
    if (rc >= 0 && (avformat_alloc_output_context2(&w->oc, NULL, "mp4", w->tmp) < 0 || !w->oc))
        rc = writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: this FFmpeg cannot write MP4", path);
    if (rc >= 0 && !(w->pkt = av_packet_alloc()))
        rc = writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", path);
    if (rc >= 0)
        rc = open_video(w, p);
    if (rc >= 0 && p->audio_path)
        rc = open_audio(w, p);
    if (rc >= 0) {
        int av = avio_open(&w->oc->pb, w->tmp, AVIO_FLAG_WRITE);
        if (av < 0)
            rc = writer_fail(w, ditto_io_av_code(av), "%s: cannot write the video: %s", path, ditto_io_av_strerror(av, eb, sizeof eb));
    }
    if (rc >= 0) {
        AVDictionary *opts = NULL;
        av_dict_set(&opts, "movflags", "+faststart+write_colr", 0);
        int av = avformat_write_header(w->oc, &opts);
        av_dict_free(&opts);
        if (av < 0)
            rc = write_error(w, av);
    }
    if (rc < 0) {
        ditto_video_writer_close(&w);
        return rc;
    }
    *out = w;
    return 0;
}

static int check_state(DittoVideoWriter *w)
{
    if (!w)
        return DITTO_ERR_INVAL;
    if (w->failed)
        return w->err;
    if (w->finished)
        return ditto_fail(&w->log, DITTO_ERR_BADSTATE, "%s: the writer is already finished", w->path);
    return 0;
}

/* After the frame's planes are filled: encode it and keep the audio up with the video. */
static int submit_frame(DittoVideoWriter *w)
{
    w->vframe->pts = w->frames++;
    DITTO_TRY(encode(w, w->venc, w->vst, w->vframe));
    return audio_pump(w, (double)w->frames / w->fps);
}

int ditto_video_writer_write(DittoVideoWriter *w, const DittoYuvPlanes *f)
{
    DITTO_TRY(check_state(w));
    if (!f || !f->y || !f->u || !f->v)
        return ditto_fail(&w->log, DITTO_ERR_INVAL, "%s: missing frame planes", w->path);
    if (av_frame_make_writable(w->vframe) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    int cw = ditto_yuv420_chroma_size(w->width), ch = ditto_yuv420_chroma_size(w->height);
    for (int y = 0; y < w->height; y++)
        memcpy(w->vframe->data[0] + (ptrdiff_t)y * w->vframe->linesize[0], f->y + (ptrdiff_t)y * f->y_stride, (size_t)w->width);
    for (int y = 0; y < ch; y++) {
        memcpy(w->vframe->data[1] + (ptrdiff_t)y * w->vframe->linesize[1], f->u + (ptrdiff_t)y * f->uv_stride, (size_t)cw);
        memcpy(w->vframe->data[2] + (ptrdiff_t)y * w->vframe->linesize[2], f->v + (ptrdiff_t)y * f->uv_stride, (size_t)cw);
    }
    return submit_frame(w);
}

int ditto_video_writer_write_rgb(DittoVideoWriter *w, DittoThreadPool *pool, const uint8_t *rgb)
{
    DITTO_TRY(check_state(w));
    if (!rgb)
        return ditto_fail(&w->log, DITTO_ERR_INVAL, "%s: missing frame", w->path);
    if (av_frame_make_writable(w->vframe) < 0)
        return writer_fail(w, DITTO_ERR_NOMEM, "%s: out of memory", w->path);
    DittoYuvPlanes pl = { w->vframe->data[0], w->vframe->data[1], w->vframe->data[2], w->vframe->linesize[0], w->vframe->linesize[1] };
    if (w->vframe->linesize[1] != w->vframe->linesize[2])
        return writer_fail(w, DITTO_ERR_UNSUPPORTED, "%s: unexpected frame layout", w->path);
    DITTO_TRY(ditto_rgb_to_yuv420(pool, rgb, w->width, w->height, (ptrdiff_t)w->width * 3, &pl));
    return submit_frame(w);
}

int64_t ditto_video_writer_frames(const DittoVideoWriter *w)
{
    return w ? w->frames : 0;
}

int ditto_video_writer_finish(DittoVideoWriter *w)
{
    DITTO_TRY(check_state(w));
    if (w->frames == 0)
        return writer_fail(w, DITTO_ERR_INVAL, "%s: no video frames were written", w->path);
    DITTO_TRY(encode(w, w->venc, w->vst, NULL));
    DITTO_TRY(audio_pump(w, INFINITY));
    int av = av_write_trailer(w->oc);
    if (av < 0)
        return write_error(w, av);
    if (w->oc->pb->error < 0)
        return write_error(w, w->oc->pb->error);
    av = avio_closep(&w->oc->pb);
    if (av < 0)
        return write_error(w, av);
    /* the data must be on disk before the name points at it */
    int fd = open(w->tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return writer_fail(w, errno_code(e), "%s: writing the video failed: %s", w->path, strerror(e));
    }
    close(fd);
    if (rename(w->tmp, w->path) != 0) {
        int e = errno;
        return writer_fail(w, errno_code(e), "%s: cannot move the finished video into place: %s", w->path, strerror(e));
    }
    w->tmp_exists = false;
    w->finished = true;
    return 0;
}

void ditto_video_writer_close(DittoVideoWriter **wp)
{
    if (!wp || !*wp)
        return;
    DittoVideoWriter *w = *wp;
    if (!w->finished)
        discard_file(w);
    if (w->oc && w->oc->pb)
        avio_closep(&w->oc->pb);
    avformat_free_context(w->oc);
    avcodec_free_context(&w->venc);
    avcodec_free_context(&w->aenc);
    av_frame_free(&w->vframe);
    av_frame_free(&w->aframe);
    av_packet_free(&w->pkt);
    swr_free(&w->swr);
    if (w->fifo)
        av_audio_fifo_free(w->fifo);
    if (w->abuf)
        av_freep(&w->abuf[0]);
    av_freep(&w->abuf);
    ditto_audio_reader_close(&w->ar);
    ditto_free(w->path);
    ditto_free(w->tmp);
    ditto_free(w);
    *wp = NULL;
}

#endif /* DITTO_HAVE_FFMPEG */
