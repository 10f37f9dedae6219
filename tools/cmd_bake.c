/*
 * ditto bake: register an avatar (portrait image or video loop) once and
 * write everything a render needs into a .avatar file
 * (src/pipeline/avatar.h, format in src/pipeline/avatar_file.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/log.h"
#include "pipeline/avatar.h"
#include "tools/cli.h"
#include "weights/synthetic.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto bake --weights DIR --avatar IMAGE|VIDEO -o NAME.avatar [OPTIONS]\n\n"
            "Registers an avatar (face detection, landmarks, 512 crop, appearance features,\n"
            "keypoints, eye state, smoothing over a video loop) and writes it to a .avatar\n"
            "file that renders start from.\n\n"
            "options:\n"
            "  --weights DIR      the official ditto_pytorch folder (models/*.pth, aux_models/*.onnx;\n"
            "                     blaze_face.onnx and face_mesh.onnx are also looked for in\n"
            "                     ../ditto_onnx), or 'synthetic' for random networks (tests only)\n"
            "  --aux DIR          folder of the auxiliary ONNX models, if not under --weights\n"
            "                     (the stand-in layout of shared/models works too)\n"
            "  --avatar FILE      portrait image (any format FFmpeg reads) or video\n"
            "  -o, --output FILE  the .avatar file to write (replaced atomically)\n"
            "  --max-size N       longer side limit of the source frames (default 1920)\n"
            "  --n-frames N       register at most N video frames (default: all)\n"
            "  --crop-scale X     face crop size relative to the landmarks (default 2.3)\n"
            "  --crop-vx X        horizontal crop shift in crop sides (default 0)\n"
            "  --crop-vy X        vertical crop shift in crop sides (default -0.125)\n"
            "  --no-rotation      do not level the eyes in the crop\n"
            "  --backend NAME     cpu or cuda for the extractor networks (default cpu)\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --quiet            print errors only\n"
            "  -h, --help         this text\n");
}

static int parse_double(const char *s, const char *opt, double *v)
{
    char *end;
    *v = strtod(s, &end);
    if (end == s || *end) {
        fprintf(stderr, "ditto bake: %s needs a number, got '%s'\n", opt, s);
        return -1;
    }
    return 0;
}

static int parse_int(const char *s, const char *opt, int *v)
{
    char *end;
    long x = strtol(s, &end, 10);
    if (end == s || *end || x < -1 || x > 1000000) {
        fprintf(stderr, "ditto bake: %s needs an integer, got '%s'\n", opt, s);
        return -1;
    }
    *v = (int)x;
    return 0;
}

int ditto_cmd_bake(int argc, char **argv)
{
    const char *weights = NULL, *aux = NULL, *avatar = NULL, *output = NULL, *backend = "cpu";
    int quiet = 0, threads = 0;
    DittoRegisterParams p;
    ditto_register_params_default(&p);
    static const struct option opts[] = {
        { "weights", required_argument, 0, 'w' },    { "aux", required_argument, 0, 'A' },       { "avatar", required_argument, 0, 'a' },
        { "output", required_argument, 0, 'o' },     { "max-size", required_argument, 0, 'm' },  { "n-frames", required_argument, 0, 'n' },
        { "crop-scale", required_argument, 0, 's' }, { "crop-vx", required_argument, 0, 'x' },   { "crop-vy", required_argument, 0, 'y' },
        { "no-rotation", no_argument, 0, 'R' },      { "backend", required_argument, 0, 'b' },   { "threads", required_argument, 0, 't' },
        { "quiet", no_argument, 0, 'q' },            { "help", no_argument, 0, 'h' },            { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'w': weights = optarg; break;
        case 'A': aux = optarg; break;
        case 'a': avatar = optarg; break;
        case 'o': output = optarg; break;
        case 'm': bad = parse_int(optarg, "--max-size", &p.max_size); break;
        case 'n': bad = parse_int(optarg, "--n-frames", &p.n_frames); break;
        case 's': bad = parse_double(optarg, "--crop-scale", &p.crop_scale); break;
        case 'x': bad = parse_double(optarg, "--crop-vx", &p.crop_vx); break;
        case 'y': bad = parse_double(optarg, "--crop-vy", &p.crop_vy); break;
        case 'R': p.crop_rot = false; break;
        case 'b': backend = optarg; break;
        case 't': bad = parse_int(optarg, "--threads", &threads); break;
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad)
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "ditto bake: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!weights || !avatar || !output) {
        fprintf(stderr, "ditto bake: --weights, --avatar and -o are required (run 'ditto bake --help')\n");
        return 2;
    }
    if (p.max_size < 2 || !(p.crop_scale > 0)) {
        fprintf(stderr, "ditto bake: --max-size must be at least 2 and --crop-scale positive\n");
        return 2;
    }

    DittoLogger log = ditto_logger_stderr(quiet ? DITTO_LOG_ERROR : DITTO_LOG_WARN);
    DittoRegistrarConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.log = log;
    cfg.threads = threads;
    bool synthetic = !strcmp(weights, "synthetic");
    const char *aux_dir = aux ? aux : synthetic ? NULL : weights;
    char paths[DITTO_AUX_COUNT][4096], app[4096], mot[4096];
    for (int i = 0; i < DITTO_AUX_COUNT; i++)
        if (aux_dir && ditto_aux_find(aux_dir, (DittoAuxRole)i, paths[i], sizeof paths[i]))
            cfg.paths[i] = paths[i];
    if (synthetic) {
        cfg.synthetic = 1;
        /* without a detector and landmark model the synthetic path crops the centre; with half a set it would fail */
        if (!cfg.paths[DITTO_AUX_DETECTOR] || !cfg.paths[DITTO_AUX_LMK106])
            for (int i = 0; i < DITTO_AUX_COUNT; i++)
                cfg.paths[i] = NULL;
        fprintf(stderr, "ditto bake: WARNING: --weights synthetic: random appearance and motion networks%s.\n"
                        "ditto bake: WARNING: %s is NOT a real registration; use it for tests only.\n",
                cfg.paths[DITTO_AUX_DETECTOR] ? "" : " and no face detector (the crop is the centred square)", output);
    } else {
        if (!ditto_net_find(weights, ditto_net_file_name(DITTO_NET_APPEARANCE), app, sizeof app) ||
            !ditto_net_find(weights, ditto_net_file_name(DITTO_NET_MOTION), mot, sizeof mot)) {
            fprintf(stderr, "ditto bake: %s: no models/%s or models/%s (expected the official ditto_pytorch folder)\n", weights,
                    ditto_net_file_name(DITTO_NET_APPEARANCE), ditto_net_file_name(DITTO_NET_MOTION));
            return 1;
        }
        cfg.appearance = app;
        cfg.motion = mot;
    }

    DittoBackend *be = NULL;
    if (strcmp(backend, "cpu") != 0) {
        DittoBackendParams bp;
        ditto_backend_params_default(&bp);
        bp.nthreads = threads;
        bp.log = log;
        if (ditto_backend_open(&be, backend, &bp) < 0)
            return 1;
        cfg.be = be;
    }
    DittoRegistrar *r = NULL;
    DittoAvatar *a = NULL;
    int rc = ditto_registrar_open(&r, &cfg);
    if (rc == 0)
        rc = ditto_registrar_run_file(r, &p, avatar, &a);
    if (rc == 0)
        rc = ditto_registrar_describe(r, a);
    if (rc == 0)
        rc = ditto_avatar_kv_set_str(a, "creator", "ditto.c bake");
    if (rc == 0)
        rc = ditto_avatar_write(a, output, &log);
    if (rc == 0 && !quiet) {
        const DittoKV *lm = ditto_avatar_kv_get(a, "landmarks");
        printf("ditto bake: wrote %s: %d frame%s of %dx%d, landmarks: %s", output, a->n_frames, a->n_frames == 1 ? "" : "s", a->width,
               a->height, lm ? lm->s : "none");
        if (a->has_box)
            printf(", face (%.0f,%.0f)-(%.0f,%.0f) score %.3f", (double)a->face_box[0], (double)a->face_box[1], (double)a->face_box[2],
                   (double)a->face_box[3], (double)a->face_box[4]);
        printf("\n");
    }
    ditto_avatar_free(&a);
    ditto_registrar_close(&r);
    ditto_backend_close(&be);
    return rc == 0 ? 0 : 1;
}
