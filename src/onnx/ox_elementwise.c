/*
 * Element-wise ONNX ops: arithmetic, comparisons and logic with NumPy
 * broadcasting, activations, Cast, Where, Clip, PRelu.
 *
 * Float tensors on the device go through the backend's unary/binary/where/
 * prelu ops (activations without a table kind are composed from them).
 * Integer and bool tensors, and float tensors whose inputs are all host
 * values (shape arithmetic), are computed here on the host: int64 with
 * wrap-around, float32 with the same formulas as the CPU backend.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "onnx/exec_internal.h"

/* ---- host broadcasting loop ---- */

typedef enum HostBin {
    HB_ADD, HB_SUB, HB_MUL, HB_DIV, HB_POW, HB_MAX, HB_MIN, HB_MOD, HB_FMOD,
    HB_EQ, HB_LT, HB_LE, HB_GT, HB_GE, HB_AND, HB_OR, HB_XOR, HB_SHL, HB_SHR, HB_PRELU,
} HostBin;

static bool hb_is_compare(HostBin op)
{
    return op >= HB_EQ && op <= HB_XOR;
}

/* Broadcast strides (elements) of t into y's dims. */
static void bstrides(const DittoTensor *t, int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    int64_t cs[DITTO_MAX_DIMS];
    for (int i = t->ndim - 1; i >= 0; i--) {
        cs[i] = s;
        s *= t->shape[i];
    }
    for (int i = 0; i < ndim; i++) {
        int j = i - (ndim - t->ndim);
        st[i] = (j >= 0 && t->shape[j] != 1) ? cs[j] : 0;
    }
}

static double ld(const DittoTensor *t, int64_t i)
{
    return t->dtype == DITTO_F32 ? (double)((const float *)t->data)[i] : (double)((const int64_t *)t->data)[i];
}

static int64_t ldi(const DittoTensor *t, int64_t i)
{
    return t->dtype == DITTO_F32 ? (int64_t)((const float *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static float max_f(float u, float v)
{
    return (u != u || u > v) ? u : v;
}

static float min_f(float u, float v)
{
    return (u != u || u < v) ? u : v;
}

static int64_t ipow(int64_t b, int64_t e)
{
    if (e < 0)
        return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

/*
 * y = a op b on host tensors (storage F32 or I64 each); y allocated by the
 * caller with the broadcast shape and the result storage. `flt` selects float
 * arithmetic (operands read as float). Returns DITTO_ERR_RANGE for an integer
 * division by zero.
 */
static int host_binary_t(HostBin op, bool flt, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    int nd = y->ndim;
    int64_t sa[DITTO_MAX_DIMS], sb[DITTO_MAX_DIMS], idx[DITTO_MAX_DIMS] = { 0 };
    bstrides(a, nd, y->shape, sa);
    bstrides(b, nd, y->shape, sb);
    int64_t numel = ditto_tensor_numel(y), oa = 0, ob = 0;
    bool yf = y->dtype == DITTO_F32;
    for (int64_t i = 0; i < numel; i++) {
        if (flt) {
            float u = (float)ld(a, oa), v = (float)ld(b, ob), r = 0;
            bool c = false;
            switch (op) {
            case HB_ADD: r = u + v; break;
            case HB_SUB: r = u - v; break;
            case HB_MUL: r = u * v; break;
            case HB_DIV: r = u / v; break;
            case HB_POW: r = powf(u, v); break;
            case HB_MAX: r = max_f(u, v); break;
            case HB_MIN: r = min_f(u, v); break;
            case HB_MOD: case HB_FMOD: r = fmodf(u, v); break;
            case HB_PRELU: r = u >= 0.0f ? u : u * v; break;
            case HB_EQ: c = u == v; break;
            case HB_LT: c = u < v; break;
            case HB_LE: c = u <= v; break;
            case HB_GT: c = u > v; break;
            case HB_GE: c = u >= v; break;
            case HB_AND: c = u != 0 && v != 0; break;
            case HB_OR: c = u != 0 || v != 0; break;
            case HB_XOR: c = (u != 0) != (v != 0); break;
            default: break;
            }
            if (yf)
                ((float *)y->data)[i] = r;
            else
                ((int64_t *)y->data)[i] = hb_is_compare(op) ? c : (int64_t)r;
        } else {
            int64_t u = ldi(a, oa), v = ldi(b, ob), r = 0;
            uint64_t uu = (uint64_t)u, uv = (uint64_t)v;
            switch (op) {
            case HB_ADD: r = (int64_t)(uu + uv); break;
            case HB_SUB: r = (int64_t)(uu - uv); break;
            case HB_MUL: r = (int64_t)(uu * uv); break;
            case HB_DIV:
                if (v == 0 || (u == INT64_MIN && v == -1))
                    return DITTO_ERR_RANGE;
                r = u / v;   /* truncation, as ONNX Runtime */
                break;
            case HB_MOD:
                if (v == 0)
                    return DITTO_ERR_RANGE;
                r = v == -1 ? 0 : u % v;
                if (r != 0 && ((r < 0) != (v < 0)))
                    r += v;   /* fmod = 0: the sign of the divisor, as Python */
                break;
            case HB_FMOD:
                if (v == 0)
                    return DITTO_ERR_RANGE;
                r = v == -1 ? 0 : u % v;
                break;
            case HB_POW: r = ipow(u, v); break;
            case HB_MAX: r = u > v ? u : v; break;
            case HB_MIN: r = u < v ? u : v; break;
            case HB_PRELU: r = u >= 0 ? u : (int64_t)(uu * uv); break;
            case HB_EQ: r = u == v; break;
            case HB_LT: r = u < v; break;
            case HB_LE: r = u <= v; break;
            case HB_GT: r = u > v; break;
            case HB_GE: r = u >= v; break;
            case HB_AND: r = u && v; break;
            case HB_OR: r = u || v; break;
            case HB_XOR: r = !u != !v; break;
            case HB_SHL: r = v >= 64 || v < 0 ? 0 : (int64_t)(uu << v); break;
            case HB_SHR: r = v >= 64 || v < 0 ? 0 : (int64_t)(uu >> v); break;
            default: break;
            }
            if (yf)
                ((float *)y->data)[i] = (float)r;
            else
                ((int64_t *)y->data)[i] = r;
        }
        for (int d = nd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < y->shape[d])
                break;
            oa -= sa[d] * y->shape[d];
            ob -= sb[d] * y->shape[d];
            idx[d] = 0;
        }
    }
    return 0;
}

/* ---- binary ops ---- */

typedef struct BinDef {
    const char *name;
    HostBin host;
    int dev;               /* DittoBinaryKind, -1: host only */
} BinDef;

static const BinDef bin_defs[] = {
    { "Add", HB_ADD, DITTO_BINARY_ADD },  { "Sub", HB_SUB, DITTO_BINARY_SUB },   { "Mul", HB_MUL, DITTO_BINARY_MUL },
    { "Div", HB_DIV, DITTO_BINARY_DIV },  { "Pow", HB_POW, DITTO_BINARY_POW },   { "Max", HB_MAX, DITTO_BINARY_MAX },
    { "Min", HB_MIN, DITTO_BINARY_MIN },  { "Sum", HB_ADD, DITTO_BINARY_ADD },   { "Mean", HB_ADD, DITTO_BINARY_ADD },
    { "Mod", HB_MOD, -1 },                { "Equal", HB_EQ, -1 },                { "Less", HB_LT, -1 },
    { "LessOrEqual", HB_LE, -1 },         { "Greater", HB_GT, -1 },              { "GreaterOrEqual", HB_GE, -1 },
    { "And", HB_AND, -1 },                { "Or", HB_OR, -1 },                   { "Xor", HB_XOR, -1 },
    { "BitShift", HB_SHL, -1 },
};

static const BinDef *bin_def(const OxNode *n)
{
    for (size_t i = 0; i < sizeof bin_defs / sizeof *bin_defs; i++)
        if (!strcmp(bin_defs[i].name, n->src->op_type))
            return &bin_defs[i];
    return NULL;
}

/* A float copy of integer value v (Pow with an integer exponent), on the device unless host. */
static int float_copy(DittoOnnxRunner *r, const OxValue *v, bool host, DittoTensor *t)
{
    DittoTensor src, h;
    DITTO_TRY(ox_host(r, v, &src));
    DITTO_TRY(ox_temp(r, DITTO_F32, src.ndim, src.shape, true, &h));
    int64_t numel = ditto_tensor_numel(&src);
    for (int64_t i = 0; i < numel; i++)
        ((float *)h.data)[i] = (float)((const int64_t *)src.data)[i];
    if (host || r->be->device == DITTO_DEVICE_CPU) {
        *t = h;
        t->device = host ? DITTO_DEVICE_CPU : r->be->device;
        return 0;
    }
    DITTO_TRY(ox_temp(r, DITTO_F32, src.ndim, src.shape, false, t));
    return r->be->upload(r->be, t->data, h.data, ditto_tensor_nbytes(&h));
}

/* One step of a (possibly variadic) binary op: y = a op b, into output k or a temporary. */
static int binary_step(DittoOnnxRunner *r, const OxNode *n, const BinDef *d, HostBin hop, const OxValue *av, const OxValue *bv,
                       const DittoTensor *at, const DittoTensor *bt, bool host, bool to_output, DittoDType type, DittoTensor *y)
{
    int nd;
    int64_t shape[DITTO_MAX_DIMS];
    char sa[DITTO_SHAPE_STR_MAX], sb[DITTO_SHAPE_STR_MAX];
    if (ox_broadcast(at->ndim, at->shape, bt->ndim, bt->shape, &nd, shape) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "shapes %s and %s do not broadcast", ditto_shape_str(at->shape, at->ndim, sa, sizeof sa),
                       ditto_shape_str(bt->shape, bt->ndim, sb, sizeof sb));
    DittoDType out_type = hb_is_compare(hop) ? DITTO_BOOL : type;
    if (host) {
        if (to_output)
            DITTO_TRY(ox_alloc(r, n, 0, out_type, nd, shape, true, y));
        else
            DITTO_TRY(ox_temp(r, ox_storage(out_type), nd, shape, true, y));
        int rc = host_binary_t(hop, ox_is_float(type), at, bt, y);
        if (rc < 0)
            return ox_fail(r, n, rc, "integer division by zero");
        return 0;
    }
    if (!to_output || !(ox_try_inplace(r, n, 0, av, type, nd, shape, y) || ox_try_inplace(r, n, 0, bv, type, nd, shape, y))) {
        if (to_output)
            DITTO_TRY(ox_alloc(r, n, 0, type, nd, shape, false, y));
        else
            DITTO_TRY(ox_temp(r, DITTO_F32, nd, shape, false, y));
    }
    int rc = ditto_op_binary(r->be, (DittoBinaryKind)d->dev, at, bt, y);
    return rc < 0 ? ox_fail(r, n, rc, "binary op failed") : 0;
}

static int run_binary(DittoOnnxRunner *r, const OxNode *n)
{
    const BinDef *d = bin_def(n);
    int nin = 0;
    for (int i = 0; i < n->nin; i++)
        nin += ox_in(r, n, i) != NULL;
    if (!d || nin < 1 || (nin != n->nin) || (nin < 2 && strcmp(d->name, "Sum") && strcmp(d->name, "Mean") &&
                                            strcmp(d->name, "Max") && strcmp(d->name, "Min")))
        return ox_fail(r, n, DITTO_ERR_FORMAT, "needs %s inputs", nin < 1 ? "at least one" : "two");
    HostBin hop = d->host;
    if (hop == HB_SHL && !strcmp(ox_attr_str(n, "direction", "LEFT"), "RIGHT"))
        hop = HB_SHR;
    const OxValue *a = ox_in(r, n, 0);
    DittoDType type = a->type;
    bool flt = ox_is_float(type);
    if (hop == HB_MOD && (flt || ox_attr_int(n, "fmod", 0)))
        hop = HB_FMOD;
    bool host = d->dev < 0 || !flt;
    bool all_host = true;
    for (int i = 0; i < nin; i++)
        all_host = all_host && ox_in(r, n, i)->host;
    host = host || all_host;
    if (nin == 1) {
        const OxValue *x = ox_in(r, n, 0);
        return ox_alias(r, n, 0, x, x->t.ndim, x->t.shape, type);
    }
    DittoTensor acc, cur;
    const OxValue *accv = a;
    if (host)
        DITTO_TRY(ox_host(r, a, &acc));
    else
        DITTO_TRY(ox_dev(r, a, &acc));
    for (int i = 1; i < nin; i++) {
        const OxValue *b = ox_in(r, n, i);
        DittoTensor bt;
        if (ox_is_float(b->type) != flt) {
            if (flt && hop == HB_POW)
                DITTO_TRY(float_copy(r, b, host, &bt));
            else if (!flt && hop == HB_POW && host)
                DITTO_TRY(ox_host(r, b, &bt));   /* int base, float exponent: read as numbers */
            else
                return ox_fail(r, n, DITTO_ERR_INVAL, "inputs of types %s and %s", ditto_dtype_name(type), ditto_dtype_name(b->type));
        } else if (host) {
            DITTO_TRY(ox_host(r, b, &bt));
        } else {
            DITTO_TRY(ox_dev(r, b, &bt));
        }
        bool last = i == nin - 1;
        DITTO_TRY(binary_step(r, n, d, hop, i == 1 ? accv : NULL, b, &acc, &bt, host, last, type, &cur));
        acc = cur;
    }
    if (!strcmp(d->name, "Mean")) {
        if (host) {
            int64_t numel = ditto_tensor_numel(&acc);
            for (int64_t i = 0; i < numel && acc.dtype == DITTO_F32; i++)
                ((float *)acc.data)[i] /= (float)nin;
        } else {
            DittoUnaryParams p = { DITTO_UNARY_AFFINE, 1.0f / (float)nin, 0.0f };
            int rc = ditto_op_unary(r->be, &p, &acc, &acc);
            if (rc < 0)
                return ox_fail(r, n, rc, "scaling failed");
        }
    }
    return 0;
}

/* ---- unary ops ---- */

typedef enum HostUn {
    HU_RELU, HU_SIGMOID, HU_TANH, HU_EXP, HU_LOG, HU_SQRT, HU_RECIP, HU_NEG, HU_ABS, HU_ERF, HU_SIN, HU_COS,
    HU_SOFTPLUS, HU_MISH, HU_LEAKY, HU_GELU, HU_GELU_TANH, HU_FLOOR, HU_CEIL, HU_ROUND, HU_SIGN, HU_NOT, HU_ISNAN, HU_ISINF,
    HU_TAN, HU_ASIN, HU_ACOS, HU_ATAN, HU_SINH, HU_COSH, HU_ASINH, HU_ACOSH, HU_ATANH, HU_SOFTSIGN, HU_HARDSIGMOID,
    HU_HARDSWISH, HU_ELU, HU_SELU, HU_CELU, HU_THRESHOLDED, HU_IDENTITY,
} HostUn;

typedef struct UnDef {
    const char *name;
    HostUn host;
    int dev;               /* DittoUnaryKind, -1: composed or host only */
} UnDef;

static const UnDef un_defs[] = {
    { "Relu", HU_RELU, DITTO_UNARY_RELU },        { "Sigmoid", HU_SIGMOID, DITTO_UNARY_SIGMOID },
    { "Tanh", HU_TANH, DITTO_UNARY_TANH },        { "Exp", HU_EXP, DITTO_UNARY_EXP },
    { "Log", HU_LOG, DITTO_UNARY_LOG },           { "Sqrt", HU_SQRT, DITTO_UNARY_SQRT },
    { "Reciprocal", HU_RECIP, DITTO_UNARY_RECIP }, { "Neg", HU_NEG, DITTO_UNARY_NEG },
    { "Abs", HU_ABS, DITTO_UNARY_ABS },           { "Erf", HU_ERF, DITTO_UNARY_ERF },
    { "Sin", HU_SIN, DITTO_UNARY_SIN },           { "Cos", HU_COS, DITTO_UNARY_COS },
    { "Softplus", HU_SOFTPLUS, DITTO_UNARY_SOFTPLUS }, { "Mish", HU_MISH, DITTO_UNARY_MISH },
    { "LeakyRelu", HU_LEAKY, DITTO_UNARY_LEAKY_RELU }, { "Gelu", HU_GELU, DITTO_UNARY_GELU },
    { "Floor", HU_FLOOR, -1 }, { "Ceil", HU_CEIL, -1 }, { "Round", HU_ROUND, -1 }, { "Sign", HU_SIGN, -1 },
    { "Not", HU_NOT, -1 }, { "IsNaN", HU_ISNAN, -1 }, { "IsInf", HU_ISINF, -1 }, { "Tan", HU_TAN, -1 },
    { "Asin", HU_ASIN, -1 }, { "Acos", HU_ACOS, -1 }, { "Atan", HU_ATAN, -1 }, { "Sinh", HU_SINH, -1 },
    { "Cosh", HU_COSH, -1 }, { "Asinh", HU_ASINH, -1 }, { "Acosh", HU_ACOSH, -1 }, { "Atanh", HU_ATANH, -1 },
    { "Softsign", HU_SOFTSIGN, -1 }, { "HardSigmoid", HU_HARDSIGMOID, -1 }, { "HardSwish", HU_HARDSWISH, -1 },
    { "Elu", HU_ELU, -1 }, { "Selu", HU_SELU, -1 }, { "Celu", HU_CELU, -1 }, { "ThresholdedRelu", HU_THRESHOLDED, -1 },
};

static float softplus_f(float v)
{
    return v > 20.0f ? v : log1pf(expf(v));
}

/* Activation parameters with the ONNX defaults. */
typedef struct UnArgs {
    float alpha, beta;
    int detect_pos, detect_neg;
} UnArgs;

static void un_args(const OxNode *n, HostUn op, UnArgs *a)
{
    memset(a, 0, sizeof *a);
    switch (op) {
    case HU_LEAKY: a->alpha = ox_attr_float(n, "alpha", 0.01f); break;
    case HU_HARDSIGMOID: a->alpha = ox_attr_float(n, "alpha", 0.2f); a->beta = ox_attr_float(n, "beta", 0.5f); break;
    case HU_ELU: case HU_CELU: case HU_THRESHOLDED: a->alpha = ox_attr_float(n, "alpha", 1.0f); break;
    case HU_SELU:
        a->alpha = ox_attr_float(n, "alpha", 1.67326319217681884765625f);
        a->beta = ox_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case HU_ISINF:
        a->detect_pos = (int)ox_attr_int(n, "detect_positive", 1);
        a->detect_neg = (int)ox_attr_int(n, "detect_negative", 1);
        break;
    default: break;
    }
}

static float un_f(HostUn op, const UnArgs *a, float v)
{
    switch (op) {
    case HU_RELU: return v > 0.0f ? v : 0.0f;
    case HU_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case HU_TANH: return tanhf(v);
    case HU_EXP: return expf(v);
    case HU_LOG: return logf(v);
    case HU_SQRT: return sqrtf(v);
    case HU_RECIP: return 1.0f / v;
    case HU_NEG: return -v;
    case HU_ABS: return fabsf(v);
    case HU_ERF: return erff(v);
    case HU_SIN: return sinf(v);
    case HU_COS: return cosf(v);
    case HU_SOFTPLUS: return softplus_f(v);
    case HU_MISH: return v * tanhf(softplus_f(v));
    case HU_LEAKY: return v > 0.0f ? v : v * a->alpha;
    case HU_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case HU_GELU_TANH: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case HU_FLOOR: return floorf(v);
    case HU_CEIL: return ceilf(v);
    case HU_ROUND: return nearbyintf(v);   /* half to even in the default rounding mode */
    case HU_SIGN: return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v;
    case HU_TAN: return tanf(v);
    case HU_ASIN: return asinf(v);
    case HU_ACOS: return acosf(v);
    case HU_ATAN: return atanf(v);
    case HU_SINH: return sinhf(v);
    case HU_COSH: return coshf(v);
    case HU_ASINH: return asinhf(v);
    case HU_ACOSH: return acoshf(v);
    case HU_ATANH: return atanhf(v);
    case HU_SOFTSIGN: return v / (1.0f + fabsf(v));
    case HU_HARDSIGMOID: { float t = a->alpha * v + a->beta; return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t; }
    case HU_HARDSWISH: { float t = v / 6.0f + 0.5f; return v * (t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t); }
    case HU_ELU: return v > 0.0f ? v : a->alpha * (expf(v) - 1.0f);
    case HU_SELU: return a->beta * (v > 0.0f ? v : a->alpha * (expf(v) - 1.0f));
    case HU_CELU: return fmaxf(0.0f, v) + fminf(0.0f, a->alpha * (expf(v / a->alpha) - 1.0f));
    case HU_THRESHOLDED: return v > a->alpha ? v : 0.0f;
    case HU_IDENTITY:
    default: return v;
    }
}

static int run_unary_host(DittoOnnxRunner *r, const OxNode *n, HostUn op, const UnArgs *args, const OxValue *x)
{
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    bool flt = ox_is_float(x->type);
    bool to_bool = op == HU_NOT || op == HU_ISNAN || op == HU_ISINF;
    DittoDType type = to_bool ? DITTO_BOOL : x->type;
    DITTO_TRY(ox_alloc(r, n, 0, type, xt.ndim, xt.shape, true, &y));
    int64_t numel = ditto_tensor_numel(&xt);
    for (int64_t i = 0; i < numel; i++) {
        if (to_bool) {
            double v = ld(&xt, i);
            int64_t b = op == HU_NOT ? v == 0 : op == HU_ISNAN ? v != v
                                              : (isinf(v) && ((v > 0 && args->detect_pos) || (v < 0 && args->detect_neg)));
            ((int64_t *)y.data)[i] = b;
        } else if (flt) {
            ((float *)y.data)[i] = un_f(op, args, ((const float *)xt.data)[i]);
        } else {
            int64_t v = ((const int64_t *)xt.data)[i];
            switch (op) {
            case HU_NEG: v = (int64_t)(0 - (uint64_t)v); break;
            case HU_ABS: v = v < 0 ? (int64_t)(0 - (uint64_t)v) : v; break;
            case HU_SIGN: v = v > 0 ? 1 : v < 0 ? -1 : 0; break;
            case HU_RELU: v = v > 0 ? v : 0; break;
            case HU_FLOOR: case HU_CEIL: case HU_ROUND: case HU_IDENTITY: break;
            default:
                return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "integer input of type %s", ditto_dtype_name(x->type));
            }
            ((int64_t *)y.data)[i] = v;
        }
    }
    return 0;
}

/* y = f(x) with the backend's unary op; y may be x. */
static int dev_unary(DittoOnnxRunner *r, const OxNode *n, DittoUnaryKind kind, float alpha, float beta, const DittoTensor *x, DittoTensor *y)
{
    DittoUnaryParams p = { kind, alpha, beta };
    int rc = ditto_op_unary(r->be, &p, x, y);
    return rc < 0 ? ox_fail(r, n, rc, "unary op failed") : 0;
}

static int dev_binary(DittoOnnxRunner *r, const OxNode *n, DittoBinaryKind kind, const DittoTensor *a, const DittoTensor *b, DittoTensor *y)
{
    int rc = ditto_op_binary(r->be, kind, a, b, y);
    return rc < 0 ? ox_fail(r, n, rc, "binary op failed") : 0;
}

/* Activations without a table kind, from unary/binary steps on the device. */
static int run_composed(DittoOnnxRunner *r, const OxNode *n, HostUn op, const UnArgs *a, const DittoTensor *x, DittoTensor *y)
{
    DittoTensor t;
    DITTO_TRY(ox_temp(r, DITTO_F32, x->ndim, x->shape, false, &t));
    switch (op) {
    case HU_HARDSIGMOID:
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, a->alpha, a->beta, x, y));
        return dev_unary(r, n, DITTO_UNARY_CLIP, 0.0f, 1.0f, y, y);
    case HU_HARDSWISH:
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 1.0f / 6.0f, 0.5f, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_CLIP, 0.0f, 1.0f, &t, &t));
        return dev_binary(r, n, DITTO_BINARY_MUL, x, &t, y);
    case HU_ELU:
    case HU_SELU:
        /* relu(x) + alpha (exp(min(x, 0)) - 1), times gamma for Selu */
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_CLIP, -INFINITY, 0.0f, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_EXP, 0, 0, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, a->alpha, -a->alpha, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_RELU, 0, 0, x, y));
        DITTO_TRY(dev_binary(r, n, DITTO_BINARY_ADD, y, &t, y));
        return op == HU_SELU ? dev_unary(r, n, DITTO_UNARY_AFFINE, a->beta, 0.0f, y, y) : 0;
    case HU_CELU:
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 1.0f / a->alpha, 0.0f, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_EXP, 0, 0, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, a->alpha, -a->alpha, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_CLIP, -INFINITY, 0.0f, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_RELU, 0, 0, x, y));
        return dev_binary(r, n, DITTO_BINARY_ADD, y, &t, y);
    case HU_SOFTSIGN:
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_ABS, 0, 0, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 1.0f, 1.0f, &t, &t));
        return dev_binary(r, n, DITTO_BINARY_DIV, x, &t, y);
    case HU_GELU_TANH:
        /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
        DITTO_TRY(dev_binary(r, n, DITTO_BINARY_MUL, x, x, &t));
        DITTO_TRY(dev_binary(r, n, DITTO_BINARY_MUL, &t, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 0.044715f, 0.0f, &t, &t));
        DITTO_TRY(dev_binary(r, n, DITTO_BINARY_ADD, &t, x, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 0.7978845608028654f, 0.0f, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_TANH, 0, 0, &t, &t));
        DITTO_TRY(dev_unary(r, n, DITTO_UNARY_AFFINE, 0.5f, 0.5f, &t, &t));
        return dev_binary(r, n, DITTO_BINARY_MUL, x, &t, y);
    default:
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "no device form");
    }
}

static int run_unary(DittoOnnxRunner *r, const OxNode *n)
{
    const UnDef *d = NULL;
    for (size_t i = 0; i < sizeof un_defs / sizeof *un_defs; i++)
        if (!strcmp(un_defs[i].name, n->src->op_type))
            d = &un_defs[i];
    OxValue *x = ox_need(r, n, 0);
    if (!d || !x)
        return DITTO_ERR_FORMAT;
    HostUn op = d->host;
    int dev = d->dev;
    if (op == HU_GELU && !strcmp(ox_attr_str(n, "approximate", "none"), "tanh")) {
        op = HU_GELU_TANH;
        dev = -1;
    }
    UnArgs args;
    un_args(n, op, &args);
    bool composed = op == HU_HARDSIGMOID || op == HU_HARDSWISH || op == HU_ELU || op == HU_SELU || op == HU_CELU ||
                    op == HU_SOFTSIGN || op == HU_GELU_TANH;
    if (x->host || !ox_is_float(x->type) || (dev < 0 && !composed))
        return run_unary_host(r, n, op, &args, x);
    DittoTensor xt, y;
    DITTO_TRY(ox_dev(r, x, &xt));
    if (!ox_try_inplace(r, n, 0, x, x->type, xt.ndim, xt.shape, &y))
        DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, false, &y));
    if (dev >= 0)
        return dev_unary(r, n, (DittoUnaryKind)dev, args.alpha, args.beta, &xt, &y);
    return run_composed(r, n, op, &args, &xt, &y);
}

/* ---- Cast ---- */

/* ONNX TensorProto element type -> dtype; DITTO_DTYPE_COUNT when unsupported. */
static DittoDType onnx_elem(int64_t to)
{
    switch (to) {
    case 1: return DITTO_F32;
    case 2: return DITTO_U8;
    case 3: return DITTO_I8;
    case 4: case 5: case 12: case 13: return DITTO_I64;   /* (u)int16, uint32, uint64: kept as int64 */
    case 6: return DITTO_I32;
    case 7: return DITTO_I64;
    case 9: return DITTO_BOOL;
    case 10: return DITTO_F16;
    case 11: return DITTO_F64;
    case 16: return DITTO_BF16;
    default: return DITTO_DTYPE_COUNT;
    }
}

/* Wrap an integer into a narrower type, as a C cast does. */
static int64_t narrow(int64_t v, DittoDType t)
{
    switch (t) {
    case DITTO_I32: return (int64_t)(int32_t)(uint32_t)(uint64_t)v;
    case DITTO_U8: return (int64_t)(uint8_t)(uint64_t)v;
    case DITTO_I8: return (int64_t)(int8_t)(uint8_t)(uint64_t)v;
    case DITTO_BOOL: return v != 0;
    default: return v;
    }
}

static int cast_to(DittoOnnxRunner *r, const OxNode *n, const OxValue *x, DittoDType to)
{
    if (ox_is_float(x->type) && ox_is_float(to))
        return ox_alias(r, n, 0, x, x->t.ndim, x->t.shape, to);   /* float32 compute: float casts are views */
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, to, xt.ndim, xt.shape, true, &y));
    int64_t numel = ditto_tensor_numel(&xt);
    for (int64_t i = 0; i < numel; i++) {
        if (ox_is_float(x->type)) {
            float v = ((const float *)xt.data)[i];
            int64_t k;
            if (to == DITTO_BOOL)
                k = v != 0.0f;
            else if (v != v)
                k = 0;
            else if (v >= 9.2233720368547758e18f)
                k = INT64_MAX;
            else if (v <= -9.2233720368547758e18f)
                k = INT64_MIN;
            else
                k = (int64_t)v;
            ((int64_t *)y.data)[i] = narrow(k, to);
        } else if (ox_is_float(to)) {
            ((float *)y.data)[i] = (float)((const int64_t *)xt.data)[i];
        } else {
            ((int64_t *)y.data)[i] = narrow(((const int64_t *)xt.data)[i], to);
        }
    }
    return 0;
}

static int run_cast(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    DittoDType to;
    if (!strcmp(n->src->op_type, "CastLike")) {
        const OxValue *like = ox_need(r, n, 1);
        if (!like)
            return DITTO_ERR_FORMAT;
        to = like->type;
    } else {
        int64_t code = ox_attr_int(n, "to", -1);
        to = onnx_elem(code);
        if (to == DITTO_DTYPE_COUNT)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "cast to element type %lld", (long long)code);
    }
    return cast_to(r, n, x, to);
}

/* ---- Where ---- */

static int run_where(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *c = ox_need(r, n, 0), *a = ox_need(r, n, 1), *b = ox_need(r, n, 2);
    if (!c || !a || !b)
        return DITTO_ERR_FORMAT;
    if (ox_is_float(c->type) || ox_is_float(a->type) != ox_is_float(b->type))
        return ox_fail(r, n, DITTO_ERR_INVAL, "condition must be bool and both branches of one type");
    int nd;
    int64_t shape[DITTO_MAX_DIMS], s2[DITTO_MAX_DIMS];
    if (ox_broadcast(a->t.ndim, a->t.shape, b->t.ndim, b->t.shape, &nd, s2) < 0 || ox_broadcast(c->t.ndim, c->t.shape, nd, s2, &nd, shape) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "condition and branches do not broadcast");
    DittoTensor ct, at, bt, y;
    DITTO_TRY(ox_host(r, c, &ct));
    if (ox_is_float(a->type) && !(a->host && b->host)) {
        /* the condition as bool bytes on the device */
        DittoTensor cb, ch;
        DITTO_TRY(ox_temp(r, DITTO_BOOL, ct.ndim, ct.shape, true, &ch));
        int64_t numel = ditto_tensor_numel(&ct);
        for (int64_t i = 0; i < numel; i++)
            ((uint8_t *)ch.data)[i] = ((const int64_t *)ct.data)[i] != 0;
        if (r->be->device == DITTO_DEVICE_CPU) {
            cb = ch;
        } else {
            DITTO_TRY(ox_temp(r, DITTO_BOOL, ct.ndim, ct.shape, false, &cb));
            DITTO_TRY(r->be->upload(r->be, cb.data, ch.data, (size_t)numel));
        }
        DITTO_TRY(ox_dev(r, a, &at));
        DITTO_TRY(ox_dev(r, b, &bt));
        DITTO_TRY(ox_alloc(r, n, 0, a->type, nd, shape, false, &y));
        int rc = ditto_op_where(r->be, &cb, &at, &bt, &y);
        return rc < 0 ? ox_fail(r, n, rc, "where failed") : 0;
    }
    DITTO_TRY(ox_host(r, a, &at));
    DITTO_TRY(ox_host(r, b, &bt));
    DITTO_TRY(ox_alloc(r, n, 0, a->type, nd, shape, true, &y));
    int64_t sc[DITTO_MAX_DIMS], sa[DITTO_MAX_DIMS], sb[DITTO_MAX_DIMS], idx[DITTO_MAX_DIMS] = { 0 };
    bstrides(&ct, nd, shape, sc);
    bstrides(&at, nd, shape, sa);
    bstrides(&bt, nd, shape, sb);
    int64_t numel = ditto_tensor_numel(&y), oc = 0, oa = 0, ob = 0;
    size_t es = ditto_dtype_size(y.dtype);
    for (int64_t i = 0; i < numel; i++) {
        const char *src = ((const int64_t *)ct.data)[oc] ? (const char *)at.data + (size_t)oa * es : (const char *)bt.data + (size_t)ob * es;
        memcpy((char *)y.data + (size_t)i * es, src, es);
        for (int d = nd - 1; d >= 0; d--) {
            oc += sc[d];
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < shape[d])
                break;
            oc -= sc[d] * shape[d];
            oa -= sa[d] * shape[d];
            ob -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
    return 0;
}

/* ---- Clip ---- */

static int run_clip(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    bool flt = ox_is_float(x->type);
    double lo = flt ? -FLT_MAX : (double)INT64_MIN, hi = flt ? FLT_MAX : (double)INT64_MAX;
    if (r->opset < 11) {
        lo = ox_attr_float(n, "min", (float)lo);
        hi = ox_attr_float(n, "max", (float)hi);
    } else {
        const OxValue *vmin = ox_in(r, n, 1), *vmax = ox_in(r, n, 2);
        if (vmin && ditto_tensor_numel(&vmin->t) > 0)
            DITTO_TRY(ox_read_scalar(r, n, vmin, &lo));
        if (vmax && ditto_tensor_numel(&vmax->t) > 0)
            DITTO_TRY(ox_read_scalar(r, n, vmax, &hi));
    }
    if (lo > hi)
        lo = hi;   /* ONNX: min > max gives max everywhere */
    DittoTensor xt, y;
    if (flt && !x->host) {
        DITTO_TRY(ox_dev(r, x, &xt));
        if (!ox_try_inplace(r, n, 0, x, x->type, xt.ndim, xt.shape, &y))
            DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, false, &y));
        return dev_unary(r, n, DITTO_UNARY_CLIP, (float)lo, (float)hi, &xt, &y);
    }
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, true, &y));
    int64_t numel = ditto_tensor_numel(&xt);
    for (int64_t i = 0; i < numel; i++) {
        if (flt) {
            float v = ((const float *)xt.data)[i], a = (float)lo, b = (float)hi;
            ((float *)y.data)[i] = v < a ? a : v > b ? b : v;
        } else {
            int64_t v = ((const int64_t *)xt.data)[i];
            ((int64_t *)y.data)[i] = (double)v < lo ? (int64_t)lo : (double)v > hi ? (int64_t)hi : v;
        }
    }
    return 0;
}

/* ---- PRelu ---- */

static int run_prelu(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *s = ox_need(r, n, 1);
    if (!x || !s)
        return DITTO_ERR_FORMAT;
    DittoTensor xt, st, y;
    int nd;
    int64_t shape[DITTO_MAX_DIMS];
    if (ox_broadcast(x->t.ndim, x->t.shape, s->t.ndim, s->t.shape, &nd, shape) < 0 || nd != x->t.ndim ||
        memcmp(shape, x->t.shape, sizeof(int64_t) * (size_t)nd))
        return ox_fail(r, n, DITTO_ERR_SHAPE, "slope does not broadcast to the input");
    if (ox_is_float(x->type) && ox_is_float(s->type) && !(x->host && s->host)) {
        DITTO_TRY(ox_dev(r, x, &xt));
        DITTO_TRY(ox_dev(r, s, &st));
        if (!ox_try_inplace(r, n, 0, x, x->type, xt.ndim, xt.shape, &y))
            DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, false, &y));
        int rc = ditto_op_prelu(r->be, &xt, &st, &y);
        return rc < 0 ? ox_fail(r, n, rc, "prelu failed") : 0;
    }
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_host(r, s, &st));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, nd, shape, true, &y));
    return host_binary_t(HB_PRELU, ox_is_float(x->type), &xt, &st, &y);
}

const OxOpDef ditto_ox_ops_elementwise[] = {
    { "Add", run_binary }, { "Sub", run_binary }, { "Mul", run_binary }, { "Div", run_binary }, { "Pow", run_binary },
    { "Max", run_binary }, { "Min", run_binary }, { "Sum", run_binary }, { "Mean", run_binary }, { "Mod", run_binary },
    { "Equal", run_binary }, { "Less", run_binary }, { "LessOrEqual", run_binary }, { "Greater", run_binary },
    { "GreaterOrEqual", run_binary }, { "And", run_binary }, { "Or", run_binary }, { "Xor", run_binary },
    { "BitShift", run_binary },
    { "Relu", run_unary }, { "Sigmoid", run_unary }, { "Tanh", run_unary }, { "Exp", run_unary }, { "Log", run_unary },
    { "Sqrt", run_unary }, { "Reciprocal", run_unary }, { "Neg", run_unary }, { "Abs", run_unary }, { "Erf", run_unary },
    { "Sin", run_unary }, { "Cos", run_unary }, { "Softplus", run_unary }, { "Mish", run_unary },
    { "LeakyRelu", run_unary }, { "Gelu", run_unary }, { "Floor", run_unary }, { "Ceil", run_unary },
    { "Round", run_unary }, { "Sign", run_unary }, { "Not", run_unary }, { "IsNaN", run_unary }, { "IsInf", run_unary },
    { "Tan", run_unary }, { "Asin", run_unary }, { "Acos", run_unary }, { "Atan", run_unary }, { "Sinh", run_unary },
    { "Cosh", run_unary }, { "Asinh", run_unary }, { "Acosh", run_unary }, { "Atanh", run_unary },
    { "Softsign", run_unary }, { "HardSigmoid", run_unary }, { "HardSwish", run_unary }, { "Elu", run_unary },
    { "Selu", run_unary }, { "Celu", run_unary }, { "ThresholdedRelu", run_unary },
    { "Cast", run_cast }, { "CastLike", run_cast }, { "Where", run_where }, { "Clip", run_clip }, { "PRelu", run_prelu },
    { NULL, NULL },
};
