/*
 * Paste-back (ditto-architecture.md 3.10); see putback.h.
 *
 * The warps write a destination rectangle [0, y1) x [0, x1) (the frame's
 * top-left corner down to the far corner of the box): warpAffine's
 * fixed-point coordinates depend on the absolute destination position, so
 * a rectangle that starts at the frame origin is bit-identical to the
 * corresponding part of a full-frame warp, while one that starts at the
 * box corner would not be. The blend then touches only the box.
 */
#include "pipeline/putback.h"

#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"

#define CROP DITTO_PUTBACK_CROP

struct DittoPutback {
    DittoBackend *be;
    DittoLogger log;
    int64_t max_w, max_h;
    DittoBuffer mask_buf;      /* (512,512,1) f32 */
    DittoBuffer mask_w_buf;    /* warped mask, up to max_h * max_w f32 */
    DittoBuffer img_w_buf;     /* warped render, up to max_h * max_w * 3 f32 */
    /* key of the warped mask in mask_w_buf */
    bool mask_valid;
    float mask_M[9];
    int64_t mask_y1, mask_x1;
    DittoPasteItem *items;     /* ditto_putback_yuv's per-frame maps and boxes, grown to the largest batch */
    int64_t items_cap;
};

/* ---- the mask (get_mask(512, 512, 0.9, 0.9)) ---- */

/* np.linspace(0, 1, n)[i] and np.linspace(1, 0, n)[i]: i * step + start, the last entry exactly stop */
static double lin_up(int i, int n)
{
    return i == n - 1 ? 1.0 : (double)i * (1.0 / (double)(n - 1)) + 0.0;
}

static double lin_down(int i, int n)
{
    return i == n - 1 ? 0.0 : (double)i * (-1.0 / (double)(n - 1)) + 1.0;
}

/* band: sqrt(0^2 + v^2) in float64, stored float32 */
static float band(double v)
{
    return (float)sqrt(0.0 * 0.0 + v * v);
}

/* corner: 1 - clip(float32(sqrt(a^2 + b^2)), 0, 1), the last two steps in float32 */
static float corner(double a, double b)
{
    float g = (float)sqrt(a * a + b * b);
    g = g < 0.0f ? 0.0f : g > 1.0f ? 1.0f : g;
    return 1.0f - g;
}

void ditto_putback_mask(float *mask)
{
    const int W = CROP, H = CROP;
    const int w = (int)(W * 0.9), h = (int)(H * 0.9);   /* int(512 * 0.9) = 460 */
    const int x1 = (W - w) / 2, x2 = x1 + w, y1 = (H - h) / 2, y2 = y1 + h;
    const int nl = x1, nr = W - x2, nt = y1, nb = H - y2;  /* band widths (26) */
    for (int r = 0; r < H; r++) {
        for (int c = 0; c < W; c++) {
            bool top = r < y1, bottom = r >= y2, left = c < x1, right = c >= x2;
            float v = 1.0f;
            if (top && left)
                v = corner(lin_down(c, nl), lin_down(r, nt));
            else if (top && right)
                v = corner(lin_up(c - x2, nr), lin_down(r, nt));
            else if (bottom && left)
                v = corner(lin_down(c, nl), lin_up(r - y2, nb));
            else if (bottom && right)
                v = corner(lin_up(c - x2, nr), lin_up(r - y2, nb));
            else if (top)
                v = band(lin_up(r, nt));
            else if (bottom)
                v = band(lin_down(r - y2, nb));
            else if (left)
                v = band(lin_up(c, nl));
            else if (right)
                v = band(lin_down(c - x2, nr));
            mask[(size_t)r * W + c] = v;
        }
    }
}

/* ---- the box ---- */

void ditto_putback_box(const float M_c2o[9], int64_t W, int64_t H, DittoPutbackBox *box)
{
    /*
     * mask_w > 0 needs a bilinear tap with nonzero weight on a crop pixel
     * in [1, 510] (the outermost rows and columns of the mask are 0), i.e.
     * a source position strictly inside (0, 511): the image of the square
     * [0, 511] holds every such pixel, and 2 destination pixels more cover
     * the 1/32-pixel rounding of warpAffine's fixed-point coordinates.
     */
    static const double cx[4] = { 0, CROP - 1, 0, CROP - 1 }, cy[4] = { 0, 0, CROP - 1, CROP - 1 };
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int k = 0; k < 4; k++) {
        double x = (double)M_c2o[0] * cx[k] + (double)M_c2o[1] * cy[k] + (double)M_c2o[2];
        double y = (double)M_c2o[3] * cx[k] + (double)M_c2o[4] * cy[k] + (double)M_c2o[5];
        xmin = fmin(xmin, x);
        xmax = fmax(xmax, x);
        ymin = fmin(ymin, y);
        ymax = fmax(ymax, y);
    }
    double lim[4] = { floor(ymin) - 2, ceil(ymax) + 3, floor(xmin) - 2, ceil(xmax) + 3 };
    int64_t v[4];
    for (int k = 0; k < 4; k++) {
        double n = k < 2 ? (double)H : (double)W;
        v[k] = !(lim[k] > 0) ? 0 : lim[k] > n ? (int64_t)n : (int64_t)lim[k];   /* NaN -> 0 */
    }
    box->y0 = v[0];
    box->y1 = v[1] > v[0] ? v[1] : v[0];
    box->x0 = v[2];
    box->x1 = v[3] > v[2] ? v[3] : v[2];
}

/* ---- open / close ---- */

static int open_pb(DittoPutback **out, DittoBackend *be, int64_t max_w, int64_t max_h, const DittoLogger *log, bool fused)
{
    *out = NULL;
    if (!be || max_w < 1 || max_h < 1 || max_w > (1 << 16) || max_h > (1 << 16))
        return ditto_fail(log, DITTO_ERR_INVAL, "putback: frame size %lldx%lld out of range", (long long)max_w, (long long)max_h);
    DittoPutback *pb = ditto_calloc(1, sizeof *pb);
    float *mask = ditto_malloc((size_t)CROP * CROP * sizeof *mask);
    if (!pb || !mask) {
        ditto_free(pb);
        ditto_free(mask);
        return ditto_fail(log, DITTO_ERR_NOMEM, "putback: out of memory");
    }
    pb->be = be;
    pb->log = log ? *log : be->log;
    pb->max_w = max_w;
    pb->max_h = max_h;
    size_t px = (size_t)max_w * (size_t)max_h;
    ditto_putback_mask(mask);
    int rc = ditto_buffer_alloc(&pb->mask_buf, &be->allocator, (size_t)CROP * CROP * sizeof(float));
    if (rc >= 0)
        rc = be->upload(be, pb->mask_buf.ptr, mask, (size_t)CROP * CROP * sizeof(float));
    if (rc >= 0 && !fused) {
        rc = ditto_buffer_alloc(&pb->mask_w_buf, &be->allocator, px * sizeof(float));
        if (rc >= 0)
            rc = ditto_buffer_alloc(&pb->img_w_buf, &be->allocator, px * 3 * sizeof(float));
    }
    ditto_free(mask);
    if (rc < 0) {
        ditto_putback_close(&pb);
        return ditto_fail(log, rc, "putback: cannot allocate %lldx%lld scratch on the %s backend: %s", (long long)max_w, (long long)max_h,
                          be->name, ditto_strerror(rc));
    }
    *out = pb;
    return 0;
}

int ditto_putback_open(DittoPutback **out, DittoBackend *be, int64_t max_w, int64_t max_h, const DittoLogger *log)
{
    return open_pb(out, be, max_w, max_h, log, false);
}

int ditto_putback_open_fused(DittoPutback **out, DittoBackend *be, int64_t max_w, int64_t max_h, const DittoLogger *log)
{
    return open_pb(out, be, max_w, max_h, log, true);
}

void ditto_putback_close(DittoPutback **pb)
{
    if (!pb || !*pb)
        return;
    ditto_buffer_free(&(*pb)->mask_buf);
    ditto_buffer_free(&(*pb)->mask_w_buf);
    ditto_buffer_free(&(*pb)->img_w_buf);
    ditto_free((*pb)->items);
    ditto_free(*pb);
    *pb = NULL;
}

/* ---- run ---- */

static bool is_image(const DittoTensor *t, DittoDType dt, int64_t B, int64_t h, int64_t w)
{
    int o = t->ndim - 3;
    if (t->dtype != dt || (t->ndim != 3 && t->ndim != 4) || !ditto_tensor_is_contiguous(t))
        return false;
    if ((o ? t->shape[0] : 1) != B || t->shape[o + 2] != 3)
        return false;
    return (h < 0 || t->shape[o] == h) && (w < 0 || t->shape[o + 1] == w);
}

static int run_one(DittoPutback *pb, const DittoTensor *frame, const DittoTensor *render, const float M[9], DittoTensor *out, DittoPutbackBox *box_out)
{
    DittoBackend *be = pb->be;
    int64_t H = frame->shape[0], W = frame->shape[1];
    DittoPutbackBox box;
    ditto_putback_box(M, W, H, &box);
    if (box_out)
        *box_out = box;
    if (out->data != frame->data)
        DITTO_TRY(ditto_op_copy(be, frame, out));
    if (box.x0 == box.x1 || box.y0 == box.y1)
        return 0;

    DittoWarpAffineParams wp = { .border_value = 0.0f };
    for (int i = 0; i < 6; i++)
        wp.m[i] = (double)M[i];   /* M_c2o[:2] as cv2 sees it */
    int64_t rect_w = box.x1, rect_h = box.y1;

    DittoTensor mask = ditto_tensor(pb->mask_buf.ptr, DITTO_F32, 3, (int64_t[]){ CROP, CROP, 1 });
    DittoTensor mask_w = ditto_tensor(pb->mask_w_buf.ptr, DITTO_F32, 3, (int64_t[]){ rect_h, rect_w, 1 });
    DittoTensor img_w = ditto_tensor(pb->img_w_buf.ptr, DITTO_F32, 3, (int64_t[]){ rect_h, rect_w, 3 });
    mask.device = mask_w.device = img_w.device = be->device;

    bool cached = pb->mask_valid && pb->mask_y1 == rect_h && pb->mask_x1 == rect_w && !memcmp(pb->mask_M, M, sizeof pb->mask_M);
    if (!cached) {
        pb->mask_valid = false;
        DITTO_TRY(ditto_op_warp_affine(be, &wp, &mask, &mask_w));
        memcpy(pb->mask_M, M, sizeof pb->mask_M);
        pb->mask_y1 = rect_h;
        pb->mask_x1 = rect_w;
        pb->mask_valid = true;
    }
    DITTO_TRY(ditto_op_warp_affine(be, &wp, render, &img_w));
    DittoBlendParams bp = { box.y0, box.y1, box.x0, box.x1 };
    return ditto_op_mask_blend(be, &bp, &mask_w, &img_w, frame, out);
}

int ditto_putback_run(DittoPutback *pb, const DittoTensor *frame, const DittoTensor *render, const float *M_c2o, DittoTensor *out,
                      DittoPutbackBox *box)
{
    if (!pb || !frame || !render || !M_c2o || !out)
        return DITTO_ERR_INVAL;
    int64_t B = frame->ndim == 4 ? frame->shape[0] : 1;
    if (!is_image(frame, DITTO_U8, B, -1, -1) || !is_image(out, DITTO_U8, B, -1, -1) || !ditto_tensor_same_shape(frame, out))
        return ditto_fail(&pb->log, DITTO_ERR_SHAPE, "putback: frame and out must be contiguous uint8 (H,W,3) or (B,H,W,3) of one shape");
    if (!is_image(render, DITTO_F32, B, CROP, CROP) || render->ndim != frame->ndim)
        return ditto_fail(&pb->log, DITTO_ERR_SHAPE, "putback: render must be contiguous float32 (%s512,512,3) like the frame",
                          frame->ndim == 4 ? "B," : "");
    if (!pb->img_w_buf.ptr)
        return ditto_fail(&pb->log, DITTO_ERR_INVAL, "putback: opened for the fused path (ditto_putback_yuv) only");
    int o = frame->ndim - 3;
    int64_t H = frame->shape[o], W = frame->shape[o + 1];
    if (W > pb->max_w || H > pb->max_h)
        return ditto_fail(&pb->log, DITTO_ERR_SHAPE, "putback: frame %lldx%lld exceeds the %lldx%lld it was opened for", (long long)W,
                          (long long)H, (long long)pb->max_w, (long long)pb->max_h);
    for (int64_t b = 0; b < B; b++) {
        DittoTensor f = *frame, r = *render, y = *out;
        if (o) {
            DITTO_TRY(ditto_tensor_select(frame, 0, b, &f));
            DITTO_TRY(ditto_tensor_select(render, 0, b, &r));
            DITTO_TRY(ditto_tensor_select(out, 0, b, &y));
        }
        DITTO_TRY(run_one(pb, &f, &r, M_c2o + 9 * b, &y, box ? box + b : NULL));
    }
    return 0;
}

int ditto_putback_yuv(DittoPutback *pb, const DittoTensor *frame, const DittoTensor *render, const float *M_c2o, DittoTensor *rgb, DittoTensor *y,
                      DittoTensor *u, DittoTensor *v, bool box_only, DittoPutbackBox *box)
{
    if (!pb || !frame || !render || !M_c2o || !y || !u || !v)
        return DITTO_ERR_INVAL;
    if (render->ndim != 4 || render->shape[0] < 1 || render->shape[2] != CROP || render->shape[3] != CROP || (frame->ndim != 3 && frame->ndim != 4))
        return ditto_fail(&pb->log, DITTO_ERR_SHAPE, "putback: render must be (B,3,512,512) and the frame (H,W,3) or (B,H,W,3)");
    const int64_t B = render->shape[0];
    int o = frame->ndim - 3;
    int64_t H = frame->shape[o], W = frame->shape[o + 1];
    if (W > pb->max_w || H > pb->max_h)
        return ditto_fail(&pb->log, DITTO_ERR_SHAPE, "putback: frame %lldx%lld exceeds the %lldx%lld it was opened for", (long long)W,
                          (long long)H, (long long)pb->max_w, (long long)pb->max_h);
    if (B > pb->items_cap) {
        DittoPasteItem *it = ditto_realloc(pb->items, (size_t)B * sizeof *it);
        if (!it)
            return ditto_fail(&pb->log, DITTO_ERR_NOMEM, "putback: out of memory");
        pb->items = it;
        pb->items_cap = B;
    }
    DittoPasteItem *items = pb->items;
    for (int64_t b = 0; b < B; b++) {
        const float *M = M_c2o + 9 * b;
        DittoPutbackBox bx;
        ditto_putback_box(M, W, H, &bx);
        for (int i = 0; i < 6; i++)
            items[b].m[i] = (double)M[i];   /* M_c2o[:2] as cv2 sees it */
        items[b].y0 = bx.y0;
        items[b].y1 = bx.y1;
        items[b].x0 = bx.x0;
        items[b].x1 = bx.x1;
        if (box)
            box[b] = bx;
    }
    DittoTensor mask = ditto_tensor(pb->mask_buf.ptr, DITTO_F32, 3, (int64_t[]){ CROP, CROP, 1 });
    mask.device = pb->be->device;
    const DittoPasteParams p = { items, 255.0f, box_only };
    return ditto_op_paste_yuv(pb->be, &p, &mask, render, frame, rgb, y, u, v);
}
