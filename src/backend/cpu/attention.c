/*
 * CPU attention and rotary embedding.
 *
 * Attention per (batch, head) and block of query rows:
 *   S (rb, Lk) = scale * Q (rb, D) K^T      cblas_sgemm
 *   S += mask (broadcast), softmax per row  float exp, double sum
 *   Y (rb, Dv) = S V (Lk, Dv)               cblas_sgemm
 * q, k, v are strided views; a (rows, cols) slice goes to BLAS as it is when
 * one of its strides is 1 (row-major, or column-major = transposed), and is
 * packed into scratch otherwise. y may be strided too: rows with unit column
 * stride are written by the GEMM in place (ldc = row stride), others go
 * through scratch. Work units are spread over the thread pool;
 * each task owns a slice of one scratch allocation.
 *
 * Threads: a threaded OpenBLAS GEMM called from several pool workers at once
 * contends badly (20x slower measured on the LMDM shapes). OpenBLAS runs a
 * GEMM single-threaded while M*N*K <= 65536 * GEMM_MULTITHREAD_THRESHOLD
 * (4 by default), so the query block is sized to stay under that; when even
 * one query row is above it, the units run on the calling thread and
 * OpenBLAS threads each GEMM itself. tf32_out rounds y last.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/log.h"
#include "core/mem.h"

#define ATT_QB 64                 /* most query rows per work unit: bounds S to 64 x Lk floats */
#define ATT_BLAS_SERIAL_MNK 262144 /* largest M*N*K that OpenBLAS keeps on the calling thread */

/* A strided (rows, cols) float matrix. */
typedef struct Mat {
    const float *p;
    int64_t rows, cols, rs, cs;
} Mat;

/* How a matrix reaches BLAS: stored row-major (trans false) or column-major (trans true), leading dim ld. */
typedef struct BlasMat {
    const float *p;
    bool trans;
    int ld;
} BlasMat;

static bool blas_view(const Mat *m, BlasMat *out)
{
    int64_t rs = m->rows == 1 ? m->cols : m->rs;   /* strides of size-1 dims are free */
    int64_t cs = m->cols == 1 ? 1 : m->cs;
    if (cs == 1 && rs >= m->cols && rs >= 1 && rs <= INT_MAX) {
        *out = (BlasMat){ m->p, false, (int)rs };
        return true;
    }
    rs = m->rows == 1 ? 1 : m->rs;
    cs = m->cols == 1 ? m->rows : m->cs;
    if (rs == 1 && cs >= m->rows && cs >= 1 && cs <= INT_MAX) {
        *out = (BlasMat){ m->p, true, (int)cs };
        return true;
    }
    return false;
}

/* m as BLAS sees it: in place when its strides allow, else packed row-major into buf. */
static BlasMat blas_operand(const Mat *m, float *buf)
{
    BlasMat b;
    if (blas_view(m, &b))
        return b;
    for (int64_t r = 0; r < m->rows; r++)
        for (int64_t c = 0; c < m->cols; c++)
            buf[r * m->cols + c] = m->p[r * m->rs + c * m->cs];
    return (BlasMat){ buf, false, (int)(m->cols > 0 ? m->cols : 1) };
}

typedef struct AttnJob {
    const DittoTensor *q, *k, *v, *mask;
    DittoTensor *y;
    float scale;
    int64_t B, H, Lq, Lk, D, Dv;
    int64_t mstride[4];           /* mask strides broadcast to (B,H,Lq,Lk); 0 where broadcast */
    int64_t qb, qblocks, units, units_per_task;   /* qb query rows per unit */
    float *scratch;
    size_t scratch_per_task;      /* floats */
} AttnJob;

static const float *head_ptr(const DittoTensor *t, int64_t b, int64_t h)
{
    return (const float *)t->data + b * t->stride[0] + h * t->stride[1];
}

static void attn_unit(const AttnJob *j, int64_t u, float *scratch)
{
    int64_t bh = u / j->qblocks, q0 = (u % j->qblocks) * j->qb;
    int64_t b = bh / j->H, h = bh % j->H;
    int64_t rb = j->Lq - q0 < j->qb ? j->Lq - q0 : j->qb;
    int64_t Lk = j->Lk;
    float *S = scratch;
    float *qbuf = S + j->qb * Lk;
    float *kbuf = qbuf + j->qb * j->D;
    float *vbuf = kbuf + Lk * j->D;
    float *ybuf = vbuf + Lk * j->Dv;

    const DittoTensor *q = j->q, *k = j->k, *v = j->v;
    Mat qm = { head_ptr(q, b, h) + q0 * q->stride[2], rb, j->D, q->stride[2], q->stride[3] };
    Mat km = { head_ptr(k, b, h), Lk, j->D, k->stride[2], k->stride[3] };
    Mat vm = { head_ptr(v, b, h), Lk, j->Dv, v->stride[2], v->stride[3] };
    BlasMat qa = blas_operand(&qm, qbuf), ka = blas_operand(&km, kbuf), va = blas_operand(&vm, vbuf);

    /* S = scale Q K^T: K row-major (Lk, D) enters transposed */
    if (j->D > 0) {
        cblas_sgemm(CblasRowMajor, qa.trans ? CblasTrans : CblasNoTrans, ka.trans ? CblasNoTrans : CblasTrans,
                    (int)rb, (int)Lk, (int)j->D, j->scale, qa.p, qa.ld, ka.p, ka.ld, 0.0f, S, (int)Lk);
    } else {
        memset(S, 0, sizeof(float) * (size_t)(rb * Lk));
    }

    for (int64_t i = 0; i < rb; i++) {
        float *s = S + i * Lk;
        if (j->mask) {
            const float *m = (const float *)j->mask->data + b * j->mstride[0] + h * j->mstride[1] + (q0 + i) * j->mstride[2];
            for (int64_t c = 0; c < Lk; c++)
                s[c] += m[c * j->mstride[3]];
        }
        float mx = -INFINITY;
        for (int64_t c = 0; c < Lk; c++)
            mx = s[c] > mx ? s[c] : mx;
        double sum = 0;
        for (int64_t c = 0; c < Lk; c++) {
            s[c] = expf(s[c] - mx);
            sum += s[c];
        }
        /* a fully masked row (all -inf) gives NaN, as PyTorch's math path does */
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < Lk; c++)
            s[c] *= inv;
    }

    /* Y = S V: straight into y when its rows have unit column stride, else through ybuf */
    const int64_t *ys = j->y->stride;
    float *y = (float *)j->y->data + b * ys[0] + h * ys[1] + q0 * ys[2];
    int64_t ldy = rb == 1 ? j->Dv : ys[2];
    bool direct = (ys[3] == 1 || j->Dv == 1) && ldy >= j->Dv && ldy <= INT_MAX;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, va.trans ? CblasTrans : CblasNoTrans, (int)rb, (int)j->Dv, (int)Lk,
                1.0f, S, (int)Lk, va.p, va.ld, 0.0f, direct ? y : ybuf, direct ? (int)(ldy > 0 ? ldy : 1) : (int)j->Dv);
    if (!direct)
        for (int64_t i = 0; i < rb; i++)
            for (int64_t e = 0; e < j->Dv; e++)
                y[i * ys[2] + e * ys[3]] = ybuf[i * j->Dv + e];
}

static void attn_task(void *arg, int task)
{
    const AttnJob *j = arg;
    float *scratch = j->scratch + (size_t)task * j->scratch_per_task;
    int64_t lo = (int64_t)task * j->units_per_task;
    int64_t hi = lo + j->units_per_task < j->units ? lo + j->units_per_task : j->units;
    for (int64_t u = lo; u < hi; u++)
        attn_unit(j, u, scratch);
}

static int cpu_attention(DittoBackend *be, const DittoAttentionParams *p, const DittoTensor *q, const DittoTensor *k,
                         const DittoTensor *v, const DittoTensor *mask, DittoTensor *y)
{
    AttnJob j;
    memset(&j, 0, sizeof j);
    j.q = q;
    j.k = k;
    j.v = v;
    j.mask = mask;
    j.y = y;
    j.B = q->shape[0];
    j.H = q->shape[1];
    j.Lq = q->shape[2];
    j.D = q->shape[3];
    j.Lk = k->shape[2];
    j.Dv = v->shape[3];
    j.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)(j.D > 0 ? j.D : 1)));
    if (j.B * j.H * j.Lq * j.Dv == 0)
        return 0;
    if (j.Lk == 0) {
        /* softmax over no keys, then an empty sum: zeros (PyTorch's math path); y may be strided */
        return be->ops.fill(be, 0.0f, y);
    }
    if (j.Lk > INT_MAX || j.D > INT_MAX || j.Dv > INT_MAX)
        return ditto_fail(&be->log, DITTO_ERR_RANGE, "op attention: dimension too large for BLAS");
    if (mask) {
        int off = 4 - mask->ndim;
        for (int i = 0; i < 4; i++) {
            int mi = i - off;
            j.mstride[i] = (mi >= 0 && mask->shape[mi] != 1) ? mask->stride[mi] : 0;
        }
    }
    /* query block: at most ATT_QB rows, and single-threaded GEMMs when OpenBLAS threads */
    int64_t wide = (j.D > j.Dv ? j.D : j.Dv) * j.Lk;
    bool serial = false;
    j.qb = ATT_QB < j.Lq ? ATT_QB : j.Lq;
    if (openblas_get_num_threads() > 1 && j.qb * wide > ATT_BLAS_SERIAL_MNK) {
        j.qb = ATT_BLAS_SERIAL_MNK / wide;
        serial = j.qb < 1;
        if (serial)
            j.qb = ATT_QB < j.Lq ? ATT_QB : j.Lq;
    }
    j.qblocks = (j.Lq + j.qb - 1) / j.qb;
    j.units = j.B * j.H * j.qblocks;
    int64_t ntasks = serial ? 1 : 4 * (int64_t)ditto_pool_size(be->pool);
    if (ntasks > j.units)
        ntasks = j.units;
    j.units_per_task = (j.units + ntasks - 1) / ntasks;
    ntasks = (j.units + j.units_per_task - 1) / j.units_per_task;
    /* S, then pack space for a q block, k and v, then a y block */
    j.scratch_per_task = (size_t)(j.qb * j.Lk + j.qb * j.D + j.Lk * j.D + j.Lk * j.Dv + j.qb * j.Dv);
    j.scratch = ditto_malloc(sizeof(float) * j.scratch_per_task * (size_t)ntasks + sizeof(float));
    if (!j.scratch)
        return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op attention: no memory for %lld x %zu floats of scratch",
                          (long long)ntasks, j.scratch_per_task);
    ditto_pool_run(be->pool, (int)ntasks, attn_task, &j);
    ditto_free(j.scratch);
    if (p->tf32_out) {
        /* every element of the strided (B,H,Lq,Dv) y to its nearest TF32 value */
        float *Y = y->data;
        const int64_t *s = y->stride;
        for (int64_t b = 0; b < j.B; b++)
            for (int64_t h = 0; h < j.H; h++)
                for (int64_t i = 0; i < j.Lq; i++)
                    for (int64_t e = 0; e < j.Dv; e++) {
                        float *yv = Y + b * s[0] + h * s[1] + i * s[2] + e * s[3];
                        *yv = ditto_tf32_round(*yv);
                    }
    }
    return 0;
}

/* ---- rotary ---- */

typedef struct RotaryJob {
    const float *x, *freqs;
    float *y;
    int64_t L, C, pos_offset, rows, rows_per_task;
} RotaryJob;

static void rotary_task(void *arg, int task)
{
    const RotaryJob *j = arg;
    int64_t lo = (int64_t)task * j->rows_per_task;
    int64_t hi = lo + j->rows_per_task < j->rows ? lo + j->rows_per_task : j->rows;
    for (int64_t r = lo; r < hi; r++) {
        /* theta in float32 as PyTorch forms it: (float)position * freq */
        float pos = (float)(j->pos_offset + r % j->L);
        const float *x = j->x + r * j->C;
        float *y = j->y + r * j->C;
        for (int64_t k = 0; k < j->C / 2; k++) {
            float th = pos * j->freqs[k];
            float c = cosf(th), s = sinf(th);
            float x0 = x[2 * k], x1 = x[2 * k + 1];   /* read both before writing: y may be x */
            y[2 * k] = x0 * c - x1 * s;
            y[2 * k + 1] = x1 * c + x0 * s;
        }
    }
}

static int cpu_rotary(DittoBackend *be, const DittoRotaryParams *p, const DittoTensor *x, const DittoTensor *freqs, DittoTensor *y)
{
    RotaryJob j = { x->data, NULL, y->data, x->shape[1], x->shape[2], p->pos_offset, x->shape[0] * x->shape[1], 0 };
    if (j.rows == 0 || j.C == 0)
        return 0;
    /* freqs: C/2 floats, possibly strided (e.g. a row of a buffer); pack when needed */
    float small[512];
    float *packed = NULL;
    int64_t n = j.C / 2;
    if (ditto_tensor_is_contiguous(freqs)) {
        j.freqs = freqs->data;
    } else {
        packed = n <= 512 ? small : ditto_malloc(sizeof(float) * (size_t)n);
        if (!packed)
            return ditto_fail(&be->log, DITTO_ERR_NOMEM, "op rotary: no memory");
        const float *f = freqs->data;
        int64_t idx[DITTO_MAX_DIMS] = { 0 };
        for (int64_t i = 0; i < n; i++) {
            int64_t off = 0;
            for (int d = 0; d < freqs->ndim; d++)
                off += idx[d] * freqs->stride[d];
            packed[i] = f[off];
            for (int d = freqs->ndim - 1; d >= 0 && ++idx[d] == freqs->shape[d]; d--)
                idx[d] = 0;
        }
        j.freqs = packed;
    }
    int64_t ntasks = j.rows * j.C / 16384;
    int64_t maxt = 4 * (int64_t)ditto_pool_size(be->pool);
    if (ntasks > maxt)
        ntasks = maxt;
    if (ntasks < 1)
        ntasks = 1;
    j.rows_per_task = (j.rows + ntasks - 1) / ntasks;
    ntasks = (j.rows + j.rows_per_task - 1) / j.rows_per_task;
    ditto_pool_run(be->pool, (int)ntasks, rotary_task, &j);
    if (packed && packed != small)
        ditto_free(packed);
    return 0;
}

void ditto_cpu_init_attention(DittoOps *ops)
{
    ops->attention = cpu_attention;
    ops->rotary = cpu_rotary;
}
