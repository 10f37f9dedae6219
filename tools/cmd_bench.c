/*
 * ditto bench: times the per-frame render path (stitch -> warp -> decode) at
 * the official network sizes with synthetic weights (no checkpoint needed),
 * for several batch sizes, on the CPU or the GPU. Prints a table and,
 * with --json, writes the numbers as JSON. With --fp16 (cuda) the warp and
 * decoder networks store activations and weights in float16; f_s, the warp
 * output and the image are then float16 too, keypoints stay float32.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/backend.h"
#include "core/log.h"
#include "core/rng.h"
#include "models/models.h"
#include "nn/weights.h"
#include "tools/cli.h"
#include "weights/synthetic.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ditto bench [OPTIONS]\n\n"
            "Times the per-frame render networks (stitching, warp, decoder) at their\n"
            "official sizes with synthetic random weights; no checkpoint is needed.\n\n"
            "options:\n"
            "  --backend NAME   cpu or cuda (default cpu)\n"
            "  --batch LIST     comma-separated batch sizes (default 1; e.g. 1,4,8,16)\n"
            "  --iters N        timed iterations per batch size (default 2 on cpu, 20 on cuda)\n"
            "  --warmup N       untimed iterations first (default 1)\n"
            "  --threads N      CPU threads (default: all cores)\n"
            "  --fp16           cuda: float16 activations and weights (fp32 math inside each op)\n"
            "  --small          use the small synthetic configuration (quick smoke run)\n"
            "  --json FILE      also write the results as JSON to FILE\n"
            "  --quiet          print only the table\n"
            "  -h, --help       this text\n");
}

typedef struct Stage { double stitch, warp, decode, total; } Stage;

static int fill_random(DittoBackend *be, DittoTensor *t, uint64_t stream, float scale)
{
    size_t n = (size_t)ditto_tensor_numel(t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        return DITTO_ERR_NOMEM;
    ditto_rng_fill_normal(1234, stream, 0, h, n);
    for (size_t i = 0; i < n; i++)
        h[i] *= scale;
    void *src = h, *conv = NULL;
    if (t->dtype != DITTO_F32) {   /* f16 tensors: the same values, rounded on the host */
        conv = malloc(ditto_tensor_nbytes(t) + 1);
        if (!conv) {
            free(h);
            return DITTO_ERR_NOMEM;
        }
        ditto_convert(conv, t->dtype, h, DITTO_F32, n);
        src = conv;
    }
    int rc = be->upload(be, t->data, src, ditto_tensor_nbytes(t));
    free(conv);
    free(h);
    return rc;
}

static int alloc_t(DittoBackend *be, DittoBuffer *buf, DittoTensor *t, DittoDType dt, int ndim, const int64_t *shape)
{
    *t = ditto_tensor(NULL, dt, ndim, shape);
    int rc = ditto_buffer_alloc(buf, &be->allocator, ditto_tensor_nbytes(t));
    t->data = buf->ptr;
    t->device = be->device;
    return rc;
}

int ditto_cmd_bench(int argc, char **argv)
{
    const char *backend = "cpu", *json = NULL, *batches = "1";
    int iters = -1, warmup = 1, threads = 0, small = 0, quiet = 0, fp16 = 0;
    static const struct option opts[] = {
        { "backend", required_argument, 0, 'b' }, { "batch", required_argument, 0, 'B' }, { "iters", required_argument, 0, 'n' },
        { "warmup", required_argument, 0, 'w' },  { "threads", required_argument, 0, 't' }, { "small", no_argument, 0, 's' },
        { "json", required_argument, 0, 'j' },    { "quiet", no_argument, 0, 'q' },         { "help", no_argument, 0, 'h' },
        { "fp16", no_argument, 0, 'f' },
        { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': backend = optarg; break;
        case 'B': batches = optarg; break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 's': small = 1; break;
        case 'j': json = optarg; break;
        case 'q': quiet = 1; break;
        case 'f': fp16 = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ditto bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    DittoBackendParams bp;
    ditto_backend_params_default(&bp);
    bp.nthreads = threads;
    bp.fp16 = fp16;
    bp.log = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoBackend *be = NULL;
    if (ditto_backend_open(&be, backend, &bp) < 0)
        return 1;
    if (iters < 0)
        iters = be->device == DITTO_DEVICE_CPU ? 2 : 20;

    int rc = 0;
    DittoCatalog *cw = NULL, *cg = NULL, *cs = NULL;
    DittoWarp *warp = NULL;
    DittoDecoder *dec = NULL;
    DittoStitch *st = NULL;
    bool full = !small;
    double t0 = now_s();
    if ((rc = ditto_synthetic_catalog(&cw, DITTO_NET_WARP, full, 1, &bp.log)) < 0 ||
        (rc = ditto_synthetic_catalog(&cg, DITTO_NET_DECODER, full, 2, &bp.log)) < 0 ||
        (rc = ditto_synthetic_catalog(&cs, DITTO_NET_STITCH, full, 3, &bp.log)) < 0 || (rc = ditto_warp_load(&warp, be, cw)) < 0 ||
        (rc = ditto_decoder_load(&dec, be, cg)) < 0 || (rc = ditto_stitch_load(&st, be, cs)) < 0) {
        fprintf(stderr, "ditto bench: cannot build the synthetic networks: %s\n", ditto_strerror(rc));
        goto done;
    }
    double load_s = now_s() - t0;
    /* device bytes held right after loading: the three networks' parameters */
    DittoMemInfo mi_load = { 0 };
    if (be->mem_info && be->mem_info(be, &mi_load) < 0)
        memset(&mi_load, 0, sizeof mi_load);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cs);
    if (!quiet)
        fprintf(stderr, "ditto bench: %s backend, %s storage, %s networks with synthetic weights (built in %.2f s)\n", be->name,
                ditto_dtype_name(be->act_dtype), full ? "official-size" : "small", load_s);

    FILE *jf = NULL;
    if (json && !(jf = fopen(json, "w"))) {
        fprintf(stderr, "ditto bench: cannot write %s\n", json);
        rc = 1;
        goto done;
    }
    if (jf)
        fprintf(jf, "{\n  \"backend\": \"%s\",\n  \"dtype\": \"%s\",\n  \"size\": \"%s\",\n  \"results\": [", be->name,
                ditto_dtype_name(be->act_dtype), full ? "official" : "small");
    /* gpu peak: high-water mark of everything ditto holds on the device (weights, arena, buffers, workspace) so far */
    printf("%-6s %12s %12s %12s %12s %10s %10s%s\n", "batch", "stitch ms/f", "warp ms/f", "decode ms/f", "total ms/f", "frames/s", "arena MB",
           be->mem_info ? "  gpu peak MB" : "");
    int first = 1;
    size_t dev_used_max = 0;   /* cudaMemGetInfo after each batch's timed runs, arena still held */
    for (const char *p = batches; *p;) {
        int B = atoi(p);
        if (B < 1) {
            fprintf(stderr, "ditto bench: bad batch size in '%s'\n", batches);
            rc = 2;
            break;
        }
        const int64_t C = full ? 32 : 8, D = 16, HW = 64;
        DittoBuffer bfs = { 0 }, bks = { 0 }, bkd = { 0 }, bkn = { 0 }, bwo = { 0 }, bimg = { 0 };
        DittoTensor f_s, kp_s, kp_d, kp_n, wout, img;
        int64_t wshape[4], ishape[4];
        DittoArena ws;
        ditto_arena_init(&ws, &be->allocator, 0);
        /* f_s, the warp output and the image in the networks' storage dtype; keypoints float32 */
        const DittoDType act = be->act_dtype;
        rc = alloc_t(be, &bfs, &f_s, act, DITTO_SHAPE(B, C, D, HW, HW));
        if (!rc) rc = alloc_t(be, &bks, &kp_s, DITTO_F32, DITTO_SHAPE(B, 21, 3));
        if (!rc) rc = alloc_t(be, &bkd, &kp_d, DITTO_F32, DITTO_SHAPE(B, 21, 3));
        if (!rc) rc = alloc_t(be, &bkn, &kp_n, DITTO_F32, DITTO_SHAPE(B, 21, 3));
        if (!rc) rc = ditto_warp_out_shape(warp, &f_s, wshape);
        if (!rc) rc = alloc_t(be, &bwo, &wout, act, 4, wshape);
        if (!rc) rc = ditto_decoder_out_shape(dec, &wout, ishape);
        if (!rc) rc = alloc_t(be, &bimg, &img, act, 4, ishape);
        if (!rc) rc = fill_random(be, &f_s, 1, 0.5f);
        if (!rc) rc = fill_random(be, &kp_s, 2, 0.3f);
        if (!rc) rc = fill_random(be, &kp_d, 3, 0.3f);
        Stage sum = { 0 };
        for (int it = 0; !rc && it < warmup + iters; it++) {
            double a = now_s();
            rc = ditto_stitch_forward(st, &ws, &kp_s, &kp_d, &kp_n, NULL);
            if (!rc) rc = be->sync(be);
            double b = now_s();
            if (!rc) rc = ditto_warp_forward(warp, &ws, &f_s, &kp_s, &kp_n, &wout, NULL);
            if (!rc) rc = be->sync(be);
            double c2 = now_s();
            if (!rc) rc = ditto_decoder_forward(dec, &ws, &wout, &img, NULL);
            if (!rc) rc = be->sync(be);
            double d = now_s();
            if (!rc) rc = ditto_arena_reset(&ws);
            if (it >= warmup) {
                sum.stitch += b - a;
                sum.warp += c2 - b;
                sum.decode += d - c2;
                sum.total += d - a;
            }
        }
        if (rc < 0) {
            fprintf(stderr, "ditto bench: batch %d failed: %s\n", B, ditto_strerror(rc));
        } else {
            double n = (double)iters * B;
            DittoMemInfo mi = { 0 };
            bool have_mi = be->mem_info && be->mem_info(be, &mi) >= 0;
            char gpu[32] = "";
            if (have_mi) {
                snprintf(gpu, sizeof gpu, " %12.0f", mi.peak / 1048576.0);
                if (mi.device_used > dev_used_max)
                    dev_used_max = mi.device_used;
            }
            printf("%-6d %12.2f %12.2f %12.2f %12.2f %10.2f %10.0f%s\n", B, 1e3 * sum.stitch / n, 1e3 * sum.warp / n, 1e3 * sum.decode / n,
                   1e3 * sum.total / n, n / sum.total, ws.peak / 1048576.0, gpu);
            if (jf) {
                fprintf(jf, "%s\n    {\"batch\": %d, \"iters\": %d, \"stitch_ms_per_frame\": %.4f, \"warp_ms_per_frame\": %.4f, "
                            "\"decode_ms_per_frame\": %.4f, \"total_ms_per_frame\": %.4f, \"fps\": %.3f, \"arena_mb\": %.1f",
                        first ? "" : ",", B, iters, 1e3 * sum.stitch / n, 1e3 * sum.warp / n, 1e3 * sum.decode / n, 1e3 * sum.total / n,
                        n / sum.total, ws.peak / 1048576.0);
                if (have_mi)
                    fprintf(jf, ", \"gpu_peak_mb\": %.1f, \"gpu_device_used_mb\": %.1f", mi.peak / 1048576.0, mi.device_used / 1048576.0);
                fprintf(jf, "}");
            }
            first = 0;
        }
        ditto_arena_free(&ws);
        ditto_buffer_free(&bfs);
        ditto_buffer_free(&bks);
        ditto_buffer_free(&bkd);
        ditto_buffer_free(&bkn);
        ditto_buffer_free(&bwo);
        ditto_buffer_free(&bimg);
        if (rc < 0)
            break;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    printf("peak host memory (RSS): %.0f MB\n", peak_rss_mb());
    DittoMemInfo mi = { 0 };
    bool have_mi = be->mem_info && be->mem_info(be, &mi) >= 0;
    if (have_mi)
        printf("peak GPU memory: %.0f MB held by ditto (weights %.0f MB, arenas, buffers, workspace); device in use up to %.0f of %.0f MB"
               " (cudaMemGetInfo after each batch: also the CUDA context and library handles)\n",
               mi.peak / 1048576.0, mi_load.used / 1048576.0, dev_used_max / 1048576.0, mi.device_total / 1048576.0);
    if (jf) {
        fprintf(jf, "\n  ],\n  \"peak_rss_mb\": %.1f", peak_rss_mb());
        if (have_mi)
            fprintf(jf, ",\n  \"gpu_weights_mb\": %.1f,\n  \"gpu_peak_mb\": %.1f,\n  \"gpu_device_used_max_mb\": %.1f,\n  \"gpu_device_total_mb\": %.1f",
                    mi_load.used / 1048576.0, mi.peak / 1048576.0, dev_used_max / 1048576.0, mi.device_total / 1048576.0);
        fprintf(jf, "\n}\n");
        fclose(jf);
    }
done:
    ditto_warp_free(&warp);
    ditto_decoder_free(&dec);
    ditto_stitch_free(&st);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cs);
    ditto_backend_close(&be);
    return rc < 0 ? 1 : rc;
}
