/*
 * Shape and data-movement ONNX ops: Shape, Size, Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity, Dropout, Transpose, Slice, Split, Concat, Gather,
 * GatherElements, ScatterND, Expand, Tile, ConstantOfShape, Range, Constant,
 * Pad, DepthToSpace, SpaceToDepth, Trilu, NonZero, CumSum, ArgMax, ArgMin.
 *
 * Reshape-like ops are views of their input's buffer. Transpose, Slice,
 * Expand and Tile build a strided view (stride 0 on broadcast axes) and copy
 * it once, with the backend's copy for device values and a host loop for host
 * values; a view that is already contiguous is shared instead.
 */
#include <math.h>
#include <string.h>

#include "onnx/exec_internal.h"

#define MAX_SHAPE_INTS 64

static int fail_rank(DittoOnnxRunner *r, const OxNode *n, int rank)
{
    return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "rank %d (at most %d supported)", rank, DITTO_MAX_DIMS);
}

/* Axes from the attribute (older opsets) or input `in` (newer); *count = -1 when neither is given. */
static int read_axes(DittoOnnxRunner *r, const OxNode *n, int in, int64_t *axes, int *count)
{
    const OxValue *v = ox_in(r, n, in);
    if (v)
        return ox_read_ints(r, n, v, axes, MAX_SHAPE_INTS, count);
    const int64_t *a;
    int k = ox_attr_ints(n, "axes", &a);
    if (k > MAX_SHAPE_INTS)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "too many axes");
    *count = k;
    for (int i = 0; i < k; i++)
        axes[i] = a[i];
    return 0;
}

/* ---- views ---- */

static int run_identity(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    DITTO_TRY(ox_alias(r, n, 0, x, x->t.ndim, x->t.shape, x->type));
    if (ox_out_used(r, n, 1)) {
        /* Dropout's mask in inference: all true */
        DittoTensor m;
        DITTO_TRY(ox_alloc(r, n, 1, DITTO_BOOL, x->t.ndim, x->t.shape, true, &m));
        int64_t numel = ditto_tensor_numel(&m);
        for (int64_t i = 0; i < numel; i++)
            ((int64_t *)m.data)[i] = 1;
    }
    return 0;
}

static int run_reshape(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int64_t want[MAX_SHAPE_INTS], shape[DITTO_MAX_DIMS];
    int k;
    const OxValue *sv = ox_in(r, n, 1);
    if (sv) {
        DITTO_TRY(ox_read_ints(r, n, sv, want, MAX_SHAPE_INTS, &k));
    } else {
        const int64_t *a;
        k = ox_attr_ints(n, "shape", &a);
        if (k < 0 || k > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "no target shape");
        memcpy(want, a, sizeof(int64_t) * (size_t)k);
    }
    if (k > DITTO_MAX_DIMS)
        return fail_rank(r, n, k);
    bool allowzero = ox_attr_int(n, "allowzero", 0) != 0;
    int64_t known = 1, numel = ditto_tensor_numel(&x->t);
    int infer = -1;
    for (int i = 0; i < k; i++) {
        int64_t s = want[i];
        if (s == 0 && !allowzero) {
            if (i >= x->t.ndim)
                return ox_fail(r, n, DITTO_ERR_SHAPE, "0 in the target shape at axis %d beyond the input rank", i);
            s = x->t.shape[i];
        } else if (s == -1) {
            if (infer >= 0)
                return ox_fail(r, n, DITTO_ERR_SHAPE, "more than one -1 in the target shape");
            infer = i;
            s = 1;
        } else if (s < 0) {
            return ox_fail(r, n, DITTO_ERR_SHAPE, "negative target dimension %lld", (long long)s);
        }
        shape[i] = s;
        known *= s;
    }
    if (infer >= 0) {
        if (known == 0 || numel % known)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "cannot infer -1: %lld elements over %lld", (long long)numel, (long long)known);
        shape[infer] = numel / known;
        known *= shape[infer];
    }
    char a[DITTO_SHAPE_STR_MAX], b[DITTO_SHAPE_STR_MAX];
    if (known != numel)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "cannot reshape %s to %s", ditto_shape_str(x->t.shape, x->t.ndim, a, sizeof a),
                       ditto_shape_str(shape, k, b, sizeof b));
    return ox_alias(r, n, 0, x, k, shape, x->type);
}

static int run_flatten(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int64_t axis = ox_attr_int(n, "axis", 1);
    int nd = x->t.ndim;
    if (axis < 0)
        axis += nd;
    if (axis < 0 || axis > nd)
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range for rank %d", (long long)axis, nd);
    int64_t shape[2] = { 1, 1 };
    for (int i = 0; i < nd; i++)
        shape[i < axis ? 0 : 1] *= x->t.shape[i];
    return ox_alias(r, n, 0, x, 2, shape, x->type);
}

static int run_squeeze(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int64_t axes[MAX_SHAPE_INTS], shape[DITTO_MAX_DIMS];
    int na, nd = x->t.ndim, k = 0;
    DITTO_TRY(read_axes(r, n, 1, axes, &na));
    bool drop[DITTO_MAX_DIMS] = { false };
    for (int i = 0; i < na; i++) {
        int a;
        if (!ox_axis(axes[i], nd, &a) || x->t.shape[a] != 1)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "axis %lld is not a dimension of size 1", (long long)axes[i]);
        drop[a] = true;
    }
    for (int i = 0; i < nd; i++)
        if (!(na > 0 ? drop[i] : x->t.shape[i] == 1))
            shape[k++] = x->t.shape[i];
    return ox_alias(r, n, 0, x, k, shape, x->type);
}

static int run_unsqueeze(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int64_t axes[MAX_SHAPE_INTS], shape[DITTO_MAX_DIMS];
    int na;
    DITTO_TRY(read_axes(r, n, 1, axes, &na));
    if (na < 1)
        return ox_fail(r, n, DITTO_ERR_FORMAT, "no axes");
    int out = x->t.ndim + na;
    if (out > DITTO_MAX_DIMS)
        return fail_rank(r, n, out);
    bool ins[DITTO_MAX_DIMS] = { false };
    for (int i = 0; i < na; i++) {
        int a;
        if (!ox_axis(axes[i], out, &a) || ins[a])
            return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range or repeated", (long long)axes[i]);
        ins[a] = true;
    }
    for (int i = 0, j = 0; i < out; i++)
        shape[i] = ins[i] ? 1 : x->t.shape[j++];
    return ox_alias(r, n, 0, x, out, shape, x->type);
}

/* ---- shape queries ---- */

static int run_shape(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int nd = x->t.ndim;
    int64_t start = ox_attr_int(n, "start", 0), end = ox_attr_int(n, "end", nd);
    if (start < 0)
        start += nd;
    if (end < 0)
        end += nd;
    start = start < 0 ? 0 : start > nd ? nd : start;
    end = end < 0 ? 0 : end > nd ? nd : end;
    int64_t len = end > start ? end - start : 0;
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, 1, &len, true, &y));
    for (int64_t i = 0; i < len; i++)
        ((int64_t *)y.data)[i] = x->t.shape[start + i];
    return 0;
}

static int run_size(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, 0, NULL, true, &y));
    *(int64_t *)y.data = ditto_tensor_numel(&x->t);
    return 0;
}

/* ---- strided views, copied once ---- */

/* Output k = the view (of x's storage): shared when contiguous, else copied. */
static int emit_view(DittoOnnxRunner *r, const OxNode *n, int k, const OxValue *x, const DittoTensor *view)
{
    if (ditto_tensor_is_contiguous(view)) {
        int64_t off = ((const char *)view->data - (const char *)x->t.data) / (int64_t)ditto_dtype_size(x->t.dtype);
        return ox_alias_at(r, n, k, x, off, view->ndim, view->shape);
    }
    return ox_materialize(r, n, k, x, view, x->type);
}

static int run_transpose(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int nd = x->t.ndim;
    const int64_t *perm;
    int np = ox_attr_ints(n, "perm", &perm);
    int p[DITTO_MAX_DIMS];
    bool seen[DITTO_MAX_DIMS] = { false };
    if (np >= 0 && np != nd)
        return ox_fail(r, n, DITTO_ERR_INVAL, "perm has %d entries for rank %d", np, nd);
    for (int i = 0; i < nd; i++) {
        p[i] = np < 0 ? nd - 1 - i : (int)perm[i];
        if (p[i] < 0 || p[i] >= nd || seen[p[i]])
            return ox_fail(r, n, DITTO_ERR_INVAL, "perm is not a permutation");
        seen[p[i]] = true;
    }
    DittoTensor v;
    int rc = ditto_tensor_permute(&x->t, p, &v);
    if (rc < 0)
        return ox_fail(r, n, rc, "bad permutation");
    return emit_view(r, n, 0, x, &v);
}

/* Clamp a Slice start/end per the ONNX rules. */
static void slice_range(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *s0, int64_t *len)
{
    if (start < 0)
        start += dim;
    if (end < 0)
        end += dim;
    if (step > 0) {
        start = start < 0 ? 0 : start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        *len = end > start ? (end - start + step - 1) / step : 0;
    } else {
        start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start;
        end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
        *len = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    *s0 = start;
}

static int run_slice(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int nd = x->t.ndim;
    int64_t starts[MAX_SHAPE_INTS], ends[MAX_SHAPE_INTS], axes[MAX_SHAPE_INTS], steps[MAX_SHAPE_INTS];
    int ns, ne, na = -1, nst = -1;
    if (r->opset < 10 || !ox_in(r, n, 1)) {
        const int64_t *a;
        ns = ox_attr_ints(n, "starts", &a);
        if (ns < 0 || ns > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "no starts");
        memcpy(starts, a, sizeof(int64_t) * (size_t)ns);
        ne = ox_attr_ints(n, "ends", &a);
        if (ne < 0 || ne > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "no ends");
        memcpy(ends, a, sizeof(int64_t) * (size_t)ne);
        na = ox_attr_ints(n, "axes", &a);
        if (na > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "too many axes");
        if (na > 0)
            memcpy(axes, a, sizeof(int64_t) * (size_t)na);
    } else {
        DITTO_TRY(ox_read_ints(r, n, ox_need(r, n, 1), starts, MAX_SHAPE_INTS, &ns));
        const OxValue *ev = ox_need(r, n, 2);
        if (!ev)
            return DITTO_ERR_FORMAT;
        DITTO_TRY(ox_read_ints(r, n, ev, ends, MAX_SHAPE_INTS, &ne));
        if (ox_in(r, n, 3))
            DITTO_TRY(ox_read_ints(r, n, ox_in(r, n, 3), axes, MAX_SHAPE_INTS, &na));
        if (ox_in(r, n, 4))
            DITTO_TRY(ox_read_ints(r, n, ox_in(r, n, 4), steps, MAX_SHAPE_INTS, &nst));
    }
    if (ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ox_fail(r, n, DITTO_ERR_INVAL, "starts, ends, axes and steps differ in length");
    DittoTensor v = x->t;
    size_t es = ditto_dtype_size(x->t.dtype);
    bool seen[DITTO_MAX_DIMS] = { false };
    for (int i = 0; i < ns; i++) {
        int a;
        if (!ox_axis(na >= 0 ? axes[i] : i, nd, &a) || seen[a])
            return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range or repeated", (long long)(na >= 0 ? axes[i] : i));
        seen[a] = true;
        int64_t step = nst >= 0 ? steps[i] : 1;
        if (step == 0)
            return ox_fail(r, n, DITTO_ERR_INVAL, "step 0");
        int64_t s0, len;
        slice_range(x->t.shape[a], starts[i], ends[i], step, &s0, &len);
        if (len > 0)
            v.data = (char *)v.data + (size_t)(s0 * v.stride[a]) * es;
        v.shape[a] = len;
        v.stride[a] *= step;
    }
    if (ditto_tensor_numel(&v) == 0)
        v.data = x->t.data;
    return emit_view(r, n, 0, x, &v);
}

static int run_split(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int axis;
    if (!ox_axis(ox_attr_int(n, "axis", 0), x->t.ndim, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
    int64_t sizes[MAX_SHAPE_INTS];
    int k = -1;
    int64_t dim = x->t.shape[axis];
    if (ox_in(r, n, 1)) {
        DITTO_TRY(ox_read_ints(r, n, ox_in(r, n, 1), sizes, MAX_SHAPE_INTS, &k));
    } else {
        const int64_t *a;
        k = ox_attr_ints(n, "split", &a);
        if (k > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_INVAL, "too many parts");
        if (k > 0)
            memcpy(sizes, a, sizeof(int64_t) * (size_t)k);
    }
    if (k < 0) {
        int64_t parts = ox_attr_int(n, "num_outputs", n->nout);
        if (parts < 1 || parts > MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_INVAL, "bad number of outputs");
        /* equal parts; with num_outputs (opset 18) the last may be smaller */
        int64_t each = (dim + parts - 1) / parts;
        if (!ox_has_attr(n, "num_outputs") && dim % parts)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "axis of %lld does not split into %lld equal parts", (long long)dim, (long long)parts);
        k = (int)parts;
        for (int i = 0; i < k; i++)
            sizes[i] = i < k - 1 ? each : dim - each * (k - 1);
    }
    if (k != n->nout)
        return ox_fail(r, n, DITTO_ERR_INVAL, "%d parts for %d outputs", k, n->nout);
    int64_t off = 0;
    for (int i = 0; i < k; i++) {
        if (sizes[i] < 0 || off + sizes[i] > dim)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "split sizes exceed the axis of %lld", (long long)dim);
        DittoTensor v;
        int rc = ditto_tensor_slice(&x->t, axis, off, off + sizes[i], 1, &v);
        if (rc < 0)
            return ox_fail(r, n, rc, "bad split");
        off += sizes[i];
        if (ox_out_used(r, n, i))
            DITTO_TRY(emit_view(r, n, i, x, &v));
    }
    if (off != dim)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "split sizes sum to %lld, the axis has %lld", (long long)off, (long long)dim);
    return 0;
}

static int run_concat(DittoOnnxRunner *r, const OxNode *n)
{
    int nin = n->nin;
    const OxValue *x0 = ox_need(r, n, 0);
    if (!x0)
        return DITTO_ERR_FORMAT;
    int nd = x0->t.ndim, axis;
    if (!ox_axis(ox_attr_int(n, "axis", 0), nd, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range for rank %d", nd);
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, x0->t.shape, sizeof shape);
    shape[axis] = 0;
    bool host = true, flt = ox_is_float(x0->type);
    for (int i = 0; i < nin; i++) {
        const OxValue *x = ox_need(r, n, i);
        if (!x)
            return DITTO_ERR_FORMAT;
        if (x->t.ndim != nd || ox_is_float(x->type) != flt)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "input %d differs in rank or type", i);
        for (int d = 0; d < nd; d++)
            if (d != axis && x->t.shape[d] != shape[d])
                return ox_fail(r, n, DITTO_ERR_SHAPE, "input %d differs outside the axis", i);
        shape[axis] += x->t.shape[axis];
        host = host && x->host;
    }
    host = host || !flt;
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, x0->type, nd, shape, host, &y));
    if (ditto_tensor_numel(&y) == 0)
        return 0;
    if (host) {
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; d++)
            outer *= shape[d];
        for (int d = axis + 1; d < nd; d++)
            inner *= shape[d];
        size_t es = ditto_dtype_size(y.dtype);
        char *dst = y.data;
        for (int64_t o = 0; o < outer; o++)
            for (int i = 0; i < nin; i++) {
                DittoTensor xt;
                DITTO_TRY(ox_host(r, ox_in(r, n, i), &xt));
                size_t chunk = (size_t)(xt.shape[axis] * inner) * es;
                memcpy(dst, (const char *)xt.data + (size_t)o * chunk, chunk);
                dst += chunk;
            }
        return 0;
    }
    DittoTensor ts[64];
    const DittoTensor *ptrs[64];
    int k = 0;
    for (int i = 0; i < nin; i++) {
        const OxValue *x = ox_in(r, n, i);
        if (x->t.shape[axis] == 0)
            continue;
        if (k == 64)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "more than 64 non-empty inputs");
        DITTO_TRY(ox_dev(r, x, &ts[k]));
        ptrs[k] = &ts[k];
        k++;
    }
    int rc = ditto_op_concat(r->be, axis, k, ptrs, &y);
    return rc < 0 ? ox_fail(r, n, rc, "concat failed") : 0;
}

/* ---- gathers ---- */

static int run_gather(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *iv = ox_need(r, n, 1);
    if (!x || !iv)
        return DITTO_ERR_FORMAT;
    if (ox_is_float(iv->type))
        return ox_fail(r, n, DITTO_ERR_INVAL, "indices must be integers");
    int axis, nd = x->t.ndim;
    if (!ox_axis(ox_attr_int(n, "axis", 0), nd, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range for rank %d", nd);
    int ny = nd - 1 + iv->t.ndim;
    if (ny > DITTO_MAX_DIMS)
        return fail_rank(r, n, ny);
    int64_t shape[DITTO_MAX_DIMS];
    for (int i = 0; i < ny; i++)
        shape[i] = i < axis ? x->t.shape[i] : i < axis + iv->t.ndim ? iv->t.shape[i - axis] : x->t.shape[i - iv->t.ndim + 1];
    DittoTensor y, xt, it;
    DITTO_TRY(ox_host(r, iv, &it));
    int64_t dim = x->t.shape[axis], m = ditto_tensor_numel(&it);
    const int64_t *idx = it.data;
    for (int64_t j = 0; j < m; j++)
        if (idx[j] < -dim || idx[j] >= dim)
            return ox_fail(r, n, DITTO_ERR_RANGE, "index %lld out of range for an axis of %lld", (long long)idx[j], (long long)dim);
    if (ox_is_float(x->type) && !x->host) {
        DITTO_TRY(ox_dev(r, x, &xt));
        DITTO_TRY(ox_dev(r, iv, &it));
        DITTO_TRY(ox_alloc(r, n, 0, x->type, ny, shape, false, &y));
        int rc = ditto_op_gather(r->be, axis, &xt, &it, &y);
        return rc < 0 ? ox_fail(r, n, rc, "gather failed") : 0;
    }
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, ny, shape, true, &y));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
        outer *= x->t.shape[i];
    for (int i = axis + 1; i < nd; i++)
        inner *= x->t.shape[i];
    size_t es = ditto_dtype_size(xt.dtype), chunk = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++) {
            int64_t k = idx[j] < 0 ? idx[j] + dim : idx[j];
            memcpy((char *)y.data + (size_t)(o * m + j) * chunk, (const char *)xt.data + (size_t)(o * dim + k) * chunk, chunk);
        }
    return 0;
}

static int run_gather_elements(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *iv = ox_need(r, n, 1);
    if (!x || !iv)
        return DITTO_ERR_FORMAT;
    int axis, nd = x->t.ndim;
    if (!ox_axis(ox_attr_int(n, "axis", 0), nd, &axis) || iv->t.ndim != nd)
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range or indices of another rank");
    DittoTensor xt, it, y;
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_host(r, iv, &it));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, nd, it.shape, true, &y));
    int64_t numel = ditto_tensor_numel(&y), idx[DITTO_MAX_DIMS] = { 0 }, dim = xt.shape[axis];
    size_t es = ditto_dtype_size(xt.dtype);
    for (int64_t i = 0; i < numel; i++) {
        int64_t k = ((const int64_t *)it.data)[i], off = 0;
        if (k < -dim || k >= dim)
            return ox_fail(r, n, DITTO_ERR_RANGE, "index %lld out of range for an axis of %lld", (long long)k, (long long)dim);
        for (int d = 0; d < nd; d++) {
            int64_t c = d == axis ? (k < 0 ? k + dim : k) : idx[d];
            if (c >= xt.shape[d])
                return ox_fail(r, n, DITTO_ERR_SHAPE, "indices larger than the data outside the axis");
            off = off * xt.shape[d] + c;
        }
        memcpy((char *)y.data + (size_t)i * es, (const char *)xt.data + (size_t)off * es, es);
        for (int d = nd - 1; d >= 0 && ++idx[d] == it.shape[d]; d--)
            idx[d] = 0;
    }
    return 0;
}

static int run_scatter_nd(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *iv = ox_need(r, n, 1), *uv = ox_need(r, n, 2);
    if (!x || !iv || !uv)
        return DITTO_ERR_FORMAT;
    const char *red = ox_attr_str(n, "reduction", "none");
    if (strcmp(red, "none"))
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "reduction '%s'", red);
    DittoTensor xt, it, ut, y;
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_host(r, iv, &it));
    DITTO_TRY(ox_host(r, uv, &ut));
    int q = it.ndim, k = q > 0 ? (int)it.shape[q - 1] : 0;
    if (q < 1 || k > xt.ndim)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "indices of rank %d with tuples of %d for data of rank %d", q, k, xt.ndim);
    DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, true, &y));
    size_t es = ditto_dtype_size(xt.dtype);
    memcpy(y.data, xt.data, ditto_tensor_nbytes(&y));
    int64_t slice = 1, tuples = ditto_tensor_numel(&it) / (k ? k : 1);
    for (int d = k; d < xt.ndim; d++)
        slice *= xt.shape[d];
    if (ditto_tensor_numel(&ut) != tuples * slice)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "updates do not match indices and data");
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off = 0;
        for (int d = 0; d < k; d++) {
            int64_t c = ((const int64_t *)it.data)[t * k + d], dim = xt.shape[d];
            if (c < -dim || c >= dim)
                return ox_fail(r, n, DITTO_ERR_RANGE, "index %lld out of range for an axis of %lld", (long long)c, (long long)dim);
            off = off * dim + (c < 0 ? c + dim : c);
        }
        memcpy((char *)y.data + (size_t)(off * slice) * es, (const char *)ut.data + (size_t)(t * slice) * es, (size_t)slice * es);
    }
    return 0;
}

/* ---- broadcasting copies ---- */

static int run_expand(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *sv = ox_need(r, n, 1);
    if (!x || !sv)
        return DITTO_ERR_FORMAT;
    int64_t want[MAX_SHAPE_INTS], shape[DITTO_MAX_DIMS];
    int k, nd;
    DITTO_TRY(ox_read_ints(r, n, sv, want, MAX_SHAPE_INTS, &k));
    if (k > DITTO_MAX_DIMS)
        return fail_rank(r, n, k);
    if (ox_broadcast(x->t.ndim, x->t.shape, k, want, &nd, shape) < 0)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "the input does not broadcast to the requested shape");
    DittoTensor v = x->t;
    v.ndim = nd;
    for (int i = 0; i < nd; i++) {
        int j = i - (nd - x->t.ndim);
        v.shape[i] = shape[i];
        v.stride[i] = j >= 0 && x->t.shape[j] == shape[i] ? x->t.stride[j] : 0;
    }
    return emit_view(r, n, 0, x, &v);
}

static int run_tile(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *rv = ox_need(r, n, 1);
    if (!x || !rv)
        return DITTO_ERR_FORMAT;
    int64_t rep[MAX_SHAPE_INTS], out[DITTO_MAX_DIMS];
    int k, nd = x->t.ndim;
    DITTO_TRY(ox_read_ints(r, n, rv, rep, MAX_SHAPE_INTS, &k));
    if (k != nd)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "%d repeats for rank %d", k, nd);
    /* (r_i, d_i) pairs with stride 0 on r_i: a contiguous copy is the tiled tensor */
    DittoTensor v = x->t;
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (rep[i] < 0)
            return ox_fail(r, n, DITTO_ERR_INVAL, "negative repeat");
        out[i] = x->t.shape[i] * rep[i];
        if (rep[i] != 1) {
            if (m == DITTO_MAX_DIMS)
                return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "too many repeated axes for rank %d", nd);
            v.shape[m] = rep[i];
            v.stride[m++] = 0;
        }
        if (m == DITTO_MAX_DIMS)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "too many repeated axes for rank %d", nd);
        v.shape[m] = x->t.shape[i];
        v.stride[m++] = x->t.stride[i];
    }
    v.ndim = m;
    DITTO_TRY(ox_materialize(r, n, 0, x, &v, x->type));
    return ox_reshape_output(r, n, 0, nd, out);
}

/* ---- generators ---- */

static int run_constant_of_shape(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *sv = ox_need(r, n, 0);
    if (!sv)
        return DITTO_ERR_FORMAT;
    int64_t shape[MAX_SHAPE_INTS];
    int k;
    DITTO_TRY(ox_read_ints(r, n, sv, shape, MAX_SHAPE_INTS, &k));
    if (k > DITTO_MAX_DIMS)
        return fail_rank(r, n, k);
    DittoDType type = DITTO_F32;
    double value = 0;
    const DittoOnnxAttr *a = NULL;
    for (int i = 0; i < n->src->n_attrs; i++)
        if (!strcmp(n->src->attrs[i].name, "value"))
            a = &n->src->attrs[i];
    if (a && a->type == DITTO_ATTR_TENSOR && a->tensor) {
        const DittoCatalogEntry *e = a->tensor;
        if ((unsigned)e->dtype >= DITTO_DTYPE_COUNT || ditto_catalog_entry_numel(e) != 1)
            return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "value must be one element of a supported type");
        type = e->dtype;
        ditto_convert_unaligned(&value, DITTO_F64, e->data, e->dtype, 1);
    }
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, type, k, shape, true, &y));
    int64_t numel = ditto_tensor_numel(&y);
    for (int64_t i = 0; i < numel; i++) {
        if (y.dtype == DITTO_F32)
            ((float *)y.data)[i] = (float)value;
        else
            ((int64_t *)y.data)[i] = (int64_t)value;
    }
    return 0;
}

static int run_range(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *sv = ox_need(r, n, 0), *lv = ox_need(r, n, 1), *dv = ox_need(r, n, 2);
    if (!sv || !lv || !dv)
        return DITTO_ERR_FORMAT;
    double s, l, d;
    DITTO_TRY(ox_read_scalar(r, n, sv, &s));
    DITTO_TRY(ox_read_scalar(r, n, lv, &l));
    DITTO_TRY(ox_read_scalar(r, n, dv, &d));
    if (d == 0)
        return ox_fail(r, n, DITTO_ERR_INVAL, "delta 0");
    double cnt = ceil((l - s) / d);
    int64_t len = cnt > 0 ? (int64_t)cnt : 0;
    if (len > ((int64_t)1 << 40))
        return ox_fail(r, n, DITTO_ERR_RANGE, "range of %lld elements", (long long)len);
    DittoTensor y;
    DITTO_TRY(ox_alloc(r, n, 0, sv->type, 1, &len, true, &y));
    for (int64_t i = 0; i < len; i++) {
        if (y.dtype == DITTO_F32)
            ((float *)y.data)[i] = (float)s + (float)i * (float)d;
        else
            ((int64_t *)y.data)[i] = (int64_t)s + i * (int64_t)d;
    }
    return 0;
}

static int run_constant(DittoOnnxRunner *r, const OxNode *n)
{
    const DittoOnnxNode *s = n->src;
    for (int i = 0; i < s->n_attrs; i++) {
        const DittoOnnxAttr *a = &s->attrs[i];
        DittoTensor y;
        if (!strcmp(a->name, "value") && a->type == DITTO_ATTR_TENSOR && a->tensor)
            return ox_const_entry(r, n, 0, a->tensor);
        if (!strcmp(a->name, "value_float") && a->type == DITTO_ATTR_FLOAT) {
            DITTO_TRY(ox_alloc(r, n, 0, DITTO_F32, 0, NULL, true, &y));
            *(float *)y.data = a->f;
            return 0;
        }
        if (!strcmp(a->name, "value_int") && a->type == DITTO_ATTR_INT) {
            DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, 0, NULL, true, &y));
            *(int64_t *)y.data = a->i;
            return 0;
        }
        if (!strcmp(a->name, "value_floats") && a->type == DITTO_ATTR_FLOATS) {
            int64_t len = (int64_t)a->n;
            DITTO_TRY(ox_alloc(r, n, 0, DITTO_F32, 1, &len, true, &y));
            if (len)
                memcpy(y.data, a->floats, (size_t)len * sizeof(float));
            return 0;
        }
        if (!strcmp(a->name, "value_ints") && a->type == DITTO_ATTR_INTS) {
            int64_t len = (int64_t)a->n;
            DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, 1, &len, true, &y));
            if (len)
                memcpy(y.data, a->ints, (size_t)len * sizeof(int64_t));
            return 0;
        }
    }
    return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "no value, value_float(s) or value_int(s) attribute (sparse and string constants are not supported)");
}

/* ---- Pad ---- */

static int run_pad(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int nd = x->t.ndim;
    int64_t pads[2 * MAX_SHAPE_INTS], axes[MAX_SHAPE_INTS];
    int np, na = -1;
    double value = 0;
    if (r->opset < 11) {
        const int64_t *a;
        np = ox_attr_ints(n, r->opset < 2 && !ox_has_attr(n, "pads") ? "paddings" : "pads", &a);
        if (np < 0 || np > 2 * MAX_SHAPE_INTS)
            return ox_fail(r, n, DITTO_ERR_FORMAT, "no pads");
        memcpy(pads, a, sizeof(int64_t) * (size_t)np);
        value = ox_attr_float(n, "value", 0.0f);
    } else {
        const OxValue *pv = ox_need(r, n, 1);
        if (!pv)
            return DITTO_ERR_FORMAT;
        DITTO_TRY(ox_read_ints(r, n, pv, pads, 2 * MAX_SHAPE_INTS, &np));
        const OxValue *cv = ox_in(r, n, 2);
        if (cv && ditto_tensor_numel(&cv->t) > 0)
            DITTO_TRY(ox_read_scalar(r, n, cv, &value));
        if (ox_in(r, n, 3))
            DITTO_TRY(ox_read_ints(r, n, ox_in(r, n, 3), axes, MAX_SHAPE_INTS, &na));
    }
    int count = na >= 0 ? na : nd;
    if (np != 2 * count)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "%d pads for %d axes", np, count);
    DittoPadParams p;
    memset(&p, 0, sizeof p);
    p.value = (float)value;
    const char *mode = ox_attr_str(n, "mode", "constant");
    if (!strcmp(mode, "constant"))
        p.mode = DITTO_PAD_CONSTANT;
    else if (!strcmp(mode, "reflect"))
        p.mode = DITTO_PAD_REFLECT;
    else if (!strcmp(mode, "edge"))
        p.mode = DITTO_PAD_EDGE;
    else if (!strcmp(mode, "wrap"))
        p.mode = DITTO_PAD_WRAP;
    else
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "mode '%s'", mode);
    int64_t shape[DITTO_MAX_DIMS];
    memcpy(shape, x->t.shape, sizeof shape);
    for (int i = 0; i < count; i++) {
        int a = i;
        if (na >= 0 && !ox_axis(axes[i], nd, &a))
            return ox_fail(r, n, DITTO_ERR_INVAL, "axis %lld out of range", (long long)axes[i]);
        p.begin[a] = pads[i];
        p.end[a] = pads[count + i];
        shape[a] = x->t.shape[a] + pads[i] + pads[count + i];
        if (shape[a] < 0)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "pads crop axis %d below zero", a);
    }
    bool flt = ox_is_float(x->type);
    if (!flt && r->be->device != DITTO_DEVICE_CPU)
        return ox_fail(r, n, DITTO_ERR_UNSUPPORTED, "integer Pad on the %s backend", r->be->name);
    DittoTensor xt, y;
    DITTO_TRY(ox_dev(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, nd, shape, !flt, &y));
    y.device = xt.device;
    int rc = ditto_op_pad(r->be, &p, &xt, &y);
    return rc < 0 ? ox_fail(r, n, rc, "pad failed") : 0;
}

/* ---- DepthToSpace / SpaceToDepth: 6-D views ---- */

static int run_depth_space(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int64_t b = ox_attr_int(n, "blocksize", 0);
    if (x->t.ndim != 4 || b < 1)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "needs a 4-D input and blocksize >= 1");
    int64_t N = x->t.shape[0], C = x->t.shape[1], H = x->t.shape[2], W = x->t.shape[3];
    bool to_space = !strcmp(n->src->op_type, "DepthToSpace");
    DittoTensor v6 = x->t, v;
    int perm[6];
    int64_t out[4];
    if (to_space) {
        if (C % (b * b))
            return ox_fail(r, n, DITTO_ERR_SHAPE, "channels not divisible by blocksize^2");
        int64_t c = C / (b * b);
        bool crd = !strcmp(ox_attr_str(n, "mode", "DCR"), "CRD");
        int64_t s6[6] = { N, crd ? c : b, b, crd ? b : c, H, W };
        if (crd) {
            /* (N, C', b1, b2, H, W) -> (N, C', H, b1, W, b2) */
            const int p[6] = { 0, 1, 4, 2, 5, 3 };
            memcpy(perm, p, sizeof perm);
        } else {
            /* (N, b1, b2, C', H, W) -> (N, C', H, b1, W, b2) */
            const int p[6] = { 0, 3, 4, 1, 5, 2 };
            memcpy(perm, p, sizeof perm);
        }
        v6.ndim = 6;
        memcpy(v6.shape, s6, sizeof s6);
        ditto_tensor_set_contiguous(&v6);
        out[0] = N; out[1] = c; out[2] = H * b; out[3] = W * b;
    } else {
        if (H % b || W % b)
            return ox_fail(r, n, DITTO_ERR_SHAPE, "spatial size not divisible by blocksize");
        /* (N, C, H', b1, W', b2) -> (N, b1, b2, C, H', W') */
        int64_t s6[6] = { N, C, H / b, b, W / b, b };
        const int p[6] = { 0, 3, 5, 1, 2, 4 };
        memcpy(perm, p, sizeof perm);
        v6.ndim = 6;
        memcpy(v6.shape, s6, sizeof s6);
        ditto_tensor_set_contiguous(&v6);
        out[0] = N; out[1] = C * b * b; out[2] = H / b; out[3] = W / b;
    }
    int rc = ditto_tensor_permute(&v6, perm, &v);
    if (rc < 0)
        return ox_fail(r, n, rc, "bad view");
    DITTO_TRY(ox_materialize(r, n, 0, x, &v, x->type));
    return ox_reshape_output(r, n, 0, 4, out);
}

/* ---- host-only ops ---- */

static int run_trilu(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    if (x->t.ndim < 2)
        return ox_fail(r, n, DITTO_ERR_SHAPE, "needs rank >= 2");
    double kd = 0;
    if (ox_in(r, n, 1))
        DITTO_TRY(ox_read_scalar(r, n, ox_in(r, n, 1), &kd));
    int64_t k = (int64_t)kd;
    bool upper = ox_attr_int(n, "upper", 1) != 0;
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, true, &y));
    int64_t rows = xt.shape[xt.ndim - 2], cols = xt.shape[xt.ndim - 1], numel = ditto_tensor_numel(&xt);
    size_t es = ditto_dtype_size(xt.dtype);
    memcpy(y.data, xt.data, ditto_tensor_nbytes(&y));
    for (int64_t e = 0; e < numel; e++) {
        int64_t j = e % cols, i = e / cols % rows;
        bool keep = upper ? j - i >= k : j - i <= k;
        if (!keep)
            memset((char *)y.data + (size_t)e * es, 0, es);
    }
    return 0;
}

static int run_nonzero(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    int64_t numel = ditto_tensor_numel(&xt), cnt = 0;
    for (int64_t i = 0; i < numel; i++)
        cnt += xt.dtype == DITTO_F32 ? ((const float *)xt.data)[i] != 0.0f : ((const int64_t *)xt.data)[i] != 0;
    int rank = xt.ndim > 0 ? xt.ndim : 1;
    int64_t shape[2] = { xt.ndim, cnt };
    DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, 2, shape, true, &y));
    int64_t j = 0;
    for (int64_t i = 0; i < numel; i++) {
        bool nz = xt.dtype == DITTO_F32 ? ((const float *)xt.data)[i] != 0.0f : ((const int64_t *)xt.data)[i] != 0;
        if (!nz)
            continue;
        int64_t rem = i;
        for (int d = xt.ndim - 1; d >= 0; d--) {
            ((int64_t *)y.data)[d * cnt + j] = rem % xt.shape[d];
            rem /= xt.shape[d];
        }
        j++;
    }
    (void)rank;
    return 0;
}

static int run_cumsum(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0), *av = ox_need(r, n, 1);
    if (!x || !av)
        return DITTO_ERR_FORMAT;
    double ad;
    DITTO_TRY(ox_read_scalar(r, n, av, &ad));
    int axis;
    if (!ox_axis((int64_t)ad, x->t.ndim, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
    bool excl = ox_attr_int(n, "exclusive", 0) != 0, rev = ox_attr_int(n, "reverse", 0) != 0;
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    DITTO_TRY(ox_alloc(r, n, 0, x->type, xt.ndim, xt.shape, true, &y));
    int64_t outer = 1, inner = 1, len = xt.shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= xt.shape[i];
    for (int i = axis + 1; i < xt.ndim; i++)
        inner *= xt.shape[i];
    bool flt = xt.dtype == DITTO_F32;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            double acc = 0;
            int64_t iacc = 0;
            for (int64_t s = 0; s < len; s++) {
                int64_t k = rev ? len - 1 - s : s, off = (o * len + k) * inner + c;
                double v = flt ? ((const float *)xt.data)[off] : 0;
                int64_t iv = flt ? 0 : ((const int64_t *)xt.data)[off];
                if (!excl) {
                    acc += v;
                    iacc += iv;
                }
                if (flt)
                    ((float *)y.data)[off] = (float)acc;
                else
                    ((int64_t *)y.data)[off] = iacc;
                if (excl) {
                    acc += v;
                    iacc += iv;
                }
            }
        }
    return 0;
}

static int run_arg(DittoOnnxRunner *r, const OxNode *n)
{
    const OxValue *x = ox_need(r, n, 0);
    if (!x)
        return DITTO_ERR_FORMAT;
    int axis, nd = x->t.ndim;
    if (!ox_axis(ox_attr_int(n, "axis", 0), nd, &axis))
        return ox_fail(r, n, DITTO_ERR_INVAL, "axis out of range");
    bool keep = ox_attr_int(n, "keepdims", 1) != 0, last = ox_attr_int(n, "select_last_index", 0) != 0;
    bool is_max = !strcmp(n->src->op_type, "ArgMax");
    DittoTensor xt, y;
    DITTO_TRY(ox_host(r, x, &xt));
    int64_t shape[DITTO_MAX_DIMS];
    int ny = 0;
    for (int i = 0; i < nd; i++) {
        if (i != axis)
            shape[ny++] = xt.shape[i];
        else if (keep)
            shape[ny++] = 1;
    }
    DITTO_TRY(ox_alloc(r, n, 0, DITTO_I64, ny, shape, true, &y));
    int64_t outer = 1, inner = 1, len = xt.shape[axis];
    for (int i = 0; i < axis; i++)
        outer *= xt.shape[i];
    for (int i = axis + 1; i < nd; i++)
        inner *= xt.shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            int64_t best = 0;
            double bv = 0;
            for (int64_t s = 0; s < len; s++) {
                int64_t off = (o * len + s) * inner + c;
                double v = xt.dtype == DITTO_F32 ? ((const float *)xt.data)[off] : (double)((const int64_t *)xt.data)[off];
                bool better = s == 0 || (is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv));
                if (better) {
                    best = s;
                    bv = v;
                }
            }
            ((int64_t *)y.data)[o * inner + c] = best;
        }
    return 0;
}

const OxOpDef ditto_ox_ops_shape[] = {
    { "Identity", run_identity }, { "Dropout", run_identity }, { "Reshape", run_reshape }, { "Flatten", run_flatten },
    { "Squeeze", run_squeeze }, { "Unsqueeze", run_unsqueeze }, { "Shape", run_shape }, { "Size", run_size },
    { "Transpose", run_transpose }, { "Slice", run_slice }, { "Split", run_split }, { "Concat", run_concat },
    { "Gather", run_gather }, { "GatherElements", run_gather_elements }, { "ScatterND", run_scatter_nd },
    { "Expand", run_expand }, { "Tile", run_tile }, { "ConstantOfShape", run_constant_of_shape }, { "Range", run_range },
    { "Constant", run_constant }, { "Pad", run_pad }, { "DepthToSpace", run_depth_space }, { "SpaceToDepth", run_depth_space },
    { "Trilu", run_trilu }, { "NonZero", run_nonzero }, { "CumSum", run_cumsum }, { "ArgMax", run_arg }, { "ArgMin", run_arg },
    { NULL, NULL },
};
