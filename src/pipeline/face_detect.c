/*
 * SCRFD face detection (ditto-architecture.md 4.2 step 1, defects 8.10 and
 * 8.11). Numerics follow the NumPy reference: anchor centres, distances and
 * boxes are float32; det_scale is a Python float that meets float32 arrays
 * (so it is rounded to float32 before the division).
 */
#include "pipeline/face_detect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "ops/ops.h"
#include "onnx/onnx_exec.h"
#include "weights/onnx.h"

/* ---- model table ------------------------------------------------------------ */

static const DittoDetSpec det_specs[] = {
    /* stock insightface SCRFD-10G as Ditto's PyTorch cfg loads it: dynamic H/W, numeric output
     * names, no batch axis; the session's first input is used whatever its name */
    { "det_10g.onnx", NULL, { NULL }, false, 512 },
    /* Ditto's ONNX/TRT copy: renamed I/O, same decode */
    { "insightface_det.onnx", "image", { "scores1", "scores2", "scores3", "boxes1", "boxes2", "boxes3", "kps1", "kps2", "kps3" }, false, 512 },
    /* the stand-ins in ../shared/models/scrfd: fixed 640x640, named outputs with a batch axis */
    { "scrfd_500m_bnkps.onnx", "input.1",
      { "score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32" }, true, 640 },
    { "scrfd_2.5g_bnkps_shape640x640.onnx", "input.1",
      { "score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32" }, true, 640 },
};

/* Unknown files: resolved from the graph in ditto_face_detector_open. */
static const DittoDetSpec det_generic = { NULL, NULL, { NULL }, false, 512 };

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

const DittoDetSpec *ditto_det_spec_find(const char *path)
{
    const char *b = path ? base_name(path) : "";
    for (size_t i = 0; i < sizeof det_specs / sizeof *det_specs; i++)
        if (!strcmp(b, det_specs[i].file))
            return &det_specs[i];
    return &det_generic;
}

/* ---- geometry and blob ------------------------------------------------------ */

void ditto_det_letterbox_dims(int h, int w, int size, int *new_h, int *new_w, double *det_scale)
{
    /* insightface: im_ratio = h / w against the square model's ratio 1; int() truncates */
    double im_ratio = (double)h / (double)w;
    if (im_ratio > 1.0) {
        *new_h = size;
        *new_w = (int)((double)size / im_ratio);
    } else {
        *new_w = size;
        *new_h = (int)((double)size * im_ratio);
    }
    if (*new_w < 1)
        *new_w = 1;
    if (*new_h < 1)
        *new_h = 1;
    *det_scale = (double)*new_h / (double)h;
}

void ditto_det_blob(const uint8_t *rgb, int size, float *blob)
{
    size_t plane = (size_t)size * (size_t)size;
    /* swapRB on an RGB image: plane 0 gets B. (x - 127.5) * (1/128) is exact in float32. */
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++)
            blob[(size_t)c * plane + i] = ((float)rgb[i * 3 + (size_t)(2 - c)] - 127.5f) * 0.0078125f;
}

int64_t ditto_det_anchor_count(int size, int stride)
{
    int64_t g = size / stride;
    return g * g * 2;
}

/* ---- decode, NMS, pick ------------------------------------------------------ */

static int cmp_score_desc(const void *a, const void *b)
{
    float sa = ((const DittoFaceBox *)a)->score, sb = ((const DittoFaceBox *)b)->score;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

int ditto_det_decode(const float *const score[3], const float *const box[3], const float *const kps[3], int size, float thresh, double det_scale,
                     DittoFaceBox *out, int cap)
{
    static const int strides[3] = { 8, 16, 32 };
    const float ds = (float)det_scale;
    int n = 0;
    for (int k = 0; k < 3; k++) {
        const int s = strides[k], gw = size / s;
        const float fs = (float)s;
        const int64_t na = ditto_det_anchor_count(size, s);
        for (int64_t a = 0; a < na; a++) {
            if (!(score[k][a] >= thresh))   /* NaN never passes */
                continue;
            int64_t cell = a / 2;
            float cx = (float)(cell % gw) * fs, cy = (float)(cell / gw) * fs;
            const float *d = box[k] + a * 4;
            DittoFaceBox b;
            b.x1 = (cx - d[0] * fs) / ds;
            b.y1 = (cy - d[1] * fs) / ds;
            b.x2 = (cx + d[2] * fs) / ds;
            b.y2 = (cy + d[3] * fs) / ds;
            b.score = score[k][a];
            for (int j = 0; j < 5; j++) {
                b.kps[2 * j] = kps[k] ? (cx + kps[k][a * 10 + 2 * j] * fs) / ds : 0.0f;
                b.kps[2 * j + 1] = kps[k] ? (cy + kps[k][a * 10 + 2 * j + 1] * fs) / ds : 0.0f;
            }
            if (n < cap) {
                out[n++] = b;
            } else if (cap > 0) {
                /* keep the best cap candidates: replace the current lowest score */
                int lo = 0;
                for (int i = 1; i < n; i++)
                    if (out[i].score < out[lo].score)
                        lo = i;
                if (b.score > out[lo].score)
                    out[lo] = b;
            }
        }
    }
    qsort(out, (size_t)n, sizeof *out, cmp_score_desc);
    return n;
}

int ditto_det_nms(DittoFaceBox *b, int n, float iou)
{
    int kept = 0;
    unsigned char *dead = n > 0 ? ditto_calloc((size_t)n, 1) : NULL;
    if (n > 0 && !dead)
        return n;   /* no memory for the flags: keeping every box is safe (the largest is picked later) */
    for (int i = 0; i < n; i++) {
        if (dead[i])
            continue;
        b[kept] = b[i];
        const DittoFaceBox *k = &b[kept];
        float area_i = (k->x2 - k->x1 + 1.0f) * (k->y2 - k->y1 + 1.0f);
        for (int j = i + 1; j < n; j++) {
            if (dead[j])
                continue;
            float xx1 = fmaxf(k->x1, b[j].x1), yy1 = fmaxf(k->y1, b[j].y1);
            float xx2 = fminf(k->x2, b[j].x2), yy2 = fminf(k->y2, b[j].y2);
            float w = fmaxf(0.0f, xx2 - xx1 + 1.0f), h = fmaxf(0.0f, yy2 - yy1 + 1.0f);
            float inter = w * h;
            float area_j = (b[j].x2 - b[j].x1 + 1.0f) * (b[j].y2 - b[j].y1 + 1.0f);
            float ovr = inter / (area_i + area_j - inter);
            if (!(ovr <= iou))
                dead[j] = 1;
        }
        kept++;
    }
    ditto_free(dead);
    return kept;
}

int ditto_det_pick_largest(const DittoFaceBox *b, int n)
{
    int best = -1;
    float best_area = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = (b[i].x2 - b[i].x1) * (b[i].y2 - b[i].y1);
        if (best < 0 || a > best_area) {
            best = i;
            best_area = a;
        }
    }
    return best;
}

/* ---- the detector ------------------------------------------------------------ */

struct DittoFaceDetector {
    DittoAuxNet *net;
    DittoBackend *cpu;       /* host image ops (letterbox resize) */
    DittoLogger log;
    const char *input;       /* NULL: first input */
    int outs[9];             /* graph output index per (kind, stride) */
    bool batch_dim;
    int size;
    uint8_t *canvas;         /* size x size x 3 letterbox */
    float *blob;             /* 3 x size x size */
    float *raw[9];           /* decoded outputs */
    DittoFaceBox *cand;      /* decode candidates */
    int cap;
};

static const char *const generic_names[9] = { "score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32" };

int ditto_face_detector_open(DittoFaceDetector **out, const char *path, DittoBackend *cpu, const DittoLogger *log)
{
    *out = NULL;
    if (!cpu || cpu->device != DITTO_DEVICE_CPU)
        return ditto_fail(log, DITTO_ERR_INVAL, "%s: the face detector needs a CPU backend for its image ops", path);
    DittoFaceDetector *d = ditto_calloc(1, sizeof *d);
    if (!d)
        return DITTO_ERR_NOMEM;
    d->cpu = cpu;
    d->log = log ? *log : (DittoLogger){ 0 };
    int rc = ditto_aux_net_open(&d->net, path, cpu, log);
    if (rc < 0)
        goto fail;
    const DittoDetSpec *sp = ditto_det_spec_find(path);
    d->input = sp->input;
    d->batch_dim = sp->batch_dim;

    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    DittoDType dt;
    if ((rc = ditto_aux_net_input(d->net, d->input, &ndim, shape, &dt)) < 0)
        goto fail;
    if (ndim != 4 || (shape[1] != 3 && shape[1] > 0)) {
        rc = ditto_fail(log, DITTO_ERR_SHAPE, "%s: detector input has rank %d, expected (1,3,H,W)", path, ndim);
        goto fail;
    }
    /* fixed H/W (the 640 stand-ins) win over the spec's default (det_10g is dynamic, Ditto feeds 512) */
    d->size = shape[2] > 0 ? (int)shape[2] : sp->default_size;
    if ((shape[3] > 0 && shape[3] != d->size) || d->size < 32 || d->size > 4096 || d->size % 32) {
        rc = ditto_fail(log, DITTO_ERR_SHAPE, "%s: detector input must be square with a side divisible by 32, got %lldx%lld", path,
                        (long long)shape[2], (long long)shape[3]);
        goto fail;
    }

    int nout = ditto_aux_net_n_outputs(d->net);
    bool named = sp->outputs[0] != NULL;
    const char *const *names = sp->outputs;
    if (sp == &det_generic && ditto_aux_net_output_index(d->net, generic_names[0]) >= 0) {
        named = true;
        names = generic_names;
    }
    for (int k = 0; k < 9; k++) {
        d->outs[k] = named ? ditto_aux_net_output_index(d->net, names[k]) : k;
        if (d->outs[k] < 0 || d->outs[k] >= nout) {
            rc = named ? ditto_fail(log, DITTO_ERR_FORMAT, "%s: detector has no output '%s'", path, names[k])
                       : ditto_fail(log, DITTO_ERR_FORMAT, "%s: detector has %d outputs, expected 9 (scores, boxes, keypoints x 3 strides)",
                                    path, nout);
            goto fail;
        }
    }

    size_t plane = (size_t)d->size * (size_t)d->size;
    d->canvas = ditto_malloc(plane * 3);
    d->blob = ditto_malloc(plane * 3 * sizeof(float));
    for (int k = 0; k < 9; k++) {
        static const int widths[3] = { 1, 4, 10 };
        d->raw[k] = ditto_malloc((size_t)ditto_det_anchor_count(d->size, 8 << (k % 3)) * (size_t)widths[k / 3] * sizeof(float));
        if (!d->raw[k])
            break;
    }
    d->cap = 4096;
    d->cand = ditto_malloc((size_t)d->cap * sizeof *d->cand);
    if (!d->canvas || !d->blob || !d->raw[8] || !d->cand) {
        rc = DITTO_ERR_NOMEM;
        goto fail;
    }
    *out = d;
    return 0;
fail:
    ditto_face_detector_close(&d);
    return rc;
}

void ditto_face_detector_close(DittoFaceDetector **pd)
{
    DittoFaceDetector *d = pd ? *pd : NULL;
    if (!d)
        return;
    ditto_aux_net_close(&d->net);
    ditto_free(d->canvas);
    ditto_free(d->blob);
    for (int k = 0; k < 9; k++)
        ditto_free(d->raw[k]);
    ditto_free(d->cand);
    ditto_free(d);
    *pd = NULL;
}

int ditto_face_detector_input_size(const DittoFaceDetector *d)
{
    return d->size;
}

int ditto_face_detect(DittoFaceDetector *d, const uint8_t *rgb, int h, int w, DittoFaceBox *box, int *found, DittoFaceBox *all, int cap_all,
                      int *n_all)
{
    *found = 0;
    if (n_all)
        *n_all = 0;
    if (!rgb || h < 1 || w < 1)
        return ditto_fail(&d->log, DITTO_ERR_INVAL, "face detector: empty image");
    const int S = d->size;
    int nh, nw;
    double det_scale;
    ditto_det_letterbox_dims(h, w, S, &nh, &nw, &det_scale);

    /* resize (cv2.resize INTER_LINEAR) into a (nh, nw) image, then paste at the top-left of a black canvas */
    memset(d->canvas, 0, (size_t)S * (size_t)S * 3);
    uint8_t *small = ditto_malloc((size_t)nh * (size_t)nw * 3);
    if (!small)
        return DITTO_ERR_NOMEM;
    DittoTensor x = ditto_tensor((void *)rgb, DITTO_U8, 3, (int64_t[]){ h, w, 3 });
    DittoTensor y = ditto_tensor(small, DITTO_U8, 3, (int64_t[]){ nh, nw, 3 });
    int rc = ditto_op_resize_bilinear(d->cpu, &x, &y);
    if (rc == 0)
        for (int r = 0; r < nh; r++)
            memcpy(d->canvas + (size_t)r * (size_t)S * 3, small + (size_t)r * (size_t)nw * 3, (size_t)nw * 3);
    ditto_free(small);
    if (rc < 0)
        return rc;
    ditto_det_blob(d->canvas, S, d->blob);

    int64_t numel[9];
    for (int k = 0; k < 9; k++) {
        static const int widths[3] = { 1, 4, 10 };
        numel[k] = ditto_det_anchor_count(S, 8 << (k % 3)) * widths[k / 3];
    }
    rc = ditto_aux_net_run(d->net, d->input, d->blob, 4, (int64_t[]){ 1, 3, S, S }, 9, d->outs, d->raw, numel);
    if (rc < 0)
        return rc;
    const float *sc[3] = { d->raw[0], d->raw[1], d->raw[2] };
    const float *bx[3] = { d->raw[3], d->raw[4], d->raw[5] };
    const float *kp[3] = { d->raw[6], d->raw[7], d->raw[8] };
    int n = ditto_det_decode(sc, bx, kp, S, DITTO_DET_THRESH, det_scale, d->cand, d->cap);
    n = ditto_det_nms(d->cand, n, DITTO_DET_NMS_IOU);
    if (all && n_all) {
        int m = n < cap_all ? n : cap_all;
        memcpy(all, d->cand, (size_t)m * sizeof *all);
        *n_all = m;
    }
    int best = ditto_det_pick_largest(d->cand, n);
    if (best >= 0) {
        *box = d->cand[best];
        *found = 1;
    }
    return 0;
}

/* ---- auxiliary ONNX models ---------------------------------------------------- */

struct DittoAuxNet {
    DittoOnnxModel *model;
    DittoOnnxRunner *runner;
    DittoBackend *be;
    DittoArena ws;           /* run scratch and outputs, reset after each run */
    bool ws_ready;
    DittoLogger log;
};

int ditto_aux_net_open(DittoAuxNet **out, const char *path, DittoBackend *be, const DittoLogger *log)
{
    *out = NULL;
    if (!be)
        return ditto_fail(log, DITTO_ERR_INVAL, "%s: no backend to run the model on", path);
    DittoAuxNet *n = ditto_calloc(1, sizeof *n);
    if (!n)
        return DITTO_ERR_NOMEM;
    n->be = be;
    n->log = log ? *log : (DittoLogger){ 0 };
    int rc = ditto_onnx_open(&n->model, path, log);
    if (rc < 0)
        goto fail;
    if (n->model->n_inputs < 1 || n->model->n_outputs < 1) {
        rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: the model has no inputs or no outputs", path);
        goto fail;
    }
    DittoOnnxRunnerParams rp;
    ditto_onnx_runner_params_default(&rp);
    rp.outputs_f32 = true;
    if ((rc = ditto_onnx_runner_open(&n->runner, n->model, be, &rp)) < 0)
        goto fail;
    if ((rc = ditto_arena_init(&n->ws, &be->allocator, 0)) < 0)
        goto fail;
    n->ws_ready = true;
    *out = n;
    return 0;
fail:
    ditto_aux_net_close(&n);
    return rc;
}

void ditto_aux_net_close(DittoAuxNet **pn)
{
    DittoAuxNet *n = pn ? *pn : NULL;
    if (!n)
        return;
    ditto_onnx_runner_close(&n->runner);
    ditto_onnx_close(&n->model);
    if (n->ws_ready)
        ditto_arena_free(&n->ws);
    ditto_free(n);
    *pn = NULL;
}

const char *ditto_aux_net_path(const DittoAuxNet *n)
{
    return n->model->path;
}

static const DittoOnnxValueInfo *aux_input(const DittoAuxNet *n, const char *name)
{
    if (!name)
        return &n->model->inputs[0];
    for (size_t i = 0; i < n->model->n_inputs; i++)
        if (!strcmp(n->model->inputs[i].name, name))
            return &n->model->inputs[i];
    return NULL;
}

int ditto_aux_net_input(const DittoAuxNet *n, const char *name, int *ndim, int64_t shape[DITTO_MAX_DIMS], DittoDType *dtype)
{
    const DittoOnnxValueInfo *v = aux_input(n, name);
    if (!v)
        return ditto_fail(&n->log, DITTO_ERR_FORMAT, "%s: no graph input named '%s'", n->model->path, name);
    if (v->ndim < 0 || v->ndim > DITTO_MAX_DIMS)
        return ditto_fail(&n->log, DITTO_ERR_FORMAT, "%s: input '%s' has no usable declared shape", n->model->path, v->name);
    *ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++)
        shape[i] = v->shape[i];
    *dtype = v->dtype;
    return 0;
}

int ditto_aux_net_n_outputs(const DittoAuxNet *n)
{
    return (int)n->model->n_outputs;
}

const char *ditto_aux_net_output_name(const DittoAuxNet *n, int i)
{
    return i >= 0 && (size_t)i < n->model->n_outputs ? n->model->outputs[i].name : NULL;
}

int ditto_aux_net_output_index(const DittoAuxNet *n, const char *name)
{
    for (size_t i = 0; i < n->model->n_outputs; i++)
        if (!strcmp(n->model->outputs[i].name, name))
            return (int)i;
    return -1;
}

#define AUX_MAX_OUT 16

int ditto_aux_net_run(DittoAuxNet *n, const char *input, const float *data, int ndim, const int64_t *shape, int n_out, const int *outs,
                      float *const *dst, const int64_t *out_numel)
{
    const DittoOnnxValueInfo *in = aux_input(n, input);
    if (!in)
        return ditto_fail(&n->log, DITTO_ERR_FORMAT, "%s: no graph input named '%s'", n->model->path, input);
    if (n->model->n_inputs != 1)
        return ditto_fail(&n->log, DITTO_ERR_UNSUPPORTED, "%s: the model has %zu inputs, expected one image input", n->model->path,
                          n->model->n_inputs);
    if (n_out < 1 || n_out > AUX_MAX_OUT)
        return DITTO_ERR_INVAL;
    DittoArenaMark mark = ditto_arena_mark(&n->ws);
    DittoOnnxIO io_in = { in->name, { 0 } };
    DittoOnnxIO io_out[AUX_MAX_OUT];
    int rc = 0;
    /* the input goes through the arena so that a non-CPU backend gets device memory */
    if ((rc = ditto_arena_tensor(&n->ws, DITTO_F32, ndim, shape, &io_in.t)) < 0)
        goto done;
    if ((rc = n->be->upload(n->be, io_in.t.data, data, ditto_tensor_nbytes(&io_in.t))) < 0)
        goto done;
    for (int k = 0; k < n_out; k++) {
        if (outs[k] < 0 || (size_t)outs[k] >= n->model->n_outputs) {
            rc = DITTO_ERR_INVAL;
            goto done;
        }
        io_out[k].name = n->model->outputs[outs[k]].name;
        memset(&io_out[k].t, 0, sizeof io_out[k].t);
    }
    if ((rc = ditto_onnx_runner_run(n->runner, &n->ws, &io_in, 1, io_out, n_out)) < 0)
        goto done;
    for (int k = 0; k < n_out; k++) {
        const DittoTensor *t = &io_out[k].t;
        if (t->dtype != DITTO_F32 || ditto_tensor_numel(t) != out_numel[k]) {
            char sh[DITTO_SHAPE_STR_MAX];
            rc = ditto_fail(&n->log, DITTO_ERR_SHAPE, "%s: output '%s' has shape %s (%lld values), expected %lld values", n->model->path,
                            io_out[k].name, ditto_shape_str(t->shape, t->ndim, sh, sizeof sh), (long long)ditto_tensor_numel(t),
                            (long long)out_numel[k]);
            goto done;
        }
        if ((rc = n->be->download(n->be, dst[k], t->data, (size_t)out_numel[k] * sizeof(float))) < 0)
            goto done;
    }
done:
    ditto_arena_release(&n->ws, mark);
    return rc;
}
