/*
 * The per-pixel arithmetic of the output path, shared by the CPU code and
 * the CUDA kernels so both give the same bytes:
 *  - BT.601 limited-range RGB -> YUV 4:2:0 in 1/65536 fixed point (the
 *    formula and its derivation: io/color.h);
 *  - the paste-back blend (pipeline/putback.h).
 */
#ifndef DITTO_CORE_BT601_H
#define DITTO_CORE_BT601_H

#include <stddef.h>
#include <stdint.h>

#include "core/half.h"   /* DITTO_HOST_DEVICE */

enum {
    DITTO_Y_R = 16829, DITTO_Y_G = 33039, DITTO_Y_B = 6416,
    DITTO_CB_R = -9714, DITTO_CB_G = -19070, DITTO_CB_B = 28784,
    DITTO_CR_R = 28784, DITTO_CR_G = -24103, DITTO_CR_B = -4681,
};

static inline DITTO_HOST_DEVICE uint8_t ditto_bt601_y(int r, int g, int b)
{
    int32_t v = DITTO_Y_R * r + DITTO_Y_G * g + DITTO_Y_B * b + (16 << 16) + (1 << 15);
    return (uint8_t)(v >> 16);
}

/* Chroma of a 2x2 block from the sums of its four R, G, B values; the offsets keep both sums positive. */
static inline DITTO_HOST_DEVICE uint8_t ditto_bt601_cb(int32_t rs, int32_t gs, int32_t bs)
{
    return (uint8_t)((DITTO_CB_R * rs + DITTO_CB_G * gs + DITTO_CB_B * bs + (128 << 18) + (1 << 17)) >> 18);
}

static inline DITTO_HOST_DEVICE uint8_t ditto_bt601_cr(int32_t rs, int32_t gs, int32_t bs)
{
    return (uint8_t)((DITTO_CR_R * rs + DITTO_CR_G * gs + DITTO_CR_B * bs + (128 << 18) + (1 << 17)) >> 18);
}

/*
 * Paste-back: trunc(clamp(a * img + (1 - a) * src, 0, 255)) with a =
 * clip(mask, 0, 1), evaluated as upstream's -ffast-math build contracts it,
 * fma(a, img, (1 - a) * src): the float32 product a * img is exact in
 * double, so this is that fma up to a double rounding, with no FMA
 * hardware needed. NaN (from a NaN render) goes to 0.
 */
static inline DITTO_HOST_DEVICE uint8_t ditto_blend_px(float mask, float img, uint8_t src)
{
    float a = mask > 0.0f ? mask : 0.0f;
    a = a < 1.0f ? a : 1.0f;
    float ia = 1.0f - a;
    float v = (float)((double)a * (double)img + (double)(ia * (float)src));
    v = v > 0.0f ? v : 0.0f;
    v = v < 255.0f ? v : 255.0f;
    return (uint8_t)v;
}

/*
 * Chroma rows [cy0, cy1) of a w x h RGB24 frame (and the one or two luma rows
 * of each) into yuv420p planes; an odd width or height repeats the last
 * column / row inside its 2x2 block.
 */
void ditto_bt601_yuv420_rows(const uint8_t *rgb, ptrdiff_t rgb_stride, int w, int h, int cy0, int cy1, uint8_t *y, ptrdiff_t y_stride,
                             uint8_t *u, uint8_t *v, ptrdiff_t uv_stride);

#endif
