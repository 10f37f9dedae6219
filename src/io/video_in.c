/* Video (and single-image) decode to RGB24 through libavformat/libavcodec/libswscale; see video_in.h. */
#include "io/video_in.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/av_util.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#endif

void ditto_video_reader_params_default(DittoVideoReaderParams *p)
{
    p->max_frames = 0;
    p->format = NULL;
    p->threads = 0;
}

void ditto_rgb_orient(const uint8_t *in, int w, int h, int o, uint8_t *out, int *ow, int *oh)
{
    bool swap = o >= 5 && o <= 8;
    int W = swap ? h : w, H = swap ? w : h;
    *ow = W;
    *oh = H;
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = w - 1 - x; sy = y; break;               /* mirror horizontally */
            case 3: sx = w - 1 - x; sy = h - 1 - y; break;       /* rotate 180 */
            case 4: sx = x; sy = h - 1 - y; break;               /* mirror vertically */
            case 5: sx = y; sy = x; break;                       /* transpose */
            case 6: sx = y; sy = h - 1 - x; break;               /* rotate 90 clockwise */
            case 7: sx = w - 1 - y; sy = h - 1 - x; break;       /* transverse */
            case 8: sx = w - 1 - y; sy = x; break;               /* rotate 90 counter-clockwise */
            default: sx = x; sy = y; break;
            }
            const uint8_t *s = in + ((size_t)sy * (size_t)w + (size_t)sx) * 3;
            uint8_t *d = out + ((size_t)y * (size_t)W + (size_t)x) * 3;
            d[0] = s[0];
            d[1] = s[1];
            d[2] = s[2];
        }
    }
}

void ditto_video_free(DittoVideo *v)
{
    if (!v)
        return;
    ditto_free(v->frames);
    memset(v, 0, sizeof *v);
}

#ifndef DITTO_HAVE_FFMPEG

int ditto_video_reader_open(DittoVideoReader **out, const char *path, const DittoVideoReaderParams *p, const DittoLogger *log)
{
    (void)p;
    *out = NULL;
    return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: cannot decode video: this build has no FFmpeg (DITTO_FFMPEG=OFF)", path ? path : "(null)");
}

void ditto_video_reader_close(DittoVideoReader **r)
{
    if (r)
        *r = NULL;
}

double ditto_video_reader_fps(const DittoVideoReader *r)
{
    (void)r;
    return 0;
}

int64_t ditto_video_reader_frame_hint(const DittoVideoReader *r)
{
    (void)r;
    return 0;
}

int ditto_video_reader_read(DittoVideoReader *r, const uint8_t **rgb, int *width, int *height)
{
    (void)r;
    *rgb = NULL;
    *width = *height = 0;
    return DITTO_ERR_UNSUPPORTED;
}

int ditto_video_reader_orientation(const DittoVideoReader *r)
{
    (void)r;
    return 1;
}

int ditto_video_load(const char *path, int64_t max_frames, DittoVideo *out, const DittoLogger *log)
{
    (void)max_frames;
    memset(out, 0, sizeof *out);
    return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: cannot decode video: this build has no FFmpeg (DITTO_FFMPEG=OFF)", path ? path : "(null)");
}

#else /* DITTO_HAVE_FFMPEG */

struct DittoVideoReader {
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    struct SwsContext *sws;
    int stream;
    int rotate;              /* EXIF-style code of the stream's display rotation (1: none) */
    int orientation;         /* EXIF orientation of the last frame */
    double fps;
    int64_t frame_hint;
    int64_t max_frames, delivered;
    bool flushing, done;
    int bad;                 /* consecutive frames the decoder rejected */
    bool jfif;               /* JPEG stream: libjpeg-compatible YCbCr -> RGB (jfif_to_rgb) */
    int32_t *jfif_tab;       /* its 4 x 256 colour tables, once */
    uint8_t *rgb, *rot;      /* converted frame, rotated frame */
    size_t rgb_cap, rot_cap;
    char *path;
    DittoLogger log;
};

void ditto_video_reader_close(DittoVideoReader **rp)
{
    if (!rp || !*rp)
        return;
    DittoVideoReader *r = *rp;
    sws_freeContext(r->sws);
    av_packet_free(&r->pkt);
    av_frame_free(&r->frame);
    avcodec_free_context(&r->dec);
    avformat_close_input(&r->fmt);
    ditto_free_aligned(r->rgb);
    ditto_free(r->rot);
    ditto_free(r->jfif_tab);
    ditto_free(r->path);
    ditto_free(r);
    *rp = NULL;
}

/* EXIF code of the stream's display matrix: 90 / 180 / 270 degrees as ffmpeg's autorotation turns them. */
static int stream_rotation(const AVStream *st)
{
    const uint8_t *m = NULL;
#if LIBAVFORMAT_VERSION_MAJOR < 61
    size_t size = 0;
    m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (size < 9 * sizeof(int32_t))
        m = NULL;
#else
    const AVPacketSideData *sd = av_packet_side_data_get(st->codecpar->coded_side_data, st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    if (sd && sd->size >= 9 * sizeof(int32_t))
        m = sd->data;
#endif
    if (!m)
        return 1;
    double theta = -round(av_display_rotation_get((const int32_t *)m));
    theta -= 360 * floor(theta / 360 + 0.9 / 360);
    if (fabs(theta - 90) < 1)
        return 6;
    if (fabs(theta - 180) < 1)
        return 3;
    if (fabs(theta - 270) < 1)
        return 8;
    return 1;
}

int ditto_video_reader_open(DittoVideoReader **out, const char *path, const DittoVideoReaderParams *p, const DittoLogger *log)
{
    *out = NULL;
    DittoVideoReaderParams def;
    if (!p) {
        ditto_video_reader_params_default(&def);
        p = &def;
    }
    if (!path)
        return ditto_fail(log, DITTO_ERR_INVAL, "video: no file name");
    DITTO_TRY(ditto_io_check_file(path, "video", log));
    ditto_io_ffmpeg_quiet();

    DittoVideoReader *r = ditto_calloc(1, sizeof *r);
    if (!r || !(r->path = ditto_strdup(path))) {
        ditto_free(r);
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    }
    r->log = log ? *log : (DittoLogger){ 0 };
    r->max_frames = p->max_frames;
    r->orientation = 1;
    char eb[128];
    int rc = 0;
    const AVInputFormat *ifmt = NULL;
    if (p->format && !(ifmt = av_find_input_format(p->format))) {
        rc = ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: this FFmpeg has no '%s' demuxer", path, p->format);
        goto fail;
    }
    const AVCodec *codec = NULL;
    rc = ditto_io_av_open_input(path, ifmt, AVMEDIA_TYPE_VIDEO, "video", "image or video file", &r->fmt, &r->stream, &codec, &r->dec,
                                &r->pkt, &r->frame, log);
    if (rc < 0)
        goto fail;
    AVStream *st = r->fmt->streams[r->stream];
    r->dec->thread_count = p->threads > 0 ? p->threads : 0;
    if (codec->id == AV_CODEC_ID_MJPEG) {
        /* the IJG integer IDCT (libjpeg's default JDCT_ISLOW) instead of FFmpeg's own */
        r->dec->idct_algo = FF_IDCT_INT;
        r->jfif = true;
    }
    int av = avcodec_open2(r->dec, codec, NULL);
    if (av < 0) {
        rc = ditto_fail(log, ditto_io_av_code(av), "%s: cannot open the %s decoder: %s", path, codec->name, ditto_io_av_strerror(av, eb, sizeof eb));
        goto fail;
    }
    AVRational fr = av_guess_frame_rate(r->fmt, st, NULL);
    r->fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0.0;
    r->frame_hint = st->nb_frames > 0 ? st->nb_frames : 0;
    r->rotate = stream_rotation(st);
    *out = r;
    return 0;
fail:
    ditto_video_reader_close(&r);
    return rc;
}

double ditto_video_reader_fps(const DittoVideoReader *r)
{
    return r->fps;
}

int64_t ditto_video_reader_frame_hint(const DittoVideoReader *r)
{
    return r->frame_hint;
}

int ditto_video_reader_orientation(const DittoVideoReader *r)
{
    return r->orientation;
}

/*
 * libjpeg's decode of a JFIF image, from FFmpeg's YCbCr planes: "fancy"
 * (triangle-filter) chroma upsampling for 4:2:0 and 4:2:2, then the JFIF
 * full-range YCbCr -> RGB conversion in 16-bit fixed point with libjpeg's
 * rounding, so an image decodes as cv2.imread decodes it (given the same
 * IDCT, FF_IDCT_INT). The formulas are the JFIF standard's and the
 * triangle filter's 3/4 + 1/4 weights with libjpeg's alternating 8/7
 * rounding biases.
 */
enum { JF_CR_R, JF_CB_B, JF_CR_G, JF_CB_G };

static int32_t jf_fix(double x)
{
    return (int32_t)(x * 65536.0 + 0.5);
}

static int32_t jf_shift(int64_t v)
{
    return (int32_t)(v >= 0 ? v >> 16 : -((-v + 65535) >> 16));   /* floor(v / 2^16) */
}

static int32_t *jfif_tables(void)
{
    int32_t *t = ditto_malloc(4 * 256 * sizeof *t);
    if (!t)
        return NULL;
    for (int i = 0; i < 256; i++) {
        int64_t x = i - 128;
        t[JF_CR_R * 256 + i] = jf_shift(jf_fix(1.40200) * x + 32768);
        t[JF_CB_B * 256 + i] = jf_shift(jf_fix(1.77200) * x + 32768);
        t[JF_CR_G * 256 + i] = (int32_t)(-jf_fix(0.71414) * x);
        t[JF_CB_G * 256 + i] = (int32_t)(-jf_fix(0.34414) * x + 32768);
    }
    return t;
}

static uint8_t clamp_u8(int32_t v)
{
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/*
 * Upsample one chroma row to full width (w samples). h2: 2x horizontally
 * with the triangle filter; v2: c1 is the other chroma row of the 3:1
 * vertical blend (4:2:0), else unused. The horizontal pass weighs the
 * nearer sample 3/4 with rounding biases alternating 8 (left output) and 7
 * (right output) on 16x-scaled sums for 4:2:0, 1 and 2 on 4x sums for
 * 4:2:2; the outermost outputs repeat the edge sample.
 */
static void jf_row(const uint8_t *c0, const uint8_t *c1, int cw, bool v2, bool h2, int w, int16_t *out)
{
    if (!h2) {
        for (int x = 0; x < w; x++)
            out[x] = c0[x];
        return;
    }
    int shift = v2 ? 4 : 2;
    int32_t be = v2 ? 8 : 1, bo = v2 ? 7 : 2;
    for (int i = 0; i < cw; i++) {
        int32_t th = v2 ? 3 * c0[i] + c1[i] : c0[i];
        int32_t la = th, nx = th;
        if (i > 0)
            la = v2 ? 3 * c0[i - 1] + c1[i - 1] : c0[i - 1];
        if (i + 1 < cw)
            nx = v2 ? 3 * c0[i + 1] + c1[i + 1] : c0[i + 1];
        int x = 2 * i;
        out[x] = (int16_t)((3 * th + la + be) >> shift);
        if (x + 1 < w)
            out[x + 1] = (int16_t)((3 * th + nx + bo) >> shift);
    }
}

static int jfif_to_rgb(DittoVideoReader *r, const AVFrame *f, bool h2, bool v2, uint8_t *dst)
{
    int w = f->width, h = f->height, cw = h2 ? (w + 1) / 2 : w, ch = v2 ? (h + 1) / 2 : h;
    if (!r->jfif_tab && !(r->jfif_tab = jfif_tables()))
        return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory", r->path);
    int16_t *cb = ditto_malloc((size_t)w * 2 * sizeof *cb);
    if (!cb)
        return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory", r->path);
    int16_t *cr = cb + w;
    const int32_t *t = r->jfif_tab;
    for (int y = 0; y < h; y++) {
        int cy = v2 ? y / 2 : y;
        /* the other chroma row of the vertical blend: above for even rows, below for odd ones, the edge row repeated */
        int cn = v2 ? (y % 2 == 0 ? (cy > 0 ? cy - 1 : 0) : (cy + 1 < ch ? cy + 1 : ch - 1)) : cy;
        jf_row(f->data[1] + (ptrdiff_t)cy * f->linesize[1], f->data[1] + (ptrdiff_t)cn * f->linesize[1], cw, v2, h2, w, cb);
        jf_row(f->data[2] + (ptrdiff_t)cy * f->linesize[2], f->data[2] + (ptrdiff_t)cn * f->linesize[2], cw, v2, h2, w, cr);
        const uint8_t *yy = f->data[0] + (ptrdiff_t)y * f->linesize[0];
        uint8_t *d = dst + (size_t)y * (size_t)w * 3;
        for (int x = 0; x < w; x++) {
            int32_t Y = yy[x], b = cb[x], c = cr[x];
            d[3 * x + 0] = clamp_u8(Y + t[JF_CR_R * 256 + c]);
            d[3 * x + 1] = clamp_u8(Y + jf_shift((int64_t)t[JF_CB_G * 256 + b] + t[JF_CR_G * 256 + c]));
            d[3 * x + 2] = clamp_u8(Y + t[JF_CB_B * 256 + b]);
        }
    }
    ditto_free(cb);
    return 0;
}

/* AVFrame -> packed RGB24 in r->rgb (w*3-byte rows), then the stream rotation. */
static int convert(DittoVideoReader *r, const uint8_t **rgb, int *width, int *height)
{
    AVFrame *f = r->frame;
    int w = f->width, h = f->height;
    if (w < 1 || h < 1 || w > 32768 || h > 32768)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: decoded frame has a bad size %dx%d", r->path, w, h);
    enum AVPixelFormat fmt = f->format;
    /* the JPEG ("j") formats are full-range variants; swscale wants the plain format + a range */
    bool full = f->color_range == AVCOL_RANGE_JPEG;
    switch (fmt) {
    case AV_PIX_FMT_YUVJ420P: fmt = AV_PIX_FMT_YUV420P; full = true; break;
    case AV_PIX_FMT_YUVJ422P: fmt = AV_PIX_FMT_YUV422P; full = true; break;
    case AV_PIX_FMT_YUVJ444P: fmt = AV_PIX_FMT_YUV444P; full = true; break;
    case AV_PIX_FMT_YUVJ440P: fmt = AV_PIX_FMT_YUV440P; full = true; break;
    case AV_PIX_FMT_YUVJ411P: fmt = AV_PIX_FMT_YUV411P; full = true; break;
    default: break;
    }
    r->sws = sws_getCachedContext(r->sws, w, h, fmt, w, h, AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
    if (!r->sws)
        return ditto_fail(&r->log, DITTO_ERR_UNSUPPORTED, "%s: cannot convert pixel format %s to RGB", r->path,
                          av_get_pix_fmt_name(fmt) ? av_get_pix_fmt_name(fmt) : "?");
    int *inv, *tab, src_range, dst_range, bri, con, sat;
    if (sws_getColorspaceDetails(r->sws, &inv, &src_range, &tab, &dst_range, &bri, &con, &sat) >= 0) {
        int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB ? SWS_CS_DEFAULT : (int)f->colorspace;
        sws_setColorspaceDetails(r->sws, sws_getCoefficients(cs), full, tab, 1, bri, con, sat);
    }
    size_t need = (size_t)w * (size_t)h * 3 + 64;   /* swscale may write a little past the last row */
    if (need > r->rgb_cap) {
        ditto_free_aligned(r->rgb);
        r->rgb_cap = 0;
        if (!(r->rgb = ditto_malloc_aligned(need)))
            return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory for a %dx%d frame", r->path, w, h);
        r->rgb_cap = need;
    }
    enum AVPixelFormat jf = f->format;
    bool jfif = r->jfif && full && (jf == AV_PIX_FMT_YUVJ420P || jf == AV_PIX_FMT_YUVJ422P || jf == AV_PIX_FMT_YUVJ444P ||
                                    jf == AV_PIX_FMT_YUV420P || jf == AV_PIX_FMT_YUV422P || jf == AV_PIX_FMT_YUV444P);
    if (jfif) {
        bool h2 = jf != AV_PIX_FMT_YUVJ444P && jf != AV_PIX_FMT_YUV444P;
        bool v2 = jf == AV_PIX_FMT_YUVJ420P || jf == AV_PIX_FMT_YUV420P;
        DITTO_TRY(jfif_to_rgb(r, f, h2, v2, r->rgb));
    } else {
        uint8_t *dst[4] = { r->rgb, NULL, NULL, NULL };
        int dst_stride[4] = { 3 * w, 0, 0, 0 };
        if (sws_scale(r->sws, (const uint8_t *const *)f->data, f->linesize, 0, h, dst, dst_stride) != h)
            return ditto_fail(&r->log, DITTO_ERR_IO, "%s: pixel conversion failed", r->path);
    }

    const AVDictionaryEntry *e = av_dict_get(f->metadata, "Orientation", NULL, 0);
    int o = e ? atoi(e->value) : 1;
    r->orientation = o >= 1 && o <= 8 ? o : 1;
    if (r->rotate == 1) {
        *rgb = r->rgb;
        *width = w;
        *height = h;
        return 0;
    }
    if (need > r->rot_cap) {
        ditto_free(r->rot);
        r->rot_cap = 0;
        if (!(r->rot = ditto_malloc(need)))
            return ditto_fail(&r->log, DITTO_ERR_NOMEM, "%s: out of memory for a %dx%d frame", r->path, w, h);
        r->rot_cap = need;
    }
    ditto_rgb_orient(r->rgb, w, h, r->rotate, r->rot, width, height);
    *rgb = r->rot;
    return 0;
}

int ditto_video_reader_read(DittoVideoReader *r, const uint8_t **rgb, int *width, int *height)
{
    *rgb = NULL;
    *width = *height = 0;
    if (r->max_frames > 0 && r->delivered >= r->max_frames)
        return 0;
    int got = ditto_io_av_next_frame(r->fmt, r->dec, r->pkt, r->frame, r->stream, &r->flushing, &r->done, &r->bad, r->path, "video",
                                     &r->log);
    if (got < 0)
        return got;
    if (got) {
        int rc = convert(r, rgb, width, height);
        av_frame_unref(r->frame);
        if (rc >= 0)
            r->delivered++;
        return rc;
    }
    if (r->delivered == 0)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: no frame could be decoded", r->path);
    return 0;
}

int ditto_video_load(const char *path, int64_t max_frames, DittoVideo *out, const DittoLogger *log)
{
    memset(out, 0, sizeof *out);
    DittoVideoReaderParams p;
    ditto_video_reader_params_default(&p);
    p.max_frames = max_frames;
    DittoVideoReader *r;
    DITTO_TRY(ditto_video_reader_open(&r, path, &p, log));
    DittoVideo v = { .fps = r->fps };
    int64_t cap = 0;
    int rc;
    for (;;) {
        const uint8_t *rgb;
        int w, h;
        rc = ditto_video_reader_read(r, &rgb, &w, &h);
        if (rc < 0 || !rgb)
            break;
        if (v.n == 0) {
            v.width = w;
            v.height = h;
        } else if (w != v.width || h != v.height) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: frame %lld is %dx%d, the first was %dx%d", path, (long long)v.n, w, h, v.width, v.height);
            break;
        }
        size_t fb = (size_t)w * (size_t)h * 3;
        if (v.n == cap) {
            int64_t nc = cap ? cap * 2 : 16;
            if (p.max_frames > 0 && nc > p.max_frames)
                nc = p.max_frames;
            uint8_t *f = (uint64_t)nc <= SIZE_MAX / fb ? ditto_realloc(v.frames, (size_t)nc * fb) : NULL;
            if (!f) {
                rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory for %lld frames of %dx%d", path, (long long)nc, w, h);
                break;
            }
            v.frames = f;
            cap = nc;
        }
        memcpy(v.frames + (size_t)v.n * fb, rgb, fb);
        v.n++;
    }
    ditto_video_reader_close(&r);
    if (rc < 0) {
        ditto_video_free(&v);
        return rc;
    }
    *out = v;
    return 0;
}

#endif /* DITTO_HAVE_FFMPEG */
