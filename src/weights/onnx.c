/*
 * ONNX reader: ModelProto -> DittoOnnxModel (see onnx.h). Field numbers are
 * those of onnx/onnx.proto. Repeated fields are read in two passes over the
 * same bytes (count, then fill) so that every array is allocated once at its
 * exact size; all strings and arrays of a model live in one arena. Sizes come
 * from the file only after overflow checks, and no allocation is larger than
 * a small multiple of the bytes that describe it.
 */
#include "weights/onnx.h"

#include <limits.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "weights/protobuf.h"

/* ONNX TensorProto.DataType values */
enum {
    ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_UINT16 = 4, ONNX_INT16 = 5, ONNX_INT32 = 6, ONNX_INT64 = 7,
    ONNX_STRING = 8, ONNX_BOOL = 9, ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11, ONNX_UINT32 = 12, ONNX_UINT64 = 13,
    ONNX_COMPLEX64 = 14, ONNX_COMPLEX128 = 15, ONNX_BFLOAT16 = 16,
};

/* AttributeProto.AttributeType values */
enum {
    A_UNDEFINED = 0, A_FLOAT = 1, A_INT = 2, A_STRING = 3, A_TENSOR = 4, A_GRAPH = 5, A_FLOATS = 6, A_INTS = 7,
    A_STRINGS = 8, A_TENSORS = 9, A_GRAPHS = 10, A_SPARSE_TENSOR = 11, A_SPARSE_TENSORS = 12, A_TYPE_PROTO = 13,
    A_TYPE_PROTOS = 14,
};

typedef struct ArenaBlock {
    struct ArenaBlock *next;
    size_t used, cap;
    max_align_t align;   /* the data follows the header, aligned for any type */
} ArenaBlock;

typedef struct OnnxImpl {
    DittoOnnxModel pub;   /* first: DittoOnnxModel * and OnnxImpl * convert */
    ArenaBlock *arena;
} OnnxImpl;

typedef struct ExtFile {
    const char *location;
    const uint8_t *data;
    size_t size;
} ExtFile;

typedef struct AttrFix {
    DittoOnnxAttr *attr;
    size_t entry;   /* catalog index: entries move while the catalog grows */
} AttrFix;

typedef struct Ctx {
    OnnxImpl *m;
    DittoCatalog *c;
    const char *file;
    const DittoLogger *log;
    const uint8_t *base;
    size_t size;
    const char *dir;        /* folder for external data; NULL: parsed from memory */
    ExtFile *ext;
    size_t n_ext;
    AttrFix *fix;
    size_t n_fix, cap_fix;
} Ctx;

static const uint64_t empty_data;   /* data of zero-size decoded tensors: never NULL */

/* ---- arena ---------------------------------------------------------------------- */

static void *arena_alloc(Ctx *x, size_t n)
{
    const size_t a = alignof(max_align_t);
    if (n > SIZE_MAX / 2) {
        ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: out of memory (%zu bytes)", x->file, n);
        return NULL;
    }
    n = n ? (n + a - 1) & ~(a - 1) : a;
    ArenaBlock *b = x->m->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = ditto_malloc(sizeof *b + cap);
        if (!b) {
            ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: out of memory (%zu bytes)", x->file, n);
            return NULL;
        }
        b->next = x->m->arena;
        b->used = 0;
        b->cap = cap;
        x->m->arena = b;
    }
    void *p = (unsigned char *)(b + 1) + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static void *arena_array(Ctx *x, size_t n, size_t elsize)
{
    uint64_t bytes;
    if (ditto_mul_overflow_u64(n, elsize, &bytes) || bytes > SIZE_MAX) {
        ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: out of memory (%zu x %zu bytes)", x->file, n, elsize);
        return NULL;
    }
    return arena_alloc(x, (size_t)bytes);
}

static void arena_free(ArenaBlock *b)
{
    while (b) {
        ArenaBlock *next = b->next;
        ditto_free(b);
        b = next;
    }
}

/* ---- errors ---------------------------------------------------------------------- */

static int pb_fail(const Ctx *x, const DittoPb *r, const char *in)
{
    if (r->truncated)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: truncated file (%zu bytes): %s at byte %zu (in %s)", x->file, x->size,
                          r->err, r->err_at, in);
    return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: malformed protobuf: %s at byte %zu (in %s)", x->file, r->err, r->err_at, in);
}

static int wire_fail(const Ctx *x, const DittoPbField *f, const char *in)
{
    return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: malformed protobuf: field %u of %s has wire type %s at byte %zu", x->file,
                      f->number, in, ditto_pb_wire_name(f->wire), f->at);
}

#define WANT(f, w, in)                          \
    do {                                        \
        if ((f)->wire != (w))                   \
            return wire_fail(x, (f), (in));     \
    } while (0)

/* ---- strings and repeated scalars ------------------------------------------------ */

/* NUL-terminated arena copy of a bytes field (attribute strings); C strings, so no NUL inside. */
static int copy_text(Ctx *x, const DittoPbField *f, const char *in, char **out)
{
    if (memchr(f->data, 0, f->len))
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: string field %u of %s at byte %zu contains a NUL byte", x->file, f->number,
                          in, f->at);
    char *s = arena_alloc(x, f->len + 1);
    if (!s)
        return DITTO_ERR_NOMEM;
    if (f->len)
        memcpy(s, f->data, f->len);
    *out = s;
    return 0;
}

/* A name (value, node, op, attribute, domain, file location): also no control characters, so that
 * every message that quotes one stays a single printable line. */
static int copy_str(Ctx *x, const DittoPbField *f, const char *in, char **out)
{
    for (size_t i = 0; i < f->len; i++) {
        if (f->data[i] < 0x20 || f->data[i] == 0x7f)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: name (field %u of %s) at byte %zu contains control character 0x%02x", x->file,
                              f->number, in, f->at, f->data[i]);
    }
    return copy_text(x, f, in, out);
}

static int empty_str(Ctx *x, char **out)
{
    *out = arena_alloc(x, 1);
    return *out ? 0 : DITTO_ERR_NOMEM;
}

/* Elements of a repeated numeric field: packed (LEN) or one per record. */
static int rep_count(const Ctx *x, const DittoPbField *f, DittoPbWire scalar, const char *in, size_t *n)
{
    if (f->wire == scalar) {
        *n = 1;
        return 0;
    }
    if (f->wire != DITTO_PB_LEN)
        return wire_fail(x, f, in);
    if (scalar == DITTO_PB_VARINT) {
        const char *why = NULL;
        if (ditto_pb_packed_varints(f->data, f->len, n, &why) < 0)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: malformed protobuf: %s at byte %zu (in %s)", x->file, why, f->at, in);
        return 0;
    }
    size_t w = scalar == DITTO_PB_I32 ? 4 : 8;
    if (f->len % w)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: malformed protobuf: packed field %u of %s at byte %zu has %zu bytes, not a multiple of %zu",
                          x->file, f->number, in, f->at, f->len, w);
    *n = f->len / w;
    return 0;
}

typedef struct RepIter {
    const uint8_t *p, *end;
    DittoPbWire scalar;
    uint64_t single;
    bool packed, done;
} RepIter;

/* Iterate a field already validated by rep_count. */
static void rep_begin(RepIter *it, const DittoPbField *f, DittoPbWire scalar)
{
    it->scalar = scalar;
    it->packed = f->wire == DITTO_PB_LEN;
    it->p = it->end = NULL;
    if (it->packed) {   /* data is NULL for a scalar record */
        it->p = f->data;
        it->end = f->data + f->len;
    }
    it->single = f->v;
    it->done = false;
}

static bool rep_next(RepIter *it, uint64_t *v)
{
    if (!it->packed) {
        if (it->done)
            return false;
        it->done = true;
        *v = it->single;
        return true;
    }
    if (it->p >= it->end)
        return false;
    const char *why;
    switch (it->scalar) {
    case DITTO_PB_I32:
        *v = ditto_pb_le32(it->p);
        it->p += 4;
        return true;
    case DITTO_PB_I64:
        *v = ditto_pb_le64(it->p);
        it->p += 8;
        return true;
    default:
        return ditto_pb_varint(&it->p, it->end, v, &why) == 0;
    }
}

static int add_count(const Ctx *x, size_t *total, size_t n, const char *in)
{
    if (*total > SIZE_MAX - n)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: too many elements in %s", x->file, in);
    *total += n;
    return 0;
}

/* ---- dtypes ------------------------------------------------------------------------ */

static DittoDType onnx_dtype(int64_t t)
{
    switch (t) {
    case ONNX_FLOAT: return DITTO_F32;
    case ONNX_UINT8: return DITTO_U8;
    case ONNX_INT8: return DITTO_I8;
    case ONNX_INT32: return DITTO_I32;
    case ONNX_INT64: return DITTO_I64;
    case ONNX_BOOL: return DITTO_BOOL;
    case ONNX_FLOAT16: return DITTO_F16;
    case ONNX_DOUBLE: return DITTO_F64;
    case ONNX_BFLOAT16: return DITTO_BF16;
    default: return DITTO_DTYPE_COUNT;
    }
}

static const char *onnx_dtype_name(int64_t t)
{
    static const char *const names[] = {
        "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE",
        "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1",
    };
    return t >= 0 && t < (int64_t)(sizeof names / sizeof *names) ? names[t] : "unknown";
}

/* ---- catalog entries ------------------------------------------------------------- */

static void set_contiguous(DittoCatalogEntry *e)
{
    int64_t s = 1;
    for (int i = e->ndim - 1; i >= 0; i--) {
        e->stride[i] = s;
        s *= e->shape[i] ? e->shape[i] : 1;   /* bounded: the caller checked the product */
    }
}

/* Product of the dims (zeros counted as one, so that no partial product can overflow either). */
static bool shape_numel(const int64_t *shape, int ndim, size_t es, uint64_t *numel, uint64_t *nbytes)
{
    uint64_t n = 1, bound = 1;
    for (int i = 0; i < ndim; i++) {
        if (ditto_mul_overflow_u64(bound, shape[i] ? (uint64_t)shape[i] : 1, &bound) || bound > INT64_MAX)
            return false;
        n *= (uint64_t)shape[i];
    }
    if (ditto_mul_overflow_u64(bound, es, nbytes) || *nbytes > INT64_MAX)
        return false;
    *numel = n;
    *nbytes = n * es;
    return true;
}

static int add_entry(Ctx *x, DittoCatalogEntry *e, size_t *index)
{
    set_contiguous(e);
    if (index)
        *index = x->c->n;
    return ditto_catalog_add(x->c, e);
}

/* A heap block for decoded values, owned by the catalog from the start. */
static int decoded_block(Ctx *x, uint64_t nbytes, const char *tname, void **out)
{
    if (!nbytes) {
        *out = (void *)(uintptr_t)&empty_data;
        return 0;
    }
    if (nbytes > SIZE_MAX - 256)
        return ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: tensor '%s': out of memory", x->file, tname);
    void *b = ditto_malloc_aligned((size_t)nbytes);
    if (!b)
        return ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: tensor '%s': out of memory for %llu bytes", x->file, tname,
                          (unsigned long long)nbytes);
    DITTO_TRY(ditto_catalog_adopt_block(x->c, b));
    *out = b;
    return 0;
}

/* ---- external data ----------------------------------------------------------------- */

static int parse_decimal(const char *s, uint64_t *v)
{
    if (!*s)
        return -1;
    uint64_t n = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || ditto_mul_overflow_u64(n, 10, &n) || ditto_add_overflow_u64(n, (uint64_t)(*s - '0'), &n))
            return -1;
    }
    *v = n;
    return 0;
}

/* Relative, inside the model's folder: no absolute path, no ".." component, no backslash. */
static int check_location(const Ctx *x, const char *loc, const char *tname)
{
    const char *why = NULL;
    if (!*loc)
        why = "is empty";
    else if (loc[0] == '/')
        why = "is an absolute path";
    else if (strchr(loc, '\\'))
        why = "contains a backslash";
    for (const char *p = loc; !why && *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            why = "leaves the model's folder ('..')";
        p += n + (q != NULL);
    }
    if (why)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external data location '%s' %s", x->file, tname, loc, why);
    return 0;
}

static int map_external(Ctx *x, const char *loc, const char *tname, const ExtFile **out)
{
    for (size_t i = 0; i < x->n_ext; i++) {
        if (!strcmp(x->ext[i].location, loc)) {
            *out = &x->ext[i];
            return 0;
        }
    }
    size_t dl = strlen(x->dir), ll = strlen(loc);
    char *full = ditto_malloc(dl + ll + 2);
    ExtFile *q = ditto_realloc(x->ext, (x->n_ext + 1) * sizeof *q);
    if (q)
        x->ext = q;
    char *keep = arena_alloc(x, ll + 1);
    if (!full || !q || !keep) {
        ditto_free(full);
        return keep ? ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: out of memory", x->file) : DITTO_ERR_NOMEM;
    }
    memcpy(full, x->dir, dl);
    full[dl] = '/';
    memcpy(full + dl + 1, loc, ll + 1);
    memcpy(keep, loc, ll + 1);
    DittoMap m;
    int rc = ditto_map_open(&m, full, NULL);   /* the message below names the model and the tensor */
    if (rc < 0) {
        ditto_fail(x->log, rc, "%s: tensor '%s': cannot map external data file '%s' (%s)", x->file, tname, full, ditto_strerror(rc));
        ditto_free(full);
        return rc;
    }
    ditto_free(full);
    DITTO_TRY(ditto_catalog_adopt_map(x->c, &m));
    x->ext[x->n_ext] = (ExtFile){ keep, m.data, m.size };
    *out = &x->ext[x->n_ext++];
    return 0;
}

/* StringStringEntryProto list -> the tensor's bytes in a mapped side file. */
static int external_data(Ctx *x, const DittoPbField *tf, const char *tname, uint64_t nbytes, DittoCatalogEntry *e)
{
    char *loc = NULL;
    uint64_t offset = 0, length = nbytes;
    bool has_off = false, has_len = false;
    DittoPb r, er;
    DittoPbField f, g;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, tf);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number != 13)
            continue;
        char *key = NULL, *val = NULL;
        ditto_pb_sub(&er, &r, &f);
        while ((rc = ditto_pb_next(&er, &g)) > 0) {
            if (g.number == 1 || g.number == 2) {
                WANT(&g, DITTO_PB_LEN, "StringStringEntryProto");
                DITTO_TRY(copy_str(x, &g, "StringStringEntryProto", g.number == 1 ? &key : &val));
            }
        }
        if (rc < 0)
            return pb_fail(x, &er, "StringStringEntryProto");
        if (!key || !val)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external_data entry without %s", x->file, tname,
                              key ? "a value" : "a key");
        bool *seen = !strcmp(key, "offset") ? &has_off : !strcmp(key, "length") ? &has_len : NULL;
        if (!strcmp(key, "location")) {
            if (loc)
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external_data has two locations", x->file, tname);
            loc = val;
        } else if (seen) {
            uint64_t v;
            if (*seen || parse_decimal(val, &v) < 0)
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external_data %s '%s' is %s", x->file, tname, key, val,
                                  *seen ? "given twice" : "not a decimal number");
            *seen = true;
            *(seen == &has_off ? &offset : &length) = v;
        }
        /* other keys ("checksum", ...) carry nothing we need */
    }
    if (rc < 0)
        return pb_fail(x, &r, "TensorProto");
    if (!loc)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external data without a location", x->file, tname);
    DITTO_TRY(check_location(x, loc, tname));
    if (!x->dir)
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: tensor '%s': external data ('%s') needs the model's folder (parsed from memory)",
                          x->file, tname, loc);
    if (length != nbytes)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external data length %llu, but its shape and dtype need %llu bytes",
                          x->file, tname, (unsigned long long)length, (unsigned long long)nbytes);
    const ExtFile *ef = NULL;
    DITTO_TRY(map_external(x, loc, tname, &ef));
    uint64_t end;
    if (ditto_add_overflow_u64(offset, nbytes, &end) || end > ef->size)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external data [%llu, +%llu) lies outside '%s' (%zu bytes)", x->file,
                          tname, (unsigned long long)offset, (unsigned long long)nbytes, loc, ef->size);
    e->offset = offset;
    e->data = nbytes ? ef->data + offset : (const void *)&empty_data;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------- */

typedef struct TensorScan {
    size_t ndim;
    int64_t data_type;
    bool has_name, has_raw, segment;
    DittoPbField name, raw;
    uint64_t location;
    size_t n_ext;
    size_t n_float, n_i32, n_str, n_i64, n_f64, n_u64;
} TensorScan;

static int scan_tensor(Ctx *x, const DittoPbField *tf, TensorScan *s)
{
    static const char in[] = "TensorProto";
    memset(s, 0, sizeof *s);
    DittoPb r;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, tf);
    DittoPbField f;
    int rc;
    size_t n;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1:  DITTO_TRY(rep_count(x, &f, DITTO_PB_VARINT, in, &n)); DITTO_TRY(add_count(x, &s->ndim, n, in)); break;
        case 2:  WANT(&f, DITTO_PB_VARINT, in); s->data_type = (int64_t)f.v; break;
        case 3:  WANT(&f, DITTO_PB_LEN, in); s->segment = true; break;
        case 4:  DITTO_TRY(rep_count(x, &f, DITTO_PB_I32, in, &n)); DITTO_TRY(add_count(x, &s->n_float, n, in)); break;
        case 5:  DITTO_TRY(rep_count(x, &f, DITTO_PB_VARINT, in, &n)); DITTO_TRY(add_count(x, &s->n_i32, n, in)); break;
        case 6:  WANT(&f, DITTO_PB_LEN, in); s->n_str++; break;
        case 7:  DITTO_TRY(rep_count(x, &f, DITTO_PB_VARINT, in, &n)); DITTO_TRY(add_count(x, &s->n_i64, n, in)); break;
        case 8:  WANT(&f, DITTO_PB_LEN, in); s->name = f; s->has_name = true; break;
        case 9:  WANT(&f, DITTO_PB_LEN, in); s->raw = f; s->has_raw = true; break;
        case 10: DITTO_TRY(rep_count(x, &f, DITTO_PB_I64, in, &n)); DITTO_TRY(add_count(x, &s->n_f64, n, in)); break;
        case 11: DITTO_TRY(rep_count(x, &f, DITTO_PB_VARINT, in, &n)); DITTO_TRY(add_count(x, &s->n_u64, n, in)); break;
        case 13: WANT(&f, DITTO_PB_LEN, in); s->n_ext++; break;
        case 14: WANT(&f, DITTO_PB_VARINT, in); s->location = f.v; break;
        default: break;   /* doc_string, metadata_props, ... */
        }
    }
    return rc < 0 ? pb_fail(x, &r, in) : 0;
}

/* Decode the typed field `number` into dst (dtype dt, numel values, counts already checked). */
static int decode_typed(Ctx *x, const DittoPbField *tf, unsigned number, DittoDType dt, void *dst, const char *tname)
{
    DittoPb r;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, tf);
    DittoPbField f;
    DittoPbWire scalar = number == 4 ? DITTO_PB_I32 : number == 10 ? DITTO_PB_I64 : DITTO_PB_VARINT;
    size_t k = 0, es = ditto_dtype_size(dt);
    uint8_t *out = dst;
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number != number)
            continue;
        RepIter it;
        uint64_t v;
        rep_begin(&it, &f, scalar);
        while (rep_next(&it, &v)) {
            int64_t sv = (int64_t)v;
            union {
                float f32;
                double f64;
                int64_t i64;
                int32_t i32;
                uint16_t u16;
                uint8_t u8;
                int8_t i8;
            } u;
            bool ok = true;
            switch (dt) {
            case DITTO_F32: u.f32 = ditto_pb_f32(v); break;
            case DITTO_F64: u.f64 = ditto_pb_f64(v); break;
            case DITTO_I64: u.i64 = sv; break;
            case DITTO_I32: ok = sv >= INT32_MIN && sv <= INT32_MAX; u.i32 = (int32_t)sv; break;
            case DITTO_F16:
            case DITTO_BF16: ok = sv >= 0 && sv <= 0xffff; u.u16 = (uint16_t)sv; break;   /* the bits, as uint16 */
            case DITTO_U8: ok = sv >= 0 && sv <= 0xff; u.u8 = (uint8_t)sv; break;
            case DITTO_I8: ok = sv >= INT8_MIN && sv <= INT8_MAX; u.i8 = (int8_t)sv; break;
            case DITTO_BOOL: ok = sv == 0 || sv == 1; u.u8 = (uint8_t)sv; break;
            default: ok = false; break;
            }
            if (!ok)
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': value %lld at index %zu does not fit %s", x->file, tname,
                                  (long long)sv, k, ditto_dtype_name(dt));
            memcpy(out + k * es, &u, es);
            k++;
        }
    }
    return rc < 0 ? pb_fail(x, &r, "TensorProto") : 0;
}

/*
 * TensorProto -> catalog entry. `name` overrides the tensor's own name (Constant outputs,
 * attribute tensors); `role` says what it is in messages when it has no name.
 */
static int parse_tensor(Ctx *x, const DittoPbField *tf, const char *name, const char *role, size_t role_index, size_t *index)
{
    TensorScan s;
    DITTO_TRY(scan_tensor(x, tf, &s));
    char *own = NULL;
    if (!name) {
        if (s.has_name)
            DITTO_TRY(copy_str(x, &s.name, "TensorProto", &own));
        if (!own || !*own)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s #%zu at byte %zu has no name", x->file, role, role_index, tf->at);
        name = own;
    }
    if (s.segment)
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: tensor '%s': segmented tensors are not supported", x->file, name);
    DittoDType dt = onnx_dtype(s.data_type);
    if (dt == DITTO_DTYPE_COUNT)
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: tensor '%s': data type %s (%lld) is not supported", x->file, name,
                          onnx_dtype_name(s.data_type), (long long)s.data_type);
    if (s.ndim > DITTO_MAX_DIMS)
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: tensor '%s': rank %zu (at most %d supported)", x->file, name, s.ndim,
                          DITTO_MAX_DIMS);

    DittoCatalogEntry e = { .name = (char *)name, .dtype = dt, .ndim = (int)s.ndim };
    DittoPb r;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, tf);
    DittoPbField f;
    int rc, nd = 0;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number != 1)
            continue;
        RepIter it;
        uint64_t v;
        rep_begin(&it, &f, DITTO_PB_VARINT);
        while (rep_next(&it, &v)) {
            if ((int64_t)v < 0)
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': negative dimension %lld", x->file, name, (long long)(int64_t)v);
            e.shape[nd++] = (int64_t)v;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, "TensorProto");
    size_t es = ditto_dtype_size(dt);
    uint64_t numel, nbytes;
    char shp[DITTO_SHAPE_STR_MAX];
    if (!shape_numel(e.shape, e.ndim, es, &numel, &nbytes))
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", x->file, name,
                          ditto_shape_str(e.shape, e.ndim, shp, sizeof shp));

    /* exactly one source of data: raw_data, the typed field of the dtype, or an external file */
    unsigned typed = dt == DITTO_F32 ? 4 : dt == DITTO_I64 ? 7 : dt == DITTO_F64 ? 10 : 5;
    size_t n_typed = typed == 4 ? s.n_float : typed == 7 ? s.n_i64 : typed == 10 ? s.n_f64 : s.n_i32;
    size_t n_other = s.n_float + s.n_i32 + s.n_str + s.n_i64 + s.n_f64 + s.n_u64 - n_typed;
    bool external = s.location == 1;
    if (s.location > 1)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': unknown data_location %llu", x->file, name,
                          (unsigned long long)s.location);
    if (n_other)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': %s tensor holds values in a field of another type", x->file, name,
                          onnx_dtype_name(s.data_type));
    if ((int)s.has_raw + (n_typed > 0) + external > 1)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': data given in more than one of raw_data, typed fields and external data",
                          x->file, name);
    if (!external && s.n_ext)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': external_data entries but data_location is not EXTERNAL", x->file, name);
    e.span = nbytes;
    if (external) {
        DITTO_TRY(external_data(x, tf, name, nbytes, &e));
    } else if (s.has_raw) {
        if (s.raw.len != nbytes)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': raw_data has %zu bytes, but %s %s needs %llu", x->file, name,
                              s.raw.len, ditto_dtype_name(dt), ditto_shape_str(e.shape, e.ndim, shp, sizeof shp), (unsigned long long)nbytes);
        e.offset = (uint64_t)(s.raw.data - x->base);
        e.data = x->c->map.data + e.offset;
    } else {
        if (n_typed != numel)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: tensor '%s': %zu values, but shape %s has %llu elements", x->file, name,
                              n_typed, ditto_shape_str(e.shape, e.ndim, shp, sizeof shp), (unsigned long long)numel);
        void *blk = NULL;
        DITTO_TRY(decoded_block(x, nbytes, name, &blk));
        if (numel)
            DITTO_TRY(decode_typed(x, tf, typed, dt, blk, name));
        e.data = blk;
    }
    return add_entry(x, &e, index);
}

/* ---- value infos ----------------------------------------------------------------------- */

static int parse_shape(Ctx *x, const DittoPb *parent, const DittoPbField *sf, DittoOnnxValueInfo *vi, bool strict)
{
    DittoPb r, dr;
    DittoPbField f, g;
    ditto_pb_sub(&r, parent, sf);
    int rc, nd = 0;
    vi->ndim = 0;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number != 1)
            continue;
        WANT(&f, DITTO_PB_LEN, "TensorShapeProto");
        int64_t d = -1;
        ditto_pb_sub(&dr, &r, &f);
        while ((rc = ditto_pb_next(&dr, &g)) > 0) {
            if (g.number == 1) {
                WANT(&g, DITTO_PB_VARINT, "TensorShapeProto.Dimension");
                if ((int64_t)g.v < 0)
                    return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: value '%s': negative dimension %lld", x->file, vi->name,
                                      (long long)(int64_t)g.v);
                d = (int64_t)g.v;
            } else if (g.number == 2) {
                WANT(&g, DITTO_PB_LEN, "TensorShapeProto.Dimension");
                d = -1;   /* symbolic */
            }
        }
        if (rc < 0)
            return pb_fail(x, &dr, "TensorShapeProto.Dimension");
        if (nd < DITTO_MAX_DIMS)
            vi->shape[nd] = d;
        if (nd <= DITTO_MAX_DIMS)
            nd++;   /* one past the limit is enough to say "too many" */
    }
    if (rc < 0)
        return pb_fail(x, &r, "TensorShapeProto");
    if (nd > DITTO_MAX_DIMS) {
        if (strict)
            return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: graph input/output '%s': rank over %d (not supported)", x->file, vi->name,
                              DITTO_MAX_DIMS);
        nd = -1;   /* a hint we cannot hold: unknown rank */
        for (int i = 0; i < DITTO_MAX_DIMS; i++)
            vi->shape[i] = -1;
    }
    vi->ndim = nd;
    return 0;
}

static int parse_value_info(Ctx *x, const DittoPbField *vf, DittoOnnxValueInfo *vi, const char *role, size_t index, bool strict)
{
    static const char in[] = "ValueInfoProto";
    DittoPb r, tr, ttr;
    DittoPbField f, g, h, type = { 0 };
    bool has_type = false;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, vf);
    vi->dtype = DITTO_DTYPE_COUNT;
    vi->ndim = -1;
    for (int i = 0; i < DITTO_MAX_DIMS; i++)
        vi->shape[i] = -1;
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number == 1) {
            WANT(&f, DITTO_PB_LEN, in);
            DITTO_TRY(copy_str(x, &f, in, &vi->name));
        } else if (f.number == 2) {
            WANT(&f, DITTO_PB_LEN, in);
            type = f;
            has_type = true;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    if (!vi->name || !*vi->name)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s #%zu at byte %zu has no name", x->file, role, index, vf->at);
    if (!has_type)
        return 0;
    ditto_pb_sub(&tr, &r, &type);
    while ((rc = ditto_pb_next(&tr, &g)) > 0) {
        if (g.number != 1)
            continue;   /* sequence, map, optional, sparse: not a dense tensor, left unknown */
        WANT(&g, DITTO_PB_LEN, "TypeProto");
        ditto_pb_sub(&ttr, &tr, &g);
        while ((rc = ditto_pb_next(&ttr, &h)) > 0) {
            if (h.number == 1) {
                WANT(&h, DITTO_PB_VARINT, "TypeProto.Tensor");
                vi->dtype = onnx_dtype((int64_t)h.v);
            } else if (h.number == 2) {
                WANT(&h, DITTO_PB_LEN, "TypeProto.Tensor");
                DITTO_TRY(parse_shape(x, &ttr, &h, vi, strict));
            }
        }
        if (rc < 0)
            return pb_fail(x, &ttr, "TypeProto.Tensor");
    }
    return rc < 0 ? pb_fail(x, &tr, "TypeProto") : 0;
}

/* ---- nodes and attributes ------------------------------------------------------------- */

static bool default_domain(const char *d)
{
    return !*d || !strcmp(d, "ai.onnx");
}

/* "node 'name' (Op)" or "node #7 (Op)" */
static const char *node_label(const DittoOnnxNode *n, size_t idx, char *buf, size_t size)
{
    if (n->name && *n->name)
        snprintf(buf, size, "node '%s' (%s)", n->name, n->op_type ? n->op_type : "?");
    else
        snprintf(buf, size, "node #%zu (%s)", idx, n->op_type ? n->op_type : "?");
    return buf;
}

static int add_fix(Ctx *x, DittoOnnxAttr *a, size_t entry)
{
    if (x->n_fix == x->cap_fix) {
        size_t cap = x->cap_fix ? 2 * x->cap_fix : 16;
        AttrFix *q = ditto_realloc(x->fix, cap * sizeof *q);
        if (!q)
            return ditto_fail(x->log, DITTO_ERR_NOMEM, "%s: out of memory", x->file);
        x->fix = q;
        x->cap_fix = cap;
    }
    x->fix[x->n_fix++] = (AttrFix){ a, entry };
    return 0;
}

static const char *attr_type_name(uint64_t t)
{
    static const char *const names[] = { "UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS",
                                         "STRINGS", "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS", "TYPE_PROTO",
                                         "TYPE_PROTOS" };
    return t < sizeof names / sizeof *names ? names[t] : "unknown";
}

static int parse_attr(Ctx *x, const DittoPb *parent, const DittoPbField *af, DittoOnnxNode *n, size_t nidx, DittoOnnxAttr *a)
{
    static const char in[] = "AttributeProto";
    char lbl[512];
#define LBL node_label(n, nidx, lbl, sizeof lbl)   /* formatted only for a message */
    DittoPb r;
    DittoPbField f, t = { 0 };
    size_t nf = 0, ni = 0, ns = 0, k;
    bool has[32] = { false };   /* by field number, for the value fields */
    uint64_t type = 0;
    bool has_type = false;
    ditto_pb_sub(&r, parent, af);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1:  WANT(&f, DITTO_PB_LEN, in); DITTO_TRY(copy_str(x, &f, in, &a->name)); break;
        case 2:  WANT(&f, DITTO_PB_I32, in); a->f = ditto_pb_f32(f.v); break;
        case 3:  WANT(&f, DITTO_PB_VARINT, in); a->i = (int64_t)f.v; break;
        case 4:  WANT(&f, DITTO_PB_LEN, in); DITTO_TRY(copy_text(x, &f, in, &a->s)); break;
        case 5:  WANT(&f, DITTO_PB_LEN, in); t = f; break;
        case 7:  DITTO_TRY(rep_count(x, &f, DITTO_PB_I32, in, &k)); DITTO_TRY(add_count(x, &nf, k, in)); break;
        case 8:  DITTO_TRY(rep_count(x, &f, DITTO_PB_VARINT, in, &k)); DITTO_TRY(add_count(x, &ni, k, in)); break;
        case 9:  WANT(&f, DITTO_PB_LEN, in); ns++; break;
        case 20: WANT(&f, DITTO_PB_VARINT, in); type = f.v; has_type = true; break;
        default: break;   /* doc_string, ... */
        }
        if (f.number < 32)
            has[f.number] = true;
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    if (!a->name || !*a->name)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: attribute at byte %zu has no name", x->file, LBL, af->at);
    if (has[6] || has[11] || type == A_GRAPH || type == A_GRAPHS)
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: %s: attribute '%s' is a subgraph; control flow (If/Loop/Scan) is not supported",
                          x->file, LBL, a->name);
    if (has[21])
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: %s: attribute '%s' refers to a function attribute (ref_attr_name)", x->file, LBL,
                          a->name);
    /* which value fields are present, as attribute types (proto2 writers set exactly one) */
    static const struct { unsigned field, type; } kinds[] = {
        { 2, A_FLOAT }, { 3, A_INT }, { 4, A_STRING }, { 5, A_TENSOR }, { 7, A_FLOATS }, { 8, A_INTS }, { 9, A_STRINGS },
        { 10, A_TENSORS }, { 22, A_SPARSE_TENSOR }, { 23, A_SPARSE_TENSORS }, { 14, A_TYPE_PROTO }, { 15, A_TYPE_PROTOS },
    };
    unsigned present = A_UNDEFINED;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        if (!has[kinds[i].field])
            continue;
        if (present != A_UNDEFINED)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: attribute '%s' holds values of several types (%s and %s)", x->file, LBL,
                              a->name, attr_type_name(present), attr_type_name(kinds[i].type));
        present = kinds[i].type;
    }
    if (!has_type)
        type = present;   /* IR version 1: no type field */
    if (present != A_UNDEFINED && present != type)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: attribute '%s' has type %s but holds a %s value", x->file, LBL, a->name,
                          attr_type_name(type), attr_type_name(present));
    switch (type) {
    case A_FLOAT: a->type = DITTO_ATTR_FLOAT; break;
    case A_INT: a->type = DITTO_ATTR_INT; break;
    case A_STRING: a->type = DITTO_ATTR_STRING; break;
    case A_TENSOR: a->type = DITTO_ATTR_TENSOR; break;
    case A_FLOATS: a->type = DITTO_ATTR_FLOATS; break;
    case A_INTS: a->type = DITTO_ATTR_INTS; break;
    case A_STRINGS: a->type = DITTO_ATTR_STRINGS; break;
    case A_UNDEFINED:
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: attribute '%s' has no value", x->file, LBL, a->name);
    default:
        return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: %s: attribute '%s' of type %s (%llu) is not supported", x->file, LBL, a->name,
                          attr_type_name(type), (unsigned long long)type);
    }
    if (a->type == DITTO_ATTR_STRING && !a->s)
        DITTO_TRY(empty_str(x, &a->s));   /* proto3 writers leave out empty values */
    if (a->type == DITTO_ATTR_TENSOR) {
        if (!has[5])
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: tensor attribute '%s' has no tensor", x->file, LBL, a->name);
        /* Constant's value is the node's output; other attribute tensors get a name of their own */
        bool constant = !strcmp(n->op_type, "Constant") && default_domain(n->domain) && !strcmp(a->name, "value");
        if (constant && (n->n_outputs != 1 || !*n->outputs[0]))
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: a Constant node needs one named output", x->file, LBL);
        char num[24];
        snprintf(num, sizeof num, "#%zu", nidx);
        const char *owner = *n->name ? n->name : num;
        size_t len = constant ? strlen(n->outputs[0]) : strlen(owner) + 1 + strlen(a->name);
        char *tname = arena_alloc(x, len + 1);
        if (!tname)
            return DITTO_ERR_NOMEM;
        if (constant)
            memcpy(tname, n->outputs[0], len + 1);
        else
            snprintf(tname, len + 1, "%s.%s", owner, a->name);
        size_t idx;
        DITTO_TRY(parse_tensor(x, &t, tname, "tensor attribute", 0, &idx));
        DITTO_TRY(add_fix(x, a, idx));
    }
    if (a->type == DITTO_ATTR_FLOATS || a->type == DITTO_ATTR_INTS || a->type == DITTO_ATTR_STRINGS) {
        a->n = a->type == DITTO_ATTR_FLOATS ? nf : a->type == DITTO_ATTR_INTS ? ni : ns;
        if (a->type == DITTO_ATTR_FLOATS && !(a->floats = arena_array(x, nf, sizeof *a->floats)))
            return DITTO_ERR_NOMEM;
        if (a->type == DITTO_ATTR_INTS && !(a->ints = arena_array(x, ni, sizeof *a->ints)))
            return DITTO_ERR_NOMEM;
        if (a->type == DITTO_ATTR_STRINGS && !(a->strings = arena_array(x, ns, sizeof *a->strings)))
            return DITTO_ERR_NOMEM;
        size_t jf = 0, ji = 0, js = 0;
        ditto_pb_sub(&r, parent, af);
        while ((rc = ditto_pb_next(&r, &f)) > 0) {
            RepIter it;
            uint64_t v;
            if (f.number == 7 && a->floats) {
                rep_begin(&it, &f, DITTO_PB_I32);
                while (rep_next(&it, &v))
                    a->floats[jf++] = ditto_pb_f32(v);
            } else if (f.number == 8 && a->ints) {
                rep_begin(&it, &f, DITTO_PB_VARINT);
                while (rep_next(&it, &v))
                    a->ints[ji++] = (int64_t)v;
            } else if (f.number == 9 && a->strings) {
                DITTO_TRY(copy_text(x, &f, in, &a->strings[js++]));
            }
        }
        DITTO_ASSERT(rc == 0 && jf <= nf && ji <= ni && js <= ns);
    }
    return 0;
#undef LBL
}

/* Constant with value_float(s) / value_int(s): a catalog entry named after the output, like `value`. */
static int constant_entry(Ctx *x, DittoOnnxNode *n, size_t nidx)
{
    static const char *const kinds[] = { "value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                                         "value_strings", "sparse_value" };
    const DittoOnnxAttr *v = NULL;
    char lbl[512];
    int found = 0;
    for (int i = 0; i < n->n_attrs; i++) {
        for (size_t j = 0; j < sizeof kinds / sizeof *kinds; j++) {
            if (!strcmp(n->attrs[i].name, kinds[j])) {
                v = &n->attrs[i];
                found++;
            }
        }
    }
    if (found != 1 || n->n_outputs != 1 || !*n->outputs[0])
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: a Constant node needs one value attribute and one named output (it has %d and %d)",
                          x->file, node_label(n, nidx, lbl, sizeof lbl), found, n->n_outputs);
    DittoCatalogEntry e = { .name = n->outputs[0] };
    const void *src = NULL;
    size_t count = 1;
    if (!strcmp(v->name, "value_float") && v->type == DITTO_ATTR_FLOAT) {
        e.dtype = DITTO_F32;
        src = &v->f;
    } else if (!strcmp(v->name, "value_int") && v->type == DITTO_ATTR_INT) {
        e.dtype = DITTO_I64;
        src = &v->i;
    } else if (!strcmp(v->name, "value_floats") && v->type == DITTO_ATTR_FLOATS) {
        e.dtype = DITTO_F32;
        e.ndim = 1;
        src = v->floats;
        count = v->n;
    } else if (!strcmp(v->name, "value_ints") && v->type == DITTO_ATTR_INTS) {
        e.dtype = DITTO_I64;
        e.ndim = 1;
        src = v->ints;
        count = v->n;
    } else if ((!strcmp(v->name, "value") && v->type == DITTO_ATTR_TENSOR) || (!strcmp(v->name, "value_string") && v->type == DITTO_ATTR_STRING) ||
               (!strcmp(v->name, "value_strings") && v->type == DITTO_ATTR_STRINGS)) {
        return 0;   /* `value` is an entry already; strings are left to the executor to refuse */
    } else {
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: Constant attribute '%s' has the wrong type", x->file,
                          node_label(n, nidx, lbl, sizeof lbl), v->name);
    }
    e.shape[0] = (int64_t)count;
    uint64_t nbytes = (uint64_t)count * ditto_dtype_size(e.dtype);   /* count came from the bytes of the file */
    void *blk = NULL;
    DITTO_TRY(decoded_block(x, nbytes, e.name, &blk));
    if (nbytes)
        memcpy(blk, src, (size_t)nbytes);
    e.data = blk;
    e.span = nbytes;
    return add_entry(x, &e, NULL);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int parse_node(Ctx *x, const DittoPb *parent, const DittoPbField *nf, size_t nidx, DittoOnnxNode *n)
{
    static const char in[] = "NodeProto";
    DittoPb r;
    DittoPbField f;
    size_t ni = 0, no = 0, na = 0;
    ditto_pb_sub(&r, parent, nf);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1: WANT(&f, DITTO_PB_LEN, in); ni++; break;
        case 2: WANT(&f, DITTO_PB_LEN, in); no++; break;
        case 3: WANT(&f, DITTO_PB_LEN, in); DITTO_TRY(copy_str(x, &f, in, &n->name)); break;
        case 4: WANT(&f, DITTO_PB_LEN, in); DITTO_TRY(copy_str(x, &f, in, &n->op_type)); break;
        case 5: WANT(&f, DITTO_PB_LEN, in); na++; break;
        case 7: WANT(&f, DITTO_PB_LEN, in); DITTO_TRY(copy_str(x, &f, in, &n->domain)); break;
        default: break;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    if (!n->name)
        DITTO_TRY(empty_str(x, &n->name));
    if (!n->domain)
        DITTO_TRY(empty_str(x, &n->domain));
    if (!n->op_type || !*n->op_type)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: node #%zu%s%s%s has no op_type", x->file, nidx, *n->name ? " '" : "", n->name,
                          *n->name ? "'" : "");
    if (ni > INT_MAX || no > INT_MAX || na > INT_MAX)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: node #%zu: too many inputs, outputs or attributes", x->file, nidx);
    n->n_inputs = (int)ni;
    n->n_outputs = (int)no;
    n->n_attrs = (int)na;
    if (!(n->inputs = arena_array(x, ni, sizeof *n->inputs)) || !(n->outputs = arena_array(x, no, sizeof *n->outputs)) ||
        !(n->attrs = arena_array(x, na, sizeof *n->attrs)))
        return DITTO_ERR_NOMEM;
    size_t ki = 0, ko = 0, ka = 0;
    ditto_pb_sub(&r, parent, nf);
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number == 1)
            DITTO_TRY(copy_str(x, &f, in, &n->inputs[ki++]));
        else if (f.number == 2)
            DITTO_TRY(copy_str(x, &f, in, &n->outputs[ko++]));
    }
    /* attributes last: a Constant's value is named after its output */
    ditto_pb_sub(&r, parent, nf);
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number != 5)
            continue;
        DITTO_TRY(parse_attr(x, &r, &f, n, nidx, &n->attrs[ka++]));
    }
    if (na > 1) {
        /* duplicate names, sorted so that a node with many attributes costs n log n */
        const char **names = arena_array(x, na, sizeof *names);
        if (!names)
            return DITTO_ERR_NOMEM;
        for (size_t j = 0; j < na; j++)
            names[j] = n->attrs[j].name;
        qsort(names, na, sizeof *names, cmp_str);
        for (size_t j = 1; j < na; j++) {
            if (!strcmp(names[j - 1], names[j])) {
                char lbl[512];
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: %s: attribute '%s' given twice", x->file, node_label(n, nidx, lbl, sizeof lbl),
                                  names[j]);
            }
        }
    }
    if (!strcmp(n->op_type, "Constant") && default_domain(n->domain))
        DITTO_TRY(constant_entry(x, n, nidx));
    return 0;
}

/* ---- graph and model -------------------------------------------------------------------- */

static int parse_graph(Ctx *x, const DittoPbField *gf)
{
    static const char in[] = "GraphProto";
    DittoOnnxModel *m = &x->m->pub;
    DittoPb r;
    DittoPbField f;
    size_t nn = 0, ninit = 0, nin = 0, nout = 0, nvi = 0;
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, gf);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1:  WANT(&f, DITTO_PB_LEN, in); nn++; break;
        case 5:  WANT(&f, DITTO_PB_LEN, in); ninit++; break;
        case 11: WANT(&f, DITTO_PB_LEN, in); nin++; break;
        case 12: WANT(&f, DITTO_PB_LEN, in); nout++; break;
        case 13: WANT(&f, DITTO_PB_LEN, in); nvi++; break;
        case 15:
            return ditto_fail(x->log, DITTO_ERR_UNSUPPORTED, "%s: the graph has sparse initializers (not supported)", x->file);
        default: break;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    DittoOnnxValueInfo *inputs = arena_array(x, nin, sizeof *inputs);
    m->nodes = arena_array(x, nn, sizeof *m->nodes);
    m->outputs = arena_array(x, nout, sizeof *m->outputs);
    m->value_info = arena_array(x, nvi, sizeof *m->value_info);
    if (!inputs || !m->nodes || !m->outputs || !m->value_info)
        return DITTO_ERR_NOMEM;

    /* initializers first: they are entries [0, n_initializers) of the catalog */
    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, gf);
    size_t k = 0;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number == 5)
            DITTO_TRY(parse_tensor(x, &f, NULL, "initializer", k++, NULL));
    }
    m->n_initializers = x->c->n;

    ditto_pb_sub(&r, &(DittoPb){ .base = x->base, .base_end = x->base + x->size }, gf);
    size_t ki = 0;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1:
            DITTO_TRY(parse_node(x, &r, &f, m->n_nodes, &m->nodes[m->n_nodes]));
            m->n_nodes++;
            break;
        case 11:
            DITTO_TRY(parse_value_info(x, &f, &inputs[ki], "graph input", ki, true));
            ki++;
            break;
        case 12:
            DITTO_TRY(parse_value_info(x, &f, &m->outputs[m->n_outputs], "graph output", m->n_outputs, true));
            m->n_outputs++;
            break;
        case 13:
            DITTO_TRY(parse_value_info(x, &f, &m->value_info[m->n_value_info], "value_info", m->n_value_info, false));
            m->n_value_info++;
            break;
        default:
            break;
        }
    }
    DITTO_TRY(ditto_catalog_finish(x->c));
    for (size_t i = 0; i < x->n_fix; i++)
        x->fix[i].attr->tensor = &x->c->entries[x->fix[i].entry];

    /* graph inputs with an initializer are constants (exporters before IR 4 list every weight) */
    m->inputs = inputs;
    for (size_t i = 0; i < nin; i++) {
        const DittoCatalogEntry *e = ditto_catalog_find(x->c, inputs[i].name);
        if (e && (size_t)(e - x->c->entries) < m->n_initializers)
            continue;
        m->inputs[m->n_inputs++] = inputs[i];
    }
    return 0;
}

static int parse_opset(Ctx *x, const DittoPb *parent, const DittoPbField *of, bool *found)
{
    static const char in[] = "OperatorSetIdProto";
    DittoPb r;
    DittoPbField f;
    char *domain = NULL;
    int64_t version = 0;
    ditto_pb_sub(&r, parent, of);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        if (f.number == 1) {
            WANT(&f, DITTO_PB_LEN, in);
            DITTO_TRY(copy_str(x, &f, in, &domain));
        } else if (f.number == 2) {
            WANT(&f, DITTO_PB_VARINT, in);
            version = (int64_t)f.v;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    if (domain && !default_domain(domain))
        return 0;
    if (version < 1)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: invalid opset version %lld for the default domain", x->file, (long long)version);
    if (!*found || version > x->m->pub.opset)
        x->m->pub.opset = version;
    *found = true;
    return 0;
}

static int parse_model(Ctx *x)
{
    static const char in[] = "ModelProto";
    DittoOnnxModel *m = &x->m->pub;
    if (!x->size)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: empty file", x->file);
    if (x->size >= 4 && !memcmp(x->base, "PK\x03\x04", 4))
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: a zip archive (a PyTorch .pth?), not an ONNX model", x->file);
    DittoPb r;
    DittoPbField f, graph = { 0 };
    bool has_graph = false, has_ir = false, has_opset = false;
    ditto_pb_init(&r, x->base, x->size, x->base, x->size);
    int rc;
    while ((rc = ditto_pb_next(&r, &f)) > 0) {
        switch (f.number) {
        case 1:
            WANT(&f, DITTO_PB_VARINT, in);
            m->ir_version = (int64_t)f.v;
            has_ir = true;
            break;
        case 2:
            WANT(&f, DITTO_PB_LEN, in);
            DITTO_TRY(copy_str(x, &f, in, &m->producer));
            break;
        case 7:
            WANT(&f, DITTO_PB_LEN, in);
            if (has_graph)
                return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: two graphs (bytes %zu and %zu)", x->file, graph.at, f.at);
            graph = f;
            has_graph = true;
            break;
        case 8:
            WANT(&f, DITTO_PB_LEN, in);
            DITTO_TRY(parse_opset(x, &r, &f, &has_opset));
            break;
        default:
            break;
        }
    }
    if (rc < 0)
        return pb_fail(x, &r, in);
    if (!has_ir || m->ir_version < 1)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: no valid ir_version (not an ONNX model?)", x->file);
    if (!has_graph)
        return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: no graph (not an ONNX model?)", x->file);
    if (!has_opset) {
        if (m->ir_version >= 3)
            return ditto_fail(x->log, DITTO_ERR_FORMAT, "%s: no opset_import for the default ONNX domain", x->file);
        m->opset = 1;   /* IR 1-2 had no opset_import: opset 1 */
    }
    if (!m->producer)
        DITTO_TRY(empty_str(x, &m->producer));
    return parse_graph(x, &graph);
}

/* ---- open / close --------------------------------------------------------------------- */

static int onnx_load(DittoOnnxModel **out, const char *path, const DittoMap *map, bool owns_map, const char *dir, const DittoLogger *log)
{
    OnnxImpl *mi = ditto_calloc(1, sizeof *mi);
    char *p = ditto_strdup(path);
    if (!mi || !p) {
        ditto_free(mi);
        ditto_free(p);
        if (owns_map) {
            DittoMap m = *map;
            ditto_map_close(&m);
        }
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    }
    mi->pub.path = p;
    DittoCatalog *c;
    int rc = ditto_catalog_create(&c, path, map, owns_map, log);
    if (rc < 0) {
        ditto_free(p);
        ditto_free(mi);
        return rc;
    }
    mi->pub.init = c;
    Ctx x = { .m = mi, .c = c, .file = path, .log = log, .base = c->map.data, .size = c->map.size, .dir = dir };
    rc = parse_model(&x);
    ditto_free(x.ext);
    ditto_free(x.fix);
    DittoOnnxModel *m = &mi->pub;
    if (rc < 0) {
        ditto_onnx_close(&m);
        return rc;
    }
    *out = m;
    return 0;
}

int ditto_onnx_open(DittoOnnxModel **out, const char *path, const DittoLogger *log)
{
    if (!out || !path)
        return DITTO_ERR_INVAL;
    *out = NULL;
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 1;
    char *dir = ditto_malloc(dl + 1);
    if (!dir)
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    if (!slash)
        memcpy(dir, ".", 2);
    else if (dl == 0)
        memcpy(dir, "/", 2);   /* "/model.onnx": the root folder; "/" + "/" + location still resolves */
    else {
        memcpy(dir, path, dl);
        dir[dl] = 0;
    }
    DittoMap m;
    int rc = ditto_map_open(&m, path, log);
    if (rc >= 0)
        rc = onnx_load(out, path, &m, true, dir, log);
    ditto_free(dir);
    return rc;
}

int ditto_onnx_open_memory(DittoOnnxModel **out, const void *data, size_t size, const char *name, const DittoLogger *log)
{
    if (!out || (!data && size) || !name)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoMap m = { size ? data : NULL, size };
    return onnx_load(out, name, &m, false, NULL, log);
}

void ditto_onnx_close(DittoOnnxModel **mp)
{
    if (!mp || !*mp)
        return;
    OnnxImpl *mi = (OnnxImpl *)*mp;
    ditto_catalog_close(&mi->pub.init);
    arena_free(mi->arena);
    ditto_free(mi->pub.path);
    ditto_free(mi);
    *mp = NULL;
}

const DittoOnnxAttr *ditto_onnx_attr(const DittoOnnxNode *n, const char *name)
{
    if (!n || !name)
        return NULL;
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name))
            return &n->attrs[i];
    return NULL;
}
