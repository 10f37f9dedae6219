/*
 * The pickle subset torch.save writes for a state_dict. data.pkl is a small
 * program for a stack machine; this interpreter builds plain objects (numbers,
 * strings, tuples, lists, dicts) and three special ones: allow-listed globals,
 * storages (persistent ids) and tensors (_rebuild_tensor_v2 calls). Nothing
 * from the file is ever resolved to code. Objects live in one array and refer
 * to each other by index, so shared and even cyclic references are harmless;
 * limits on every structure keep memory and time linear in the pickle size.
 */
#include "weights/pickle.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"

#define MAX_OBJECTS (1u << 24)
#define MAX_STACK   (1u << 20)
#define MAX_MARKS   64      /* MARK nesting: torch uses 3 */
#define MAX_MEMO    (1u << 24)
#define MAX_DEPTH   32      /* dict/list nesting below the top-level dict */
#define MAX_NAME    4096    /* one flattened key */
#define MAX_KEY     256     /* storage key ("0", "17", ...) */
#define MAX_LINE    256     /* GLOBAL module / name */
#define NO_OBJ      UINT32_MAX

enum { K_NONE, K_BOOL, K_INT, K_FLOAT, K_STR, K_BYTES, K_TUPLE, K_LIST, K_DICT, K_GLOBAL, K_STORAGE, K_TENSOR };
static const char *const kind_names[] = { "None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict", "global", "storage", "tensor" };

/* The allow-list. Storage classes carry their dtype; ShortStorage is listed only to name it in the error. */
enum { G_ORDERED_DICT, G_REBUILD_TENSOR_V2, G_REBUILD_PARAMETER, G_REBUILD_PARAMETER_STATE, G_FIRST_STORAGE };
#define NOT_A_DTYPE (-1)
static const struct {
    const char *module, *name;
    int dtype;
} globals[] = {
    { "collections", "OrderedDict", NOT_A_DTYPE },
    { "torch._utils", "_rebuild_tensor_v2", NOT_A_DTYPE },
    { "torch._utils", "_rebuild_parameter", NOT_A_DTYPE },
    { "torch._utils", "_rebuild_parameter_with_state", NOT_A_DTYPE },
    { "torch", "FloatStorage", DITTO_F32 },
    { "torch", "HalfStorage", DITTO_F16 },
    { "torch", "BFloat16Storage", DITTO_BF16 },
    { "torch", "DoubleStorage", DITTO_F64 },
    { "torch", "LongStorage", DITTO_I64 },
    { "torch", "IntStorage", DITTO_I32 },
    { "torch", "ByteStorage", DITTO_U8 },
    { "torch", "CharStorage", DITTO_I8 },
    { "torch", "BoolStorage", DITTO_BOOL },
    { "torch", "ShortStorage", NOT_A_DTYPE },
};
#define N_GLOBALS (int)(sizeof globals / sizeof *globals)

/* Python names of every pickle opcode, for messages; NULL: not an opcode at all. */
static const char *const op_names[256] = {
    ['('] = "MARK", ['.'] = "STOP", ['0'] = "POP", ['1'] = "POP_MARK", ['2'] = "DUP", ['F'] = "FLOAT", ['I'] = "INT",
    ['J'] = "BININT", ['K'] = "BININT1", ['L'] = "LONG", ['M'] = "BININT2", ['N'] = "NONE", ['P'] = "PERSID",
    ['Q'] = "BINPERSID", ['R'] = "REDUCE", ['S'] = "STRING", ['T'] = "BINSTRING", ['U'] = "SHORT_BINSTRING",
    ['V'] = "UNICODE", ['X'] = "BINUNICODE", ['a'] = "APPEND", ['b'] = "BUILD", ['c'] = "GLOBAL", ['d'] = "DICT",
    ['}'] = "EMPTY_DICT", ['e'] = "APPENDS", ['g'] = "GET", ['h'] = "BINGET", ['i'] = "INST", ['j'] = "LONG_BINGET",
    ['l'] = "LIST", [']'] = "EMPTY_LIST", ['o'] = "OBJ", ['p'] = "PUT", ['q'] = "BINPUT", ['r'] = "LONG_BINPUT",
    ['s'] = "SETITEM", ['t'] = "TUPLE", [')'] = "EMPTY_TUPLE", ['u'] = "SETITEMS", ['G'] = "BINFLOAT", ['B'] = "BINBYTES",
    ['C'] = "SHORT_BINBYTES", [0x80] = "PROTO", [0x81] = "NEWOBJ", [0x82] = "EXT1", [0x83] = "EXT2", [0x84] = "EXT4",
    [0x85] = "TUPLE1", [0x86] = "TUPLE2", [0x87] = "TUPLE3", [0x88] = "NEWTRUE", [0x89] = "NEWFALSE", [0x8a] = "LONG1",
    [0x8b] = "LONG4", [0x8c] = "SHORT_BINUNICODE", [0x8d] = "BINUNICODE8", [0x8e] = "BINBYTES8", [0x8f] = "EMPTY_SET",
    [0x90] = "ADDITEMS", [0x91] = "FROZENSET", [0x92] = "NEWOBJ_EX", [0x93] = "STACK_GLOBAL", [0x94] = "MEMOIZE",
    [0x95] = "FRAME", [0x96] = "BYTEARRAY8", [0x97] = "NEXT_BUFFER", [0x98] = "READONLY_BUFFER",
};

typedef struct PObj {
    uint8_t kind;
    uint8_t g;          /* K_GLOBAL: index into globals[] */
    uint32_t n, cap;    /* K_TUPLE/K_LIST: items; K_DICT: n (key, value) pairs in 2n items */
    union {
        int64_t i;                         /* K_INT, K_BOOL */
        double f;                          /* K_FLOAT */
        struct { size_t off, len; } s;     /* K_STR, K_BYTES: bytes inside data.pkl */
        uint32_t *items;                   /* containers */
        uint32_t idx;                      /* K_STORAGE, K_TENSOR: into Pk.stor / Pk.tens */
    } u;
} PObj;

typedef struct PStorage {
    int g;
    size_t key_off, key_len;
    uint64_t numel;
} PStorage;

typedef struct PTensor {
    uint32_t storage;
    uint64_t offset;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS], stride[DITTO_MAX_DIMS];
} PTensor;

typedef struct Pk {
    const uint8_t *d;
    size_t size, pos, op_pos;
    int op;                  /* current opcode, -1 while flattening */
    const char *file;
    const DittoLogger *log;
    PObj *obj;
    size_t nobj, cobj;
    uint32_t *stack;
    size_t sp, cstack;
    size_t marks[MAX_MARKS];
    int nmarks;
    uint32_t *memo;
    size_t cmemo, nmemo, memo_limit;
    PStorage *stor;
    size_t nstor, cstor;
    PTensor *tens;
    size_t ntens, ctens;
    char *name;              /* flattening: the key being built */
    size_t cname;
    uint64_t work, work_limit;
    DittoPickleTensorFn fn;
    void *ctx;
} Pk;

static int pk_fail(Pk *k, int code, const char *fmt, ...) DITTO_PRINTF(3, 4);
static int pk_fail(Pk *k, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (k->op < 0)
        return ditto_fail(k->log, code, "%s: data.pkl: %s", k->file, msg);
    const char *on = op_names[k->op];
    if (on)
        return ditto_fail(k->log, code, "%s: data.pkl: %s (%s at offset %zu)", k->file, msg, on, k->op_pos);
    return ditto_fail(k->log, code, "%s: data.pkl: %s (byte 0x%02x at offset %zu)", k->file, msg, k->op, k->op_pos);
}

static int pk_nomem(Pk *k)
{
    return pk_fail(k, DITTO_ERR_NOMEM, "out of memory");
}

/* Grow an array to hold `need` elements (doubling); NULL on failure, p untouched. */
static void *grow(void *p, size_t *cap, size_t need, size_t elsize)
{
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = ditto_realloc(p, nc * elsize);
    if (q)
        *cap = nc;
    return q;
}

/* Text from the file, made safe for a one-line message. */
static const char *printable(char *buf, size_t n, const uint8_t *s, size_t len)
{
    size_t i = 0, k = 0;
    for (; i < len && k + 4 < n; i++)
        buf[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (i < len) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = 0;
    return buf;
}

/* ---- reading ------------------------------------------------------------------ */

static int need(Pk *k, uint64_t n)
{
    if (n > k->size - k->pos)
        return pk_fail(k, DITTO_ERR_FORMAT, "truncated: %llu bytes needed, %zu left", (unsigned long long)n, k->size - k->pos);
    return 0;
}

static uint64_t rd_le(Pk *k, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)k->d[k->pos + (size_t)i] << (8 * i);
    k->pos += (size_t)n;
    return v;
}

/* ---- objects and the stack ----------------------------------------------------- */

static int new_obj(Pk *k, int kind, uint32_t *id)
{
    if (k->nobj >= MAX_OBJECTS)
        return pk_fail(k, DITTO_ERR_FORMAT, "more than %u objects", MAX_OBJECTS);
    if (k->nobj == k->cobj) {
        PObj *q = grow(k->obj, &k->cobj, k->nobj + 1, sizeof *q);
        if (!q)
            return pk_nomem(k);
        k->obj = q;
    }
    memset(&k->obj[k->nobj], 0, sizeof *k->obj);
    k->obj[k->nobj].kind = (uint8_t)kind;
    *id = (uint32_t)k->nobj++;
    return 0;
}

static int push(Pk *k, uint32_t id)
{
    if (k->sp >= MAX_STACK)
        return pk_fail(k, DITTO_ERR_FORMAT, "stack deeper than %u", MAX_STACK);
    if (k->sp == k->cstack) {
        uint32_t *q = grow(k->stack, &k->cstack, k->sp + 1, sizeof *q);
        if (!q)
            return pk_nomem(k);
        k->stack = q;
    }
    k->stack[k->sp++] = id;
    return 0;
}

/* New object of `kind` on the stack; returns its id. */
static int push_new(Pk *k, int kind, uint32_t *id)
{
    DITTO_TRY(new_obj(k, kind, id));
    return push(k, *id);
}

static int push_int(Pk *k, int kind, int64_t v)
{
    uint32_t id = 0;
    DITTO_TRY(push_new(k, kind, &id));
    k->obj[id].u.i = v;
    return 0;
}

/* Items above the innermost MARK belong to it: pops never cross it. */
static size_t stack_floor(const Pk *k)
{
    return k->nmarks ? k->marks[k->nmarks - 1] : 0;
}

static int need_items(Pk *k, size_t n)
{
    if (k->sp - stack_floor(k) < n)
        return pk_fail(k, DITTO_ERR_FORMAT, "stack underflow: %zu item(s) needed, %zu available", n, k->sp - stack_floor(k));
    return 0;
}

static int pop(Pk *k, uint32_t *id)
{
    DITTO_TRY(need_items(k, 1));
    *id = k->stack[--k->sp];
    return 0;
}

static int pop_mark(Pk *k, size_t *start)
{
    if (!k->nmarks)
        return pk_fail(k, DITTO_ERR_FORMAT, "no MARK on the stack");
    *start = k->marks[--k->nmarks];
    return 0;
}

/* Replace stack[start..sp) by one new tuple or list holding them. */
static int collect(Pk *k, int kind, size_t start)
{
    size_t n = k->sp - start;
    uint32_t *items = NULL;
    if (n) {
        items = ditto_malloc(n * sizeof *items);
        if (!items)
            return pk_nomem(k);
        memcpy(items, k->stack + start, n * sizeof *items);
    }
    k->sp = start;
    uint32_t id = 0;
    int rc = push_new(k, kind, &id);
    if (rc < 0) {
        ditto_free(items);
        return rc;
    }
    k->obj[id].u.items = items;
    k->obj[id].n = k->obj[id].cap = (uint32_t)n;
    return 0;
}

/* Append stack[start..sp) to `target`, a list or (with key, value pairs) a dict, and drop them. */
static int extend(Pk *k, int kind, uint32_t target, size_t start)
{
    PObj *o = &k->obj[target];
    size_t n = k->sp - start;
    bool dict = kind == K_DICT;
    if (o->kind != kind)
        return pk_fail(k, DITTO_ERR_FORMAT, "adding items to a %s", kind_names[o->kind]);
    if (dict && n % 2)
        return pk_fail(k, DITTO_ERR_FORMAT, "odd number of items (%zu) for a dict", n);
    size_t have = dict ? 2 * (size_t)o->n : o->n;   /* item slots in use */
    if (have + n > (size_t)UINT32_MAX / 2)
        return pk_fail(k, DITTO_ERR_FORMAT, "container too large");
    if (have + n > o->cap) {
        size_t cap = o->cap;
        uint32_t *q = grow(o->u.items, &cap, have + n, sizeof *q);
        if (!q)
            return pk_nomem(k);
        o->u.items = q;
        o->cap = (uint32_t)cap;
    }
    if (n)
        memcpy(o->u.items + have, k->stack + start, n * sizeof(uint32_t));
    o->n += (uint32_t)(dict ? n / 2 : n);
    k->sp = start;
    return 0;
}

/* ---- memo -------------------------------------------------------------------------- */

static int memo_put(Pk *k, uint64_t idx)
{
    if (k->sp == stack_floor(k))
        return pk_fail(k, DITTO_ERR_FORMAT, "memo store with an empty stack");
    if (idx >= k->memo_limit)
        return pk_fail(k, DITTO_ERR_FORMAT, "memo index %llu too large", (unsigned long long)idx);
    if (idx >= k->cmemo) {
        size_t old = k->cmemo;
        uint32_t *q = grow(k->memo, &k->cmemo, (size_t)idx + 1, sizeof *q);
        if (!q)
            return pk_nomem(k);
        k->memo = q;
        for (size_t i = old; i < k->cmemo; i++)
            k->memo[i] = NO_OBJ;
    }
    if (k->memo[idx] == NO_OBJ)
        k->nmemo++;
    k->memo[idx] = k->stack[k->sp - 1];
    return 0;
}

static int memo_get(Pk *k, uint64_t idx)
{
    if (idx >= k->cmemo || k->memo[idx] == NO_OBJ)
        return pk_fail(k, DITTO_ERR_FORMAT, "memo entry %llu is not defined", (unsigned long long)idx);
    return push(k, k->memo[idx]);
}

/* ---- globals, persistent ids, REDUCE ---------------------------------------------- */

static int push_global(Pk *k, const uint8_t *mod, size_t mlen, const uint8_t *name, size_t nlen)
{
    for (int g = 0; g < N_GLOBALS; g++) {
        if (strlen(globals[g].module) == mlen && !memcmp(globals[g].module, mod, mlen) && strlen(globals[g].name) == nlen &&
            !memcmp(globals[g].name, name, nlen)) {
            uint32_t id = 0;
            DITTO_TRY(push_new(k, K_GLOBAL, &id));
            k->obj[id].g = (uint8_t)g;
            return 0;
        }
    }
    char a[96], b[96];
    return pk_fail(k, DITTO_ERR_UNSUPPORTED, "forbidden global '%s.%s' (only what torch.save writes for tensors is allowed)",
                   printable(a, sizeof a, mod, mlen), printable(b, sizeof b, name, nlen));
}

static int read_line(Pk *k, const uint8_t **s, size_t *len)
{
    size_t left = k->size - k->pos;
    const uint8_t *p = k->d + k->pos;
    const uint8_t *nl = memchr(p, '\n', left < MAX_LINE ? left : MAX_LINE);
    if (!nl)
        return pk_fail(k, DITTO_ERR_FORMAT, "GLOBAL name without a newline in %d bytes", MAX_LINE);
    *s = p;
    *len = (size_t)(nl - p);
    k->pos += *len + 1;
    return 0;
}

static bool is_str(const Pk *k, uint32_t id, const char *want)
{
    const PObj *o = &k->obj[id];
    return o->kind == K_STR && o->u.s.len == strlen(want) && !memcmp(k->d + o->u.s.off, want, o->u.s.len);
}

/* BINPERSID: ('storage', storage class, key, location, numel) -> storage */
static int persistent_load(Pk *k)
{
    uint32_t pid = 0;
    DITTO_TRY(pop(k, &pid));
    const PObj *t = &k->obj[pid];
    if (t->kind != K_TUPLE || t->n != 5 || !is_str(k, t->u.items[0], "storage"))
        return pk_fail(k, DITTO_ERR_FORMAT, "persistent id is not ('storage', type, key, location, numel)");
    const PObj *cls = &k->obj[t->u.items[1]], *key = &k->obj[t->u.items[2]], *numel = &k->obj[t->u.items[4]];
    if (cls->kind != K_GLOBAL || cls->g < G_FIRST_STORAGE)
        return pk_fail(k, DITTO_ERR_FORMAT, "persistent id names a %s, not a storage class", kind_names[cls->kind]);
    bool key_ok = key->kind == K_STR && key->u.s.len > 0 && key->u.s.len <= MAX_KEY;
    for (size_t i = 0; key_ok && i < key->u.s.len; i++)
        key_ok = k->d[key->u.s.off + i] > 0x20 && k->d[key->u.s.off + i] < 0x7f;
    if (!key_ok)
        return pk_fail(k, DITTO_ERR_FORMAT, "bad storage key in a persistent id");
    if (numel->kind != K_INT || numel->u.i < 0)
        return pk_fail(k, DITTO_ERR_FORMAT, "bad storage size in a persistent id");
    PStorage s = { cls->g, key->u.s.off, key->u.s.len, (uint64_t)numel->u.i };
    if (k->nstor == k->cstor) {
        PStorage *q = grow(k->stor, &k->cstor, k->nstor + 1, sizeof *q);
        if (!q)
            return pk_nomem(k);
        k->stor = q;
    }
    uint32_t id = 0;
    DITTO_TRY(push_new(k, K_STORAGE, &id));
    k->obj[id].u.idx = (uint32_t)k->nstor;
    k->stor[k->nstor++] = s;
    return 0;
}

/* A tuple of non-negative ints (a size or a stride). */
static int read_dims(Pk *k, uint32_t id, const char *what, int *ndim, int64_t *out)
{
    const PObj *t = &k->obj[id];
    if (t->kind != K_TUPLE)
        return pk_fail(k, DITTO_ERR_FORMAT, "tensor %s is a %s, not a tuple", what, kind_names[t->kind]);
    if (t->n > DITTO_MAX_DIMS)
        return pk_fail(k, DITTO_ERR_UNSUPPORTED, "tensor with %u dimensions (at most %d supported)", t->n, DITTO_MAX_DIMS);
    for (uint32_t i = 0; i < t->n; i++) {
        const PObj *v = &k->obj[t->u.items[i]];
        if (v->kind != K_INT || v->u.i < 0)
            return pk_fail(k, DITTO_ERR_FORMAT, "tensor %s[%u] is not a non-negative int", what, i);
        out[i] = v->u.i;
    }
    *ndim = (int)t->n;
    return 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
static int rebuild_tensor(Pk *k, uint32_t args)
{
    const PObj *a = &k->obj[args];
    if (a->n != 6 && a->n != 7)
        return pk_fail(k, DITTO_ERR_FORMAT, "_rebuild_tensor_v2 with %u arguments", a->n);
    const PObj *st = &k->obj[a->u.items[0]], *off = &k->obj[a->u.items[1]];
    if (st->kind != K_STORAGE)
        return pk_fail(k, DITTO_ERR_FORMAT, "_rebuild_tensor_v2 on a %s, not a storage", kind_names[st->kind]);
    if (off->kind != K_INT || off->u.i < 0)
        return pk_fail(k, DITTO_ERR_FORMAT, "bad tensor storage offset");
    PTensor t = { .storage = st->u.idx, .offset = (uint64_t)off->u.i };
    int nstride;
    DITTO_TRY(read_dims(k, a->u.items[2], "size", &t.ndim, t.shape));
    DITTO_TRY(read_dims(k, a->u.items[3], "stride", &nstride, t.stride));
    if (nstride != t.ndim)
        return pk_fail(k, DITTO_ERR_FORMAT, "tensor has %d sizes but %d strides", t.ndim, nstride);
    if (k->ntens == k->ctens) {
        PTensor *q = grow(k->tens, &k->ctens, k->ntens + 1, sizeof *q);
        if (!q)
            return pk_nomem(k);
        k->tens = q;
    }
    uint32_t id = 0;
    DITTO_TRY(push_new(k, K_TENSOR, &id));
    k->obj[id].u.idx = (uint32_t)k->ntens;
    k->tens[k->ntens++] = t;
    return 0;
}

static int reduce(Pk *k)
{
    uint32_t args = 0, fn = 0;
    DITTO_TRY(pop(k, &args));
    DITTO_TRY(pop(k, &fn));
    const PObj *f = &k->obj[fn], *a = &k->obj[args];
    if (f->kind != K_GLOBAL)
        return pk_fail(k, DITTO_ERR_UNSUPPORTED, "REDUCE on a %s, not an allow-listed callable", kind_names[f->kind]);
    if (a->kind != K_TUPLE)
        return pk_fail(k, DITTO_ERR_FORMAT, "REDUCE arguments are a %s, not a tuple", kind_names[a->kind]);
    uint32_t id = 0;
    switch (f->g) {
    case G_ORDERED_DICT:
        if (a->n != 0)
            return pk_fail(k, DITTO_ERR_UNSUPPORTED, "OrderedDict called with arguments");
        return push_new(k, K_DICT, &id);
    case G_REBUILD_TENSOR_V2:
        return rebuild_tensor(k, args);
    case G_REBUILD_PARAMETER:
    case G_REBUILD_PARAMETER_STATE:
        /* (data, requires_grad, backward_hooks[, state]): a Parameter is its data here */
        if (a->n != (f->g == G_REBUILD_PARAMETER ? 3u : 4u) || k->obj[a->u.items[0]].kind != K_TENSOR)
            return pk_fail(k, DITTO_ERR_FORMAT, "%s with bad arguments", globals[f->g].name);
        return push(k, a->u.items[0]);
    default:
        return pk_fail(k, DITTO_ERR_UNSUPPORTED, "REDUCE on '%s.%s', which is not callable here", globals[f->g].module, globals[f->g].name);
    }
}

static int push_bytes(Pk *k, int kind, uint64_t len)
{
    DITTO_TRY(need(k, len));
    uint32_t id = 0;
    DITTO_TRY(push_new(k, kind, &id));
    k->obj[id].u.s.off = k->pos;
    k->obj[id].u.s.len = (size_t)len;
    k->pos += (size_t)len;
    return 0;
}

/* ---- the interpreter loop ---------------------------------------------------------- */

static int step(Pk *k, bool *stop)
{
    uint32_t a = 0, b = 0;
    size_t start = 0;
    int op = k->op;
    switch (op) {
    case 0x80: {   /* PROTO */
        DITTO_TRY(need(k, 1));
        unsigned v = k->d[k->pos++];
        if (v < 2 || v > 5)
            return pk_fail(k, DITTO_ERR_UNSUPPORTED, "pickle protocol %u (2 to 5 supported)", v);
        return 0;
    }
    case 0x95: {   /* FRAME: a length hint; frames hold whole opcodes, nothing to do */
        DITTO_TRY(need(k, 8));
        uint64_t n = rd_le(k, 8);
        return need(k, n);
    }
    case '.':      /* STOP */
        *stop = true;
        return 0;
    case '(':      /* MARK */
        if (k->nmarks == MAX_MARKS)
            return pk_fail(k, DITTO_ERR_FORMAT, "MARKs nested deeper than %d", MAX_MARKS);
        k->marks[k->nmarks++] = k->sp;
        return 0;

    case 'N':      /* NONE */
        return push_int(k, K_NONE, 0);
    case 0x88:     /* NEWTRUE */
        return push_int(k, K_BOOL, 1);
    case 0x89:     /* NEWFALSE */
        return push_int(k, K_BOOL, 0);
    case 'K':      /* BININT1 */
        DITTO_TRY(need(k, 1));
        return push_int(k, K_INT, (int64_t)rd_le(k, 1));
    case 'M':      /* BININT2 */
        DITTO_TRY(need(k, 2));
        return push_int(k, K_INT, (int64_t)rd_le(k, 2));
    case 'J':      /* BININT: signed 32-bit */
        DITTO_TRY(need(k, 4));
        return push_int(k, K_INT, (int32_t)(uint32_t)rd_le(k, 4));
    case 0x8a: {   /* LONG1: n-byte little-endian two's complement */
        DITTO_TRY(need(k, 1));
        unsigned n = k->d[k->pos++];
        if (n > 8)
            return pk_fail(k, DITTO_ERR_UNSUPPORTED, "integer of %u bytes (at most 8 supported)", n);
        DITTO_TRY(need(k, n));
        uint64_t v = rd_le(k, (int)n);
        if (n && n < 8 && (v >> (8 * n - 1)) & 1)
            v |= ~0ull << (8 * n);
        int64_t s;
        memcpy(&s, &v, sizeof s);
        return push_int(k, K_INT, s);
    }
    case 'G': {    /* BINFLOAT: big-endian double */
        DITTO_TRY(need(k, 8));
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v = v << 8 | k->d[k->pos++];
        uint32_t id = 0;
        DITTO_TRY(push_new(k, K_FLOAT, &id));
        memcpy(&k->obj[id].u.f, &v, sizeof v);
        return 0;
    }

    case 0x8c:     /* SHORT_BINUNICODE */
        DITTO_TRY(need(k, 1));
        return push_bytes(k, K_STR, rd_le(k, 1));
    case 'X':      /* BINUNICODE */
        DITTO_TRY(need(k, 4));
        return push_bytes(k, K_STR, rd_le(k, 4));
    case 0x8d:     /* BINUNICODE8 */
        DITTO_TRY(need(k, 8));
        return push_bytes(k, K_STR, rd_le(k, 8));
    case 'U':      /* SHORT_BINSTRING: Python 2 str, read as text */
        DITTO_TRY(need(k, 1));
        return push_bytes(k, K_STR, rd_le(k, 1));
    case 'T': {    /* BINSTRING: signed 32-bit length */
        DITTO_TRY(need(k, 4));
        int32_t n = (int32_t)(uint32_t)rd_le(k, 4);
        if (n < 0)
            return pk_fail(k, DITTO_ERR_FORMAT, "negative string length %d", (int)n);
        return push_bytes(k, K_STR, (uint64_t)n);
    }
    case 'C':      /* SHORT_BINBYTES */
        DITTO_TRY(need(k, 1));
        return push_bytes(k, K_BYTES, rd_le(k, 1));
    case 'B':      /* BINBYTES */
        DITTO_TRY(need(k, 4));
        return push_bytes(k, K_BYTES, rd_le(k, 4));
    case 0x8e:     /* BINBYTES8 */
        DITTO_TRY(need(k, 8));
        return push_bytes(k, K_BYTES, rd_le(k, 8));

    case ')':      /* EMPTY_TUPLE */
        return collect(k, K_TUPLE, k->sp);
    case 't':      /* TUPLE: items since MARK */
        DITTO_TRY(pop_mark(k, &start));
        return collect(k, K_TUPLE, start);
    case 0x85:     /* TUPLE1 */
    case 0x86:     /* TUPLE2 */
    case 0x87:     /* TUPLE3 */
        DITTO_TRY(need_items(k, (size_t)(op - 0x84)));
        return collect(k, K_TUPLE, k->sp - (size_t)(op - 0x84));
    case ']':      /* EMPTY_LIST */
        return collect(k, K_LIST, k->sp);
    case 'l':      /* LIST */
        DITTO_TRY(pop_mark(k, &start));
        return collect(k, K_LIST, start);
    case 'a':      /* APPEND */
        DITTO_TRY(need_items(k, 2));
        return extend(k, K_LIST, k->stack[k->sp - 2], k->sp - 1);
    case 'e':      /* APPENDS: the list sits below the MARK */
        DITTO_TRY(pop_mark(k, &start));
        if (start <= stack_floor(k))
            return pk_fail(k, DITTO_ERR_FORMAT, "stack underflow: no list below the MARK");
        return extend(k, K_LIST, k->stack[start - 1], start);
    case '}':      /* EMPTY_DICT */
        return push_new(k, K_DICT, &a);
    case 'd': {    /* DICT: key, value pairs since MARK */
        DITTO_TRY(pop_mark(k, &start));
        if ((k->sp - start) % 2)
            return pk_fail(k, DITTO_ERR_FORMAT, "odd number of items (%zu) for a dict", k->sp - start);
        DITTO_TRY(new_obj(k, K_DICT, &a));
        DITTO_TRY(extend(k, K_DICT, a, start));
        return push(k, a);
    }
    case 's':      /* SETITEM */
        DITTO_TRY(need_items(k, 3));
        return extend(k, K_DICT, k->stack[k->sp - 3], k->sp - 2);
    case 'u':      /* SETITEMS: the dict sits below the MARK */
        DITTO_TRY(pop_mark(k, &start));
        if (start <= stack_floor(k))
            return pk_fail(k, DITTO_ERR_FORMAT, "stack underflow: no dict below the MARK");
        return extend(k, K_DICT, k->stack[start - 1], start);

    case 'q':      /* BINPUT */
        DITTO_TRY(need(k, 1));
        return memo_put(k, rd_le(k, 1));
    case 'r':      /* LONG_BINPUT */
        DITTO_TRY(need(k, 4));
        return memo_put(k, rd_le(k, 4));
    case 0x94:     /* MEMOIZE: next index is the memo's size */
        return memo_put(k, k->nmemo);
    case 'h':      /* BINGET */
        DITTO_TRY(need(k, 1));
        return memo_get(k, rd_le(k, 1));
    case 'j':      /* LONG_BINGET */
        DITTO_TRY(need(k, 4));
        return memo_get(k, rd_le(k, 4));

    case 'c': {    /* GLOBAL: "module\nname\n" */
        const uint8_t *mod = NULL, *name = NULL;
        size_t ml = 0, nl = 0;
        DITTO_TRY(read_line(k, &mod, &ml));
        DITTO_TRY(read_line(k, &name, &nl));
        return push_global(k, mod, ml, name, nl);
    }
    case 0x93: {   /* STACK_GLOBAL: module and name strings from the stack */
        DITTO_TRY(pop(k, &b));
        DITTO_TRY(pop(k, &a));
        const PObj *m = &k->obj[a], *n = &k->obj[b];
        if (m->kind != K_STR || n->kind != K_STR)
            return pk_fail(k, DITTO_ERR_FORMAT, "STACK_GLOBAL on a %s and a %s", kind_names[m->kind], kind_names[n->kind]);
        return push_global(k, k->d + m->u.s.off, m->u.s.len, k->d + n->u.s.off, n->u.s.len);
    }
    case 'Q':      /* BINPERSID */
        return persistent_load(k);
    case 'R':      /* REDUCE */
        return reduce(k);
    case 'b': {    /* BUILD: only OrderedDict state (the _metadata attribute), which is dropped */
        DITTO_TRY(need_items(k, 2));
        const PObj *o = &k->obj[k->stack[k->sp - 2]];
        if (o->kind != K_DICT)
            return pk_fail(k, DITTO_ERR_UNSUPPORTED, "BUILD on a %s", kind_names[o->kind]);
        k->sp--;
        return 0;
    }
    default:
        if (op_names[op])
            return pk_fail(k, DITTO_ERR_FORMAT, "opcode %s is not allowed in a checkpoint", op_names[op]);
        return pk_fail(k, DITTO_ERR_FORMAT, "unknown opcode 0x%02x", (unsigned)op);
    }
}

/* ---- flattening: dict -> dict -> tensor becomes "a.b.c" -------------------------------- */

static int emit(Pk *k, const PTensor *t)
{
    const PStorage *s = &k->stor[t->storage];
    if (globals[s->g].dtype == NOT_A_DTYPE)
        return pk_fail(k, DITTO_ERR_UNSUPPORTED, "tensor '%s': torch.%s is not supported", k->name, globals[s->g].name);
    char key[MAX_KEY + 1];
    memcpy(key, k->d + s->key_off, s->key_len);
    key[s->key_len] = 0;
    DittoPickleTensor pt = {
        .name = k->name, .dtype = (DittoDType)globals[s->g].dtype, .storage_type = globals[s->g].name, .storage_key = key,
        .storage_numel = s->numel, .storage_offset = t->offset, .ndim = t->ndim,
    };
    memcpy(pt.shape, t->shape, sizeof pt.shape);
    memcpy(pt.stride, t->stride, sizeof pt.stride);
    return k->fn(k->ctx, &pt);
}

/* "under 'a.b'" or "at the top level", for messages while flattening. */
static const char *where(const Pk *k, char *buf, size_t n)
{
    if (!k->name[0])
        return "at the top level";
    snprintf(buf, n, "under '%s'", k->name);
    return buf;
}

/* Append ".key" (or "key" at the top) to the name; returns the new length. */
static int name_append(Pk *k, size_t len, uint32_t key, size_t index, bool by_index, size_t *out)
{
    char num[24], wb[MAX_NAME + 16];
    const char *s;
    size_t n = 0;
    if (by_index) {
        n = (size_t)snprintf(num, sizeof num, "%zu", index);
        s = num;
    } else {
        const PObj *o = &k->obj[key];
        if (o->kind == K_STR) {
            s = (const char *)k->d + o->u.s.off;
            n = o->u.s.len;
            for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)   /* keeps names printable in messages and listings */
                    return pk_fail(k, DITTO_ERR_FORMAT, "dict key %s contains control character 0x%02x", where(k, wb, sizeof wb),
                                   (unsigned char)s[i]);
        } else if (o->kind == K_INT) {
            n = (size_t)snprintf(num, sizeof num, "%lld", (long long)o->u.i);
            s = num;
        } else {
            return pk_fail(k, DITTO_ERR_UNSUPPORTED, "dict key of type %s %s", kind_names[o->kind], where(k, wb, sizeof wb));
        }
    }
    size_t total = len + (len ? 1 : 0) + n;
    if (total > MAX_NAME)
        return pk_fail(k, DITTO_ERR_FORMAT, "flattened key longer than %d bytes", MAX_NAME);
    k->work += total;
    if (k->work > k->work_limit)
        return pk_fail(k, DITTO_ERR_FORMAT, "flattening needs too much work (dicts shared many times?)");
    if (len)
        k->name[len] = '.';
    memcpy(k->name + len + (len ? 1 : 0), s, n);
    k->name[total] = 0;
    *out = total;
    return 0;
}

static int walk(Pk *k, uint32_t id, size_t len, int depth)
{
    const PObj *o = &k->obj[id];
    if (depth > MAX_DEPTH)
        return pk_fail(k, DITTO_ERR_FORMAT, "containers nested deeper than %d (a cycle?) under '%.200s'", MAX_DEPTH, k->name);
    bool dict = o->kind == K_DICT;
    for (uint32_t i = 0; i < o->n; i++) {
        uint32_t key = dict ? o->u.items[2 * i] : NO_OBJ;
        uint32_t val = dict ? o->u.items[2 * i + 1] : o->u.items[i];
        int kind = k->obj[val].kind;
        if (++k->work > k->work_limit)
            return pk_fail(k, DITTO_ERR_FORMAT, "flattening needs too much work (dicts shared many times?)");
        if (kind != K_TENSOR && kind != K_DICT && kind != K_LIST && kind != K_TUPLE)
            continue;   /* ints, strings, None...: not weights */
        size_t n = 0;
        DITTO_TRY(name_append(k, len, key, i, !dict, &n));
        if (kind == K_TENSOR)
            DITTO_TRY(emit(k, &k->tens[k->obj[val].u.idx]));
        else
            DITTO_TRY(walk(k, val, n, depth + 1));
        k->name[len] = 0;
    }
    return 0;
}

static int run(Pk *k)
{
    bool stop = false;
    while (!stop) {
        if (k->pos >= k->size)
            return pk_fail(k, DITTO_ERR_FORMAT, "truncated: no STOP opcode before the end (%zu bytes)", k->size);
        k->op_pos = k->pos;
        k->op = k->d[k->pos++];
        DITTO_TRY(step(k, &stop));
    }
    uint32_t root = 0;
    DITTO_TRY(pop(k, &root));
    k->op = -1;
    if (k->obj[root].kind != K_DICT)
        return pk_fail(k, DITTO_ERR_UNSUPPORTED, "the top-level object is a %s, not a dict of tensors", kind_names[k->obj[root].kind]);
    k->name = ditto_malloc(MAX_NAME + 1);
    if (!k->name)
        return pk_nomem(k);
    k->name[0] = 0;
    return walk(k, root, 0, 0);
}

int ditto_pickle_tensors(const uint8_t *data, size_t size, const char *file, const DittoLogger *log, DittoPickleTensorFn fn, void *ctx)
{
    DITTO_ASSERT(file && fn && (data || !size));
    Pk k = { .d = data, .size = size, .file = file, .log = log, .fn = fn, .ctx = ctx, .op = -1 };
    /* every memo store costs at least two bytes, so real indices stay below the size */
    k.memo_limit = size < 256 ? 256 : size < MAX_MEMO ? size : MAX_MEMO;
    /* legitimate files flatten in far less: each name part and dict item came from the file */
    k.work_limit = 64 * (uint64_t)size + 65536;
    int rc = run(&k);
    for (size_t i = 0; i < k.nobj; i++)
        if (k.obj[i].kind == K_TUPLE || k.obj[i].kind == K_LIST || k.obj[i].kind == K_DICT)
            ditto_free(k.obj[i].u.items);
    ditto_free(k.obj);
    ditto_free(k.stack);
    ditto_free(k.memo);
    ditto_free(k.stor);
    ditto_free(k.tens);
    ditto_free(k.name);
    return rc;
}
