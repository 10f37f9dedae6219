/* RGB24 -> yuv420p, BT.601 limited range; the formula is documented in color.h. */
#include "io/color.h"

#include "core/bt601.h"
#include "core/log.h"

/* chroma rows per task: enough work per task to amortise the pool's dispatch */
#define ROWS_PER_TASK 8

typedef struct ColorCtx {
    const uint8_t *rgb;
    ptrdiff_t rgb_stride;
    int w, h, cw, ch;
    DittoYuvPlanes out;
} ColorCtx;

static void color_task(void *arg, int t)
{
    const ColorCtx *c = arg;
    int r0 = t * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < c->ch ? r0 + ROWS_PER_TASK : c->ch;
    ditto_bt601_yuv420_rows(c->rgb, c->rgb_stride, c->w, c->h, r0, r1, c->out.y, c->out.y_stride, c->out.u, c->out.v, c->out.uv_stride);
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
