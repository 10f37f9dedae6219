/*
 * ditto render: speech + avatar -> lip-synced MP4. Thin: parses the
 * options into the library's params, calls ditto_render_file(), prints
 * progress and a summary.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ditto/ditto.h"
#include "pipeline/pipeline_internal.h"   /* ditto_now */
#include "tools/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto render --weights DIR --audio SPEECH --avatar IMAGE|VIDEO|NAME.avatar -o OUT.mp4 [OPTIONS]\n\n"
            "Renders a talking-head video: the avatar speaks the audio with lip-sync, head motion\n"
            "and blinks. Output: H.264 (yuv420p, BT.601 limited range) at 25 fps with the original\n"
            "audio as AAC, ceil(seconds * 25) frames, written to a temporary file and renamed when\n"
            "complete (a failed run leaves nothing under OUT.mp4).\n\n"
            "inputs:\n"
            "  --weights DIR      the official ditto_pytorch folder (models/*.pth, aux_models/*.onnx);\n"
            "                     default $DITTO_WEIGHTS. 'synthetic' uses random networks generated\n"
            "                     in C (tiny and fast; 'synthetic:small', 'synthetic:full' are larger):\n"
            "                     the video then shows NOISE where the face would be (tests, demos)\n"
            "  --aux DIR          folder of the auxiliary ONNX models (face detector, landmarks, face\n"
            "                     mesh, HuBERT) when they are not under --weights\n"
            "  --audio FILE       the speech (any format FFmpeg reads: wav, mp3, m4a, flac, ...)\n"
            "  --avatar FILE      a portrait image, a short video loop (played back and forth) or a\n"
            "                     .avatar file made by 'ditto bake'\n"
            "  -o, --output FILE  the MP4 to write\n\n"
            "motion:\n"
            "  --seed N           seed of every random draw (diffusion noise); same seed, same video\n"
            "                     (default 0)\n"
            "  --steps N          DDIM sampling steps, 1..1000 (default 50; fewer is faster and rougher)\n"
            "  --emo E            emotion: a label 0..7 or its name: angry, disgust, fear, happy,\n"
            "                     neutral, sad, surprise, contempt (default neutral)\n"
            "  --fade-in SEC      ease the expression in from the avatar's own over the first SEC seconds\n"
            "  --fade-out SEC     ease it back to the avatar's own over the last SEC seconds\n"
            "  --max-size N       longer side limit of the avatar frames in pixels (default 1920);\n"
            "                     the output has the avatar's size after this limit\n\n"
            "output:\n"
            "  --crf N            H.264 constant quality 0..51, lower is better (default 18)\n"
            "  --bitrate R        average video bitrate instead of --crf, e.g. 4M or 800k\n"
            "  --encoder NAME     auto (default: h264_nvenc when the GPU offers it, else libx264) or an\n"
            "                     FFmpeg encoder name\n"
            "  --preset NAME      encoder preset (default for libx264: ultrafast with --backend cuda,\n"
            "                     which keeps up with the GPU, superfast on the cpu; else the\n"
            "                     encoder's own). Slower presets make smaller files\n"
            "  --frame-hashes F   write the SHA-256 of every frame's YUV planes to F (one line per frame)\n\n"
            "performance:\n"
            "  --backend NAME     cpu or cuda (default cpu)\n"
            "  --batch N          frames per render batch (default 8); results do not depend on it\n"
            "  --precision P      auto (default: fp16 on cuda, fp32 on cpu), fp32 or fp16 (cuda only):\n"
            "                     storage of the render networks; fp16 is ~9x faster on the GPU\n"
            "  --motion-precision P  auto or fp32 (default), or fp16 (cuda): the motion model's\n"
            "                     linears. fp32 gives the CPU's motion, so frames match a CPU\n"
            "                     render of the same seed; fp16 (TF32 products of operands held\n"
            "                     as float16) halves the motion's GPU time (motion within rel-L2\n"
            "                     1e-3) but frames can then differ visibly; the motion runs\n"
            "                     beside the render, so the wall time barely changes\n"
            "  --threads N        CPU threads per pipeline stage (default: all cores)\n\n"
            "  --quiet            print errors only (no progress line, no summary)\n"
            "  -v, --verbose      also print the set-up phases and where the time to the first\n"
            "                     frame went\n"
            "  -h, --help         this text\n");
}

/* ---- logging: warnings as they come, only the first error (one line per failure) ---- */

typedef struct Cli {
    int quiet;
    int verbose;
    int tty;
    int progress_open;       /* a \r progress line is on screen */
    int errors;
    double last_print;
    FILE *hashes;
} Cli;

static void end_progress_line(Cli *c)
{
    if (c->progress_open) {
        fputc('\n', stderr);
        c->progress_open = 0;
    }
}

static void on_log(void *cookie, DittoLogLevel level, const char *msg)
{
    Cli *c = cookie;
    if (level == DITTO_LOG_ERROR) {
        if (c->errors++)
            return;
        end_progress_line(c);
        fprintf(stderr, "ditto render: %s\n", msg);
        return;
    }
    if (c->quiet)
        return;
    end_progress_line(c);
    fprintf(stderr, "ditto render: %s%s\n", level == DITTO_LOG_WARN ? "WARNING: " : "", msg);
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, n, "--:--");
    else
        snprintf(buf, n, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
}

static void on_progress(void *cookie, const DittoProgress *p)
{
    Cli *c = cookie;
    if (c->quiet)
        return;
    bool last = p->done == p->total;
    if (!last && p->elapsed - c->last_print < (c->tty ? 0.25 : 5.0))
        return;
    c->last_print = p->elapsed;
    double fps = p->elapsed > 0 ? (double)p->done / p->elapsed : 0;
    char eta[16];
    fmt_time(fps > 0 ? (double)(p->total - p->done) / fps : -1, eta, sizeof eta);
    fprintf(stderr, "%sditto render: %lld/%lld frames  %.1f fps  ETA %s%s", c->tty ? "\r" : "", (long long)p->done, (long long)p->total,
            fps, eta, c->tty ? "   " : "\n");
    c->progress_open = c->tty;
    if (last)
        end_progress_line(c);
    fflush(stderr);
}

static int on_frame(void *cookie, const DittoFrame *f)
{
    Cli *c = cookie;
    if (!c->hashes)
        return 0;
    char hex[65];
    int rc = ditto_frame_sha256(f, hex);
    if (rc < 0)
        return rc;
    if (fprintf(c->hashes, "%lld %s\n", (long long)f->index, hex) < 0)
        return DITTO_ERR_IO;
    return 0;
}

/* ---- option parsing ---- */

static int parse_long(const char *s, const char *opt, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "ditto render: %s needs an integer in %ld..%ld, got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *v = x;
    return 0;
}

static int parse_seconds(const char *s, const char *opt, int *frames)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || *end || !(x >= 0) || x > 3600) {
        fprintf(stderr, "ditto render: %s needs seconds (0..3600), got '%s'\n", opt, s);
        return -1;
    }
    *frames = (int)lround(x * DITTO_FPS);
    return 0;
}

static int parse_bitrate(const char *s, int64_t *v)
{
    char *end;
    double x = strtod(s, &end);
    double mul = 1;
    if (end != s && (*end == 'k' || *end == 'K'))
        mul = 1e3, end++;
    else if (end != s && (*end == 'm' || *end == 'M'))
        mul = 1e6, end++;
    if (end == s || *end || !(x > 0) || x * mul < 1e4 || x * mul > 1e9) {
        fprintf(stderr, "ditto render: --bitrate needs a rate between 10k and 1000M (e.g. 4M, 800k), got '%s'\n", s);
        return -1;
    }
    *v = (int64_t)(x * mul);
    return 0;
}

static int parse_emo(const char *s, int *v)
{
    static const char *const names[8] = { "angry", "disgust", "fear", "happy", "neutral", "sad", "surprise", "contempt" };
    for (int i = 0; i < 8; i++)
        if (!strcasecmp(s, names[i])) {
            *v = i;
            return 0;
        }
    long x;
    if (parse_long(s, "--emo", 0, 7, &x) < 0)
        return -1;
    *v = (int)x;
    return 0;
}

int ditto_cmd_render(int argc, char **argv)
{
    Cli cli;
    memset(&cli, 0, sizeof cli);
    const char *weights = getenv("DITTO_WEIGHTS"), *aux = NULL, *backend = "cpu", *hashes = NULL;
    long threads = 0, v = 0;
    int precision = DITTO_PRECISION_AUTO, motion_precision = DITTO_PRECISION_AUTO;
    DittoRenderParams rp;
    ditto_render_params_default(&rp);
    DittoSessionParams *sp = &rp.session;
    static const struct option opts[] = {
        { "weights", required_argument, 0, 'w' },  { "aux", required_argument, 0, 'A' },      { "audio", required_argument, 0, 'i' },
        { "avatar", required_argument, 0, 'a' },   { "output", required_argument, 0, 'o' },   { "seed", required_argument, 0, 'S' },
        { "steps", required_argument, 0, 'n' },    { "emo", required_argument, 0, 'e' },      { "fade-in", required_argument, 0, 'F' },
        { "fade-out", required_argument, 0, 'G' }, { "max-size", required_argument, 0, 'm' }, { "crf", required_argument, 0, 'c' },
        { "bitrate", required_argument, 0, 'r' },  { "encoder", required_argument, 0, 'E' },  { "preset", required_argument, 0, 'P' },
        { "frame-hashes", required_argument, 0, 'H' }, { "backend", required_argument, 0, 'b' }, { "batch", required_argument, 0, 'B' },
        { "threads", required_argument, 0, 't' },  { "quiet", no_argument, 0, 'q' },          { "help", no_argument, 0, 'h' },
        { "precision", required_argument, 0, 'p' }, { "verbose", no_argument, 0, 'v' },
        { "motion-precision", required_argument, 0, 'M' }, { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:hv", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'w': weights = optarg; break;
        case 'A': aux = optarg; break;
        case 'i': rp.audio = optarg; break;
        case 'a': sp->avatar = optarg; break;
        case 'o': rp.output = optarg; break;
        case 'S': {
            char *end;
            errno = 0;
            unsigned long long x = strtoull(optarg, &end, 10);
            if (end == optarg || *end || errno || optarg[0] == '-') {
                fprintf(stderr, "ditto render: --seed needs a non-negative integer, got '%s'\n", optarg);
                bad = 1;
            }
            sp->seed = x;
            break;
        }
        case 'n': bad = parse_long(optarg, "--steps", 1, 1000, &v); sp->steps = (int)v; break;
        case 'e': bad = parse_emo(optarg, &sp->emo); break;
        case 'F': bad = parse_seconds(optarg, "--fade-in", &sp->fade_in); break;
        case 'G': bad = parse_seconds(optarg, "--fade-out", &sp->fade_out); break;
        case 'm': bad = parse_long(optarg, "--max-size", 2, 16384, &v); sp->max_size = (int)v; break;
        case 'c': bad = parse_long(optarg, "--crf", 0, 51, &v); rp.crf = (int)v; break;
        case 'r': bad = parse_bitrate(optarg, &rp.bitrate); break;
        case 'E': rp.encoder = optarg; break;
        case 'P': rp.preset = optarg; break;
        case 'H': hashes = optarg; break;
        case 'b': backend = optarg; break;
        case 'p':
        case 'M': {
            int *dst = c == 'p' ? &precision : &motion_precision;
            if ((*dst = ditto_cli_precision(optarg)) < 0) {
                fprintf(stderr, "ditto render: %s '%s': expected auto, fp32 or fp16\n", c == 'p' ? "--precision" : "--motion-precision", optarg);
                bad = 1;
            }
            break;
        }
        case 'B': bad = parse_long(optarg, "--batch", 1, 256, &v); sp->batch = (int)v; break;
        case 't': bad = parse_long(optarg, "--threads", 0, 1024, &threads); break;
        case 'q': cli.quiet = 1; break;
        case 'v': cli.verbose = 1; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "ditto render: %s needs a value (run 'ditto render --help')\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "ditto render: unknown option '%s' (run 'ditto render --help')\n", argv[optind - 1]);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "ditto render: unexpected argument '%s' (run 'ditto render --help')\n", argv[optind]);
        return 2;
    }
    if (!weights || !rp.audio || !sp->avatar || !rp.output) {
        fprintf(stderr, "ditto render: --weights (or $DITTO_WEIGHTS), --audio, --avatar and -o are required (run 'ditto render --help')\n");
        return 2;
    }
    cli.tty = isatty(2);
    /* a file-size limit (ulimit -f) then fails the write with EFBIG instead of killing the process */
    signal(SIGXFSZ, SIG_IGN);

    DittoLogger log = { on_log, &cli, cli.quiet ? DITTO_LOG_ERROR : cli.verbose ? DITTO_LOG_INFO : DITTO_LOG_WARN };
    DittoModelsParams mp;
    ditto_models_params_default(&mp);
    mp.weights = weights;
    mp.aux = aux;
    mp.backend = backend;
    mp.precision = precision;
    mp.motion_precision = motion_precision;
    mp.threads = (int)threads;
    mp.log = log;
    DittoModels *m = NULL;
    const double t_start = ditto_now();
    int rc = ditto_models_open(&m, &mp);
    const double t_load = ditto_now() - t_start;
    if (rc < 0) {
        if (!cli.errors)
            fprintf(stderr, "ditto render: cannot load the models: %s\n", ditto_strerror(rc));
        return 1;
    }
    if (hashes && !(cli.hashes = fopen(hashes, "w"))) {
        fprintf(stderr, "ditto render: %s: cannot write the frame hashes: %s\n", hashes, strerror(errno));
        ditto_models_close(&m);
        return 1;
    }
    rp.log = log;
    rp.cookie = &cli;
    rp.progress = on_progress;
    rp.on_frame = on_frame;
    DittoStats st;
    const double t_render0 = ditto_now();
    rc = ditto_render_file(m, &rp, &st);
    const double t_render = ditto_now() - t_render0;
    bool synthetic = ditto_models_synthetic(m);
    ditto_models_close(&m);
    if (cli.hashes && fclose(cli.hashes) != 0 && rc >= 0) {
        fprintf(stderr, "ditto render: %s: cannot write the frame hashes: %s\n", hashes, strerror(errno));
        rc = DITTO_ERR_IO;
        cli.errors++;
    }
    if (rc < 0) {
        if (hashes)
            remove(hashes);
        if (!cli.errors)
            fprintf(stderr, "ditto render: %s\n", ditto_strerror(rc));
        return 1;
    }
    if (!cli.quiet) {
        double secs = (double)st.total / DITTO_FPS;
        printf("ditto render: wrote %s: %lld frames (%.2f s at %d fps), %dx%d, in %.1f s (%.1f frames/s, batch %d)\n", rp.output,
               (long long)st.frames, secs, DITTO_FPS, st.width, st.height, st.wall, st.wall > 0 ? (double)st.frames / st.wall : 0.0,
               st.batch);
        printf("ditto render: time: models load + warm-up %.2f s, render %.2f s (audio decode to the MP4 closed)\n", t_load, t_render);
        printf("ditto render: timeline: avatar ready %.2f s, audio decoded %.2f s, first frame %.2f s, last frame %.2f s, MP4 closed %.2f s\n",
               st.t_ready, st.t_audio, st.t_first_frame, st.t_last_frame, st.t_closed);
        printf("ditto render: stage busy times (stages overlap):");
        for (int i = 0; i < DITTO_STAGE_COUNT; i++)
            printf(" %s %.2fs", ditto_stage_name((DittoStage)i), st.seconds[i]);
        printf("\n");
        if (synthetic)
            printf("ditto render: NOTE: synthetic weights: %s shows NOISE where the face would be (not a real render)\n", rp.output);
    }
    return 0;
}
