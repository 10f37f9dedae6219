/* RGB24 -> yuv420p, BT.601 limited range; the formula is documented in color.h. */
#include "io/color.h"

#include "core/log.h"

/* 1/65536 fixed-point coefficients (see color.h) */
enum {
    Y_R = 16829, Y_G = 33039, Y_B = 6416,
    CB_R = -9714, CB_G = -19070, CB_B = 28784,
    CR_R = 28784, CR_G = -24103, CR_B = -4681,
};

/* chroma rows per task: enough work per task to amortise the pool's dispatch */
#define ROWS_PER_TASK 8

typedef struct ColorCtx {
    const uint8_t *rgb;
    ptrdiff_t rgb_stride;
    int w, h, cw, ch;
    DittoYuvPlanes out;
} ColorCtx;

static uint8_t luma(const uint8_t *p)
{
    int32_t v = Y_R * p[0] + Y_G * p[1] + Y_B * p[2] + (16 << 16) + (1 << 15);
    return (uint8_t)(v >> 16);
}

static void color_task(void *arg, int t)
{
    const ColorCtx *c = arg;
    int r0 = t * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < c->ch ? r0 + ROWS_PER_TASK : c->ch;
    for (int cy = r0; cy < r1; cy++) {
        int y0 = 2 * cy, y1 = y0 + 1 < c->h ? y0 + 1 : y0;   /* odd height: repeat the last row */
        const uint8_t *s0 = c->rgb + (ptrdiff_t)y0 * c->rgb_stride, *s1 = c->rgb + (ptrdiff_t)y1 * c->rgb_stride;
        uint8_t *d0 = c->out.y + (ptrdiff_t)y0 * c->out.y_stride, *d1 = c->out.y + (ptrdiff_t)y1 * c->out.y_stride;
        uint8_t *du = c->out.u + (ptrdiff_t)cy * c->out.uv_stride, *dv = c->out.v + (ptrdiff_t)cy * c->out.uv_stride;
        for (int x = 0; x < c->w; x++) {
            d0[x] = luma(s0 + 3 * x);
            if (y1 != y0)
                d1[x] = luma(s1 + 3 * x);
        }
        for (int cx = 0; cx < c->cw; cx++) {
            int x0 = 2 * cx, x1 = x0 + 1 < c->w ? x0 + 1 : x0;   /* odd width: repeat the last column */
            const uint8_t *a = s0 + 3 * x0, *b = s0 + 3 * x1, *p = s1 + 3 * x0, *q = s1 + 3 * x1;
            int32_t rs = a[0] + b[0] + p[0] + q[0];
            int32_t gs = a[1] + b[1] + p[1] + q[1];
            int32_t bs = a[2] + b[2] + p[2] + q[2];
            /* the offsets keep both sums positive (|coefficient sums| <= 112.x/255 of 4*255) */
            int32_t u = CB_R * rs + CB_G * gs + CB_B * bs + (128 << 18) + (1 << 17);
            int32_t v = CR_R * rs + CR_G * gs + CR_B * bs + (128 << 18) + (1 << 17);
            du[cx] = (uint8_t)(u >> 18);
            dv[cx] = (uint8_t)(v >> 18);
        }
    }
}

int ditto_rgb_to_yuv420(DittoThreadPool *pool, const uint8_t *rgb, int width, int height, ptrdiff_t rgb_stride, const DittoYuvPlanes *out)
{
    if (!rgb || !out || !out->y || !out->u || !out->v || width < 1 || height < 1)
        return DITTO_ERR_INVAL;
    ColorCtx c = { .rgb = rgb, .rgb_stride = rgb_stride, .w = width, .h = height,
                   .cw = ditto_yuv420_chroma_size(width), .ch = ditto_yuv420_chroma_size(height), .out = *out };
    if (rgb_stride < 3 * (ptrdiff_t)width || out->y_stride < width || out->uv_stride < c.cw)
        return DITTO_ERR_INVAL;
    int ntasks = (c.ch + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    ditto_pool_run(pool, ntasks, color_task, &c);
    return 0;
}
