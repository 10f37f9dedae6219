#include "core/bt601.h"

void ditto_bt601_yuv420_rows(const uint8_t *rgb, ptrdiff_t rgb_stride, int w, int h, int cy0, int cy1, uint8_t *y, ptrdiff_t y_stride,
                             uint8_t *u, uint8_t *v, ptrdiff_t uv_stride)
{
    const int cw = (w + 1) / 2;
    for (int cy = cy0; cy < cy1; cy++) {
        int y0 = 2 * cy, y1 = y0 + 1 < h ? y0 + 1 : y0;   /* odd height: repeat the last row */
        const uint8_t *s0 = rgb + (ptrdiff_t)y0 * rgb_stride, *s1 = rgb + (ptrdiff_t)y1 * rgb_stride;
        uint8_t *d0 = y + (ptrdiff_t)y0 * y_stride, *d1 = y + (ptrdiff_t)y1 * y_stride;
        uint8_t *du = u + (ptrdiff_t)cy * uv_stride, *dv = v + (ptrdiff_t)cy * uv_stride;
        for (int x = 0; x < w; x++) {
            d0[x] = ditto_bt601_y(s0[3 * x], s0[3 * x + 1], s0[3 * x + 2]);
            if (y1 != y0)
                d1[x] = ditto_bt601_y(s1[3 * x], s1[3 * x + 1], s1[3 * x + 2]);
        }
        for (int cx = 0; cx < cw; cx++) {
            int x0 = 2 * cx, x1 = x0 + 1 < w ? x0 + 1 : x0;   /* odd width: repeat the last column */
            const uint8_t *a = s0 + 3 * x0, *b = s0 + 3 * x1, *p = s1 + 3 * x0, *q = s1 + 3 * x1;
            int32_t rs = a[0] + b[0] + p[0] + q[0], gs = a[1] + b[1] + p[1] + q[1], bs = a[2] + b[2] + p[2] + q[2];
            du[cx] = ditto_bt601_cb(rs, gs, bs);
            dv[cx] = ditto_bt601_cr(rs, gs, bs);
        }
    }
}
