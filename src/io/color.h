/*
 * RGB -> YUV 4:2:0 (planar, yuv420p) with BT.601 limited-range ("TV",
 * "MPEG") coefficients: the frames the H.264 writer takes (video_out.h).
 *
 * The conversion is ours, not swscale's, so the CPU and a later GPU version
 * produce the same bytes. Exact integer formula (R, G, B in 0..255; >> is a
 * floor shift of a non-negative value):
 *
 *   Y  = (16829 R + 33039 G +  6416 B + (16 << 16) + (1 << 15)) >> 16
 *
 * i.e. Y = round_half_up(16 + 219 (0.299 R + 0.587 G + 0.114 B) / 255) with
 * the coefficients rounded to 1/65536. Chroma takes the sums Rs, Gs, Bs of
 * the (up to) four pixels of each 2x2 block (a block cut by an odd width or
 * height repeats its last column / row, so it still sums four values):
 *
 *   Cb = ( -9714 Rs - 19070 Gs + 28784 Bs + (128 << 18) + (1 << 17)) >> 18
 *   Cr = ( 28784 Rs - 24103 Gs -  4681 Bs + (128 << 18) + (1 << 17)) >> 18
 *
 * i.e. 128 + 224 (-0.168736 R - 0.331264 G + 0.5 B) / 255 and
 * 128 + 224 (0.5 R - 0.418688 G - 0.081312 B) / 255 of the block mean,
 * rounded half up once. Each chroma row of coefficients sums to zero, so a
 * grey pixel gives exactly 128; black -> (16,128,128), white -> (235,128,128).
 * Results stay inside [16,235] / [16,240] by construction.
 */
#ifndef DITTO_IO_COLOR_H
#define DITTO_IO_COLOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/thread.h"

/* Caller-owned yuv420p planes: Y is width x height, U and V are ceil(width/2) x ceil(height/2). */
typedef struct DittoYuvPlanes {
    uint8_t *y, *u, *v;
    ptrdiff_t y_stride;     /* bytes from one row to the next */
    ptrdiff_t uv_stride;
} DittoYuvPlanes;

/* Chroma plane size of a width x height frame. */
static inline int ditto_yuv420_chroma_size(int n)
{
    return (n + 1) / 2;
}

/*
 * Convert one packed RGB24 frame (rows rgb_stride bytes apart) to yuv420p
 * with the formula above, split by rows over pool (NULL: the calling
 * thread). Returns 0, or DITTO_ERR_INVAL for a size < 1, NULL planes or
 * strides shorter than a row.
 */
int ditto_rgb_to_yuv420(DittoThreadPool *pool, const uint8_t *rgb, int width, int height, ptrdiff_t rgb_stride, const DittoYuvPlanes *out);

#endif
