/*
 * Case runners of `ditto verify`: one per (manifest kind, target), each
 * feeding the io inputs to one network or function and submitting its
 * outputs under the io names (see tools/verify.h). To support a new kind of
 * case, add a runner and a line to the table at the end.
 *
 * Dtypes (models.h, "Precision"): images, f_s, the warp output and the
 * decoder feature and image travel in the backend's act_dtype (float16 with
 * `--fp16`); keypoints, grids, the motion extractor's outputs and the
 * function cases (fp32 tolerances only) float32.
 */
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "models/models.h"
#include "models/warp_internal.h"
#include "ops/ops.h"
#include "tools/verify.h"

static int need_weights(DittoVerifyRun *r)
{
    if (!r->weights)
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: the manifest gives no weights_file", r->name);
    return 0;
}

/* ---- AppearanceFeatureExtractor: image -> f_s ---- */

static int appearance_load(DittoVerifyRun *r, void **model)
{
    DITTO_TRY(need_weights(r));
    DittoAppearance *m = NULL;
    int rc = ditto_appearance_load(&m, r->be, r->weights);
    *model = m;
    return rc;
}

static int appearance_forward(DittoVerifyRun *r, void *model)
{
    DittoAppearance *m = model;
    DittoTensor image, f_s;
    int64_t shape[5];
    DITTO_TRY(ditto_verify_input_act(r, "image", &image));
    DITTO_TRY(ditto_appearance_out_shape(m, &image, shape));
    DITTO_TRY(ditto_verify_output_act(r, 5, shape, &f_s));
    DITTO_TRY(ditto_appearance_forward(m, r->ws, &image, &f_s, r->tap));
    return ditto_verify_submit(r, "f_s", &f_s);
}

static void appearance_release(void *model)
{
    DittoAppearance *m = model;
    ditto_appearance_free(&m);
}

/* ---- MotionExtractor: image -> pitch, yaw, roll, t, exp, scale, kp ---- */

static int motion_load(DittoVerifyRun *r, void **model)
{
    DITTO_TRY(need_weights(r));
    DittoMotionExtractor *m = NULL;
    int rc = ditto_motion_extractor_load(&m, r->be, r->weights);
    *model = m;
    return rc;
}

static int motion_forward(DittoVerifyRun *r, void *model)
{
    static const char *const names[7] = { "pitch", "yaw", "roll", "t", "exp", "scale", "kp" };
    DittoMotionExtractor *m = model;
    DittoTensor image;
    DittoMotionInfo info;
    DittoTensor *outs[7] = { &info.pitch, &info.yaw, &info.roll, &info.t, &info.exp, &info.scale, &info.kp };
    int64_t dims[7];
    DITTO_TRY(ditto_verify_input_act(r, "image", &image));
    ditto_motion_extractor_dims(m, dims);
    for (int i = 0; i < 7; i++)
        DITTO_TRY(ditto_verify_output(r, 2, (int64_t[]){ image.shape[0], dims[i] }, outs[i]));
    DITTO_TRY(ditto_motion_extractor_forward(m, r->ws, &image, &info, r->tap));
    for (int i = 0; i < 7; i++)
        DITTO_TRY(ditto_verify_submit(r, names[i], outs[i]));
    return 0;
}

static void motion_release(void *model)
{
    DittoMotionExtractor *m = model;
    ditto_motion_extractor_free(&m);
}

/* ---- WarpingNetwork: feature_3d, kp_source, kp_driving -> out ---- */

static int warp_load(DittoVerifyRun *r, void **model)
{
    DITTO_TRY(need_weights(r));
    DittoWarp *m = NULL;
    int rc = ditto_warp_load(&m, r->be, r->weights);
    *model = m;
    return rc;
}

static int warp_forward(DittoVerifyRun *r, void *model)
{
    DittoWarp *m = model;
    DittoTensor f_s, kp_s, kp_d, out;
    int64_t shape[4];
    DITTO_TRY(ditto_verify_input_act(r, "feature_3d", &f_s));
    DITTO_TRY(ditto_verify_input(r, "kp_source", &kp_s));
    DITTO_TRY(ditto_verify_input(r, "kp_driving", &kp_d));
    DITTO_TRY(ditto_warp_out_shape(m, &f_s, shape));
    DITTO_TRY(ditto_verify_output_act(r, 4, shape, &out));
    DITTO_TRY(ditto_warp_forward(m, r->ws, &f_s, &kp_s, &kp_d, &out, r->tap));
    return ditto_verify_submit(r, "out", &out);
}

static void warp_release(void *model)
{
    DittoWarp *m = model;
    ditto_warp_free(&m);
}

/* ---- SPADEDecoder: feature -> img ---- */

static int decoder_load(DittoVerifyRun *r, void **model)
{
    DITTO_TRY(need_weights(r));
    DittoDecoder *m = NULL;
    int rc = ditto_decoder_load(&m, r->be, r->weights);
    *model = m;
    return rc;
}

static int decoder_forward(DittoVerifyRun *r, void *model)
{
    DittoDecoder *m = model;
    DittoTensor feature, img;
    int64_t shape[4];
    DITTO_TRY(ditto_verify_input_act(r, "feature", &feature));
    DITTO_TRY(ditto_decoder_out_shape(m, &feature, shape));
    DITTO_TRY(ditto_verify_output_act(r, 4, shape, &img));
    DITTO_TRY(ditto_decoder_forward(m, r->ws, &feature, &img, r->tap));
    return ditto_verify_submit(r, "img", &img);
}

static void decoder_release(void *model)
{
    DittoDecoder *m = model;
    ditto_decoder_free(&m);
}

/* ---- StitchingNetwork: kp_source, kp_driving -> kp_driving_new ---- */

static int stitch_load(DittoVerifyRun *r, void **model)
{
    DITTO_TRY(need_weights(r));
    DittoStitch *m = NULL;
    int rc = ditto_stitch_load(&m, r->be, r->weights);
    *model = m;
    return rc;
}

static int stitch_forward(DittoVerifyRun *r, void *model)
{
    DittoStitch *m = model;
    DittoTensor kp_s, kp_d, kp_new;
    DITTO_TRY(ditto_verify_input(r, "kp_source", &kp_s));
    DITTO_TRY(ditto_verify_input(r, "kp_driving", &kp_d));
    DITTO_TRY(ditto_verify_output(r, kp_d.ndim, kp_d.shape, &kp_new));
    DITTO_TRY(ditto_stitch_forward(m, r->ws, &kp_s, &kp_d, &kp_new, r->tap));
    return ditto_verify_submit(r, "kp_driving_new", &kp_new);
}

static void stitch_release(void *model)
{
    DittoStitch *m = model;
    ditto_stitch_free(&m);
}

/* ---- F.grid_sample (2-D or 3-D, zeros padding): input, grid -> out ---- */

static int grid_sample_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    DittoTensor x, grid, y;
    /* float32 storage also with --fp16: the function cases carry fp32 tolerances only (test_ops -p f16 covers f16 grid_sample) */
    DITTO_TRY(ditto_verify_input(r, "input", &x));
    DITTO_TRY(ditto_verify_input(r, "grid", &grid));
    if (x.ndim != grid.ndim || (x.ndim != 4 && x.ndim != 5))
        return ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: grid_sample wants input and grid of the same rank, 4 or 5", r->name);
    /* (N,C,[D,]H,W) with grid (N,[Do,]Ho,Wo,k) -> (N,C,[Do,]Ho,Wo) */
    int64_t shape[5] = { x.shape[0], x.shape[1] };
    for (int i = 2; i < x.ndim; i++)
        shape[i] = grid.shape[i - 1];
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(r->params, "align_corners");
    bool align_corners = cJSON_IsTrue(ac);
    DITTO_TRY(ditto_verify_output(r, x.ndim, shape, &y));
    DITTO_TRY(ditto_op_grid_sample(r->be, align_corners, &x, &grid, &y));
    return ditto_verify_submit(r, "out", &y);
}

/* ---- make_coordinate_grid((d,h,w)) -> out (d,h,w,3) ---- */

/* params.spatial_size = [d, h, w] */
static int spatial_size(DittoVerifyRun *r, int64_t dhw[3])
{
    for (int i = 0; i < 3; i++)
        DITTO_TRY(ditto_verify_param_int(r, "spatial_size", i, &dhw[i]));
    if (dhw[0] < 1 || dhw[1] < 1 || dhw[2] < 1 || dhw[0] * dhw[1] * dhw[2] > ((int64_t)1 << 28))
        return ditto_fail(&r->log, DITTO_ERR_RANGE, "%s: params.spatial_size out of range", r->name);
    return 0;
}

/* The coordinate grid (d,h,w,3), computed on the host, as a tensor on the backend. */
static int coordinate_grid(DittoVerifyRun *r, const int64_t dhw[3], DittoTensor *grid)
{
    int64_t shape[4] = { dhw[0], dhw[1], dhw[2], 3 };
    size_t bytes = (size_t)(dhw[0] * dhw[1] * dhw[2] * 3) * sizeof(float);
    float *host = ditto_malloc(bytes);
    if (!host)
        return DITTO_ERR_NOMEM;
    int rc = ditto_warp_coordinate_grid(host, dhw[0], dhw[1], dhw[2]);
    if (rc >= 0)
        rc = ditto_verify_output(r, 4, shape, grid);
    if (rc >= 0)
        rc = r->be->upload(r->be, grid->data, host, bytes);
    ditto_free(host);
    return rc;
}

static int coordinate_grid_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    int64_t dhw[3];
    DittoTensor grid;
    DITTO_TRY(spatial_size(r, dhw));
    DITTO_TRY(coordinate_grid(r, dhw, &grid));
    return ditto_verify_submit(r, "out", &grid);
}

/* ---- kp2gaussian(kp, (d,h,w), kp_variance): kp (B,K,3) -> out (B,K,d,h,w) ---- */

static int kp2gaussian_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    int64_t dhw[3];
    DittoTensor kp, grid, out;
    DITTO_TRY(spatial_size(r, dhw));
    DITTO_TRY(ditto_verify_input(r, "kp", &kp));
    if (kp.ndim != 3)
        return ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: kp must be (B,K,3)", r->name);
    const cJSON *var = cJSON_GetObjectItemCaseSensitive(r->params, "kp_variance");
    double variance = cJSON_IsNumber(var) ? var->valuedouble : DITTO_WARP_KP_VARIANCE;
    DITTO_TRY(coordinate_grid(r, dhw, &grid));
    DITTO_TRY(ditto_verify_output(r, 5, (int64_t[]){ kp.shape[0], kp.shape[1], dhw[0], dhw[1], dhw[2] }, &out));
    DITTO_TRY(ditto_warp_kp2gaussian(r->be, r->ws, &grid, &kp, variance, &out));
    return ditto_verify_submit(r, "out", &out);
}

/*
 * kind, target (last component of the manifest's module / function / stage),
 * load, forward, release. Cases whose (kind, target) is not here are reported
 * as UNSUPPORTED.
 */
const DittoVerifyRunner ditto_verify_runners_models[] = {
    { "module", "AppearanceFeatureExtractor", appearance_load, appearance_forward, appearance_release },
    { "module", "MotionExtractor", motion_load, motion_forward, motion_release },
    { "module", "WarpingNetwork", warp_load, warp_forward, warp_release },
    { "module", "SPADEDecoder", decoder_load, decoder_forward, decoder_release },
    { "module", "StitchingNetwork", stitch_load, stitch_forward, stitch_release },
    { "function", "grid_sample", NULL, grid_sample_forward, NULL },
    { "function", "make_coordinate_grid", NULL, coordinate_grid_forward, NULL },
    { "function", "kp2gaussian", NULL, kp2gaussian_forward, NULL },
    { NULL, NULL, NULL, NULL, NULL },
};
