/*
 * .pth reader: ZIP central directory, allow-listed pickle, catalog.
 * A small writer below builds checkpoints the way torch.save lays them out
 * (and variants), so everything except the fixture checks runs without
 * ../shared: positive cases (every dtype, strides, shared storages, ZIP64,
 * protocols 2 and 4), hostile ones (each must fail with exactly one error
 * line naming the file), truncation and bit-flip sweeps, allocation failures.
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"
#include "weights/catalog.h"
#include "test_util.h"

/* ---- byte buffers --------------------------------------------------------------- */

static void put16(TestBuf *b, unsigned v) { test_buf_put8(b, v & 0xff); test_buf_put8(b, (v >> 8) & 0xff); }
static void put32(TestBuf *b, uint32_t v) { put16(b, v & 0xffff); put16(b, v >> 16); }
static void put64(TestBuf *b, uint64_t v) { put32(b, (uint32_t)v); put32(b, (uint32_t)(v >> 32)); }
static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* ---- pickle writer: the opcode sequences torch.save emits -------------------------- */

static void p_op(TestBuf *b, unsigned op) { test_buf_put8(b, op); }

static void p_str(TestBuf *b, const char *s)   /* BINUNICODE */
{
    p_op(b, 'X');
    put32(b, (uint32_t)strlen(s));
    test_buf_put(b, s, strlen(s));
}

static void p_int(TestBuf *b, int64_t v)
{
    if (v >= 0 && v < 256) {
        p_op(b, 'K');   /* BININT1 */
        test_buf_put8(b, (unsigned)v);
    } else if (v >= 0 && v < 65536) {
        p_op(b, 'M');   /* BININT2 */
        put16(b, (unsigned)v);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        p_op(b, 'J');   /* BININT */
        put32(b, (uint32_t)(int32_t)v);
    } else {
        p_op(b, 0x8a);  /* LONG1, 8 bytes */
        test_buf_put8(b, 8);
        put64(b, (uint64_t)v);
    }
}

static int g_proto4;   /* writer mode: protocol 4 globals (STACK_GLOBAL + MEMOIZE) */

static void p_global(TestBuf *b, const char *mod, const char *name)
{
    if (g_proto4) {
        p_op(b, 0x8c);   /* SHORT_BINUNICODE */
        test_buf_put8(b, (unsigned)strlen(mod));
        test_buf_put(b, mod, strlen(mod));
        p_op(b, 0x94);   /* MEMOIZE */
        p_op(b, 0x8c);
        test_buf_put8(b, (unsigned)strlen(name));
        test_buf_put(b, name, strlen(name));
        p_op(b, 0x94);
        p_op(b, 0x93);   /* STACK_GLOBAL */
        p_op(b, 0x94);
        return;
    }
    p_op(b, 'c');   /* GLOBAL */
    test_buf_put(b, mod, strlen(mod));
    p_op(b, '\n');
    test_buf_put(b, name, strlen(name));
    p_op(b, '\n');
}

static void p_ordered_dict(TestBuf *b)   /* collections.OrderedDict() */
{
    p_global(b, "collections", "OrderedDict");
    p_op(b, ')');   /* EMPTY_TUPLE */
    p_op(b, 'R');   /* REDUCE */
}

typedef struct TDesc {
    const char *key, *cls, *skey;
    int64_t numel, offset;
    int ndim;
    int64_t shape[8], stride[8];
    int param;   /* wrap in torch._utils._rebuild_parameter */
} TDesc;

static void p_tensor(TestBuf *b, const TDesc *t)
{
    if (t->param)
        p_global(b, "torch._utils", "_rebuild_parameter");
    p_global(b, "torch._utils", "_rebuild_tensor_v2");
    p_op(b, '(');   /* MARK: arguments */
    p_op(b, '(');   /* MARK: persistent id */
    p_str(b, "storage");
    p_global(b, "torch", t->cls);
    p_str(b, t->skey);
    p_str(b, "cpu");
    p_int(b, t->numel);
    p_op(b, 't');   /* TUPLE */
    p_op(b, 'Q');   /* BINPERSID */
    p_int(b, t->offset);
    p_op(b, '(');
    for (int i = 0; i < t->ndim; i++)
        p_int(b, t->shape[i]);
    p_op(b, 't');
    p_op(b, '(');
    for (int i = 0; i < t->ndim; i++)
        p_int(b, t->stride[i]);
    p_op(b, 't');
    p_op(b, 0x89);  /* NEWFALSE: requires_grad */
    p_ordered_dict(b);   /* backward_hooks */
    p_op(b, 't');
    p_op(b, 'R');
    if (t->param) {
        p_op(b, 0x89);
        p_ordered_dict(b);
        p_op(b, 0x87);   /* TUPLE3 */
        p_op(b, 'R');
    }
}

/* module.state_dict() as torch.save pickles it (OrderedDict + _metadata), optionally as {wrap: state_dict}. */
static void p_state_dict(TestBuf *b, const TDesc *ts, int n, const char *wrap, int proto)
{
    p_op(b, 0x80);   /* PROTO */
    test_buf_put8(b, (unsigned)proto);
    size_t frame_len_at = 0;
    if (proto >= 4) {
        p_op(b, 0x95);   /* FRAME: patched below */
        frame_len_at = b->n;
        put64(b, 0);
    }
    g_proto4 = proto >= 4;
    if (wrap) {
        p_op(b, '}');
        p_op(b, 'q');    /* BINPUT 0 */
        test_buf_put8(b, 0);
        p_str(b, wrap);
    }
    p_ordered_dict(b);
    p_op(b, '(');
    for (int i = 0; i < n; i++) {
        p_str(b, ts[i].key);
        p_tensor(b, &ts[i]);
    }
    p_op(b, 'u');    /* SETITEMS */
    p_op(b, '}');    /* state: {'_metadata': OrderedDict({'': {'version': 1}})} */
    p_str(b, "_metadata");
    p_ordered_dict(b);
    p_op(b, '(');
    p_str(b, "");
    p_op(b, '}');
    p_str(b, "version");
    p_int(b, 1);
    p_op(b, 's');    /* SETITEM */
    p_op(b, 'u');
    p_op(b, 's');
    p_op(b, 'b');    /* BUILD */
    if (wrap)
        p_op(b, 's');
    p_op(b, '.');
    g_proto4 = 0;
    if (frame_len_at) {
        uint64_t len = b->n - frame_len_at - 8;
        for (int i = 0; i < 8; i++)
            b->p[frame_len_at + (size_t)i] = (uint8_t)(len >> (8 * i));
    }
}

/* ---- zip writer ------------------------------------------------------------------- */

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

typedef struct ZEnt {
    char name[160];
    const void *data;
    size_t size;
    unsigned method;
} ZEnt;

typedef struct ZOpts {
    int align;        /* data start multiple (PyTorch: 64), 0: none */
    int descriptor;   /* sizes in a data descriptor, zeros in the local header (PyTorch) */
    int zip64;        /* ZIP64 end records (PyTorch always writes them) */
    int force64;      /* 0xffffffff in the 32-bit fields + zip64 extra fields */
    int flags;        /* extra general-purpose flags in the central directory */
} ZOpts;

static const ZOpts torch_like = { 64, 1, 1, 0, 0 };

#define MAX_ZENT 32

static void zip_write(TestBuf *out, const ZEnt *e, int n, const ZOpts *o)
{
    uint64_t offs[MAX_ZENT];
    uint32_t crcs[MAX_ZENT];
    for (int i = 0; i < n; i++) {
        offs[i] = out->n;
        crcs[i] = crc32_of(e[i].data, e[i].size);
        size_t nl = strlen(e[i].name);
        size_t x64 = o->force64 ? 20 : 0;
        size_t pad = 0;
        if (o->align) {
            size_t start = out->n + 30 + nl + x64 + 4;
            pad = (size_t)((o->align - start % (size_t)o->align) % (size_t)o->align) + 4;
        }
        put32(out, 0x04034b50);
        put16(out, 45);
        put16(out, (o->descriptor ? 8 : 0) | 0x800);
        put16(out, e[i].method);
        put16(out, 0);
        put16(out, 0x21);
        put32(out, o->descriptor ? 0 : crcs[i]);
        put32(out, o->force64 ? 0xffffffffu : o->descriptor ? 0 : (uint32_t)e[i].size);
        put32(out, o->force64 ? 0xffffffffu : o->descriptor ? 0 : (uint32_t)e[i].size);
        put16(out, (unsigned)nl);
        put16(out, (unsigned)(x64 + pad));
        test_buf_put(out, e[i].name, nl);
        if (x64) {
            put16(out, 1);
            put16(out, 16);
            put64(out, e[i].size);
            put64(out, e[i].size);
        }
        if (pad) {
            put16(out, 0x4246);   /* "FB", PyTorch's padding field */
            put16(out, (unsigned)(pad - 4));
            for (size_t k = 0; k < pad - 4; k++)
                test_buf_put8(out, 'Z');
        }
        test_buf_put(out, e[i].data, e[i].size);
        if (o->descriptor) {
            put32(out, 0x08074b50);
            put32(out, crcs[i]);
            if (o->zip64) {
                put64(out, e[i].size);
                put64(out, e[i].size);
            } else {
                put32(out, (uint32_t)e[i].size);
                put32(out, (uint32_t)e[i].size);
            }
        }
    }
    uint64_t cd_off = out->n;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(e[i].name);
        put32(out, 0x02014b50);
        put16(out, 0x031e);
        put16(out, 45);
        put16(out, (unsigned)((o->descriptor ? 8 : 0) | 0x800 | o->flags));
        put16(out, e[i].method);
        put16(out, 0);
        put16(out, 0x21);
        put32(out, crcs[i]);
        put32(out, o->force64 ? 0xffffffffu : (uint32_t)e[i].size);
        put32(out, o->force64 ? 0xffffffffu : (uint32_t)e[i].size);
        put16(out, (unsigned)nl);
        put16(out, o->force64 ? 28 : 0);
        put16(out, 0);
        put16(out, 0);
        put16(out, 0);
        put32(out, 0);
        put32(out, o->force64 ? 0xffffffffu : (uint32_t)offs[i]);
        test_buf_put(out, e[i].name, nl);
        if (o->force64) {
            put16(out, 1);
            put16(out, 24);
            put64(out, e[i].size);
            put64(out, e[i].size);
            put64(out, offs[i]);
        }
    }
    uint64_t cd_size = out->n - cd_off;
    if (o->zip64) {
        uint64_t rec = out->n;
        put32(out, 0x06064b50);
        put64(out, 44);
        put16(out, 0x031e);
        put16(out, 45);
        put32(out, 0);
        put32(out, 0);
        put64(out, (uint64_t)n);
        put64(out, (uint64_t)n);
        put64(out, cd_size);
        put64(out, cd_off);
        put32(out, 0x07064b50);
        put32(out, 0);
        put64(out, rec);
        put32(out, 1);
    }
    put32(out, 0x06054b50);
    put16(out, 0);
    put16(out, 0);
    put16(out, o->force64 ? 0xffff : (unsigned)n);
    put16(out, o->force64 ? 0xffff : (unsigned)n);
    put32(out, o->force64 ? 0xffffffffu : (uint32_t)cd_size);
    put32(out, o->force64 ? 0xffffffffu : (uint32_t)cd_off);
    put16(out, 0);
}

typedef struct Stor {
    const char *key;
    const void *data;
    size_t size;
} Stor;

/* "<prefix>/data.pkl", byteorder (NULL: none, as before PyTorch 1.12), "<prefix>/data/<key>", version. */
static void pth_write(TestBuf *out, const char *prefix, const TestBuf *pkl, const Stor *st, int nst, const char *byteorder, const ZOpts *o)
{
    ZEnt e[MAX_ZENT];
    int n = 0;
    memset(e, 0, sizeof e);
    snprintf(e[n].name, sizeof e[n].name, "%s/data.pkl", prefix);
    e[n].data = pkl->p;
    e[n++].size = pkl->n;
    if (byteorder) {
        snprintf(e[n].name, sizeof e[n].name, "%s/byteorder", prefix);
        e[n].data = byteorder;
        e[n++].size = strlen(byteorder);
    }
    for (int i = 0; i < nst && n < MAX_ZENT - 1; i++) {
        snprintf(e[n].name, sizeof e[n].name, "%s/data/%s", prefix, st[i].key);
        e[n].data = st[i].data;
        e[n++].size = st[i].size;
    }
    snprintf(e[n].name, sizeof e[n].name, "%s/version", prefix);
    e[n].data = "3\n";
    e[n++].size = 2;
    zip_write(out, e, n, o ? o : &torch_like);
}

/* ---- the reference checkpoint: every dtype, strides, shared storage, zero-dim, zero-size ---- */

static float s_f32[24];
static uint16_t s_f16[4], s_bf16[4];
static double s_f64[3] = { 1.25, -1e300, 3.0 };
static int64_t s_i64[1] = { 7 };
static int32_t s_i32[2] = { -5, 100000 };
static uint8_t s_u8[4] = { 0, 255, 17, 3 };
static int8_t s_i8[3] = { -128, 5, 127 };
static uint8_t s_bool[3] = { 1, 0, 1 };
static const float f16_vals[4] = { 1.5f, -2.0f, 0.25f, 65504.0f };
static const float bf16_vals[4] = { 1.0f, -3.5f, 256.0f, 0.0078125f };

static void init_storages(void)
{
    for (int i = 0; i < 24; i++)
        s_f32[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 4; i++) {
        s_f16[i] = ditto_f32_to_f16(f16_vals[i]);
        s_bf16[i] = ditto_f32_to_bf16(bf16_vals[i]);
    }
}

static const Stor ref_storages[] = {
    { "0", s_f32, sizeof s_f32 }, { "1", s_f16, sizeof s_f16 }, { "2", s_bf16, sizeof s_bf16 }, { "3", s_f64, sizeof s_f64 },
    { "4", s_i64, sizeof s_i64 }, { "5", s_i32, sizeof s_i32 }, { "6", s_u8, sizeof s_u8 },     { "7", s_i8, sizeof s_i8 },
    { "8", s_bool, sizeof s_bool }, { "9", "", 0 },
};
#define N_REF_STORAGES (int)(sizeof ref_storages / sizeof *ref_storages)

static const TDesc ref_tensors[] = {
    { "w", "FloatStorage", "0", 24, 0, 3, { 2, 3, 4 }, { 12, 4, 1 }, 0 },
    { "wt", "FloatStorage", "0", 24, 0, 2, { 4, 3 }, { 1, 4 }, 0 },          /* transposed view of the first 12 */
    { "slice", "FloatStorage", "0", 24, 5, 2, { 2, 2 }, { 6, 2 }, 0 },       /* offset + strides > 1 */
    { "bcast", "FloatStorage", "0", 24, 10, 2, { 3, 2 }, { 0, 1 }, 0 },      /* stride 0 (expand) */
    { "last", "FloatStorage", "0", 24, 23, 1, { 1 }, { 1 }, 1 },            /* the very last element, as a Parameter */
    { "half", "HalfStorage", "1", 4, 0, 1, { 4 }, { 1 }, 0 },
    { "bf", "BFloat16Storage", "2", 4, 0, 2, { 2, 2 }, { 2, 1 }, 0 },
    { "dbl", "DoubleStorage", "3", 3, 0, 1, { 3 }, { 1 }, 0 },
    { "bn.num_batches_tracked", "LongStorage", "4", 1, 0, 0, { 0 }, { 0 }, 0 },
    { "i32", "IntStorage", "5", 2, 0, 1, { 2 }, { 1 }, 0 },
    { "u8", "ByteStorage", "6", 4, 0, 2, { 2, 2 }, { 1, 2 }, 0 },           /* column-major */
    { "i8", "CharStorage", "7", 3, 0, 1, { 3 }, { 1 }, 0 },
    { "mask", "BoolStorage", "8", 3, 0, 1, { 3 }, { 1 }, 0 },
    { "empty", "FloatStorage", "9", 0, 0, 2, { 0, 5 }, { 5, 1 }, 0 },
    { "six", "FloatStorage", "0", 24, 0, 6, { 1, 2, 1, 3, 1, 4 }, { 24, 12, 12, 4, 4, 1 }, 0 },
};
#define N_REF_TENSORS (int)(sizeof ref_tensors / sizeof *ref_tensors)

/* Element i (row-major over the shape) of a reference tensor, from the storage arrays. */
static double ref_value(const TDesc *t, int64_t i)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    switch (t->skey[0]) {
    case '0': return s_f32[off];
    case '1': return f16_vals[off];
    case '2': return bf16_vals[off];
    case '3': return s_f64[off];
    case '4': return (double)s_i64[off];
    case '5': return s_i32[off];
    case '6': return s_u8[off];
    case '7': return s_i8[off];
    default: return s_bool[off];
    }
}

static void make_ref(TestBuf *out, const char *prefix, const char *wrap, int proto, const char *byteorder, const ZOpts *o)
{
    TestBuf pkl = { 0 };
    p_state_dict(&pkl, ref_tensors, N_REF_TENSORS, wrap, proto);
    pth_write(out, prefix, &pkl, ref_storages, N_REF_STORAGES, byteorder, o);
    test_buf_free(&pkl);
}

/* Check every reference tensor of c (under "wrap." when wrapped): dtype, shape, zero-copy pointer, values. */
static int check_ref(const DittoCatalog *c, const char *wrap, const TestBuf *file, char *why, size_t nwhy)
{
    if (c->n != (size_t)N_REF_TENSORS)
        return snprintf(why, nwhy, "%zu entries, expected %d", c->n, N_REF_TENSORS), 0;
    static const DittoDType dt[] = { DITTO_F32, DITTO_F32, DITTO_F32, DITTO_F32, DITTO_F32, DITTO_F16, DITTO_BF16, DITTO_F64,
                                     DITTO_I64, DITTO_I32, DITTO_U8, DITTO_I8, DITTO_BOOL, DITTO_F32, DITTO_F32 };
    for (int i = 0; i < N_REF_TENSORS; i++) {
        const TDesc *t = &ref_tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%s%s%s", wrap ? wrap : "", wrap ? "." : "", t->key);
        const DittoCatalogEntry *e = ditto_catalog_find(c, name);
        if (!e)
            return snprintf(why, nwhy, "'%s' missing", name), 0;
        if (&c->entries[i] != e)
            return snprintf(why, nwhy, "'%s' not in file order", name), 0;
        if (e->dtype != dt[i] || e->ndim != t->ndim)
            return snprintf(why, nwhy, "'%s': dtype %s ndim %d", name, ditto_dtype_name(e->dtype), e->ndim), 0;
        for (int d = 0; d < t->ndim; d++)
            if (e->shape[d] != t->shape[d] || e->stride[d] != t->stride[d])
                return snprintf(why, nwhy, "'%s': shape/stride differ", name), 0;
        const uint8_t *p = e->data;
        if (p < file->p || p + e->span > file->p + file->n || e->offset != (uint64_t)(p - file->p))
            return snprintf(why, nwhy, "'%s': data not inside the file buffer", name), 0;
        int64_t n = ditto_catalog_entry_numel(e);
        float v[64];
        if (n > 64 || ditto_catalog_read_f32(c, e, v) < 0)
            return snprintf(why, nwhy, "'%s': read_f32 failed", name), 0;
        for (int64_t k = 0; k < n; k++) {
            float want = (float)ref_value(t, k);
            if (v[k] != want)
                return snprintf(why, nwhy, "'%s'[%lld] = %g, expected %g", name, (long long)k, v[k], want), 0;
        }
    }
    /* shared storage: tensors on storage "0" at offset 0 alias the same bytes */
    const DittoCatalogEntry *a = &c->entries[0], *b = &c->entries[1], *s = &c->entries[2];
    if (a->data != b->data || (const uint8_t *)s->data != (const uint8_t *)a->data + 5 * 4)
        return snprintf(why, nwhy, "shared storage not aliased"), 0;
    if (c->entries[13].span != 0 || c->entries[8].span != 8 || c->entries[1].span != (3 * 1 + 2 * 4 + 1) * 4)
        return snprintf(why, nwhy, "spans wrong"), 0;
    return 1;
}

static void test_positive(TestCtx *tc)
{
    static const ZOpts plain = { 0, 0, 0, 0, 0 }, forced = { 64, 1, 1, 1, 0 }, odd_align = { 3, 0, 1, 0, 0 };
    static const struct {
        const char *label, *prefix, *wrap, *byteorder;
        int proto;
        const ZOpts *zo;
    } cases[] = {
        { "pth.torch_layout", "archive", NULL, "little", 2, &torch_like },
        { "pth.nested_dict", "lmdm", "model_state_dict", "little", 2, &torch_like },
        { "pth.protocol4", "x.y", NULL, "little", 4, &torch_like },
        { "pth.protocol5_nested", "some_name", "retarget_shoulder", NULL, 5, &torch_like },
        { "pth.old_torch_no_byteorder", "archive", NULL, NULL, 2, &plain },
        { "pth.zip64_fields", "archive", "m", "little", 2, &forced },
        { "pth.unaligned_data", "a", NULL, "little", 2, &odd_align },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TestBuf f = { 0 };
        make_ref(&f, cases[i].prefix, cases[i].wrap, cases[i].proto, cases[i].byteorder, cases[i].zo);
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoCatalog *c = NULL;
        int rc = ditto_catalog_open_pth_memory(&c, f.p, f.n, "ref.pth", &lg);
        char why[256] = "";
        int ok = rc == 0 && lc.errors == 0 && check_ref(c, cases[i].wrap, &f, why, sizeof why);
        test_report(tc, cases[i].label, ok, "rc %d, %zu bytes: %s%s", rc, f.n, why, lc.first);
        ditto_catalog_close(&c);
        test_buf_free(&f);
    }

    /* catalog API details */
    TestBuf f = { 0 };
    make_ref(&f, "archive", NULL, 2, "little", NULL);
    DittoCatalog *c = NULL;
    int ok = ditto_catalog_open_pth_memory(&c, f.p, f.n, "ref.pth", NULL) == 0;
    if (ok) {
        DittoCatalogEntry *e = ditto_catalog_get(c, "wt");
        ok &= e && !e->used && ditto_catalog_find(c, "w.") == NULL && ditto_catalog_find(c, "") == NULL && ditto_catalog_find(c, "W") == NULL;
        ok &= ditto_catalog_entry_numel(ditto_catalog_find(c, "bn.num_batches_tracked")) == 1;
        ok &= ditto_catalog_entry_numel(ditto_catalog_find(c, "empty")) == 0 && ditto_catalog_entry_nbytes(ditto_catalog_find(c, "dbl")) == 24;
        ok &= !strcmp(c->path, "ref.pth") && c->map.data == f.p && c->map.size == f.n;
        ok &= ditto_catalog_read_f32(c, NULL, NULL) == DITTO_ERR_INVAL;
    }
    ditto_catalog_close(&c);
    ditto_catalog_close(&c);   /* NULL-safe, idempotent */
    test_report(tc, "pth.catalog_api", ok && c == NULL, "");
    test_buf_free(&f);

    /* non-tensor leaves of every allowed kind are skipped; lists of tensors flatten with indices */
    TestBuf pk = { 0 };
    p_op(&pk, 0x80);
    test_buf_put8(&pk, 2);
    p_op(&pk, '}');
    p_str(&pk, "epoch");
    p_int(&pk, -3);
    p_op(&pk, 's');
    p_str(&pk, "meta");
    p_op(&pk, '(');
    p_str(&pk, "lr");
    p_op(&pk, 'G');   /* BINFLOAT 1.0 */
    test_buf_put(&pk, "\x3f\xf0\0\0\0\0\0\0", 8);
    p_str(&pk, "none");
    p_op(&pk, 'N');
    p_str(&pk, "flag");
    p_op(&pk, 0x88);
    p_str(&pk, "old");
    p_op(&pk, 'U');   /* SHORT_BINSTRING */
    test_buf_put8(&pk, 2);
    test_buf_put(&pk, "ab", 2);
    p_str(&pk, "raw");
    p_op(&pk, 'C');   /* SHORT_BINBYTES */
    test_buf_put8(&pk, 1);
    test_buf_put8(&pk, 0);
    p_str(&pk, "big");
    p_int(&pk, (int64_t)1 << 40);
    p_op(&pk, 'd');   /* DICT */
    p_op(&pk, 's');
    p_str(&pk, "lst");
    p_op(&pk, ']');   /* EMPTY_LIST */
    p_op(&pk, 'q');
    test_buf_put8(&pk, 7);
    p_tensor(&pk, &ref_tensors[7]);
    p_op(&pk, 'a');   /* APPEND */
    p_op(&pk, '(');
    p_tensor(&pk, &ref_tensors[9]);
    p_op(&pk, 'K');
    test_buf_put8(&pk, 1);
    p_op(&pk, 'e');   /* APPENDS */
    p_op(&pk, 's');
    p_str(&pk, "tup");
    p_op(&pk, '(');
    p_op(&pk, 'l');   /* LIST (empty) */
    p_int(&pk, 2);
    p_op(&pk, 0x86);  /* TUPLE2 */
    p_op(&pk, 's');
    p_op(&pk, '.');
    pth_write(&f, "archive", &pk, ref_storages, N_REF_STORAGES, "little", NULL);
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    int rc = ditto_catalog_open_pth_memory(&c, f.p, f.n, "leaves.pth", &lg);
    ok = rc == 0 && c->n == 2 && !strcmp(c->entries[0].name, "lst.0") && !strcmp(c->entries[1].name, "lst.1") &&
         c->entries[0].dtype == DITTO_F64 && c->entries[1].dtype == DITTO_I32;
    test_report(tc, "pth.skip_leaves", ok, "rc %d %s", rc, lc.first);
    ditto_catalog_close(&c);
    test_buf_free(&f);
    test_buf_free(&pk);
}

/* ---- hostile inputs ------------------------------------------------------------------ */

/* rc < 0 (== want unless want is 0), exactly one error line, starting with the file name, containing `has`. */
static bool expect_fail(TestCtx *tc, const char *label, const void *data, size_t size, int want, const char *has)
{
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoCatalog *c = NULL;
    int rc = ditto_catalog_open_pth_memory(&c, data, size, "hostile.pth", &lg);
    bool ok = rc < 0 && (!want || rc == want) && c == NULL && lc.errors == 1 && lc.lines == 1 &&
              !strncmp(lc.first, "hostile.pth: ", 13) && (!has || strstr(lc.first, has));
    ditto_catalog_close(&c);
    return test_report(tc, label, ok, "rc %d (%s), %d line(s): %s", rc, ditto_strerror(rc), lc.lines, lc.first);
}

/* A pickle around one tensor, in a torch-like archive with the reference storages. */
static void one_tensor(TestBuf *f, const TDesc *t)
{
    TestBuf pk = { 0 };
    p_state_dict(&pk, t, 1, NULL, 2);
    pth_write(f, "archive", &pk, ref_storages, N_REF_STORAGES, "little", NULL);
    test_buf_free(&pk);
}

static void fail_tensor(TestCtx *tc, const char *label, const TDesc *t, int want, const char *has)
{
    TestBuf f = { 0 };
    one_tensor(&f, t);
    expect_fail(tc, label, f.p, f.n, want, has);
    test_buf_free(&f);
}

/* data.pkl = the given bytes, in an archive with the reference storages. */
static void fail_pickle(TestCtx *tc, const char *label, const void *pkl, size_t n, int want, const char *has)
{
    TestBuf pk = { 0 }, f = { 0 };
    test_buf_put(&pk, pkl, n);
    pth_write(&f, "archive", &pk, ref_storages, N_REF_STORAGES, "little", NULL);
    expect_fail(tc, label, f.p, f.n, want, has);
    test_buf_free(&pk);
    test_buf_free(&f);
}
#define FAIL_PICKLE(tc, label, lit, want, has) fail_pickle(tc, label, lit, sizeof(lit) - 1, want, has)

static void test_hostile_pickles(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    FAIL_PICKLE(tc, "hostile.global_os_system", "\x80\x02" "cos\nsystem\n" "X\x02\0\0\0ls" "\x85R.", U, "forbidden global 'os.system'");
    FAIL_PICKLE(tc, "hostile.global_builtins_eval", "\x80\x04\x8c\x08" "builtins" "\x8c\x04" "eval" "\x93" "X\x01\0\0\0" "1\x85R.", U,
                "'builtins.eval'");
    FAIL_PICKLE(tc, "hostile.global_torch_load", "\x80\x02" "ctorch\nload\n" ")R.", U, "'torch.load'");
    FAIL_PICKLE(tc, "hostile.reduce_storage_class", "\x80\x02" "ctorch\nFloatStorage\n" ")R.", U, "not callable");
    FAIL_PICKLE(tc, "hostile.reduce_string", "\x80\x02" "X\x01\0\0\0a" ")R.", U, "REDUCE on a str");
    FAIL_PICKLE(tc, "hostile.ordereddict_args", "\x80\x02" "ccollections\nOrderedDict\n" "]\x85R.", U, "OrderedDict");
    FAIL_PICKLE(tc, "hostile.build_on_list", "\x80\x02" "]}b.", U, "BUILD on a list");
    FAIL_PICKLE(tc, "hostile.opcode_inst", "\x80\x02" "(ios\nsystem\n.", F, "INST");
    FAIL_PICKLE(tc, "hostile.opcode_newobj", "\x80\x02" "ccollections\nOrderedDict\n)\x81.", F, "NEWOBJ");
    FAIL_PICKLE(tc, "hostile.opcode_ext1", "\x80\x02\x82\x01.", F, "EXT1");
    FAIL_PICKLE(tc, "hostile.opcode_unknown", "\x80\x02\xff.", F, "0xff");
    FAIL_PICKLE(tc, "hostile.opcode_persid_text", "\x80\x02" "P0\n.", F, "PERSID");
    FAIL_PICKLE(tc, "hostile.protocol_6", "\x80\x06}.", U, "protocol 6");
    FAIL_PICKLE(tc, "hostile.no_stop", "\x80\x02}", F, "no STOP");
    FAIL_PICKLE(tc, "hostile.empty_pickle", "", F, "no STOP");
    FAIL_PICKLE(tc, "hostile.stack_underflow", "\x80\x02R.", F, "underflow");
    FAIL_PICKLE(tc, "hostile.setitem_underflow", "\x80\x02}(s.", F, "underflow");
    FAIL_PICKLE(tc, "hostile.setitems_no_mark", "\x80\x02}u.", F, "MARK");
    FAIL_PICKLE(tc, "hostile.setitems_odd", "\x80\x02}(K\x01u.", F, "odd");
    FAIL_PICKLE(tc, "hostile.setitem_on_int", "\x80\x02K\x01K\x02K\x03s.", F, "adding items to a int");
    FAIL_PICKLE(tc, "hostile.append_on_dict", "\x80\x02}K\x01" "a.", F, "adding items to a dict");
    FAIL_PICKLE(tc, "hostile.memo_undefined", "\x80\x02h\x05.", F, "memo entry 5");
    FAIL_PICKLE(tc, "hostile.memo_huge", "\x80\x02}r\xff\xff\xff\x7f.", F, "memo index");
    FAIL_PICKLE(tc, "hostile.memo_empty_stack", "\x80\x02q\x00.", F, "empty stack");
    FAIL_PICKLE(tc, "hostile.string_too_long", "\x80\x02X\xff\xff\xff\x7f" "abc.", F, "truncated");
    FAIL_PICKLE(tc, "hostile.unicode8_huge", "\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", F, "truncated");
    FAIL_PICKLE(tc, "hostile.binstring_negative", "\x80\x02T\xff\xff\xff\xff.", F, "negative");
    FAIL_PICKLE(tc, "hostile.long1_9_bytes", "\x80\x02\x8a\x09" "123456789.", U, "9 bytes");
    FAIL_PICKLE(tc, "hostile.frame_past_end", "\x80\x04\x95\xff\0\0\0\0\0\0\0}.", F, "truncated");
    FAIL_PICKLE(tc, "hostile.global_no_newline", "\x80\x02" "ccollections OrderedDict", F, "newline");
    FAIL_PICKLE(tc, "hostile.stack_global_ints", "\x80\x04K\x01K\x02\x93.", F, "STACK_GLOBAL");
    FAIL_PICKLE(tc, "hostile.top_level_list", "\x80\x02].", U, "top-level object is a list");
    FAIL_PICKLE(tc, "hostile.top_level_none", "\x80\x02N.", U, "top-level object is a None");
    FAIL_PICKLE(tc, "hostile.dict_key_bytes", "\x80\x02}C\x01x}s.", U, "dict key of type bytes");
    FAIL_PICKLE(tc, "hostile.dict_key_control", "\x80\x02}X\x02\0\0\0a\n}s.", F, "control character");
    FAIL_PICKLE(tc, "hostile.cycle", "\x80\x02}q\x00X\x01\0\0\0ah\x00s.", F, "nested deeper");
    FAIL_PICKLE(tc, "hostile.persid_not_tuple", "\x80\x02K\x01Q.", F, "persistent id");
    FAIL_PICKLE(tc, "hostile.persid_bad_class", "\x80\x02(X\x07\0\0\0storageK\x01X\x01\0\0\0" "0X\x03\0\0\0cpuK\x01tQ.", F,
                "not a storage class");
    FAIL_PICKLE(tc, "hostile.persid_bad_key", "\x80\x02(X\x07\0\0\0storagectorch\nFloatStorage\nX\x01\0\0\0\nX\x03\0\0\0cpuK\x01tQ.", F,
                "storage key");
    FAIL_PICKLE(tc, "hostile.rebuild_bad_args", "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n" "K\x01\x85R.", F, "1 arguments");
    FAIL_PICKLE(tc, "hostile.rebuild_not_storage", "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2\n" "(K\x01K\0)))\x89}tR.", F,
                "not a storage");
    FAIL_PICKLE(tc, "hostile.parameter_of_int", "\x80\x02" "ctorch._utils\n_rebuild_parameter\n" "(K\x01\x89}tR.", F, "_rebuild_parameter");

    /* MARK and container nesting */
    TestBuf pk = { 0 };
    p_op(&pk, 0x80);
    test_buf_put8(&pk, 2);
    for (int i = 0; i < 100; i++)
        p_op(&pk, '(');
    p_op(&pk, '.');
    fail_pickle(tc, "hostile.deep_marks", pk.p, pk.n, F, "MARKs nested");
    pk.n = 2;
    for (int i = 0; i < 40; i++) {   /* {"a": {"a": ... {"a": tensor}}} */
        p_op(&pk, '}');
        p_str(&pk, "a");
    }
    p_tensor(&pk, &ref_tensors[0]);
    for (int i = 0; i < 40; i++)
        p_op(&pk, 's');
    p_op(&pk, '.');
    fail_pickle(tc, "hostile.deep_dicts", pk.p, pk.n, F, "nested deeper than 32");
    pk.n = 2;
    p_op(&pk, '}');
    p_str(&pk, "t");
    p_int(&pk, 0);
    for (int i = 0; i < 200000; i++)   /* ((((0,),),),...): no recursion while building */
        p_op(&pk, 0x85);
    p_op(&pk, 's');
    p_op(&pk, '.');
    fail_pickle(tc, "hostile.deep_tuples", pk.p, pk.n, F, "nested deeper");
    pk.n = 2;
    for (int i = 0; i < (1 << 20) + 1; i++)   /* stack limit */
        p_op(&pk, 'N');
    fail_pickle(tc, "hostile.stack_limit", pk.p, pk.n, F, "stack deeper");
    /* shared dicts: 2^30 paths from 30 dicts of two keys each -> work limit, not 2^30 callbacks */
    pk.n = 2;
    p_op(&pk, '}');
    p_str(&pk, "t");
    p_tensor(&pk, &ref_tensors[0]);
    p_op(&pk, 's');
    for (int i = 0; i < 30; i++) {
        p_op(&pk, 'q');
        test_buf_put8(&pk, 1);
        p_op(&pk, '}');
        p_str(&pk, "x");
        p_op(&pk, 'h');
        test_buf_put8(&pk, 1);
        p_op(&pk, 's');
        p_str(&pk, "y");
        p_op(&pk, 'h');
        test_buf_put8(&pk, 1);
        p_op(&pk, 's');
    }
    p_op(&pk, '.');
    fail_pickle(tc, "hostile.shared_dict_explosion", pk.p, pk.n, F, "too much work");
    test_buf_free(&pk);
}

static void test_hostile_tensors(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    TDesc t = ref_tensors[0];
    t.skey = "42";
    fail_tensor(tc, "hostile.missing_storage", &t, F, "'archive/data/42' is missing");
    t = ref_tensors[0];
    t.shape[0] = 3;   /* (3,3,4) stride (12,4,1) reaches element 35 of 24 */
    fail_tensor(tc, "hostile.stride_past_storage", &t, F, "reaches element 35");
    t = ref_tensors[4];
    t.offset = 24;
    fail_tensor(tc, "hostile.offset_past_storage", &t, F, "reaches element 24");
    t = ref_tensors[0];
    t.numel = 25;   /* the pickle claims more than the record holds */
    fail_tensor(tc, "hostile.numel_past_record", &t, F, "its record has 96 bytes");
    t = ref_tensors[0];
    t.numel = (int64_t)1 << 62;   /* numel * 4 overflows */
    fail_tensor(tc, "hostile.numel_overflow", &t, F, "record");
    t = ref_tensors[0];
    t.ndim = 2;
    t.shape[0] = (int64_t)1 << 62;
    t.shape[1] = 8;
    t.stride[0] = 8;
    t.stride[1] = 1;
    fail_tensor(tc, "hostile.size_overflow", &t, F, "overflow 64 bits");
    t = ref_tensors[3];   /* stride 0: the addresses fit, but numel is 2^63 */
    t.shape[0] = (int64_t)1 << 62;
    fail_tensor(tc, "hostile.numel_too_large", &t, F, "too large");
    t = ref_tensors[0];
    t.stride[1] = -4;
    fail_tensor(tc, "hostile.negative_stride", &t, F, "stride[1]");
    t = ref_tensors[0];
    t.shape[2] = -1;
    fail_tensor(tc, "hostile.negative_size", &t, F, "size[2]");
    t = ref_tensors[0];
    t.offset = -1;
    fail_tensor(tc, "hostile.negative_offset", &t, F, "offset");
    t = ref_tensors[0];
    t.ndim = 7;
    for (int i = 0; i < 7; i++)
        t.shape[i] = 1, t.stride[i] = 1;
    fail_tensor(tc, "hostile.seven_dims", &t, U, "7 dimensions");
    t = ref_tensors[0];
    t.cls = "ShortStorage";
    fail_tensor(tc, "hostile.short_storage", &t, U, "ShortStorage");
    t = ref_tensors[0];
    t.cls = "UntypedStorage";
    fail_tensor(tc, "hostile.unknown_storage_class", &t, U, "torch.UntypedStorage");

    /* duplicate keys */
    TDesc two[2] = { ref_tensors[0], ref_tensors[1] };
    two[1].key = "w";
    TestBuf pk = { 0 }, f = { 0 };
    p_state_dict(&pk, two, 2, NULL, 2);
    pth_write(&f, "archive", &pk, ref_storages, N_REF_STORAGES, "little", NULL);
    expect_fail(tc, "hostile.duplicate_key", f.p, f.n, F, "duplicate key 'w'");
    test_buf_free(&pk);
    test_buf_free(&f);
}

static void test_hostile_archives(TestCtx *tc)
{
    const int F = DITTO_ERR_FORMAT, U = DITTO_ERR_UNSUPPORTED;
    expect_fail(tc, "hostile.zero_length", "", 0, F, "empty file");
    expect_fail(tc, "hostile.not_zip", "hello, world; this is not a checkpoint at all", 46, F, "not a zip archive");
    static const uint8_t legacy[] = { 0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.', 0, 0, 0 };
    expect_fail(tc, "hostile.legacy_format", legacy, sizeof legacy, U, "legacy");
    uint8_t eocd_only[22] = { 0x50, 0x4b, 0x05, 0x06 };
    expect_fail(tc, "hostile.empty_archive", eocd_only, sizeof eocd_only, F, "no data.pkl");

    TestBuf pk = { 0 }, f = { 0 };
    p_state_dict(&pk, ref_tensors, 2, NULL, 2);
    pth_write(&f, "archive", &pk, ref_storages, 1, "big", NULL);
    expect_fail(tc, "hostile.big_endian", f.p, f.n, U, "big-endian");
    f.n = 0;
    pth_write(&f, "archive", &pk, ref_storages, 1, "middle", NULL);
    expect_fail(tc, "hostile.bad_byteorder", f.p, f.n, F, "byteorder");

    /* compressed records: data.pkl, then a storage */
    ZEnt e[4];
    memset(e, 0, sizeof e);
    snprintf(e[0].name, sizeof e[0].name, "archive/data.pkl");
    e[0].data = pk.p;
    e[0].size = pk.n;
    e[0].method = 8;
    snprintf(e[1].name, sizeof e[1].name, "archive/data/0");
    e[1].data = s_f32;
    e[1].size = sizeof s_f32;
    f.n = 0;
    zip_write(&f, e, 2, &torch_like);
    expect_fail(tc, "hostile.compressed_pickle", f.p, f.n, U, "'archive/data.pkl' is compressed");
    e[0].method = 0;
    e[1].method = 8;
    f.n = 0;
    zip_write(&f, e, 2, &torch_like);
    expect_fail(tc, "hostile.compressed_storage", f.p, f.n, U, "'archive/data/0' is compressed");
    e[1].method = 0;

    /* two data.pkl, duplicate entries, encrypted flag, nested prefix */
    e[2] = e[0];
    snprintf(e[2].name, sizeof e[2].name, "other/data.pkl");
    f.n = 0;
    zip_write(&f, e, 3, &torch_like);
    expect_fail(tc, "hostile.two_pickles", f.p, f.n, F, "several data.pkl");
    snprintf(e[2].name, sizeof e[2].name, "archive/data/0");
    f.n = 0;
    zip_write(&f, e, 3, &torch_like);
    expect_fail(tc, "hostile.duplicate_entry", f.p, f.n, F, "duplicate zip entry");
    ZOpts enc = torch_like;
    enc.flags = 1;
    f.n = 0;
    zip_write(&f, e, 2, &enc);
    expect_fail(tc, "hostile.encrypted", f.p, f.n, U, "encrypted");
    snprintf(e[0].name, sizeof e[0].name, "a/b/data.pkl");
    f.n = 0;
    zip_write(&f, e, 2, &torch_like);
    expect_fail(tc, "hostile.nested_prefix", f.p, f.n, F, "no data.pkl");
    snprintf(e[0].name, sizeof e[0].name, "archive/data.pkl");

    /* directory pointers: central directory past the end, local header of another entry, zip64 record missing */
    TestBuf ok = { 0 };
    ZOpts no64 = { 64, 1, 0, 0, 0 };
    zip_write(&ok, e, 2, &no64);
    memcpy(f.p, ok.p, ok.n);
    f.n = ok.n;
    wr32(f.p + f.n - 6, (uint32_t)f.n);   /* EOCD cd_offset */
    expect_fail(tc, "hostile.cd_past_end", f.p, f.n, F, "beyond end of file");
    memcpy(f.p, ok.p, ok.n);
    wr32(f.p + f.n - 6 - 4, 0x7fffffff);   /* EOCD cd_size */
    expect_fail(tc, "hostile.cd_size_huge", f.p, f.n, F, "central directory");
    memcpy(f.p, ok.p, ok.n);
    f.p[f.n - 22 + 10] = 0xff;   /* EOCD: more entries than the directory can hold */
    f.p[f.n - 22 + 8] = 0xff;
    expect_fail(tc, "hostile.too_many_entries", f.p, f.n, F, "cannot hold");
    memcpy(f.p, ok.p, ok.n);
    size_t cd = (size_t)(f.p[f.n - 6] | f.p[f.n - 5] << 8 | f.p[f.n - 4] << 16);
    wr32(f.p + cd + 42, 0x40000000);   /* first entry's local header offset */
    expect_fail(tc, "hostile.local_past_end", f.p, f.n, F, "local header");
    memcpy(f.p, ok.p, ok.n);
    wr32(f.p + cd + 42, 1);
    expect_fail(tc, "hostile.local_bad_signature", f.p, f.n, F, "no local header");
    test_buf_free(&ok);

    f.n = 0;
    zip_write(&f, e, 2, &torch_like);
    f.p[f.n - 22 - 20 + 8] ^= 0x01;   /* zip64 locator points one byte off */
    expect_fail(tc, "hostile.zip64_record_moved", f.p, f.n, F, "zip64");
    f.n = 0;
    ZOpts forced = torch_like;
    forced.force64 = 1;
    zip_write(&f, e, 2, &forced);
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoCatalog *c = NULL;
    int rc = ditto_catalog_open_pth_memory(&c, f.p, f.n, "hostile.pth", &lg);
    test_report(tc, "pth.zip64_minimal", rc == 0 && c && c->n == 2, "rc %d %s", rc, lc.first);
    ditto_catalog_close(&c);
    test_buf_free(&pk);
    test_buf_free(&f);
}

/* Every truncation and every single-bit flip of a small checkpoint: an error or a correct load, never a crash. */
static void test_sweeps(TestCtx *tc)
{
    TestBuf f = { 0 }, pk = { 0 };
    TDesc ts[3] = { ref_tensors[1], ref_tensors[5], ref_tensors[8] };
    static const Stor st[] = { { "0", s_f32, 48 }, { "1", s_f16, sizeof s_f16 }, { "4", s_i64, sizeof s_i64 } };
    ts[0].numel = 12;
    p_state_dict(&pk, ts, 3, "m", 2);
    pth_write(&f, "t", &pk, st, 3, "little", NULL);
    int bad = 0, loaded = 0, runs = 0;
    char first_bad[1200] = "";
    uint8_t *copy = malloc(f.n);
    for (int mode = 0; mode < 2; mode++) {
        size_t count = mode == 0 ? f.n : f.n * 8;
        for (size_t i = 0; i < count; i++) {
            size_t n = f.n;
            memcpy(copy, f.p, f.n);
            if (mode == 0)
                n = i;   /* truncated to i bytes (the buffer ends there for ASan: copied below) */
            else
                copy[i / 8] ^= (uint8_t)(1u << (i % 8));
            uint8_t *in = malloc(n ? n : 1);
            memcpy(in, copy, n);
            TestLogCapture lc;
            DittoLogger lg = test_log_capture(&lc);
            DittoCatalog *c = NULL;
            int rc = ditto_catalog_open_pth_memory(&c, in, n, "sweep.pth", &lg);
            runs++;
            if (rc == 0) {
                loaded++;
                for (size_t k = 0; k < c->n; k++) {
                    float v[64];
                    if (ditto_catalog_entry_numel(&c->entries[k]) <= 64)
                        ditto_catalog_read_f32(c, &c->entries[k], v);
                }
            }
            bool good = rc == 0 ? lc.errors == 0 : (lc.errors == 1 && !strncmp(lc.first, "sweep.pth: ", 11));
            if (mode == 0 && rc == 0)
                good = false;   /* no strict prefix of the file is a valid archive */
            if (!good && !bad++)
                snprintf(first_bad, sizeof first_bad, "%s %zu: rc %d '%s'", mode ? "flip" : "truncate", i, rc, lc.first);
            ditto_catalog_close(&c);
            free(in);
        }
    }
    free(copy);
    test_report(tc, "pth.sweep_truncate_and_flip", bad == 0, "%d runs over %zu bytes, %d loaded, %d bad %s", runs, f.n, loaded, bad,
                first_bad);
    test_buf_free(&f);
    test_buf_free(&pk);
}

/* Fail the i-th allocation for every i: NOMEM with one error line, or success; no leaks (ASan). */
static void test_alloc_failures(TestCtx *tc)
{
    TestBuf f = { 0 };
    make_ref(&f, "archive", "m", 2, "little", NULL);
    int bad = 0, i;
    for (i = 0; i < 10000; i++) {
        TestLogCapture lc;
        DittoLogger lg = test_log_capture(&lc);
        DittoCatalog *c = NULL;
        ditto_mem_fail_after(i);
        int rc = ditto_catalog_open_pth_memory(&c, f.p, f.n, "oom.pth", &lg);
        ditto_mem_fail_after(-1);
        if (rc == 0) {
            ditto_catalog_close(&c);
            break;
        }
        if (rc != DITTO_ERR_NOMEM || lc.errors != 1 || strncmp(lc.first, "oom.pth: ", 9))
            bad++;
    }
    test_report(tc, "pth.alloc_failures", bad == 0 && i > 5 && i < 10000, "%d allocation points, %d bad", i, bad);
    test_buf_free(&f);
}

/* Through the file system: mmap, path in messages, missing file, directory, empty file. */
static void test_files(TestCtx *tc)
{
    char path[] = "/tmp/ditto_test_pth_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        test_report(tc, "pth.files", false, "mkstemp failed");
        return;
    }
    TestBuf f = { 0 };
    make_ref(&f, "archive", NULL, 2, "little", NULL);
    bool ok = write(fd, f.p, f.n) == (ssize_t)f.n;
    close(fd);
    DittoCatalog *c = NULL;
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    int rc = ditto_catalog_open_pth(&c, path, &lg);
    char why[256] = "";
    TestBuf mapped = { (uint8_t *)(uintptr_t)(c ? c->map.data : NULL), c ? c->map.size : 0, 0 };
    ok &= rc == 0 && !strcmp(c->path, path) && mapped.n == f.n && check_ref(c, NULL, &mapped, why, sizeof why);
    ditto_catalog_close(&c);
    test_report(tc, "pth.file_mapped", ok, "rc %d %s %s", rc, why, lc.first);

    /* truncated on disk: the message names the path */
    ok = truncate(path, (off_t)f.n - 30) == 0;
    lg = test_log_capture(&lc);
    rc = ditto_catalog_open_pth(&c, path, &lg);
    ok &= rc == DITTO_ERR_FORMAT && lc.errors == 1 && !strncmp(lc.first, path, strlen(path)) && c == NULL;
    test_report(tc, "pth.file_truncated", ok, "rc %d: %s", rc, lc.first);

    ok = truncate(path, 0) == 0;
    lg = test_log_capture(&lc);
    rc = ditto_catalog_open_pth(&c, path, &lg);
    ok &= rc == DITTO_ERR_FORMAT && lc.errors == 1 && strstr(lc.first, "empty file") && !strncmp(lc.first, path, strlen(path));
    test_report(tc, "pth.file_empty", ok, "rc %d: %s", rc, lc.first);
    DittoMap m;
    ok = ditto_map_open(&m, path, NULL) == 0 && m.size == 0 && m.data == NULL;
    ditto_map_close(&m);
    test_report(tc, "pth.map_empty", ok, "");
    unlink(path);

    lg = test_log_capture(&lc);
    rc = ditto_catalog_open_pth(&c, path, &lg);
    ok = rc == DITTO_ERR_NOENT && lc.errors == 1 && !strncmp(lc.first, path, strlen(path)) && strstr(lc.first, "No such file");
    test_report(tc, "pth.file_missing", ok, "rc %d: %s", rc, lc.first);
    lg = test_log_capture(&lc);
    rc = ditto_catalog_open_pth(&c, "/tmp", &lg);
    ok = rc < 0 && lc.errors == 1 && !strncmp(lc.first, "/tmp: ", 6);
    test_report(tc, "pth.file_directory", ok, "rc %d: %s", rc, lc.first);
    test_buf_free(&f);
}

/* The seeds in tests/data/pth, written by Python's pickle and zipfile (make_seeds.py): values read back. */
static bool seed_values(const char *file, const char *key, int n, const float *want, char *why, size_t nwhy)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/pth/%s", DITTO_SOURCE_DIR, file);
    TestLogCapture lc;
    DittoLogger lg = test_log_capture(&lc);
    DittoCatalog *c = NULL;
    if (ditto_catalog_open_pth(&c, path, &lg) < 0)
        return snprintf(why, nwhy, "%.400s", lc.first), false;
    const DittoCatalogEntry *e = ditto_catalog_find(c, key);
    float v[64];
    bool ok = e && ditto_catalog_entry_numel(e) == n && n <= 64 && ditto_catalog_read_f32(c, e, v) == 0;
    for (int i = 0; ok && i < n; i++)
        ok = v[i] == want[i];
    if (!ok)
        snprintf(why, nwhy, "%s: %s", file, key);
    ditto_catalog_close(&c);
    return ok;
}

static void test_seed_files(TestCtx *tc)
{
    char why[512] = "";
    float wt[12], bias[4], row[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            wt[i * 3 + j] = (float)(j * 4 + i) * 0.25f - 1;
    for (int k = 0; k < 4; k++)
        bias[k] = (float)(20 + k) * 0.25f - 1;
    for (int i = 0; i < 12; i++)
        row[i] = (float)(3 + i % 3);
    bool ok = seed_values("state_dict_p2.pth", "conv.weight_t", 12, wt, why, sizeof why) &&
              seed_values("state_dict_p2.pth", "conv.bias", 4, bias, why, sizeof why) &&
              seed_values("state_dict_p2.pth", "bn.num_batches_tracked", 1, (float[]){ 0 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.half", 4, f16_vals, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.bf16", 4, bf16_vals, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.f64", 3, (float[]){ 1.25f, -INFINITY, 3 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.i32", 2, (float[]){ -5, 100000 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.u8", 4, (float[]){ 0, 17, 255, 3 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.i8", 3, (float[]){ -128, 5, 127 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.mask", 3, (float[]){ 1, 0, 1 }, why, sizeof why) &&
              seed_values("nested_dtypes_p4.pth", "model_state_dict.empty", 0, NULL, why, sizeof why) &&
              seed_values("io_dict_old.pth", "row", 12, row, why, sizeof why);
    test_report(tc, "pth.python_written_seeds", ok, "%s", why);
}

/* ---- fixtures (../shared) ------------------------------------------------------------- */

static bool shape_is(const DittoCatalogEntry *e, int ndim, const int64_t *shape)
{
    if (!e || e->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (e->shape[i] != shape[i])
            return false;
    return true;
}

typedef struct KeyCheck {
    const char *file, *key;
    DittoDType dtype;
    int ndim;
    int64_t shape[6];
} KeyCheck;

/* Shapes from the reduced configurations in the manifest's ctor_kwargs. */
static const KeyCheck key_checks[] = {
    { "appearance.pth", "first.conv.weight", DITTO_F32, 4, { 8, 3, 3, 3 } },
    { "appearance.pth", "resblocks_3d.3dr0.conv1.weight", DITTO_F32, 5, { 8, 8, 3, 3, 3 } },
    { "appearance.pth", "first.norm.num_batches_tracked", DITTO_I64, 0, { 0 } },
    { "motion.pth", "detector.fc_kp.weight", DITTO_F32, 2, { 63, 32 } },
    { "motion.pth", "detector.fc_pitch.weight", DITTO_F32, 2, { 66, 32 } },
    { "warp.pth", "dense_motion_network.occlusion.weight", DITTO_F32, 4, { 1, 296, 7, 7 } },
    { "warp.pth", "third.norm.num_batches_tracked", DITTO_I64, 0, { 0 } },
    { "decoder.pth", "G_middle_0.conv_0.weight_orig", DITTO_F32, 4, { 16, 16, 3, 3 } },
    { "decoder.pth", "G_middle_0.conv_0.weight_u", DITTO_F32, 1, { 16 } },
    { "decoder.pth", "G_middle_0.conv_0.weight_v", DITTO_F32, 1, { 144 } },
    { "decoder.pth", "fc.weight", DITTO_F32, 4, { 16, 8, 3, 3 } },
    { "decoder.pth", "conv_img.0.weight", DITTO_F32, 4, { 12, 4, 3, 3 } },
    { "stitching.pth", "retarget_shoulder.mlp.0.weight", DITTO_F32, 2, { 128, 126 } },
    { "stitching.pth", "retarget_shoulder.mlp.6.weight", DITTO_F32, 2, { 65, 64 } },
    { "stitching.pth", "retarget_shoulder.mlp.6.bias", DITTO_F32, 1, { 65 } },
    { "lmdm.pth", "model_state_dict.input_projection.weight", DITTO_F32, 2, { 32, 530 } },
    { "lmdm.pth", "model_state_dict.cond_projection.weight", DITTO_F32, 2, { 32, 1059 } },
    { "lmdm.pth", "model_state_dict.null_cond_embed", DITTO_F32, 3, { 1, 20, 32 } },
    { "lmdm.pth", "model_state_dict.final_layer.weight", DITTO_F32, 2, { 265, 32 } },
    { "lmdm_a2m.pth", "model_state_dict.cond_projection.weight", DITTO_F32, 2, { 32, 1103 } },
    { "lmdm_a2m.pth", "model_state_dict.null_cond_embed", DITTO_F32, 3, { 1, 80, 32 } },
};

static const struct {
    const char *file;
    size_t n;
} count_checks[] = {
    { "appearance.pth", 51 }, { "motion.pth", 82 }, { "warp.pth", 69 }, { "decoder.pth", 182 },
    { "stitching.pth", 8 },   { "lmdm.pth", 99 },   { "lmdm_a2m.pth", 99 },
};

static DittoCatalog *open_fixture(const char *dir, const char *file)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return NULL;
    DittoLogger lg = ditto_logger_stderr(DITTO_LOG_WARN);
    DittoCatalog *c = NULL;
    ditto_catalog_open_pth(&c, path, &lg);
    return c;
}

static void test_fixture_files(TestCtx *tc, const char *shared)
{
    static const char *const dirs[] = { "fixtures/ditto", "fixtures/onnx" };
    for (size_t d = 0; d < 2; d++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", shared, dirs[d]);
        DIR *dh = opendir(dir);
        int files = 0, failed = 0, tensors = 0;
        char first[512] = "";
        struct dirent *de;
        while (dh && (de = readdir(dh))) {
            size_t l = strlen(de->d_name);
            if (l < 4 || strcmp(de->d_name + l - 4, ".pth"))
                continue;
            files++;
            DittoCatalog *c = open_fixture(dir, de->d_name);
            if (!c) {
                if (!failed++)
                    snprintf(first, sizeof first, "%s", de->d_name);
                continue;
            }
            tensors += (int)c->n;
            ditto_catalog_close(&c);
        }
        if (dh)
            closedir(dh);
        char label[64];
        snprintf(label, sizeof label, "fixtures.load_all.%s", dirs[d] + 9);
        test_report(tc, label, files > 0 && failed == 0, "%d files, %d tensors, %d failed %s", files, tensors, failed, first);
    }
}

static void test_fixture_keys(TestCtx *tc, const char *dir)
{
    int bad = 0;
    char first[512] = "";
    for (size_t i = 0; i < sizeof count_checks / sizeof *count_checks; i++) {
        DittoCatalog *c = open_fixture(dir, count_checks[i].file);
        if (!c || c->n != count_checks[i].n) {
            if (!bad++)
                snprintf(first, sizeof first, "%s: %zu entries", count_checks[i].file, c ? c->n : 0);
        }
        /* every BatchNorm counter is an int64 scalar; everything else float32 */
        for (size_t k = 0; c && k < c->n; k++) {
            const DittoCatalogEntry *e = &c->entries[k];
            bool nbt = strstr(e->name, "num_batches_tracked") != NULL;
            if (nbt ? (e->dtype != DITTO_I64 || e->ndim != 0 || e->span != 8) : e->dtype != DITTO_F32)
                if (!bad++)
                    snprintf(first, sizeof first, "%s: %s is %s", count_checks[i].file, e->name, ditto_dtype_name(e->dtype));
        }
        ditto_catalog_close(&c);
    }
    for (size_t i = 0; i < sizeof key_checks / sizeof *key_checks; i++) {
        const KeyCheck *k = &key_checks[i];
        DittoCatalog *c = open_fixture(dir, k->file);
        const DittoCatalogEntry *e = c ? ditto_catalog_find(c, k->key) : NULL;
        if (!e || e->dtype != k->dtype || !shape_is(e, k->ndim, k->shape))
            if (!bad++)
                snprintf(first, sizeof first, "%s: %s %s", k->file, k->key, e ? "has another shape/dtype" : "missing");
        ditto_catalog_close(&c);
    }
    test_report(tc, "fixtures.weights_keys_shapes", bad == 0, "%d problems %s", bad, first);

    /* lmdm.pth: every rotary.freqs tensor shares one storage */
    DittoCatalog *c = open_fixture(dir, "lmdm.pth");
    const DittoCatalogEntry *a = c ? ditto_catalog_find(c, "model_state_dict.rotary.freqs") : NULL;
    const DittoCatalogEntry *b = c ? ditto_catalog_find(c, "model_state_dict.seqTransDecoder.stack.1.rotary.freqs") : NULL;
    test_report(tc, "fixtures.lmdm_shared_storage", a && b && a != b && a->data == b->data && a->span == 64, "");
    ditto_catalog_close(&c);
}

/* Values: spectral-norm sigma from weight_orig/u/v against the manifest; frame_rgb against frame_row_sums. */
static void test_fixture_values(TestCtx *tc, const char *dir, cJSON *manifest)
{
    DittoCatalog *c = open_fixture(dir, "decoder.pth");
    cJSON *sig = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(manifest, "weights"), "decoder.pth"), "spectral_norm_sigma");
    int checked = 0, bad = 0;
    double worst = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, sig)
    {
        char kw[256], ku[256], kv[256];
        snprintf(kw, sizeof kw, "%s.weight_orig", it->string);
        snprintf(ku, sizeof ku, "%s.weight_u", it->string);
        snprintf(kv, sizeof kv, "%s.weight_v", it->string);
        const DittoCatalogEntry *w = c ? ditto_catalog_find(c, kw) : NULL, *u = c ? ditto_catalog_find(c, ku) : NULL,
                                *v = c ? ditto_catalog_find(c, kv) : NULL;
        if (!w || !u || !v || w->ndim != 4) {
            bad++;
            continue;
        }
        int64_t rows = w->shape[0], cols = ditto_catalog_entry_numel(w) / rows;
        float *fw = malloc((size_t)(rows * cols) * sizeof *fw), *fu = malloc((size_t)rows * sizeof *fu), *fv = malloc((size_t)cols * sizeof *fv);
        if (ditto_catalog_entry_numel(u) == rows && ditto_catalog_entry_numel(v) == cols && !ditto_catalog_read_f32(c, w, fw) &&
            !ditto_catalog_read_f32(c, u, fu) && !ditto_catalog_read_f32(c, v, fv)) {
            double s = 0;
            for (int64_t r = 0; r < rows; r++) {
                double dot = 0;
                for (int64_t q = 0; q < cols; q++)
                    dot += (double)fw[r * cols + q] * fv[q];
                s += fu[r] * dot;
            }
            double err = fabs(s - it->valuedouble) / fabs(it->valuedouble);
            worst = err > worst ? err : worst;
            bad += err > 1e-5;
            checked++;
        } else {
            bad++;
        }
        free(fw);
        free(fu);
        free(fv);
    }
    ditto_catalog_close(&c);
    test_report(tc, "fixtures.decoder_sigma", checked == 18 && bad == 0, "%d sigmas, worst rel err %.2g, %d bad", checked, worst, bad);

    c = open_fixture(dir, "crop_putback.io.pth");
    const DittoCatalogEntry *rgb = c ? ditto_catalog_find(c, "frame_rgb") : NULL, *sums = c ? ditto_catalog_find(c, "frame_row_sums") : NULL;
    bool ok = rgb && sums && rgb->dtype == DITTO_U8 && shape_is(rgb, 3, (int64_t[]){ 1432, 1432, 3 }) &&
              shape_is(sums, 2, (int64_t[]){ 1432, 3 });
    long long mismatches = -1;
    if (ok) {
        float *fs = malloc(1432 * 3 * sizeof *fs), *fr = malloc((size_t)1432 * 1432 * 3 * sizeof *fr);
        ok = !ditto_catalog_read_f32(c, sums, fs) && !ditto_catalog_read_f32(c, rgb, fr);
        mismatches = 0;
        const uint8_t *px = rgb->data;
        for (int y = 0; ok && y < 1432; y++) {
            for (int ch = 0; ch < 3; ch++) {
                double s_raw = 0, s_conv = 0;
                for (int x = 0; x < 1432; x++) {
                    s_raw += px[(size_t)y * rgb->stride[0] + (size_t)x * rgb->stride[1] + (size_t)ch];
                    s_conv += fr[((size_t)y * 1432 + (size_t)x) * 3 + (size_t)ch];
                }
                mismatches += s_raw != fs[y * 3 + ch] || s_conv != s_raw;
            }
        }
        free(fs);
        free(fr);
    }
    test_report(tc, "fixtures.frame_rgb_row_sums", ok && mismatches == 0, "%lld mismatching rows/channels", mismatches);
    const DittoCatalogEntry *crop = c ? ditto_catalog_find(c, "img_crop") : NULL;
    ok = crop && shape_is(crop, 3, (int64_t[]){ 512, 512, 3 });
    if (ok) {
        float *fc = malloc((size_t)512 * 512 * 3 * sizeof *fc);
        ok = !ditto_catalog_read_f32(c, crop, fc);
        for (size_t i = 0; ok && i < (size_t)512 * 512 * 3; i++)
            ok = fc[i] >= 0 && fc[i] <= 255 && fc[i] == floorf(fc[i]);
        free(fc);
    }
    test_report(tc, "fixtures.img_crop_range", ok, "");
    ditto_catalog_close(&c);
}

/* Every io file lists the names and shapes (and dtypes where given) of the manifest's cases. */
static void test_manifest(TestCtx *tc, const char *dir, cJSON *manifest, const char *label)
{
    int checked = 0, bad = 0;
    char first[512] = "";
    cJSON *cs;
    cJSON_ArrayForEach(cs, cJSON_GetObjectItem(manifest, "cases"))
    {
        cJSON *io = cJSON_GetObjectItem(cs, "io_file");
        if (!cJSON_IsString(io))
            continue;
        DittoCatalog *c = open_fixture(dir, io->valuestring);
        static const char *const secs[] = { "inputs", "outputs", "intermediates" };
        for (int s = 0; s < 3; s++) {
            cJSON *t;
            cJSON_ArrayForEach(t, cJSON_GetObjectItem(cs, secs[s]))
            {
                cJSON *shape = cJSON_GetObjectItem(t, "shape"), *dt = cJSON_GetObjectItem(t, "dtype");
                if (!cJSON_IsArray(shape))
                    continue;
                const DittoCatalogEntry *e = c ? ditto_catalog_find(c, t->string) : NULL;
                int64_t want[8];
                int nd = cJSON_GetArraySize(shape);
                for (int i = 0; i < nd && i < 8; i++)
                    want[i] = (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble;
                bool ok = e && nd <= 6 && shape_is(e, nd, want);
                if (ok && cJSON_IsString(dt))
                    ok = !strcmp(dt->valuestring, ditto_dtype_name(e->dtype));
                checked++;
                if (!ok && !bad++)
                    snprintf(first, sizeof first, "%s: %s", io->valuestring, t->string);
            }
        }
        ditto_catalog_close(&c);
    }
    test_report(tc, label, checked > 0 && bad == 0, "%d tensors checked, %d bad %s", checked, bad, first);
}

static cJSON *load_json(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, fp);
    s[got] = 0;
    fclose(fp);
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

static void test_fixtures(TestCtx *tc)
{
    const char *shared = test_shared_dir();
    char dir[4096], odir[4096];
    if (shared)
        snprintf(dir, sizeof dir, "%s/fixtures/ditto", shared);
    struct stat st;
    if (!shared || stat(dir, &st) != 0) {
        printf("SKIP fixtures: ../shared/fixtures not found (set DITTO_SHARED); generated-data checks still ran\n");
        tc->skipped += 6;
        return;
    }
    snprintf(odir, sizeof odir, "%s/fixtures/onnx", shared);
    test_fixture_files(tc, shared);
    test_fixture_keys(tc, dir);
    cJSON *m = load_json(dir), *om = load_json(odir);
    test_report(tc, "fixtures.manifest_parsed", m != NULL, "");
    if (m) {
        test_fixture_values(tc, dir, m);
        test_manifest(tc, dir, m, "fixtures.manifest_io_names_shapes");
    }
    if (om)
        test_manifest(tc, odir, om, "fixtures.onnx_manifest_io_names_shapes_dtypes");
    cJSON_Delete(m);
    cJSON_Delete(om);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    init_storages();
    test_positive(&c);
    test_hostile_pickles(&c);
    test_hostile_tensors(&c);
    test_hostile_archives(&c);
    test_sweeps(&c);
    test_alloc_failures(&c);
    test_files(&c);
    test_seed_files(&c);
    test_fixtures(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
