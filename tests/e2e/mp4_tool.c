/*
 * e2e helper for tests/e2e.cmake (ffprobe is not on the CI machine):
 *
 *   mp4_tool probe FILE               key=value lines: codecs, pixel format, colour tags,
 *                                     frames (counted by decoding), fps, durations
 *   mp4_tool compare A B              decode both, compare frame by frame (RGB):
 *                                     frames, max_abs, mean_abs, psnr
 *   mp4_tool frame FILE N OUT.ppm     frame N as a PPM (for looking at a render)
 *   mp4_tool gen-wav OUT SEC RATE     speech-like test signal, 16-bit mono WAV (SEC may be 0)
 *   mp4_tool gen-image OUT W H        a drawn portrait as PPM
 *   mp4_tool gen-video OUT W H N      N frames of a moving drawn portrait, H.264 MP4
 *   mp4_tool gen-noface OUT W H       a flat image without a face, PPM
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>

#include "core/log.h"
#include "io/video_in.h"
#include "io/video_out.h"

static int probe(const char *path)
{
    AVFormatContext *fc = NULL;
    if (avformat_open_input(&fc, path, NULL, NULL) < 0 || avformat_find_stream_info(fc, NULL) < 0) {
        fprintf(stderr, "mp4_tool: cannot open %s\n", path);
        return 1;
    }
    printf("format=%s\n", fc->iformat->name);
    printf("duration=%.6f\n", fc->duration > 0 ? fc->duration / (double)AV_TIME_BASE : -1.0);
    int vi = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    int ai = av_find_best_stream(fc, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (vi >= 0) {
        AVStream *st = fc->streams[vi];
        AVCodecParameters *p = st->codecpar;
        printf("video_codec=%s\n", avcodec_get_name(p->codec_id));
        printf("pix_fmt=%s\n", av_get_pix_fmt_name((enum AVPixelFormat)p->format) ? av_get_pix_fmt_name((enum AVPixelFormat)p->format) : "none");
        printf("width=%d\nheight=%d\n", p->width, p->height);
        printf("color_range=%s\n", av_color_range_name(p->color_range) ? av_color_range_name(p->color_range) : "unknown");
        printf("color_space=%s\n", av_color_space_name(p->color_space) ? av_color_space_name(p->color_space) : "unknown");
        printf("color_primaries=%s\n", av_color_primaries_name(p->color_primaries) ? av_color_primaries_name(p->color_primaries) : "unknown");
        printf("color_trc=%s\n", av_color_transfer_name(p->color_trc) ? av_color_transfer_name(p->color_trc) : "unknown");
        printf("fps=%.6f\n", st->avg_frame_rate.den ? av_q2d(st->avg_frame_rate) : 0.0);
        printf("video_duration=%.6f\n", st->duration > 0 ? st->duration * av_q2d(st->time_base) : -1.0);
        /* count by decoding */
        const AVCodec *dec = avcodec_find_decoder(p->codec_id);
        AVCodecContext *cc = avcodec_alloc_context3(dec);
        avcodec_parameters_to_context(cc, p);
        long frames = 0;
        if (avcodec_open2(cc, dec, NULL) == 0) {
            AVPacket *pkt = av_packet_alloc();
            AVFrame *fr = av_frame_alloc();
            while (av_read_frame(fc, pkt) >= 0) {
                if (pkt->stream_index == vi && avcodec_send_packet(cc, pkt) == 0)
                    while (avcodec_receive_frame(cc, fr) == 0)
                        frames++;
                av_packet_unref(pkt);
            }
            avcodec_send_packet(cc, NULL);
            while (avcodec_receive_frame(cc, fr) == 0)
                frames++;
            av_frame_free(&fr);
            av_packet_free(&pkt);
        }
        avcodec_free_context(&cc);
        printf("frames=%ld\n", frames);
    } else {
        printf("video_codec=none\n");
    }
    if (ai >= 0) {
        AVStream *st = fc->streams[ai];
        printf("audio_codec=%s\n", avcodec_get_name(st->codecpar->codec_id));
        printf("audio_rate=%d\n", st->codecpar->sample_rate);
        printf("audio_duration=%.6f\n", st->duration > 0 ? st->duration * av_q2d(st->time_base) : -1.0);
    } else {
        printf("audio_codec=none\n");
    }
    avformat_close_input(&fc);
    return 0;
}

static int compare(const char *a, const char *b)
{
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_ERROR);
    DittoVideoReader *ra = NULL, *rb = NULL;
    if (ditto_video_reader_open(&ra, a, NULL, &lg) < 0 || ditto_video_reader_open(&rb, b, NULL, &lg) < 0)
        return 1;
    long frames = 0;
    int max_abs = 0;
    double sum = 0, sq = 0, n = 0;
    for (;;) {
        const uint8_t *pa, *pb;
        int wa, ha, wb, hb;
        if (ditto_video_reader_read(ra, &pa, &wa, &ha) < 0 || ditto_video_reader_read(rb, &pb, &wb, &hb) < 0)
            return 1;
        if (!pa || !pb) {
            if (pa || pb) {
                fprintf(stderr, "mp4_tool: the videos have different frame counts\n");
                return 1;
            }
            break;
        }
        if (wa != wb || ha != hb) {
            fprintf(stderr, "mp4_tool: frame sizes differ\n");
            return 1;
        }
        for (long i = 0; i < (long)wa * ha * 3; i++) {
            int d = abs((int)pa[i] - (int)pb[i]);
            if (d > max_abs)
                max_abs = d;
            sum += d;
            sq += (double)d * d;
        }
        n += (double)wa * ha * 3;
        frames++;
    }
    double mse = n > 0 ? sq / n : 0;
    printf("frames=%ld\nmax_abs=%d\nmean_abs=%.6f\npsnr=%.2f\n", frames, max_abs, n > 0 ? sum / n : 0, mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99.0);
    ditto_video_reader_close(&ra);
    ditto_video_reader_close(&rb);
    return 0;
}

static int write_ppm(const char *path, const uint8_t *rgb, int w, int h)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    fprintf(f, "P6\n%d %d\n255\n", w, h);
    fwrite(rgb, 1, (size_t)w * h * 3, f);
    return fclose(f) != 0;
}

static int frame(const char *path, long want, const char *out)
{
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_ERROR);
    DittoVideoReader *r = NULL;
    if (ditto_video_reader_open(&r, path, NULL, &lg) < 0)
        return 1;
    for (long i = 0;; i++) {
        const uint8_t *p;
        int w, h;
        if (ditto_video_reader_read(r, &p, &w, &h) < 0 || !p)
            return 1;
        if (i == want) {
            int rc = write_ppm(out, p, w, h);
            ditto_video_reader_close(&r);
            return rc;
        }
    }
}

/* Speech-like: a 120-220 Hz glottal buzz with formant-ish harmonics, syllables at ~4 Hz, pauses. */
static int gen_wav(const char *path, double sec, int rate)
{
    long n = (long)(sec * rate);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    unsigned data = (unsigned)(n * 2);
    unsigned char h[44];
    memcpy(h, "RIFF", 4);
    unsigned v = 36 + data;
    memcpy(h + 4, &v, 4);
    memcpy(h + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(h + 16, &v, 4);
    unsigned short s = 1;
    memcpy(h + 20, &s, 2);
    memcpy(h + 22, &s, 2);
    v = (unsigned)rate;
    memcpy(h + 24, &v, 4);
    v = (unsigned)rate * 2;
    memcpy(h + 28, &v, 4);
    s = 2;
    memcpy(h + 32, &s, 2);
    s = 16;
    memcpy(h + 34, &s, 2);
    memcpy(h + 36, "data", 4);
    memcpy(h + 40, &data, 4);
    fwrite(h, 1, 44, f);
    double phase = 0;
    for (long i = 0; i < n; i++) {
        double t = (double)i / rate;
        double f0 = 150 + 50 * sin(2 * M_PI * 0.7 * t);
        phase += 2 * M_PI * f0 / rate;
        double env = pow(fmax(0, sin(2 * M_PI * 4.0 * t)), 2) * (fmod(t, 2.5) < 2.0 ? 1 : 0);
        double x = 0;
        for (int k = 1; k <= 12; k++)
            x += sin(k * phase) / k * (k == 3 || k == 7 ? 2.0 : 1.0);
        short q = (short)lrint(8000 * env * x / 3);
        fwrite(&q, 2, 1, f);
    }
    return fclose(f) != 0;
}

/* A simple drawn face (skin oval, eyes, mouth) on a background; mouth opening and offset vary with t. */
static void draw_face(uint8_t *p, int w, int h, double t)
{
    double cx = w / 2.0 + 0.02 * w * sin(t), cy = h * 0.5, rx = w * 0.28, ry = h * 0.36;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            double dx = (x - cx) / rx, dy = (y - cy) / ry;
            q[0] = (uint8_t)(40 + 60 * y / h), q[1] = (uint8_t)(70 + 40 * x / w), q[2] = 110;
            if (dx * dx + dy * dy <= 1) {
                q[0] = 225, q[1] = 180, q[2] = 150;
                for (int e = -1; e <= 1; e += 2) {
                    double ex = (x - (cx + e * 0.38 * rx)) / (0.14 * rx), ey = (y - (cy - 0.2 * ry)) / (0.07 * ry);
                    if (ex * ex + ey * ey <= 1)
                        q[0] = 250, q[1] = 250, q[2] = 250;
                    if (ex * ex + ey * ey <= 0.25)
                        q[0] = 40, q[1] = 30, q[2] = 20;
                }
                double mx = (x - cx) / (0.35 * rx), my = (y - (cy + 0.42 * ry)) / ((0.05 + 0.05 * fabs(sin(3 * t))) * ry);
                if (mx * mx + my * my <= 1)
                    q[0] = 150, q[1] = 40, q[2] = 50;
            }
        }
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "probe"))
        return probe(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "compare"))
        return compare(argv[2], argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "frame"))
        return frame(argv[2], atol(argv[3]), argv[4]);
    if (argc >= 5 && !strcmp(argv[1], "gen-wav"))
        return gen_wav(argv[2], atof(argv[3]), atoi(argv[4]));
    if (argc >= 5 && (!strcmp(argv[1], "gen-image") || !strcmp(argv[1], "gen-noface"))) {
        int w = atoi(argv[3]), h = atoi(argv[4]);
        uint8_t *p = malloc((size_t)w * h * 3);
        if (!p || w < 2 || h < 2)
            return 1;
        if (!strcmp(argv[1], "gen-image"))
            draw_face(p, w, h, 0);
        else
            memset(p, 128, (size_t)w * h * 3);
        int rc = write_ppm(argv[2], p, w, h);
        free(p);
        return rc;
    }
    if (argc >= 6 && !strcmp(argv[1], "gen-video")) {
        int w = atoi(argv[3]), h = atoi(argv[4]), n = atoi(argv[5]);
        DittoVideoWriterParams wp;
        ditto_video_writer_params_default(&wp);
        wp.log = ditto_logger_stderr(DITTO_LOG_ERROR);
        wp.encoder = "libx264";
        DittoVideoWriter *vw = NULL;
        uint8_t *p = malloc((size_t)w * h * 3);
        if (!p || ditto_video_writer_open(&vw, argv[2], w, h, &wp) < 0)
            return 1;
        for (int i = 0; i < n; i++) {
            draw_face(p, w, h, i * 0.3);
            if (ditto_video_writer_write_rgb(vw, NULL, p) < 0)
                return 1;
        }
        int rc = ditto_video_writer_finish(vw);
        ditto_video_writer_close(&vw);
        free(p);
        return rc < 0;
    }
    fprintf(stderr, "usage: mp4_tool probe FILE | compare A B | frame FILE N OUT.ppm | gen-wav OUT SEC RATE | gen-image OUT W H |\n"
                    "       gen-video OUT W H N | gen-noface OUT W H\n");
    return 2;
}
