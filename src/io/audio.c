/*
 * Audio decode (libavformat/libavcodec) and resampling (libswresample); see
 * audio.h.
 */
#include "io/audio.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/av_util.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#endif

void ditto_pcm_free(DittoPcm *pcm)
{
    if (!pcm)
        return;
    ditto_free(pcm->samples);
    memset(pcm, 0, sizeof *pcm);
}

#ifndef DITTO_HAVE_FFMPEG

static int no_ffmpeg(const char *path, const DittoLogger *log)
{
    return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: cannot decode audio: this build has no FFmpeg (DITTO_FFMPEG=OFF)", path ? path : "(null)");
}

int ditto_audio_load(const char *path, int rate, DittoPcm *out, const DittoLogger *log)
{
    (void)rate;
    if (out)
        memset(out, 0, sizeof *out);
    return no_ffmpeg(path, log);
}

int ditto_audio_reader_open(DittoAudioReader **out, const char *path, const DittoLogger *log)
{
    *out = NULL;
    return no_ffmpeg(path, log);
}

void ditto_audio_reader_close(DittoAudioReader **r)
{
    if (r)
        *r = NULL;
}

int ditto_audio_reader_rate(const DittoAudioReader *r)
{
    (void)r;
    return 0;
}

int ditto_audio_reader_channels(const DittoAudioReader *r)
{
    (void)r;
    return 0;
}

int ditto_audio_reader_read(DittoAudioReader *r, const float **samples, int64_t *n)
{
    (void)r;
    *samples = NULL;
    *n = 0;
    return DITTO_ERR_UNSUPPORTED;
}

#else /* DITTO_HAVE_FFMPEG */

/* ---- streaming reader ---- */

struct DittoAudioReader {
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
    int rate, channels;
    float *buf;              /* interleaved output of the last read */
    int64_t cap;             /* frames buf holds */
    bool flushing, done;
    int bad;                 /* consecutive frames the decoder rejected */
    int64_t decoded;         /* frames delivered so far */
    char *path;
    DittoLogger log;
};


void ditto_audio_reader_close(DittoAudioReader **rp)
{
    if (!rp || !*rp)
        return;
    DittoAudioReader *r = *rp;
    av_packet_free(&r->pkt);
    av_frame_free(&r->frame);
    avcodec_free_context(&r->dec);
    avformat_close_input(&r->fmt);
    ditto_free(r->buf);
    ditto_free(r->path);
    ditto_free(r);
    *rp = NULL;
}

int ditto_audio_reader_open(DittoAudioReader **out, const char *path, const DittoLogger *log)
{
    *out = NULL;
    if (!path)
        return ditto_fail(log, DITTO_ERR_INVAL, "audio: no file name");
    DITTO_TRY(ditto_io_check_file(path, "audio", log));
    ditto_io_ffmpeg_quiet();

    DittoAudioReader *r = ditto_calloc(1, sizeof *r);
    if (!r || !(r->path = ditto_strdup(path))) {
        ditto_free(r);
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    }
    r->log = log ? *log : (DittoLogger){ 0 };
    char eb[128];
    const AVCodec *codec = NULL;
    int rc = ditto_io_av_open_input(path, NULL, AVMEDIA_TYPE_AUDIO, "audio", "audio file", &r->fmt, &r->stream, &codec, &r->dec, &r->pkt,
                                    &r->frame, log);
    if (rc < 0)
        goto fail;
    int av = avcodec_open2(r->dec, codec, NULL);
    if (av < 0) {
        rc = ditto_fail(log, ditto_io_av_code(av), "%s: cannot open the %s decoder: %s", path, codec->name, ditto_io_av_strerror(av, eb, sizeof eb));
        goto fail;
    }
    r->rate = r->dec->sample_rate;
    r->channels = r->dec->ch_layout.nb_channels;
    if (r->rate <= 0 || r->channels <= 0) {
        rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: audio stream without a sample rate or channels (%d Hz, %d channels)", path, r->rate, r->channels);
        goto fail;
    }
    *out = r;
    return 0;
fail:
    ditto_audio_reader_close(&r);
    return rc;
}

int ditto_audio_reader_rate(const DittoAudioReader *r)
{
    return r->rate;
}

int ditto_audio_reader_channels(const DittoAudioReader *r)
{
    return r->channels;
}

/* One sample of any FFmpeg sample format as float, integer PCM scaled by 1/2^(bits-1). */
static float sample_f32(enum AVSampleFormat packed, const uint8_t *p)
{
    switch (packed) {
    case AV_SAMPLE_FMT_U8: return (float)((int)p[0] - 128) * (1.0f / 128.0f);
    case AV_SAMPLE_FMT_S16: { int16_t v; memcpy(&v, p, 2); return (float)v * (1.0f / 32768.0f); }
    case AV_SAMPLE_FMT_S32: { int32_t v; memcpy(&v, p, 4); return (float)v * (1.0f / 2147483648.0f); }
    case AV_SAMPLE_FMT_S64: { int64_t v; memcpy(&v, p, 8); return (float)((double)v * (1.0 / 9223372036854775808.0)); }
    case AV_SAMPLE_FMT_FLT: { float v; memcpy(&v, p, 4); return v; }
    case AV_SAMPLE_FMT_DBL: { double v; memcpy(&v, p, 8); return (float)v; }
    default: return 0.0f;
    }
}

static int deliver(DittoAudioReader *r, const float **samples, int64_t *n)
{
    AVFrame *f = r->frame;
    int ch = f->ch_layout.nb_channels;
    if (f->sample_rate != r->rate || ch != r->channels) {
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: the audio changes format mid-stream (%d Hz %d ch -> %d Hz %d ch)", r->path,
                          r->rate, r->channels, f->sample_rate, ch);
    }
    enum AVSampleFormat fmt = f->format, packed = av_get_packed_sample_fmt(fmt);
    if (packed == AV_SAMPLE_FMT_NONE || av_get_bytes_per_sample(fmt) <= 0)
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: unsupported decoded sample format %d", r->path, (int)fmt);
    int64_t frames = f->nb_samples;
    if (frames > r->cap) {
        float *b = ditto_realloc(r->buf, (size_t)frames * (size_t)ch * sizeof *b);
        if (!b)
            return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory", r->path);
        r->buf = b;
        r->cap = frames;
    }
    int bps = av_get_bytes_per_sample(fmt);
    bool planar = av_sample_fmt_is_planar(fmt);
    for (int64_t i = 0; i < frames; i++)
        for (int c = 0; c < ch; c++) {
            const uint8_t *p = planar ? f->extended_data[c] + i * bps : f->extended_data[0] + (i * ch + c) * bps;
            r->buf[i * ch + c] = sample_f32(packed, p);
        }
    r->decoded += frames;
    *samples = r->buf;
    *n = frames;
    return 0;
}

int ditto_audio_reader_read(DittoAudioReader *r, const float **samples, int64_t *n)
{
    *samples = NULL;
    *n = 0;
    for (;;) {
        int got = ditto_io_av_next_frame(r->fmt, r->dec, r->pkt, r->frame, r->stream, &r->flushing, &r->done, &r->bad, r->path, "audio",
                                         &r->log);
        if (got < 0)
            return got;
        if (!got)
            break;
        int rc = r->frame->nb_samples > 0 ? deliver(r, samples, n) : 0;
        av_frame_unref(r->frame);
        if (rc < 0 || *n > 0)
            return rc;
    }
    if (r->decoded == 0)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: no audio samples could be decoded", r->path);
    return 0;
}

/* ---- load: mono, resampled ---- */

/*
 * A mono float resampler: libsoxr through swresample when this FFmpeg has
 * it, else swresample's own engine with a long, finely phased filter.
 */
static SwrContext *resampler(int in_rate, int out_rate, bool soxr, const DittoLogger *log)
{
    SwrContext *s = swr_alloc();
    if (!s)
        return NULL;
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    av_opt_set_chlayout(s, "in_chlayout", &mono, 0);
    av_opt_set_chlayout(s, "out_chlayout", &mono, 0);
    av_opt_set_int(s, "in_sample_rate", in_rate, 0);
    av_opt_set_int(s, "out_sample_rate", out_rate, 0);
    av_opt_set_sample_fmt(s, "in_sample_fmt", AV_SAMPLE_FMT_FLT, 0);
    av_opt_set_sample_fmt(s, "out_sample_fmt", AV_SAMPLE_FMT_FLT, 0);
    int ok;
    if (soxr) {
        ok = av_opt_set(s, "resampler", "soxr", 0) >= 0 && av_opt_set_double(s, "precision", 28.0, 0) >= 0;
    } else {
        ok = av_opt_set_int(s, "filter_size", 64, 0) >= 0 && av_opt_set_int(s, "phase_shift", 14, 0) >= 0 &&
             av_opt_set_int(s, "linear_interp", 1, 0) >= 0 && av_opt_set_int(s, "exact_rational", 1, 0) >= 0;
    }
    if (!ok || swr_init(s) < 0)
        swr_free(&s);
    if (s)
        ditto_log(log, DITTO_LOG_DEBUG, "audio: resampling %d Hz -> %d Hz with %s", in_rate, out_rate,
                  soxr ? "libsoxr (28-bit precision)" : "swresample (64-tap filter)");
    return s;
}

/* in (n_in mono samples at in_rate) -> out (n_out samples at out_rate), cut or zero-padded to n_out */
static int resample_mono(const float *in, int64_t n_in, int in_rate, int out_rate, float *out, int64_t n_out, const char *path,
                         const DittoLogger *log)
{
    SwrContext *s = resampler(in_rate, out_rate, true, log);
    if (!s)
        s = resampler(in_rate, out_rate, false, log);
    if (!s)
        return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: cannot set up resampling %d Hz -> %d Hz", path, in_rate, out_rate);
    const int chunk = 1 << 16;
    float *tmp = NULL;
    int cap = 0, rc = 0;
    int64_t got = 0, pos = 0;
    for (;;) {
        int m = n_in - pos < chunk ? (int)(n_in - pos) : chunk;   /* 0: drain */
        int need = swr_get_out_samples(s, m);
        if (need < 0) {
            rc = ditto_fail(log, DITTO_ERR_IO, "%s: resampling failed", path);
            break;
        }
        if (need + 16 > cap) {
            float *t = ditto_realloc(tmp, (size_t)(need + 16) * sizeof *t);
            if (!t) {
                rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory while resampling", path);
                break;
            }
            tmp = t;
            cap = need + 16;
        }
        uint8_t *dst = (uint8_t *)tmp;
        const uint8_t *src = (const uint8_t *)(in + pos);
        int k = swr_convert(s, &dst, cap, m ? &src : NULL, m);
        if (k < 0) {
            char eb[128];
            rc = ditto_fail(log, DITTO_ERR_IO, "%s: resampling failed: %s", path, ditto_io_av_strerror(k, eb, sizeof eb));
            break;
        }
        int64_t keep = n_out - got < k ? n_out - got : k;
        if (keep > 0)
            memcpy(out + got, tmp, (size_t)keep * sizeof *out);
        got += keep > 0 ? keep : 0;
        pos += m;
        if (m == 0 && k == 0)
            break;
    }
    ditto_free(tmp);
    swr_free(&s);
    if (rc < 0)
        return rc;
    for (int64_t i = got; i < n_out; i++)
        out[i] = 0.0f;
    return 0;
}

int ditto_audio_load(const char *path, int rate, DittoPcm *out, const DittoLogger *log)
{
    memset(out, 0, sizeof *out);
    if (rate <= 0)
        return ditto_fail(log, DITTO_ERR_INVAL, "%s: bad target sample rate %d", path ? path : "audio", rate);
    DittoAudioReader *r;
    DITTO_TRY(ditto_audio_reader_open(&r, path, log));
    int ch = r->channels;
    float *mono = NULL;
    int64_t n = 0, cap = 0;
    int rc;
    for (;;) {
        const float *x;
        int64_t k;
        rc = ditto_audio_reader_read(r, &x, &k);
        if (rc < 0 || k == 0)
            break;
        if (n + k > cap) {
            int64_t nc = cap ? cap : 1 << 16;
            while (nc < n + k)
                nc *= 2;
            float *m = (uint64_t)nc < SIZE_MAX / sizeof *m ? ditto_realloc(mono, (size_t)nc * sizeof *m) : NULL;
            if (!m) {
                rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory for %lld samples", path, (long long)(n + k));
                break;
            }
            mono = m;
            cap = nc;
        }
        /* librosa.to_mono: np.mean over channels in float32 */
        for (int64_t i = 0; i < k; i++) {
            float s = x[i * ch];
            for (int c = 1; c < ch; c++)
                s += x[i * ch + c];
            mono[n + i] = ch > 1 ? s / (float)ch : s;
        }
        n += k;
    }
    int src_rate = r->rate;
    ditto_audio_reader_close(&r);
    if (rc < 0) {
        ditto_free(mono);
        return rc;
    }

    out->src_rate = src_rate;
    out->src_channels = ch;
    out->src_frames = n;
    out->src_duration = (double)n / (double)src_rate;
    out->rate = rate;
    if (src_rate == rate) {
        out->samples = mono;
        out->n = n;
        return 0;
    }
    /* librosa: n_samples = ceil(n * (sr / orig_sr)) in double */
    double want = ceil((double)n * ((double)rate / (double)src_rate));
    int64_t n_out = want < 1 ? 1 : (int64_t)want;
    float *res = (uint64_t)n_out < SIZE_MAX / sizeof *res ? ditto_malloc((size_t)n_out * sizeof *res) : NULL;
    if (!res) {
        ditto_free(mono);
        memset(out, 0, sizeof *out);
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory for %lld samples", path, (long long)n_out);
    }
    rc = resample_mono(mono, n, src_rate, rate, res, n_out, path, log);
    ditto_free(mono);
    if (rc < 0) {
        ditto_free(res);
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->samples = res;
    out->n = n_out;
    return 0;
}

#endif /* DITTO_HAVE_FFMPEG */
