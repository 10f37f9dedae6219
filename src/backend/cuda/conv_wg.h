/*
 * The sm_90a convolution (conv_wg.cu): channels-last f16, stride 1, "same"
 * padding, rows of 64 pixels, 129-160 outputs (tiles of 144 and 160; see
 * wg_tile for the channel and kernel sizes). Built only where the CUDA
 * architectures include 90 (DITTO_HAVE_WG); elsewhere nothing fits.
 */
#ifndef DITTO_CONV_WG_H
#define DITTO_CONV_WG_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct DittoWgConv {
    const void *x;        /* (N, D, H, W, C) f16 */
    const void *w;        /* (O, kd, kh, kw, C) f16 */
    const void *bias;     /* (O) f32 or f16, or NULL */
    bool bias_f16, relu, acc;   /* y = relu(conv + bias (+ y when acc)), one rounding */
    void *y;              /* (N, D, H, W, ldy) f16, columns [0, O) */
    int64_t N, D, H, W, C, O, ldy;
    int kd, kh, kw;       /* odd; padding k / 2 */
} DittoWgConv;

#ifdef DITTO_HAVE_WG
/* Whether the device, the build and the geometry allow it (conv.cu reads DITTO_CUDA_WGCONV). */
bool ditto_cuda_wg_fits(DittoBackend *be, const DittoWgConv *c);
/* On the backend's stream; c must fit. */
int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c);
#else
static inline bool ditto_cuda_wg_fits(DittoBackend *be, const DittoWgConv *c)
{
    (void)be, (void)c;
    return false;
}
static inline int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c)
{
    (void)c;
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op conv: this build has no sm_90a convolution");
}
#endif

#endif
