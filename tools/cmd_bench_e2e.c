/*
 * ditto bench --e2e: the whole pipeline through the session API, without
 * FFmpeg: a baked .avatar (or an image when FFmpeg is built in), generated
 * 16 kHz audio of a given length pushed at once, every frame pulled (YUV
 * planes, as an encoder would take them, but not encoded). Reports the
 * model-load time, the avatar time, the wall time from the first push to
 * the last frame, the busy time of each stage, and device memory.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "backend/backend.h"
#include "core/log.h"
#include "ditto/ditto.h"
#include "pipeline/pipeline_internal.h"
#include "tools/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto bench --e2e AVATAR [OPTIONS]\n\n"
            "Runs the whole pipeline (audio features, motion, render, paste-back, YUV) on\n"
            "generated speech-band audio and times it; frames are pulled, not encoded,\n"
            "as YUV planes only, as ditto render takes them (RGB too with --rgb-checksum\n"
            "or --parity-cpu).\n"
            "AVATAR is a .avatar file (no FFmpeg needed) or a portrait image.\n\n"
            "options:\n"
            "  --weights DIR    model folder, or synthetic:full (default), synthetic:small, synthetic\n"
            "  --backend NAME   cpu or cuda (default cpu)\n"
            "  --precision P    auto (default), fp32 or fp16: the render networks' storage\n"
            "  --motion-precision P  auto or fp32 (default), or fp16: the motion model's linears\n"
            "                   (as ditto render --motion-precision)\n"
            "  --seconds S      audio length (default 15.755, the reference clip: 394 frames)\n"
            "  --steps N        DDIM steps (default 50)\n"
            "  --batch N        render batch (default 8)\n"
            "  --threads N      CPU threads per stage (default: all cores)\n"
            "  --rgb-checksum   also checksum the frames' RGB (SHA-256 per frame, on the\n"
            "                   pulling thread: slower; for comparing two paths' frames)\n"
            "  --parity-cpu N   afterwards run the same session on the cpu backend (float32\n"
            "                   networks, same seed) and compare its first N frames with\n"
            "                   this run's: PSNR and largest difference of the RGB frames\n"
            "  --verbose        log what the pipeline decides and how long loading took\n"
            "  --json FILE      also write the numbers as JSON\n"
            "  -h, --help       this text\n");
}

/* Deterministic speech-band test signal: voiced harmonics under a 4 Hz syllable envelope, plus a little noise. */
static void gen_audio(float *pcm, int64_t n)
{
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < n; i++) {
        double t = (double)i / 16000.0, f0 = 120.0 + 30.0 * sin(2 * M_PI * 0.7 * t);
        double env = 0.5 + 0.5 * sin(2 * M_PI * 4.0 * t);
        double v = 0;
        for (int h = 1; h <= 6; h++)
            v += sin(2 * M_PI * f0 * h * t) / h;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double noise = ((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.05;
        pcm[i] = (float)(0.25 * env * v + noise);
    }
}

static double mb(size_t b)
{
    return (double)b / 1048576.0;
}

/* The first frames of a run, RGB24 (--parity-cpu). */
typedef struct Kept {
    uint8_t *rgb;          /* n x h x w x 3 */
    int w, h;
    int64_t n;
} Kept;

static int keep_frames(Kept *k, const DittoFrame *f, int64_t i, int64_t cap)
{
    const size_t fb = (size_t)f->width * (size_t)f->height * 3;
    if (!k->rgb) {
        if (!(k->rgb = malloc(fb * (size_t)cap)))
            return -1;
        k->w = f->width;
        k->h = f->height;
    }
    for (int y = 0; y < f->height; y++)
        memcpy(k->rgb + (size_t)i * fb + (size_t)y * f->width * 3, f->rgb + (ptrdiff_t)y * f->rgb_stride, (size_t)f->width * 3);
    k->n = i + 1;
    return 0;
}

typedef struct Parity {
    int64_t n;
    double psnr_min, psnr_mean;
    int max_diff;
} Parity;

/*
 * The same session on the cpu backend (float32 networks): its first k->n
 * frames against the kept ones, PSNR and largest channel difference.
 */
static int parity_cpu(const DittoModelsParams *mp0, const DittoSessionParams *sp, const float *pcm, int64_t n, const Kept *k, Parity *out)
{
    DittoModelsParams mp = *mp0;
    mp.backend = "cpu";
    mp.precision = DITTO_PRECISION_FP32;
    mp.motion_precision = DITTO_PRECISION_FP32;
    DittoModels *m = NULL;
    DittoSession *s = NULL;
    fprintf(stderr, "ditto bench: parity run on the cpu backend (%lld frames)...\n", (long long)k->n);
    int rc = ditto_models_open(&m, &mp);
    if (rc >= 0)
        rc = ditto_session_open(&s, m, sp);
    if (rc >= 0)
        rc = ditto_session_push_audio(s, pcm, n);
    if (rc >= 0)
        rc = ditto_session_end_audio(s);
    double psnr_min = INFINITY, psnr_sum = 0;
    int max_diff = 0;
    int64_t got_n = 0;
    const size_t fb = (size_t)k->w * (size_t)k->h * 3;
    while (rc >= 0 && got_n < k->n) {
        DittoFrame f;
        int got = ditto_session_pull_frame(s, &f);
        if (got <= 0) {
            rc = got < 0 ? got : DITTO_ERR_BADSTATE;
            break;
        }
        if (f.width != k->w || f.height != k->h) {
            rc = DITTO_ERR_SHAPE;
            break;
        }
        const uint8_t *a = k->rgb + (size_t)got_n * fb;
        double se = 0;
        for (int y = 0; y < f.height; y++) {
            const uint8_t *b = f.rgb + (ptrdiff_t)y * f.rgb_stride, *ar = a + (size_t)y * k->w * 3;
            for (int x = 0; x < f.width * 3; x++) {
                int d = (int)ar[x] - (int)b[x];
                se += (double)(d * d);
                if (abs(d) > max_diff)
                    max_diff = abs(d);
            }
        }
        double mse = se / (double)fb, psnr = mse > 0 ? 10.0 * log10(255.0 * 255.0 / mse) : 99.0;
        psnr_sum += psnr;
        if (psnr < psnr_min)
            psnr_min = psnr;
        got_n++;
    }
    ditto_session_close(&s);
    ditto_models_close(&m);
    if (rc < 0) {
        fprintf(stderr, "ditto bench: the cpu parity run failed: %s\n", ditto_strerror(rc));
        return rc;
    }
    printf("  vs cpu float32, first %lld frames: PSNR min %.2f dB, mean %.2f dB (99: identical), largest difference %d of 255\n",
           (long long)got_n, psnr_min, psnr_sum / (double)got_n, max_diff);
    out->n = got_n;
    out->psnr_min = psnr_min;
    out->psnr_mean = psnr_sum / (double)got_n;
    out->max_diff = max_diff;
    return 0;
}

int ditto_bench_e2e(int argc, char **argv)
{
    const char *avatar = NULL, *weights = "synthetic:full", *backend = "cpu", *json = NULL;
    int precision = DITTO_PRECISION_AUTO, motion_precision = DITTO_PRECISION_AUTO, steps = 50, batch = 8, threads = 0, rgb_sum = 0, verbose = 0, parity = 0;
    double seconds = 15.755;
    static const struct option opts[] = {
        { "e2e", required_argument, 0, 'e' },      { "weights", required_argument, 0, 'w' }, { "backend", required_argument, 0, 'b' },
        { "precision", required_argument, 0, 'p' }, { "seconds", required_argument, 0, 's' }, { "steps", required_argument, 0, 'n' },
        { "batch", required_argument, 0, 'B' },    { "threads", required_argument, 0, 't' }, { "json", required_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },           { "rgb-checksum", no_argument, 0, 'r' },
        { "verbose", no_argument, 0, 'v' },        { "parity-cpu", required_argument, 0, 'P' },
        { "motion-precision", required_argument, 0, 'M' }, { 0, 0, 0, 0 },
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    }
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'e': avatar = optarg; break;
        case 'w': weights = optarg; break;
        case 'b': backend = optarg; break;
        case 'p':
        case 'M': {
            int *dst = c == 'p' ? &precision : &motion_precision;
            if ((*dst = ditto_cli_precision(optarg)) < 0) {
                fprintf(stderr, "ditto bench: %s '%s': expected auto, fp32 or fp16\n", c == 'p' ? "--precision" : "--motion-precision", optarg);
                return 2;
            }
            break;
        }
        case 's': seconds = atof(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'B': batch = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'j': json = optarg; break;
        case 'r': rgb_sum = 1; break;
        case 'v': verbose = 1; break;
        case 'P': parity = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!avatar || optind < argc || !(seconds > 0 && seconds < 3600) || steps < 1 || steps > 1000 || batch < 1 || batch > 256 || parity < 0) {
        usage(stderr);
        return 2;
    }
    DittoLogger log = ditto_logger_stderr(verbose ? DITTO_LOG_INFO : DITTO_LOG_WARN);
    DittoModelsParams mp;
    ditto_models_params_default(&mp);
    mp.weights = weights;
    mp.backend = backend;
    mp.precision = precision;
    mp.motion_precision = motion_precision;
    mp.threads = threads;
    mp.log = log;
    DittoModels *m = NULL;
    DittoSession *s = NULL;
    float *pcm = NULL;
    int rc;
    double t0 = ditto_now();
    if ((rc = ditto_models_open(&m, &mp)) < 0) {
        fprintf(stderr, "ditto bench: cannot open the models: %s\n", ditto_strerror(rc));
        return 1;
    }
    const double t_load = ditto_now() - t0;
    const int64_t n = (int64_t)llround(seconds * 16000.0);
    if (!(pcm = malloc((size_t)n * sizeof *pcm))) {
        ditto_models_close(&m);
        return 1;
    }
    gen_audio(pcm, n);

    DittoSessionParams sp;
    ditto_session_params_default(&sp);
    sp.avatar = avatar;
    sp.steps = steps;
    sp.batch = batch;
    sp.log = log;
    sp.yuv_only = !rgb_sum && parity == 0;   /* what ditto render fetches: the planes */
    double t1 = ditto_now();
    rc = ditto_session_open(&s, m, &sp);
    const double t_open = ditto_now() - t1;
    int64_t frames = 0;
    uint64_t sum = 1469598103934665603ull;   /* FNV-1a over the frames' SHA-256 (YUV planes): one checksum for the clip */
    uint64_t sum_rgb = sum;                  /* the same over the RGB24 frames (--rgb-checksum) */
    Kept keep = { 0 };
    char *jtext = NULL;                      /* the JSON object so far, without its closing brace */
    size_t jlen = 0;
    double t_first = 0, t2 = ditto_now();
    if (rc >= 0)
        rc = ditto_session_push_audio(s, pcm, n);
    if (rc >= 0)
        rc = ditto_session_end_audio(s);
    while (rc >= 0) {
        DittoFrame f;
        int got = ditto_session_pull_frame(s, &f);
        if (got < 0)
            rc = got;
        if (got <= 0)
            break;
        if (!frames++)
            t_first = ditto_now() - t2;
        char hex[65];
        if (ditto_frame_sha256(&f, hex) == 0)
            for (int k = 0; k < 64; k++)
                sum = (sum ^ (uint8_t)hex[k]) * 1099511628211ull;
        if (frames <= parity && keep_frames(&keep, &f, frames - 1, parity) < 0) {
            rc = DITTO_ERR_NOMEM;
            break;
        }
        if (rgb_sum) {
            unsigned char md[32];
            unsigned int len = 0;
            EVP_Digest(f.rgb, (size_t)f.rgb_stride * (size_t)f.height, md, &len, EVP_sha256(), NULL);
            for (unsigned k = 0; k < len; k++)
                sum_rgb = (sum_rgb ^ md[k]) * 1099511628211ull;
        }
    }
    const double wall = ditto_now() - t2;
    if (rc < 0) {
        fprintf(stderr, "ditto bench: the e2e run failed: %s\n", ditto_strerror(rc));
    } else {
        DittoStats st;
        ditto_session_stats(s, &st);
        DittoMemInfo mr, mm;
        bool have_mem = ditto_models_mem(m, &mr, &mm) >= 0;
        printf("e2e: %s backend, weights %s, %.3f s of audio, %d DDIM steps, batch %d, %dx%d avatar\n", backend, weights, seconds, steps,
               batch, st.width, st.height);
        printf("  model load + warm-up  %8.3f s\n", t_load);
        printf("  session open (avatar) %8.3f s\n", t_open);
        printf("  wall, push -> last    %8.3f s  (%lld frames, %.1f frames/s, %.2fx real time; first frame after %.3f s)\n", wall,
               (long long)frames, (double)frames / wall, seconds / wall, t_first);
        double m0 = 0, b0 = 0;
        ditto_session_milestones(s, &m0, &b0);
        printf("  first motion frame after %.3f s, first render batch done after %.3f s\n", m0 > 0 ? m0 - t2 : NAN, b0 > 0 ? b0 - t2 : NAN);
        printf("  frames checksum       %016llx  (FNV-1a of the frames' SHA-256: compare runs)\n", (unsigned long long)sum);
        if (rgb_sum)
            printf("  rgb checksum          %016llx\n", (unsigned long long)sum_rgb);
        printf("  busy time per stage (stages overlap):\n");
        for (int k = 0; k < DITTO_STAGE_COUNT; k++)
            if (st.seconds[k] > 0)
                printf("    %-8s %8.3f s\n", ditto_stage_name((DittoStage)k), st.seconds[k]);
        if (have_mem)
            printf("  device memory held by ditto: render backend peak %.0f MB, motion backend peak %.0f MB; device in use %.0f MB\n",
                   mb(mr.peak), mb(mm.peak), mb(mr.device_used));
        if (json) {
            FILE *jf = open_memstream(&jtext, &jlen);
            if (!jf) {
                rc = DITTO_ERR_NOMEM;
            } else {
                fprintf(jf, "{\n  \"backend\": \"%s\", \"weights\": \"%s\", \"seconds\": %.3f, \"steps\": %d, \"batch\": %d,\n", backend, weights,
                        seconds, steps, batch);
                fprintf(jf, "  \"load_s\": %.4f, \"open_s\": %.4f, \"wall_s\": %.4f, \"first_frame_s\": %.4f, \"frames\": %lld,\n", t_load, t_open,
                        wall, t_first, (long long)frames);
                fprintf(jf, "  \"frames_checksum\": \"%016llx\",\n", (unsigned long long)sum);
                if (rgb_sum)
                    fprintf(jf, "  \"rgb_checksum\": \"%016llx\",\n", (unsigned long long)sum_rgb);
                fprintf(jf, "  \"stages_busy_s\": {");
                for (int k = 0; k < DITTO_STAGE_COUNT; k++)
                    fprintf(jf, "%s\"%s\": %.4f", k ? ", " : "", ditto_stage_name((DittoStage)k), st.seconds[k]);
                fprintf(jf, "}");
                if (have_mem)
                    fprintf(jf, ",\n  \"render_peak_mb\": %.1f, \"motion_peak_mb\": %.1f, \"device_used_mb\": %.1f", mb(mr.peak), mb(mm.peak),
                            mb(mr.device_used));
                fclose(jf);
            }
        }
    }
    ditto_session_close(&s);
    ditto_models_close(&m);
    Parity par = { 0 };
    if (rc >= 0 && parity > 0)
        rc = parity_cpu(&mp, &sp, pcm, n, &keep, &par);
    if (rc >= 0 && json && jtext) {
        FILE *jf = fopen(json, "w");
        bool ok = jf && fputs(jtext, jf) >= 0;
        if (ok && par.n > 0)
            ok = fprintf(jf, ",\n  \"parity_cpu\": {\"frames\": %lld, \"psnr_min_db\": %.3f, \"psnr_mean_db\": %.3f, \"max_abs_diff\": %d}",
                         (long long)par.n, par.psnr_min, par.psnr_mean, par.max_diff) > 0;
        if (ok)
            ok = fputs("\n}\n", jf) >= 0;
        if ((jf && fclose(jf) != 0) || !ok) {
            fprintf(stderr, "ditto bench: cannot write %s\n", json);
            rc = DITTO_ERR_IO;
        }
    }
    free(jtext);
    free(keep.rgb);
    free(pcm);
    return rc < 0 ? 1 : 0;
}
