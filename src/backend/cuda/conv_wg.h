/*
 * The sm_90a convolution (conv_wg.cu): channels-last f16, stride 1, "same"
 * padding, rows of 64 pixels, 129-160 outputs (tiles of 144 and 160) or up
 * to 32 at 3x3(x3) (taps as columns; see wg_tile for the channel and kernel
 * sizes). Built only where the CUDA architectures include 90
 * (DITTO_HAVE_WG); elsewhere nothing fits.
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

/*
 * A SPADE with its gamma / beta convolution in one kernel (k_wg_spade, for
 * norm.cu's spade_conv): gb = conv3x3(a, w) stays in registers, y =
 * lrelu?((x - mean) rstd (1 + gamma + bg) + beta + bb). Rows of a multiple of
 * 64 pixels, H a multiple of 4, Ca a multiple of 64, C of 64 (gamma and
 * beta) or 128 (gamma only).
 */
typedef struct DittoWgSpade {
    const void *a;        /* (N, H, W, Ca) f16, rows lda apart: the SPADE's hidden activation (lda > Ca: a channel slice) */
    const void *w;        /* (K C, 3, 3, Ca) f16 (KRSC): gamma rows [0, C), then beta rows */
    const void *bias;     /* (K C) f32 or f16, or NULL */
    bool bias_f16, gamma_only, act;
    float slope;          /* of the LeakyReLU when act */
    const void *x;        /* (N, H / fh, W / fw, C) f16, read nearest-upsampled */
    const float *stat;    /* (2, N, C): x's mean, then its rstd; 8-byte aligned */
    void *y;              /* (N, H, W, C) f16 */
    void *wt;             /* ditto_cuda_wg_spade_wbytes of scratch, 16-byte aligned: w laid out for the kernel */
    int64_t N, H, W, Ca, C, fh, fw;
    int64_t lda;          /* a's row pitch in elements: >= Ca, a multiple of 8 */
} DittoWgSpade;

#ifdef DITTO_HAVE_WG
bool ditto_cuda_wg_spade_fits(DittoBackend *be, const DittoWgSpade *s);
size_t ditto_cuda_wg_spade_wbytes(const DittoWgSpade *s);
int ditto_cuda_wg_spade(DittoBackend *be, const DittoWgSpade *s);
/* Whether the device, the build and the geometry allow it (conv.cu reads DITTO_CUDA_WGCONV). */
bool ditto_cuda_wg_fits(DittoBackend *be, const DittoWgConv *c);
/* On the backend's stream; c must fit. */
int ditto_cuda_wg_conv(DittoBackend *be, const DittoWgConv *c);
#else
static inline bool ditto_cuda_wg_spade_fits(DittoBackend *be, const DittoWgSpade *s)
{
    (void)be, (void)s;
    return false;
}
static inline size_t ditto_cuda_wg_spade_wbytes(const DittoWgSpade *s)
{
    (void)s;
    return 0;
}
static inline int ditto_cuda_wg_spade(DittoBackend *be, const DittoWgSpade *s)
{
    (void)s;
    return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "op spade_conv: this build has no sm_90a kernel");
}
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
