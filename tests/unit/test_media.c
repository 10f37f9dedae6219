/*
 * Media IO and the image stages of the avatar path:
 *   audio    decode + mono + resample to 16 kHz (the example recording or a
 *            generated stand-in; a 44.1 kHz stereo sine keeps frequency,
 *            phase and amplitude); error cases give one line each
 *   image    the example JPEG-named-.png against OpenCV's decode (row sums
 *            and pixels, reported), a generated PPM named .png (exact)
 *   colour   BT.601 limited-range yuv420p of flat and random frames
 *   writer   50 frames + 2 s of audio -> MP4, re-opened with libavformat;
 *            bad destinations and a write failure leave no file behind
 *   crop / putback   the crop_image_512 and putback_512 fixture cases
 * Run with -v to see the measured numbers of passing checks.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/audio.h"
#include "io/color.h"
#include "io/image.h"
#include "io/video_in.h"
#include "io/video_out.h"
#include "pipeline/crop.h"
#include "pipeline/putback.h"
#include "test_util.h"
#include "weights/catalog.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#endif

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- helpers ---- */

/* A logger that counts error lines and keeps the last one. */
typedef struct LogCount {
    int errors, lines;
    char last[512];
} LogCount;

static void count_cb(void *cookie, DittoLogLevel level, const char *msg)
{
    LogCount *lc = cookie;
    lc->lines++;
    if (level == DITTO_LOG_ERROR)
        lc->errors++;
    snprintf(lc->last, sizeof lc->last, "%s", msg);
}

static DittoLogger counting(LogCount *lc)
{
    memset(lc, 0, sizeof *lc);
    DittoLogger lg = { count_cb, lc, DITTO_LOG_WARN };
    return lg;
}

static char tmpdir[256];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/ditto_media_XXXXXX", base);
    if (!mkdtemp(tmpdir))
        snprintf(tmpdir, sizeof tmpdir, ".");
}

#ifdef DITTO_HAVE_FFMPEG
static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmpdir, name);
}
#endif

/* Remove the temporary folder and what the tests left in it (one level deep). */
static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        chmod(p, 0755);
        DIR *sub = opendir(p);
        if (sub) {
            struct dirent *f;
            char q[900];
            while ((f = readdir(sub)))
                if (strcmp(f->d_name, ".") && strcmp(f->d_name, "..")) {
                    snprintf(q, sizeof q, "%s/%s", p, f->d_name);
                    unlink(q);
                }
            closedir(sub);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
    rmdir(tmpdir);
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

#ifdef DITTO_HAVE_FFMPEG

/* Files in dir whose names contain `part` (leftover temporaries). */
static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!part || strstr(e->d_name, part)))
            n++;
    closedir(d);
    return n;
}


static void put_le(FILE *f, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        fputc((int)((v >> (8 * i)) & 0xFF), f);
}

/* 16-bit PCM WAV of n frames x ch channels. */
static int write_wav(const char *path, const int16_t *pcm, int64_t n, int ch, int rate)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    uint32_t data = (uint32_t)(n * ch * 2);
    fwrite("RIFF", 1, 4, f);
    put_le(f, 36 + data, 4);
    fwrite("WAVEfmt ", 1, 8, f);
    put_le(f, 16, 4);
    put_le(f, 1, 2);
    put_le(f, (uint32_t)ch, 2);
    put_le(f, (uint32_t)rate, 4);
    put_le(f, (uint32_t)(rate * ch * 2), 4);
    put_le(f, (uint32_t)(ch * 2), 2);
    put_le(f, 16, 2);
    fwrite("data", 1, 4, f);
    put_le(f, data, 4);
    if (n > 0)
        fwrite(pcm, 2, (size_t)(n * ch), f);
    return fclose(f);
}

static int16_t to_s16(double v)
{
    double s = nearbyint(v * 32767.0);
    return (int16_t)(s > 32767 ? 32767 : s < -32768 ? -32768 : s);
}

/* A stereo (or mono) sine WAV: amplitude a, frequency hz, the right channel scaled by r_gain. */
static int write_sine_wav(const char *path, int rate, int ch, double seconds, double hz, double a, double r_gain)
{
    int64_t n = (int64_t)(seconds * rate);
    int16_t *pcm = malloc((size_t)(n * ch) * sizeof *pcm);
    if (!pcm)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        double v = a * sin(2 * M_PI * hz * (double)i / rate);
        pcm[i * ch] = to_s16(v);
        if (ch == 2)
            pcm[i * ch + 1] = to_s16(v * r_gain);
    }
    int rc = write_wav(path, pcm, n, ch, rate);
    free(pcm);
    return rc;
}

/* Samples of a 16-bit mono WAV as float (x / 32768), for the reference energy. */
static float *read_wav16(const char *path, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char hdr[12];
    float *out = NULL;
    *n = 0;
    if (fread(hdr, 1, 12, f) == 12) {
        unsigned char ck[8];
        while (fread(ck, 1, 8, f) == 8) {
            uint32_t size = ck[4] | ck[5] << 8 | ck[6] << 16 | (uint32_t)ck[7] << 24;
            if (!memcmp(ck, "data", 4)) {
                int16_t *s = malloc(size);
                out = malloc((size / 2 + 1) * sizeof *out);
                if (s && out && fread(s, 1, size, f) == size) {
                    for (uint32_t i = 0; i < size / 2; i++)
                        out[i] = (float)s[i] / 32768.0f;
                    *n = size / 2;
                }
                free(s);
                break;
            }
            fseek(f, size + (size & 1), SEEK_CUR);
        }
    }
    fclose(f);
    return out;
}

static void stats(const float *x, int64_t n, double *rms, double *peak)
{
    double e = 0, p = 0;
    for (int64_t i = 0; i < n; i++) {
        e += (double)x[i] * x[i];
        p = fmax(p, fabs(x[i]));
    }
    *rms = n ? sqrt(e / n) : 0;
    *peak = p;
}

/* ---- audio ---- */

static void test_audio_example(TestCtx *c)
{
    char gen[300];
    const char *sh = test_shared_dir();
    char path[600];
    bool shared = false;
    if (sh) {
        snprintf(path, sizeof path, "%s/media/audio.wav", sh);
        shared = exists(path);
    }
    if (!shared) {
        /* a stand-in of the same shape: 378112 samples of 24 kHz mono (speech-band tones + noise) */
        tmp_path(gen, sizeof gen, "speech24k.wav");
        int64_t n = 378112;
        int16_t *pcm = malloc((size_t)n * sizeof *pcm);
        uint32_t s = 12345;
        for (int64_t i = 0; i < n; i++) {
            double t = (double)i / 24000;
            s = s * 1664525u + 1013904223u;
            double v = 0.3 * sin(2 * M_PI * 220 * t) + 0.2 * sin(2 * M_PI * 1375 * t) * sin(2 * M_PI * 3 * t) + 0.05 * ((double)(s >> 8) / 16777216.0 - 0.5);
            pcm[i] = to_s16(v);
        }
        write_wav(gen, pcm, n, 1, 24000);
        free(pcm);
        snprintf(path, sizeof path, "%s", gen);
    }
    LogCount lc;
    DittoLogger lg = counting(&lc);
    DittoPcm p;
    int rc = ditto_audio_load(path, DITTO_AUDIO_RATE, &p, &lg);
    bool ok = rc == 0 && llabs(p.n - 252075) <= 1 && p.rate == 16000 && p.src_rate == 24000 && p.src_channels == 1 && p.src_frames == 378112 &&
              fabs(p.src_duration - 378112.0 / 24000) < 1e-9;
    test_report(c, shared ? "audio.example_wav_16k" : "audio.generated_wav_16k", ok, "rc %d n %lld (want 252075 +-1) src %d Hz %d ch %lld frames %.4f s",
                rc, (long long)p.n, p.src_rate, p.src_channels, (long long)p.src_frames, p.src_duration);
    if (rc == 0) {
        int64_t n0;
        float *x0 = read_wav16(path, &n0);
        double r0 = 0, p0 = 0, r1, p1;
        if (x0)
            stats(x0, n0, &r0, &p0);
        stats(p.samples, p.n, &r1, &p1);
        /* speech has little energy above 8 kHz: rms within 2 %, peak within 5 % (the band limit can overshoot) */
        ok = x0 && fabs(r1 / r0 - 1) < 0.02 && fabs(p1 / p0 - 1) < 0.05;
        test_report(c, "audio.energy_peak", ok, "rms %.5f -> %.5f, peak %.5f -> %.5f", r0, r1, p0, p1);
        free(x0);
    }
    ditto_pcm_free(&p);
}

static void test_audio_sine(TestCtx *c)
{
    char path[300];
    tmp_path(path, sizeof path, "sine44k_stereo.wav");
    /* left a sin, right 0.5 a sin: the channel mean is 0.75 a sin */
    const double a = 0.5, hz = 1000, secs = 2.0;
    write_sine_wav(path, 44100, 2, secs, hz, a, 0.5);
    DittoPcm p;
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    int rc = ditto_audio_load(path, 16000, &p, &lg);
    bool ok = rc == 0 && p.n == 32000 && p.src_rate == 44100 && p.src_channels == 2;
    test_report(c, "audio.sine_length", ok, "rc %d n %lld (want ceil(88200*16000/44100) = 32000)", rc, (long long)p.n);
    if (rc == 0) {
        int zc = 0;
        for (int64_t i = 1; i < p.n; i++)
            zc += (p.samples[i - 1] < 0) != (p.samples[i] < 0);
        /* amplitude and phase over the middle (away from the edge transients) */
        double e = 0, maxerr = 0;
        int64_t lo = p.n / 10, hi = p.n - p.n / 10;
        for (int64_t i = lo; i < hi; i++) {
            double ideal = 0.75 * a * sin(2 * M_PI * hz * (double)i / 16000);
            e += (double)p.samples[i] * p.samples[i];
            maxerr = fmax(maxerr, fabs(p.samples[i] - ideal));
        }
        double amp = sqrt(2 * e / (double)(hi - lo));
        ok = abs(zc - (int)(2 * hz * secs)) <= 2 && fabs(amp / (0.75 * a) - 1) < 0.005 && maxerr < 2e-3;
        test_report(c, "audio.sine_freq_amp_phase", ok, "zero crossings %d (want %d), amplitude %.5f (want %.5f), max |x - ideal| %.2e", zc,
                    (int)(2 * hz * secs), amp, 0.75 * a, maxerr);
    }
    ditto_pcm_free(&p);
}

static void test_audio_errors(TestCtx *c)
{
    char missing[300], text[300], empty[300], nodata[300];
    tmp_path(missing, sizeof missing, "no_such_file.wav");
    tmp_path(text, sizeof text, "notes.wav");
    tmp_path(empty, sizeof empty, "empty.m4a");
    tmp_path(nodata, sizeof nodata, "nodata.wav");
    FILE *f = fopen(text, "w");
    if (f) {
        fputs("This is a text file, not audio.\nSecond line.\n", f);
        fclose(f);
    }
    f = fopen(empty, "w");
    if (f)
        fclose(f);
    write_wav(nodata, NULL, 0, 1, 16000);
    const struct {
        const char *name, *path;
    } cases[] = { { "audio.err_missing", missing }, { "audio.err_text", text }, { "audio.err_zero_bytes", empty }, { "audio.err_no_samples", nodata } };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        LogCount lc;
        DittoLogger lg = counting(&lc);
        DittoPcm p;
        int rc = ditto_audio_load(cases[i].path, 16000, &p, &lg);
        bool ok = rc < 0 && lc.errors == 1 && lc.lines == 1 && p.samples == NULL && p.n == 0 && strstr(lc.last, cases[i].path);
        test_report(c, cases[i].name, ok, "rc %d (%s), %d line(s): %s", rc, ditto_strerror(rc), lc.lines, lc.last);
    }
}

/* ---- image ---- */

static void test_image_example(TestCtx *c)
{
    const char *sh = test_shared_dir();
    char path[600], io[600];
    if (!sh)
        return;
    snprintf(path, sizeof path, "%s/media/image.png", sh);
    snprintf(io, sizeof io, "%s/fixtures/ditto/crop_putback.io.pth", sh);
    if (!exists(path))
        return;
    unsigned char head[16] = { 0 };
    FILE *f = fopen(path, "rb");
    size_t hn = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    test_report(c, "image.sniff_jpeg_named_png", ditto_image_sniff(head, hn) == DITTO_IMAGE_JPEG, "");

    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoImage im;
    int rc = ditto_image_load(path, &im, &lg);
    test_report(c, "image.example_decode", rc == 0 && im.width == 1432 && im.height == 1432, "rc %d size %dx%d", rc, im.width, im.height);
    if (rc == 0) {
        /* the same JPEG with an EXIF block "Orientation = 6" (rotate 90 clockwise) put in front */
        static const uint8_t app1[] = { 0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 0x2A, 0, 8, 0, 0, 0, 1, 0,
                                        0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0 };
        char rot[300];
        tmp_path(rot, sizeof rot, "rotated.jpg");
        FILE *in = fopen(path, "rb"), *o = fopen(rot, "wb");
        if (in && o) {
            int ch0 = fgetc(in), ch1 = fgetc(in), ch;
            fputc(ch0, o);
            fputc(ch1, o);
            fwrite(app1, 1, sizeof app1, o);
            while ((ch = fgetc(in)) != EOF)
                fputc(ch, o);
        }
        if (in)
            fclose(in);
        if (o)
            fclose(o);
        DittoImage r6;
        int rc6 = ditto_image_load(rot, &r6, &lg);
        uint8_t *want = malloc((size_t)im.width * im.height * 3);
        int ww, wh;
        ditto_rgb_orient(im.data, im.width, im.height, 6, want, &ww, &wh);
        bool ok = rc6 == 0 && r6.width == ww && r6.height == wh && !memcmp(r6.data, want, (size_t)ww * wh * 3);
        test_report(c, "image.exif_orientation_6", ok, "rc %d %dx%d", rc6, r6.width, r6.height);
        free(want);
        ditto_image_free(&r6);
    }
    DittoCatalog *cat = NULL;
    if (rc < 0 || !exists(io) || ditto_catalog_open_pth(&cat, io, &lg) < 0) {
        ditto_image_free(&im);
        return;
    }
    const DittoCatalogEntry *rs = ditto_catalog_find(cat, "frame_row_sums"), *fr = ditto_catalog_find(cat, "frame_rgb");
    if (rs && fr && ditto_catalog_entry_numel(rs) == 1432 * 3 && fr->dtype == DITTO_U8 && ditto_catalog_entry_numel(fr) == 1432 * 1432 * 3) {
        float *sums = malloc(1432 * 3 * sizeof *sums);
        ditto_catalog_read_f32(cat, rs, sums);
        double max_row = 0, mean_row = 0;
        for (int y = 0; y < 1432; y++)
            for (int ch = 0; ch < 3; ch++) {
                double s = 0;
                for (int x = 0; x < 1432; x++)
                    s += im.data[((size_t)y * 1432 + x) * 3 + ch];
                double d = fabs(s - sums[y * 3 + ch]);
                max_row = fmax(max_row, d);
                mean_row += d / (1432 * 3);
            }
        const uint8_t *ref = fr->data;
        int64_t n = 1432 * 1432 * 3, same = 0;
        int maxd = 0;
        double mad = 0;
        for (int64_t i = 0; i < n; i++) {
            int d = abs((int)im.data[i] - (int)ref[i]);
            same += d == 0;
            maxd = d > maxd ? d : maxd;
            mad += d;
        }
        /* loose by design: FFmpeg's decoder is not libjpeg (see image.h); a geometry or colour bug is far larger */
        bool ok = max_row / 1432 < 1.0 && mad / n < 0.25 && maxd <= 8;
        test_report(c, "image.example_vs_opencv", ok,
                    "row sums: max |diff| %.0f (%.3f per pixel), mean %.1f; pixels: %.2f%% identical, max %d, mean %.4f levels", max_row,
                    max_row / 1432, mean_row, 100.0 * same / n, maxd, mad / n);
        free(sums);
    }
    ditto_catalog_close(&cat);
    ditto_image_free(&im);
}

static void test_image_generated(TestCtx *c)
{
    /* a binary PPM named .png: content sniffing must win over the name, and PPM decodes exactly */
    char path[300];
    tmp_path(path, sizeof path, "pattern.png");
    const int W = 37, H = 22;
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fprintf(f, "P6\n%d %d\n255\n", W, H);
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int i = 0; i < W * H * 3; i++)
        px[i] = (uint8_t)(i * 7 + i / 5);
    fwrite(px, 1, (size_t)W * H * 3, f);
    fclose(f);
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoImage im;
    int rc = ditto_image_load(path, &im, &lg);
    bool ok = rc == 0 && im.width == W && im.height == H && !memcmp(im.data, px, (size_t)W * H * 3);
    test_report(c, "image.ppm_named_png_exact", ok, "rc %d %dx%d", rc, im.width, im.height);
    ditto_image_free(&im);

    /* orientation helper: 6 (rotate 90 cw) then 8 (rotate 90 ccw) is the identity; 3 twice too */
    uint8_t *a = malloc((size_t)W * H * 3), *b = malloc((size_t)W * H * 3);
    int w1, h1, w2, h2;
    ditto_rgb_orient(px, W, H, 6, a, &w1, &h1);
    ditto_rgb_orient(a, w1, h1, 8, b, &w2, &h2);
    ok = w1 == H && h1 == W && w2 == W && h2 == H && !memcmp(b, px, (size_t)W * H * 3);
    /* 6 moves the bottom-left pixel to the top-left */
    ok &= !memcmp(a, px + (size_t)(H - 1) * W * 3, 3);
    ditto_rgb_orient(px, W, H, 3, a, &w1, &h1);
    ditto_rgb_orient(a, w1, h1, 3, b, &w2, &h2);
    ok &= !memcmp(b, px, (size_t)W * H * 3);
    test_report(c, "image.orientation", ok, "");
    free(a);
    free(b);
    free(px);

    LogCount lc;
    lg = counting(&lc);
    char text[300];
    tmp_path(text, sizeof text, "notes.jpg");
    f = fopen(text, "w");
    if (f) {
        fputs("plain text\n", f);
        fclose(f);
    }
    rc = ditto_image_load(text, &im, &lg);
    test_report(c, "image.err_text", rc < 0 && lc.errors == 1 && lc.lines == 1 && !im.data, "rc %d: %s", rc, lc.last);
}

#endif /* DITTO_HAVE_FFMPEG */

/* ---- colour ---- */

/* Inverse BT.601 limited range, to 0..255 (the check's own formula, in double). */
static void yuv_to_rgb(double Y, double U, double V, double rgb[3])
{
    double y = (Y - 16) * 255.0 / 219.0, cb = (U - 128) * 255.0 / 224.0, cr = (V - 128) * 255.0 / 224.0;
    rgb[0] = y + 1.402 * cr;
    rgb[1] = y - 0.344136 * cb - 0.714136 * cr;
    rgb[2] = y + 1.772 * cb;
}

static void test_colour(TestCtx *c)
{
    enum { W = 64, H = 48 };
    static uint8_t rgb[W * H * 3], yp[W * H], up[(W / 2) * (H / 2)], vp[(W / 2) * (H / 2)];
    DittoYuvPlanes pl = { yp, up, vp, W, W / 2 };
    const struct {
        const char *name;
        uint8_t r, g, b, y, u, v;
    } flat[] = {
        { "colour.flat_grey128", 128, 128, 128, 126, 128, 128 },
        { "colour.flat_red", 255, 0, 0, 81, 90, 240 },
        { "colour.flat_black", 0, 0, 0, 16, 128, 128 },
        { "colour.flat_white", 255, 255, 255, 235, 128, 128 },
    };
    for (size_t k = 0; k < sizeof flat / sizeof *flat; k++) {
        for (int i = 0; i < W * H; i++) {
            rgb[3 * i] = flat[k].r;
            rgb[3 * i + 1] = flat[k].g;
            rgb[3 * i + 2] = flat[k].b;
        }
        int rc = ditto_rgb_to_yuv420(c->be->pool, rgb, W, H, W * 3, &pl);
        bool ok = rc == 0;
        double back[3];
        yuv_to_rgb(yp[0], up[0], vp[0], back);
        for (int i = 0; i < W * H; i++)
            ok &= yp[i] == flat[k].y;
        for (int i = 0; i < W * H / 4; i++)
            ok &= up[i] == flat[k].u && vp[i] == flat[k].v;
        ok &= fabs(back[0] - flat[k].r) <= 2 && fabs(back[1] - flat[k].g) <= 2 && fabs(back[2] - flat[k].b) <= 2;
        test_report(c, flat[k].name, ok, "YUV %d %d %d (want %d %d %d) -> RGB %.2f %.2f %.2f", yp[0], up[0], vp[0], flat[k].y, flat[k].u, flat[k].v,
                    back[0], back[1], back[2]);
    }
    /* random colours, 2x2 blocks of one colour each: back within 2 levels */
    uint32_t s = 99;
    for (int by = 0; by < H / 2; by++)
        for (int bx = 0; bx < W / 2; bx++) {
            uint8_t col[3];
            for (int k = 0; k < 3; k++) {
                s = s * 1664525u + 1013904223u;
                col[k] = (uint8_t)(s >> 24);
            }
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++)
                    memcpy(rgb + ((size_t)(2 * by + dy) * W + 2 * bx + dx) * 3, col, 3);
        }
    ditto_rgb_to_yuv420(NULL, rgb, W, H, W * 3, &pl);
    double worst = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double back[3];
            yuv_to_rgb(yp[y * W + x], up[(y / 2) * (W / 2) + x / 2], vp[(y / 2) * (W / 2) + x / 2], back);
            for (int k = 0; k < 3; k++) {
                /* the round trip of an 8-bit limited-range triple cannot exceed the gamut edges' clipping */
                double want = rgb[(y * W + x) * 3 + k], got = fmin(255, fmax(0, back[k]));
                worst = fmax(worst, fabs(got - want));
            }
        }
    test_report(c, "colour.random_blocks_roundtrip", worst <= 2.0, "max |RGB - back| %.2f levels", worst);
    /* odd sizes are accepted (the last row/column repeats for chroma) */
    int rc = ditto_rgb_to_yuv420(NULL, rgb, W - 1, H - 1, W * 3, &pl);
    test_report(c, "colour.odd_size", rc == 0, "rc %d", rc);
    test_report(c, "colour.bad_args", ditto_rgb_to_yuv420(NULL, rgb, 0, H, W * 3, &pl) == DITTO_ERR_INVAL, "");
}

/* ---- writer ---- */

#ifdef DITTO_HAVE_FFMPEG

enum { VW = 320, VH = 240, VN = 50 };

/* Frame i of a moving pattern: a gradient with a bright square sliding right. */
static void pattern(int i, uint8_t *rgb)
{
    for (int y = 0; y < VH; y++)
        for (int x = 0; x < VW; x++) {
            uint8_t *p = rgb + ((size_t)y * VW + x) * 3;
            bool sq = x >= 4 * i && x < 4 * i + 48 && y >= 96 && y < 144;
            p[0] = sq ? 250 : (uint8_t)(x * 255 / VW);
            p[1] = sq ? 240 : (uint8_t)(y * 255 / VH);
            p[2] = sq ? 40 : (uint8_t)((x + y) / 3);
        }
}

typedef struct Probe {
    char codec[32], pix_fmt[32], range[16], space[16], audio_codec[32];
    double fps, duration, audio_seconds;
    int64_t frames;
    int width, height, audio_streams;
} Probe;

static int probe(const char *path, Probe *pr)
{
    memset(pr, 0, sizeof *pr);
    AVFormatContext *fmt = NULL;
    if (avformat_open_input(&fmt, path, NULL, NULL) < 0)
        return -1;
    if (avformat_find_stream_info(fmt, NULL) < 0) {
        avformat_close_input(&fmt);
        return -1;
    }
    int vs = -1;
    for (unsigned i = 0; i < fmt->nb_streams; i++) {
        AVCodecParameters *cp = fmt->streams[i]->codecpar;
        if (cp->codec_type == AVMEDIA_TYPE_VIDEO && vs < 0) {
            vs = (int)i;
            snprintf(pr->codec, sizeof pr->codec, "%s", avcodec_get_name(cp->codec_id));
            const char *pf = av_get_pix_fmt_name(cp->format);
            snprintf(pr->pix_fmt, sizeof pr->pix_fmt, "%s", pf ? pf : "?");
            snprintf(pr->range, sizeof pr->range, "%s", av_color_range_name(cp->color_range) ? av_color_range_name(cp->color_range) : "?");
            snprintf(pr->space, sizeof pr->space, "%s", av_color_space_name(cp->color_space) ? av_color_space_name(cp->color_space) : "?");
            pr->fps = av_q2d(fmt->streams[i]->avg_frame_rate);
            pr->width = cp->width;
            pr->height = cp->height;
        } else if (cp->codec_type == AVMEDIA_TYPE_AUDIO) {
            pr->audio_streams++;
            snprintf(pr->audio_codec, sizeof pr->audio_codec, "%s", avcodec_get_name(cp->codec_id));
            AVStream *st = fmt->streams[i];
            if (st->duration > 0)
                pr->audio_seconds = st->duration * av_q2d(st->time_base);
        }
    }
    pr->duration = fmt->duration > 0 ? (double)fmt->duration / AV_TIME_BASE : 0;
    AVPacket *pkt = av_packet_alloc();
    while (pkt && av_read_frame(fmt, pkt) >= 0) {
        pr->frames += pkt->stream_index == vs;
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    avformat_close_input(&fmt);
    return vs >= 0 ? 0 : -1;
}

static void test_writer(TestCtx *c)
{
    char out[300], audio[300];
    tmp_path(out, sizeof out, "clip.mp4");
    tmp_path(audio, sizeof audio, "tone2s.wav");
    write_sine_wav(audio, 44100, 2, 2.0, 440, 0.3, 1.0);
    DittoVideoWriterParams p;
    ditto_video_writer_params_default(&p);
    p.audio_path = audio;
    p.log = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoVideoWriter *w = NULL;
    uint8_t *rgb = malloc((size_t)VW * VH * 3);
    uint8_t *all = malloc((size_t)VW * VH * 3 * VN);
    static uint8_t yp[VW * VH], up[VW * VH / 4], vp[VW * VH / 4];
    DittoYuvPlanes pl = { yp, up, vp, VW, VW / 2 };
    int rc = ditto_video_writer_open(&w, out, VW, VH, &p);
    for (int i = 0; i < VN && rc == 0; i++) {
        pattern(i, rgb);
        memcpy(all + (size_t)i * VW * VH * 3, rgb, (size_t)VW * VH * 3);
        if (i % 2) {
            rc = ditto_video_writer_write_rgb(w, c->be->pool, rgb);
        } else {
            ditto_rgb_to_yuv420(c->be->pool, rgb, VW, VH, VW * 3, &pl);
            rc = ditto_video_writer_write(w, &pl);
        }
    }
    bool tmp_seen = count_entries(tmpdir, ".part") == 1;   /* the temporary exists while writing */
    bool final_absent = !exists(out);
    if (rc == 0)
        rc = ditto_video_writer_finish(w);
    ditto_video_writer_close(&w);
    test_report(c, "writer.encode", rc == 0 && exists(out) && count_entries(tmpdir, ".part") == 0 && tmp_seen && final_absent,
                "rc %d; temporary while writing %d, final absent while writing %d, leftovers %d", rc, tmp_seen, final_absent,
                count_entries(tmpdir, ".part"));
    Probe pr;
    if (rc == 0 && probe(out, &pr) == 0) {
        bool ok = !strcmp(pr.codec, "h264") && !strcmp(pr.pix_fmt, "yuv420p") && !strcmp(pr.range, "tv") &&
                  (!strcmp(pr.space, "smpte170m") || !strcmp(pr.space, "bt470bg")) && fabs(pr.fps - 25) < 1e-9 && pr.frames == VN &&
                  pr.width == VW && pr.height == VH && pr.audio_streams == 1 && !strcmp(pr.audio_codec, "aac") &&
                  fabs(pr.duration - 2.0) <= 0.04 + 1e-9;
        test_report(c, "writer.probe", ok, "%s %s range %s space %s %.3f fps %lld frames %dx%d, audio %s x%d (%.3f s), duration %.4f s", pr.codec,
                    pr.pix_fmt, pr.range, pr.space, pr.fps, (long long)pr.frames, pr.width, pr.height, pr.audio_codec, pr.audio_streams,
                    pr.audio_seconds, pr.duration);
        /* decode it back: our reader, the same frames within H.264 + 4:2:0 losses */
        DittoVideo v;
        DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
        rc = ditto_video_load(out, 0, &v, &lg);
        double mse = 0;
        if (rc == 0 && v.n == VN && v.width == VW && v.height == VH) {
            for (size_t i = 0; i < (size_t)VN * VW * VH * 3; i++) {
                double d = (double)v.frames[i] - all[i];
                mse += d * d;
            }
            mse /= (double)VN * VW * VH * 3;
        }
        double psnr = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99;
        test_report(c, "writer.decode_back", rc == 0 && v.n == VN && fabs(v.fps - 25) < 1e-9 && psnr > 35, "rc %d %lld frames %dx%d %.2f fps, PSNR %.1f dB",
                    rc, (long long)v.n, v.width, v.height, v.fps, psnr);
        DittoVideo first;
        rc = ditto_video_load(out, 7, &first, &lg);
        test_report(c, "video_in.max_frames", rc == 0 && first.n == 7, "rc %d n %lld", rc, (long long)first.n);
        ditto_video_free(&first);
        ditto_video_free(&v);
    } else {
        test_report(c, "writer.probe", false, "cannot re-open %s", out);
    }
    free(rgb);
    free(all);
}

/*
 * The libx264 preset the writer picks: superfast by default, ultrafast for
 * GPU frames (x264_fast), the caller's when given (the writer's info line names it).
 */
static void test_writer_preset(TestCtx *c)
{
    static const struct {
        bool fast;
        const char *preset, *want;
    } cases[] = {
        { false, NULL, "preset superfast" }, { true, NULL, "preset ultrafast" }, { true, "veryfast", "preset veryfast" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[300];
        tmp_path(out, sizeof out, "preset.mp4");
        DittoVideoWriterParams p;
        ditto_video_writer_params_default(&p);
        p.encoder = "libx264";
        p.x264_fast = cases[i].fast;
        p.preset = cases[i].preset;
        LogCount lc;
        p.log = counting(&lc);
        p.log.level = DITTO_LOG_INFO;
        DittoVideoWriter *w = NULL;
        int rc = ditto_video_writer_open(&w, out, 64, 64, &p);
        bool named = rc == 0 && strstr(lc.last, cases[i].want) != NULL;
        ditto_video_writer_close(&w);
        remove(out);
        test_report(c, "writer.preset", named, "x264_fast %d, preset %s: rc %d, \"%s\" (want \"%s\")", cases[i].fast,
                    cases[i].preset ? cases[i].preset : "default", rc, lc.last, cases[i].want);
    }
}

/*
 * The NVENC probe: 0 or 1, remembered; an "auto" writer opened after it
 * names h264_nvenc only when the probe found it usable (where it did not,
 * auto falls through to libx264 without a second try).
 */
static void test_writer_probe(TestCtx *c)
{
    const int usable = ditto_video_writer_probe_nvenc(0, NULL);
    const int again = ditto_video_writer_probe_nvenc(0, NULL);
    char out[300];
    tmp_path(out, sizeof out, "probe.mp4");
    DittoVideoWriterParams p;
    ditto_video_writer_params_default(&p);
    LogCount lc;
    p.log = counting(&lc);
    p.log.level = DITTO_LOG_INFO;
    DittoVideoWriter *w = NULL;
    int rc = ditto_video_writer_open(&w, out, 64, 64, &p);
    const bool nvenc = rc == 0 && strstr(lc.last, "h264_nvenc") != NULL;
    ditto_video_writer_close(&w);
    remove(out);
    test_report(c, "writer.probe_nvenc", (usable == 0 || usable == 1) && again == usable && rc == 0 && (usable || !nvenc),
                "probe %d then %d; auto writer rc %d: \"%s\"", usable, again, rc, lc.last);
}

/* Open a writer on path and push 3 frames; returns the first error. */
static int try_write(const char *path, const char *audio, LogCount *lc, int frames, uint32_t noise_seed)
{
    DittoVideoWriterParams p;
    ditto_video_writer_params_default(&p);
    p.audio_path = audio;
    p.log = counting(lc);
    DittoVideoWriter *w = NULL;
    uint8_t *rgb = malloc((size_t)VW * VH * 3);
    int rc = ditto_video_writer_open(&w, path, VW, VH, &p);
    uint32_t s = noise_seed;
    for (int i = 0; i < frames && rc == 0; i++) {
        pattern(i, rgb);
        if (noise_seed)   /* incompressible frames: the file grows fast */
            for (size_t k = 0; k < (size_t)VW * VH * 3; k++) {
                s = s * 1664525u + 1013904223u;
                rgb[k] = (uint8_t)(s >> 24);
            }
        rc = ditto_video_writer_write_rgb(w, NULL, rgb);
    }
    if (rc == 0)
        rc = ditto_video_writer_finish(w);
    ditto_video_writer_close(&w);
    free(rgb);
    return rc;
}

static void test_writer_errors(TestCtx *c)
{
    char missing_dir[300], ro_dir[300], ro_out[400], bad_audio[300], out2[300], sub[300], big[400];
    tmp_path(missing_dir, sizeof missing_dir, "no_such_dir/out.mp4");
    tmp_path(ro_dir, sizeof ro_dir, "readonly");
    snprintf(ro_out, sizeof ro_out, "%s/out.mp4", ro_dir);
    tmp_path(bad_audio, sizeof bad_audio, "missing_audio.wav");
    tmp_path(out2, sizeof out2, "with_missing_audio.mp4");
    LogCount lc;

    int rc = try_write(missing_dir, NULL, &lc, 3, 0);
    test_report(c, "writer.err_missing_dir", rc < 0 && lc.errors == 1 && lc.lines == 1 && !exists(missing_dir), "rc %d: %s", rc, lc.last);

    rc = try_write("/proc/nope.mp4", NULL, &lc, 3, 0);
    test_report(c, "writer.err_proc", rc < 0 && lc.errors == 1 && lc.lines == 1 && !exists("/proc/nope.mp4"), "rc %d: %s", rc, lc.last);

    mkdir(ro_dir, 0755);
    chmod(ro_dir, 0555);
    if (access(ro_dir, W_OK) == 0) {
        test_report(c, "writer.err_readonly_dir", true, "skipped: running as root, a read-only folder is still writable");
    } else {
        rc = try_write(ro_out, NULL, &lc, 3, 0);
        test_report(c, "writer.err_readonly_dir", rc < 0 && lc.errors == 1 && lc.lines == 1 && !exists(ro_out) && count_entries(ro_dir, NULL) == 0,
                    "rc %d: %s", rc, lc.last);
    }
    chmod(ro_dir, 0755);

    rc = try_write(out2, bad_audio, &lc, 3, 0);
    test_report(c, "writer.err_missing_audio", rc < 0 && lc.errors == 1 && lc.lines == 1 && !exists(out2) && count_entries(tmpdir, ".part") == 0,
                "rc %d: %s", rc, lc.last);

    /* a write failure mid-file (the file-size limit stands in for a full disk): one line, nothing left */
    tmp_path(sub, sizeof sub, "full");
    mkdir(sub, 0755);
    snprintf(big, sizeof big, "%s/big.mp4", sub);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = { 256 * 1024, old.rlim_max };
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    rc = try_write(big, NULL, &lc, 40, 7);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    test_report(c, "writer.err_write_failure", rc < 0 && lc.errors == 1 && lc.lines == 1 && !exists(big) && count_entries(sub, NULL) == 0,
                "rc %d (%s): %s", rc, ditto_strerror(rc), lc.last);

    /* bad sizes and a missing encoder are refused at open */
    DittoVideoWriterParams p;
    ditto_video_writer_params_default(&p);
    p.log = counting(&lc);
    DittoVideoWriter *w = NULL;
    char odd[300];
    tmp_path(odd, sizeof odd, "odd.mp4");
    rc = ditto_video_writer_open(&w, odd, 321, 240, &p);
    test_report(c, "writer.err_odd_size", rc == DITTO_ERR_INVAL && lc.lines == 1 && !exists(odd), "rc %d: %s", rc, lc.last);
    p.log = counting(&lc);
    p.encoder = "no_such_encoder";
    rc = ditto_video_writer_open(&w, odd, 320, 240, &p);
    test_report(c, "writer.err_encoder_name", rc < 0 && lc.lines == 1 && !exists(odd) && count_entries(tmpdir, ".part") == 0, "rc %d: %s", rc, lc.last);
    /* finishing without frames is an error and leaves nothing */
    p.encoder = NULL;
    p.log = counting(&lc);
    rc = ditto_video_writer_open(&w, odd, 320, 240, &p);
    if (rc == 0)
        rc = ditto_video_writer_finish(w);
    ditto_video_writer_close(&w);
    test_report(c, "writer.err_no_frames", rc < 0 && lc.lines == 1 && !exists(odd) && count_entries(tmpdir, ".part") == 0, "rc %d: %s", rc, lc.last);
}

#else /* no FFmpeg: every io entry point refuses with one line */

static void test_no_ffmpeg(TestCtx *c)
{
    LogCount lc;
    DittoLogger lg = counting(&lc);
    DittoPcm p;
    int rc = ditto_audio_load("x.wav", 16000, &p, &lg);
    test_report(c, "noffmpeg.audio", rc == DITTO_ERR_UNSUPPORTED && lc.lines == 1, "%s", lc.last);
    lg = counting(&lc);
    DittoImage im;
    rc = ditto_image_load("x.png", &im, &lg);
    test_report(c, "noffmpeg.image", rc == DITTO_ERR_UNSUPPORTED && lc.lines == 1, "%s", lc.last);
    lg = counting(&lc);
    DittoVideo v;
    rc = ditto_video_load("x.mp4", 0, &v, &lg);
    test_report(c, "noffmpeg.video_in", rc == DITTO_ERR_UNSUPPORTED && lc.lines == 1, "%s", lc.last);
    DittoVideoWriterParams wp;
    ditto_video_writer_params_default(&wp);
    wp.log = counting(&lc);
    DittoVideoWriter *w;
    rc = ditto_video_writer_open(&w, "x.mp4", 64, 64, &wp);
    test_report(c, "noffmpeg.writer", rc == DITTO_ERR_UNSUPPORTED && lc.lines == 1 && !exists("x.mp4"), "%s", lc.last);
}

#endif /* DITTO_HAVE_FFMPEG */

/* ---- crop and putback ---- */

static void test_mask(TestCtx *c)
{
    float *m = malloc((size_t)DITTO_PUTBACK_CROP * DITTO_PUTBACK_CROP * sizeof *m);
    ditto_putback_mask(m);
    const int N = DITTO_PUTBACK_CROP;
    bool ok = m[0] == 0.0f && m[N - 1] == 0.0f && m[(size_t)(N - 1) * N] == 0.0f && m[(size_t)N * N - 1] == 0.0f;
    ok &= m[(size_t)256 * N + 256] == 1.0f && m[(size_t)26 * N + 26] == 1.0f && m[(size_t)25 * N + 256] == 1.0f && m[256] == 0.0f;
    ok &= m[(size_t)13 * N + 256] == (float)(13 * (1.0 / 25));            /* top band: linspace(0,1,26)[13] */
    ok &= m[(size_t)500 * N + 256] == (float)(14 * (-1.0 / 25) + 1.0);    /* bottom band: linspace(1,0,26)[14] */
    /* left-right and top-bottom mirror symmetry within one float32 ulp */
    double asym = 0;
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) {
            asym = fmax(asym, fabs(m[(size_t)y * N + x] - m[(size_t)y * N + (N - 1 - x)]));
            asym = fmax(asym, fabs(m[(size_t)y * N + x] - m[(size_t)(N - 1 - y) * N + x]));
        }
    ok &= asym < 1e-6;
    test_report(c, "putback.mask", ok, "asymmetry %.2e", asym);
    free(m);
}

/* Synthetic paste-back: a render equal to the crop of the frame pastes back (nearly) invisibly. */
static void test_putback_synthetic(TestCtx *c)
{
    const int W = 700, H = 600;
    uint8_t *frame = malloc((size_t)W * H * 3), *out = malloc((size_t)W * H * 3);
    for (int i = 0; i < W * H * 3; i++)
        frame[i] = (uint8_t)(64 + (i % 97));
    /* a 512 render of solid 200 placed by a scale-1 rotation-free matrix at (100, 50) */
    float *render = malloc((size_t)512 * 512 * 3 * sizeof *render);
    for (int i = 0; i < 512 * 512 * 3; i++)
        render[i] = 200.0f;
    float M[9] = { 1, 0, 100, 0, 1, 50, 0, 0, 1 };
    DittoPutback *pb = NULL;
    int rc = ditto_putback_open(&pb, c->be, W, H, NULL);
    DittoTensor tf = ditto_tensor(frame, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    DittoTensor tr = ditto_tensor(render, DITTO_F32, 3, (int64_t[]){ 512, 512, 3 });
    DittoTensor to = ditto_tensor(out, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    DittoPutbackBox box = { 0 };
    if (rc == 0)
        rc = ditto_putback_run(pb, &tf, &tr, M, &to, &box);
    bool ok = rc == 0;
    int64_t changed_out = 0;
    for (int y = 0; y < H && ok; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *a = frame + ((size_t)y * W + x) * 3, *b = out + ((size_t)y * W + x) * 3;
            bool inside = x >= 126 && x < 586 && y >= 76 && y < 536;   /* the mask's 1-region */
            bool outside = x < 100 || x > 612 || y < 50 || y > 562;
            if (inside)
                ok &= b[0] == 200 && b[1] == 200 && b[2] == 200;
            if (outside && memcmp(a, b, 3))
                changed_out++;
            if ((x < box.x0 || x >= box.x1 || y < box.y0 || y >= box.y1) && memcmp(a, b, 3))
                changed_out++;
        }
    ok &= changed_out == 0 && box.x0 <= 101 && box.x1 >= 611 && box.y0 <= 51 && box.y1 >= 561;
    test_report(c, "putback.synthetic", ok, "rc %d box y[%lld,%lld) x[%lld,%lld), %lld changed outside", rc, (long long)box.y0, (long long)box.y1,
                (long long)box.x0, (long long)box.x1, (long long)changed_out);
    /* in place gives the same frame */
    uint8_t *copy = malloc((size_t)W * H * 3);
    memcpy(copy, frame, (size_t)W * H * 3);
    DittoTensor tc = ditto_tensor(copy, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    rc = ditto_putback_run(pb, &tc, &tr, M, &tc, NULL);
    test_report(c, "putback.in_place", rc == 0 && !memcmp(copy, out, (size_t)W * H * 3), "rc %d", rc);
    ditto_putback_close(&pb);
    free(copy);
    free(frame);
    free(out);
    free(render);
}

static float *cat_f32(DittoCatalog *cat, const char *name, int64_t n)
{
    const DittoCatalogEntry *e = ditto_catalog_find(cat, name);
    if (!e || ditto_catalog_entry_numel(e) != n)
        return NULL;
    float *d = malloc((size_t)n * sizeof *d);
    if (d && ditto_catalog_read_f32(cat, e, d) < 0) {
        free(d);
        return NULL;
    }
    return d;
}

static void test_fixture_cases(TestCtx *c)
{
    const char *sh = test_shared_dir();
    char io[600];
    if (!sh)
        return;
    snprintf(io, sizeof io, "%s/fixtures/ditto/crop_putback.io.pth", sh);
    DittoCatalog *cat = NULL;
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    if (!exists(io) || ditto_catalog_open_pth(&cat, io, &lg) < 0)
        return;
    const DittoCatalogEntry *fe = ditto_catalog_find(cat, "frame_rgb");
    float *pts = cat_f32(cat, "pts", 406), *Mo = cat_f32(cat, "M_o2c", 9), *Mc = cat_f32(cat, "M_c2o", 9), *ptc = cat_f32(cat, "pt_crop", 406);
    float *crop_ref = cat_f32(cat, "img_crop", 512 * 512 * 3), *tile = cat_f32(cat, "render_tile", 64 * 64 * 3);
    float *boxf = cat_f32(cat, "putback_box", 4), *rows_y = cat_f32(cat, "putback_rows_y", 58), *rows = cat_f32(cat, "putback_rows", 58 * 926 * 3);
    if (!fe || fe->dtype != DITTO_U8 || !pts || !Mo || !Mc || !ptc || !crop_ref || !tile || !boxf || !rows_y || !rows) {
        test_report(c, "crop.fixture", false, "crop_putback.io.pth lacks a tensor");
        goto done;
    }
    const int64_t H = fe->shape[0], W = fe->shape[1];
    uint8_t *frame = (uint8_t *)fe->data;   /* read-only mapping; used as input only */

    /* crop_image_512: matrices from the landmarks */
    DittoCropParams cp;
    ditto_crop_params_default(&cp);
    float M_o2c[9], M_c2o[9], pc[406];
    int rc = ditto_crop_matrix(pts, 203, &cp, M_o2c, M_c2o, NULL);
    double e_o = 0, e_c = 0, e_p = 0;
    for (int i = 0; i < 9; i++) {
        e_o = fmax(e_o, fabs(M_o2c[i] - Mo[i]));
        e_c = fmax(e_c, fabs(M_c2o[i] - Mc[i]) / 282.6);
    }
    ditto_crop_transform_pts(pts, 203, M_o2c, pc);
    for (int i = 0; i < 406; i++)
        e_p = fmax(e_p, fabs(pc[i] - ptc[i]) / 431.3);
    test_report(c, "crop.fixture_matrices", rc == 0 && e_o == 0 && e_c < 1e-5 && e_p < 1e-5, "M_o2c max |diff| %.3g, M_c2o max/ref %.3g, pt_crop max/ref %.3g",
                e_o, e_c, e_p);

    /* img_crop from the stored matrix */
    uint8_t *crop = malloc(512 * 512 * 3);
    DittoTensor tf = ditto_tensor(frame, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    DittoTensor tcrop = ditto_tensor(crop, DITTO_U8, 3, (int64_t[]){ 512, 512, 3 });
    rc = ditto_crop_image(c->be, &tf, Mo, &tcrop);
    int maxd = 0;
    for (int i = 0; i < 512 * 512 * 3 && rc == 0; i++)
        maxd = (int)fmax(maxd, fabs(crop[i] - crop_ref[i]));
    test_report(c, "crop.fixture_img_crop", rc == 0 && maxd <= 1, "max |diff| %d (tolerance 1)", maxd);
    /* and from our own matrix (informational bound: a few levels where coordinates moved by 1/32 px) */
    rc = ditto_crop_image(c->be, &tf, M_o2c, &tcrop);
    int maxd2 = 0;
    for (int i = 0; i < 512 * 512 * 3 && rc == 0; i++)
        maxd2 = (int)fmax(maxd2, fabs(crop[i] - crop_ref[i]));
    test_report(c, "crop.img_crop_own_matrix", rc == 0 && maxd2 <= 2, "max |diff| %d", maxd2);

    /* vx_ratio is honoured: a shift along ux moves the centre by vx * S */
    DittoCropParams cpx = cp;
    cpx.vx_ratio = 0.1;
    float M2[9];
    rc = ditto_crop_matrix(pts, 203, &cpx, M2, NULL, NULL);
    double shift = hypot(M2[2] - M_o2c[2], M2[5] - M_o2c[5]);
    test_report(c, "crop.vx_ratio_applied", rc == 0 && fabs(shift - 0.1 * 512) < 0.05, "crop shift %.4f px (want %.1f)", shift, 0.1 * 512);
    /* the 106-point set and bad inputs */
    float p106[212];
    for (int i = 0; i < 106; i++) {
        p106[2 * i] = pts[2 * i];
        p106[2 * i + 1] = pts[2 * i + 1];
    }
    rc = ditto_crop_matrix(p106, 106, &cp, M2, NULL, NULL);
    LogCount lc;
    DittoLogger cl = counting(&lc);
    int bad = ditto_crop_matrix(pts, 68, &cp, M2, NULL, &cl);
    test_report(c, "crop.point_sets", rc == 0 && bad == DITTO_ERR_INVAL && lc.lines == 1, "106: rc %d; 68: rc %d (%s)", rc, bad, lc.last);

    /* putback_512 */
    float *render = malloc((size_t)512 * 512 * 3 * sizeof *render);
    for (int y = 0; y < 512; y++)
        for (int x = 0; x < 512; x++)
            for (int k = 0; k < 3; k++)
                render[((size_t)y * 512 + x) * 3 + k] = crop_ref[((size_t)y * 512 + x) * 3 + k] + tile[((y % 64) * 64 + x % 64) * 3 + k];
    uint8_t *out = malloc((size_t)W * H * 3);
    DittoPutback *pb = NULL;
    rc = ditto_putback_open(&pb, c->be, W, H, NULL);
    DittoTensor tr = ditto_tensor(render, DITTO_F32, 3, (int64_t[]){ 512, 512, 3 });
    DittoTensor to = ditto_tensor(out, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    DittoPutbackBox box = { 0 };
    if (rc == 0)
        rc = ditto_putback_run(pb, &tf, &tr, Mc, &to, &box);
    int64_t y0 = (int64_t)boxf[0], y1 = (int64_t)boxf[1], x0 = (int64_t)boxf[2], x1 = (int64_t)boxf[3];
    int pmax = 0;
    int64_t ndiff = 0, outside = 0;
    for (int r = 0; r < 58 && rc == 0; r++) {
        int64_t y = (int64_t)rows_y[r];
        for (int64_t x = x0; x < x1; x++)
            for (int k = 0; k < 3; k++) {
                int d = abs((int)out[((size_t)y * W + x) * 3 + k] - (int)rows[((size_t)r * 926 + (x - x0)) * 3 + k]);
                pmax = d > pmax ? d : pmax;
                ndiff += d != 0;
            }
    }
    for (int64_t y = 0; y < H && rc == 0; y++)
        for (int64_t x = 0; x < W; x++)
            if ((y < y0 || y >= y1 || x < x0 || x >= x1) && memcmp(out + (y * W + x) * 3, frame + (y * W + x) * 3, 3))
                outside++;
    bool box_ok = box.y0 <= y0 && box.y1 >= y1 && box.x0 <= x0 && box.x1 >= x1 && box.y0 >= y0 - 16 && box.y1 <= y1 + 16 && box.x0 >= x0 - 16 && box.x1 <= x1 + 16;
    test_report(c, "putback.fixture_rows", rc == 0 && pmax <= 1 && outside == 0 && box_ok,
                "max |diff| %d over %d values (%lld differ), changed outside the box %lld, box y[%lld,%lld) x[%lld,%lld) vs fixture y[%lld,%lld) x[%lld,%lld)",
                pmax, 58 * 926 * 3, (long long)ndiff, (long long)outside, (long long)box.y0, (long long)box.y1, (long long)box.x0, (long long)box.x1,
                (long long)y0, (long long)y1, (long long)x0, (long long)x1);
    /* the cached mask gives the same result on a second frame */
    uint8_t *out2 = malloc((size_t)W * H * 3);
    DittoTensor to2 = ditto_tensor(out2, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    rc = ditto_putback_run(pb, &tf, &tr, Mc, &to2, NULL);
    test_report(c, "putback.cached_mask", rc == 0 && !memcmp(out, out2, (size_t)W * H * 3), "rc %d", rc);
    ditto_putback_close(&pb);
    free(out2);
    free(out);
    free(render);
    free(crop);
done:
    free(pts);
    free(Mo);
    free(Mc);
    free(ptc);
    free(crop_ref);
    free(tile);
    free(boxf);
    free(rows_y);
    free(rows);
    ditto_catalog_close(&cat);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    make_tmpdir();
#ifdef DITTO_HAVE_FFMPEG
    test_audio_example(&c);
    test_audio_sine(&c);
    test_audio_errors(&c);
    test_image_example(&c);
    test_image_generated(&c);
#endif
    test_colour(&c);
#ifdef DITTO_HAVE_FFMPEG
    test_writer(&c);
    test_writer_preset(&c);
    test_writer_probe(&c);
    test_writer_errors(&c);
#else
    test_no_ffmpeg(&c);
#endif
    test_mask(&c);
    test_putback_synthetic(&c);
    test_fixture_cases(&c);
    remove_tmpdir();
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
