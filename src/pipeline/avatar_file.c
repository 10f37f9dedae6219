/*
 * .avatar reader and writer (format in avatar_file.h). The writer streams
 * the file once through a SHA-256 context and patches the header last; the
 * reader checks sizes, then the checksum, then parses every entry with
 * bounds-checked arithmetic.
 */
#include "pipeline/avatar_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/tensor.h"
#include "weights/catalog.h"

#define HDR_SIZE 128u
#define HASH_AT 96u
#define ALIGN 64u
#define MAX_NAME 255u
#define MAX_STR 65535u
#define MAX_ENTRIES 4096u

enum { FILE_U8 = 1, FILE_F32 = 2 };

/* ---- container ------------------------------------------------------------------ */

int64_t ditto_avatar_fs_numel(const DittoAvatar *a)
{
    return a->fs_shape[0] * a->fs_shape[1] * a->fs_shape[2] * a->fs_shape[3];
}

int ditto_avatar_alloc(DittoAvatar **out, int n, int h, int w, const int64_t fs_shape[4], int n_lmk)
{
    *out = NULL;
    if (n < 1 || h < 1 || w < 1 || n_lmk < 0)
        return DITTO_ERR_INVAL;
    for (int i = 0; i < 4; i++)
        if (fs_shape[i] < 1 || fs_shape[i] > (1 << 20))
            return DITTO_ERR_INVAL;
    DittoAvatar *a = ditto_calloc(1, sizeof *a);
    if (!a)
        return DITTO_ERR_NOMEM;
    a->n_frames = n, a->height = h, a->width = w, a->n_lmk = n_lmk;
    memcpy(a->fs_shape, fs_shape, sizeof a->fs_shape);
    uint64_t img, fs;
    if (ditto_mul_overflow_u64((uint64_t)n * (uint64_t)h, (uint64_t)w * 3u, &img) ||
        ditto_mul_overflow_u64((uint64_t)n, (uint64_t)ditto_avatar_fs_numel(a) * sizeof(float), &fs) || img > SIZE_MAX || fs > SIZE_MAX) {
        ditto_free(a);
        return DITTO_ERR_RANGE;
    }
    a->img_rgb = ditto_malloc((size_t)img);
    a->m_c2o = ditto_calloc((size_t)n * 9, sizeof(float));
    a->x_s_info = ditto_calloc((size_t)n, sizeof(DittoXInfo));
    a->f_s = ditto_malloc((size_t)fs);
    a->eye_open = ditto_calloc((size_t)n * 2, sizeof(float));
    a->eye_ball = ditto_calloc((size_t)n * 6, sizeof(float));
    if (n_lmk)
        a->lmk = ditto_calloc((size_t)n * (size_t)n_lmk * 2, sizeof(float));
    if (!a->img_rgb || !a->m_c2o || !a->x_s_info || !a->f_s || !a->eye_open || !a->eye_ball || (n_lmk && !a->lmk)) {
        ditto_avatar_free(&a);
        return DITTO_ERR_NOMEM;
    }
    memset(a->img_rgb, 0, (size_t)img);
    memset(a->f_s, 0, (size_t)fs);
    *out = a;
    return 0;
}

void ditto_avatar_free(DittoAvatar **pa)
{
    DittoAvatar *a = pa ? *pa : NULL;
    if (!a)
        return;
    ditto_free(a->img_rgb);
    ditto_free(a->m_c2o);
    ditto_free(a->x_s_info);
    ditto_free(a->f_s);
    ditto_free(a->eye_open);
    ditto_free(a->eye_ball);
    ditto_free(a->lmk);
    for (int i = 0; i < a->n_kv; i++) {
        ditto_free(a->kv[i].key);
        ditto_free(a->kv[i].s);
    }
    ditto_free(a->kv);
    ditto_free(a);
    *pa = NULL;
}

static bool key_ok(const char *k, size_t n)
{
    if (n < 1 || n > MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (k[i] < 0x21 || k[i] > 0x7e)
            return false;
    return true;
}

/* The entry for key, created when absent; its old string is freed. */
static DittoKV *kv_slot(DittoAvatar *a, const char *key)
{
    if (!key_ok(key, strlen(key)))
        return NULL;
    for (int i = 0; i < a->n_kv; i++)
        if (!strcmp(a->kv[i].key, key)) {
            ditto_free(a->kv[i].s);
            a->kv[i].s = NULL;
            return &a->kv[i];
        }
    if (a->n_kv == a->cap_kv) {
        int cap = a->cap_kv ? a->cap_kv * 2 : 32;
        DittoKV *kv = ditto_realloc(a->kv, (size_t)cap * sizeof *kv);
        if (!kv)
            return NULL;
        a->kv = kv, a->cap_kv = cap;
    }
    DittoKV *e = &a->kv[a->n_kv];
    memset(e, 0, sizeof *e);
    if (!(e->key = ditto_strdup(key)))
        return NULL;
    a->n_kv++;
    return e;
}

int ditto_avatar_kv_set_str(DittoAvatar *a, const char *key, const char *v)
{
    size_t n = strlen(v);
    if (n > MAX_STR)
        return DITTO_ERR_RANGE;
    DittoKV *e = kv_slot(a, key);
    if (!e)
        return DITTO_ERR_INVAL;
    e->type = DITTO_KV_STRING;
    e->s = ditto_strdup(v);
    return e->s ? 0 : DITTO_ERR_NOMEM;
}

int ditto_avatar_kv_set_int(DittoAvatar *a, const char *key, int64_t v)
{
    DittoKV *e = kv_slot(a, key);
    if (!e)
        return DITTO_ERR_INVAL;
    e->type = DITTO_KV_INT;
    e->i = v;
    return 0;
}

int ditto_avatar_kv_set_float(DittoAvatar *a, const char *key, double v)
{
    DittoKV *e = kv_slot(a, key);
    if (!e)
        return DITTO_ERR_INVAL;
    e->type = DITTO_KV_FLOAT;
    e->f = v;
    return 0;
}

const DittoKV *ditto_avatar_kv_get(const DittoAvatar *a, const char *key)
{
    for (int i = 0; i < a->n_kv; i++)
        if (!strcmp(a->kv[i].key, key))
            return &a->kv[i];
    return NULL;
}

/* ---- tensor list shared by reader and writer ---------------------------------------- */

/* x_s_info keys are strided slices of the DittoXInfo array. */
typedef enum Part { P_IMG, P_M, P_SCALE, P_PITCH, P_YAW, P_ROLL, P_T, P_EXP, P_KP, P_FS, P_EYE_OPEN, P_EYE_BALL, P_SC, P_LMK, P_BOX, P_COUNT } Part;

static const char *const part_names[P_COUNT] = {
    "img_rgb", "M_c2o", "x_s_info.scale", "x_s_info.pitch", "x_s_info.yaw", "x_s_info.roll", "x_s_info.t", "x_s_info.exp",
    "x_s_info.kp", "f_s", "eye_open", "eye_ball", "sc", "lmk", "face_box",
};

typedef struct PartDesc {
    int dtype;
    int ndim;
    int64_t shape[DITTO_MAX_DIMS];
    bool present;
} PartDesc;

static void describe(const DittoAvatar *a, Part p, PartDesc *d)
{
    int64_t n = a->n_frames;
    memset(d, 0, sizeof *d);
    d->dtype = FILE_F32;
    d->present = true;
    d->ndim = 2;
    d->shape[0] = n;
    switch (p) {
    case P_IMG:
        d->dtype = FILE_U8, d->ndim = 4, d->shape[1] = a->height, d->shape[2] = a->width, d->shape[3] = 3;
        break;
    case P_M: d->ndim = 3, d->shape[1] = 3, d->shape[2] = 3; break;
    case P_SCALE: d->shape[1] = 1; break;
    case P_PITCH: case P_YAW: case P_ROLL: d->shape[1] = DITTO_POSE_BINS; break;
    case P_T: d->shape[1] = 3; break;
    case P_EXP: case P_KP: d->shape[1] = DITTO_KP_DIM; break;
    case P_FS:
        d->ndim = 5;
        for (int i = 0; i < 4; i++)
            d->shape[1 + i] = a->fs_shape[i];
        break;
    case P_EYE_OPEN: d->shape[1] = 2; break;
    case P_EYE_BALL: d->shape[1] = 6; break;
    case P_SC: d->ndim = 1, d->shape[0] = DITTO_KP_DIM; break;
    case P_LMK: d->ndim = 3, d->shape[1] = a->n_lmk, d->shape[2] = 2, d->present = a->n_lmk > 0; break;
    case P_BOX: d->ndim = 1, d->shape[0] = 5, d->present = a->has_box; break;
    default: break;
    }
}

static uint64_t part_bytes(const PartDesc *d)
{
    uint64_t n = d->dtype == FILE_U8 ? 1 : 4;
    for (int i = 0; i < d->ndim; i++)
        n *= (uint64_t)d->shape[i];
    return n;
}

/* Pointer to a contiguous part, or NULL for the x_s_info slices (per-frame copies). */
static void *part_data(const DittoAvatar *a, Part p)
{
    switch (p) {
    case P_IMG: return a->img_rgb;
    case P_M: return a->m_c2o;
    case P_FS: return a->f_s;
    case P_EYE_OPEN: return a->eye_open;
    case P_EYE_BALL: return a->eye_ball;
    case P_SC: return (void *)a->sc;
    case P_LMK: return a->lmk;
    case P_BOX: return (void *)a->face_box;
    default: return NULL;
    }
}

/* The per-frame float row of an x_s_info key. */
static float *xinfo_row(DittoXInfo *x, Part p)
{
    switch (p) {
    case P_SCALE: return &x->scale;
    case P_PITCH: return x->pitch.v;
    case P_YAW: return x->yaw.v;
    case P_ROLL: return x->roll.v;
    case P_T: return x->t;
    case P_EXP: return x->exp;
    case P_KP: return x->kp;
    default: return NULL;
    }
}

/* ---- writer --------------------------------------------------------------------------------- */

typedef struct Buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} Buf;

static void buf_put(Buf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = ditto_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(Buf *b, uint32_t v)
{
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    buf_put(b, x, 4);
}

static void put_u64(Buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(Buf *b, const char *s)
{
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    buf_put(b, s, n);
}

static uint64_t align_up(uint64_t v)
{
    return (v + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

typedef struct Writer {
    FILE *f;
    EVP_MD_CTX *md;
    const char *path;
    const DittoLogger *log;
    int err;
} Writer;

static void w_put(Writer *w, const void *p, size_t n, bool hash)
{
    if (w->err || !n)
        return;
    if (hash && EVP_DigestUpdate(w->md, p, n) != 1)
        w->err = ditto_fail(w->log, DITTO_ERR_NOMEM, "%s: SHA-256 update failed", w->path);
    else if (fwrite(p, 1, n, w->f) != n)
        w->err = ditto_fail(w->log, errno == ENOSPC ? DITTO_ERR_NOSPC : DITTO_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
}

static void w_zeros(Writer *w, uint64_t n)
{
    static const uint8_t z[ALIGN];
    while (n && !w->err) {
        size_t k = n < ALIGN ? (size_t)n : ALIGN;
        w_put(w, z, k, true);
        n -= k;
    }
}

int ditto_avatar_write(DittoAvatar *a, const char *path, const DittoLogger *log)
{
    int rc;
    if ((rc = ditto_avatar_kv_set_int(a, "frames", a->n_frames)) < 0 || (rc = ditto_avatar_kv_set_int(a, "width", a->width)) < 0 ||
        (rc = ditto_avatar_kv_set_int(a, "height", a->height)) < 0)
        return ditto_fail(log, rc, "%s: cannot record the frame geometry", path);

    /* meta: KV list then tensor table, with offsets laid out in order */
    Buf meta = { 0 };
    for (int i = 0; i < a->n_kv; i++) {
        const DittoKV *e = &a->kv[i];
        put_str(&meta, e->key);
        put_u32(&meta, (uint32_t)e->type);
        if (e->type == DITTO_KV_STRING) {
            put_str(&meta, e->s);
        } else {
            uint64_t bits;
            if (e->type == DITTO_KV_INT)
                bits = (uint64_t)e->i;
            else
                memcpy(&bits, &e->f, 8);
            put_u64(&meta, bits);
        }
    }
    uint64_t off = 0, n_tensors = 0;
    PartDesc desc[P_COUNT];
    uint64_t offs[P_COUNT];
    for (int p = 0; p < P_COUNT; p++) {
        describe(a, (Part)p, &desc[p]);
        if (!desc[p].present)
            continue;
        put_str(&meta, part_names[p]);
        put_u32(&meta, (uint32_t)desc[p].dtype);
        put_u32(&meta, (uint32_t)desc[p].ndim);
        for (int d = 0; d < desc[p].ndim; d++)
            put_u64(&meta, (uint64_t)desc[p].shape[d]);
        offs[p] = off;
        put_u64(&meta, off);
        put_u64(&meta, part_bytes(&desc[p]));
        off = align_up(off + part_bytes(&desc[p]));
        n_tensors++;
    }
    if (meta.oom) {
        ditto_free(meta.p);
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory building the header", path);
    }
    uint64_t blob_offset = align_up(HDR_SIZE + meta.n), blob_size = off, file_size = blob_offset + blob_size;

    Buf hdr = { 0 };
    buf_put(&hdr, DITTO_AVATAR_MAGIC, 8);
    put_u32(&hdr, DITTO_AVATAR_VERSION);
    put_u32(&hdr, 0);
    put_u64(&hdr, file_size);
    put_u64(&hdr, HDR_SIZE);
    put_u64(&hdr, meta.n);
    put_u64(&hdr, blob_offset);
    put_u64(&hdr, blob_size);
    put_u64(&hdr, (uint64_t)a->n_kv);
    put_u64(&hdr, n_tensors);
    uint8_t zeros[56] = { 0 };
    buf_put(&hdr, zeros, HDR_SIZE - hdr.n);   /* reserved + hash placeholder */
    if (hdr.oom) {
        ditto_free(meta.p);
        ditto_free(hdr.p);
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory building the header", path);
    }

    /* temporary file beside the target, renamed on success */
    size_t plen = strlen(path);
    char *tmp = ditto_malloc(plen + 16);
    Writer w = { NULL, EVP_MD_CTX_new(), path, log, 0 };
    int fd = -1;
    if (tmp) {
        memcpy(tmp, path, plen);
        memcpy(tmp + plen, ".tmp.XXXXXX", 12);
        fd = mkstemp(tmp);
    }
    if (!tmp || !w.md) {
        rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fd < 0 || !(w.f = fdopen(fd, "wb"))) {
        rc = ditto_fail(log, errno == ENOSPC ? DITTO_ERR_NOSPC : DITTO_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                        strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
        goto done;
    }
    fd = -1;   /* owned by w.f now */
    /* mkstemp creates 0600; an avatar is an ordinary output file */
    if (fchmod(fileno(w.f), 0644) != 0) {
        rc = ditto_fail(log, DITTO_ERR_IO, "%s: cannot set the file mode: %s", path, strerror(errno));
        goto done;
    }
    if (EVP_DigestInit_ex(w.md, EVP_sha256(), NULL) != 1) {
        rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: SHA-256 init failed", path);
        goto done;
    }
    EVP_DigestUpdate(w.md, hdr.p, HASH_AT);
    w_put(&w, hdr.p, HDR_SIZE, false);
    w_put(&w, meta.p, meta.n, true);
    w_zeros(&w, blob_offset - HDR_SIZE - meta.n);
    uint64_t pos = 0;
    for (int p = 0; p < P_COUNT && !w.err; p++) {
        if (!desc[p].present)
            continue;
        w_zeros(&w, offs[p] - pos);
        uint64_t nb = part_bytes(&desc[p]);
        const void *src = part_data(a, (Part)p);
        if (src) {
            w_put(&w, src, (size_t)nb, true);
        } else {
            size_t row = (size_t)(nb / (uint64_t)a->n_frames);
            for (int i = 0; i < a->n_frames; i++)
                w_put(&w, xinfo_row(&a->x_s_info[i], (Part)p), row, true);
        }
        pos = offs[p] + nb;
    }
    w_zeros(&w, blob_size - pos);
    unsigned char digest[32];
    unsigned dlen = 0;
    if (!w.err && EVP_DigestFinal_ex(w.md, digest, &dlen) != 1)
        w.err = ditto_fail(log, DITTO_ERR_NOMEM, "%s: SHA-256 final failed", path);
    if (!w.err && (fseek(w.f, HASH_AT, SEEK_SET) != 0 || fwrite(digest, 1, 32, w.f) != 32))
        w.err = ditto_fail(log, DITTO_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (!w.err && (fflush(w.f) != 0 || fsync(fileno(w.f)) != 0))
        w.err = ditto_fail(log, errno == ENOSPC ? DITTO_ERR_NOSPC : DITTO_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    rc = w.err;
    if (fclose(w.f) != 0 && !rc)
        rc = ditto_fail(log, DITTO_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    w.f = NULL;
    if (!rc && rename(tmp, path) != 0)
        rc = ditto_fail(log, DITTO_ERR_IO, "%s: cannot rename the temporary file into place: %s", path, strerror(errno));
done:
    if (w.f)
        fclose(w.f);
    if (rc < 0 && tmp && tmp[0])
        unlink(tmp);
    EVP_MD_CTX_free(w.md);
    ditto_free(tmp);
    ditto_free(meta.p);
    ditto_free(hdr.p);
    return rc;
}

/* ---- reader ------------------------------------------------------------------------------------ */

typedef struct Rd {
    const uint8_t *p;
    uint64_t n, at;
    const char *name;
    const DittoLogger *log;
} Rd;

static int rd_fail(Rd *r, const char *what)
{
    return ditto_fail(r->log, DITTO_ERR_FORMAT, "%s: malformed avatar file: %s (at byte %llu)", r->name, what,
                      (unsigned long long)(HDR_SIZE + r->at));
}

static bool rd_u32(Rd *r, uint32_t *v)
{
    if (r->n - r->at < 4)
        return false;
    const uint8_t *b = r->p + r->at;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    r->at += 4;
    return true;
}

static bool rd_u64(Rd *r, uint64_t *v)
{
    uint32_t lo, hi;
    if (r->n - r->at < 8 || !rd_u32(r, &lo) || !rd_u32(r, &hi))
        return false;
    *v = (uint64_t)hi << 32 | lo;
    return true;
}

static uint64_t le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* A length-prefixed string copied into dst (cap bytes incl. NUL). */
static bool rd_name(Rd *r, char *dst, size_t cap)
{
    uint32_t n;
    if (!rd_u32(r, &n) || n < 1 || n >= cap || r->n - r->at < n)
        return false;
    memcpy(dst, r->p + r->at, n);
    dst[n] = 0;
    r->at += n;
    return key_ok(dst, n);
}

typedef struct TEntry {
    char name[MAX_NAME + 1];
    uint32_t dtype, ndim;
    uint64_t shape[DITTO_MAX_DIMS];
    uint64_t offset, nbytes;
} TEntry;

static int cmp_offset(const void *a, const void *b)
{
    uint64_t x = (*(const TEntry *const *)a)->offset, y = (*(const TEntry *const *)b)->offset;
    return x < y ? -1 : x > y;
}

static int kv_int(DittoAvatar *a, const char *name, const char *key, int64_t lo, int64_t hi, int64_t *v, const DittoLogger *log)
{
    const DittoKV *e = ditto_avatar_kv_get(a, key);
    if (!e || e->type != DITTO_KV_INT)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: required integer key '%s' is missing", name, key);
    if (e->i < lo || e->i > hi)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: %s = %lld is out of range", name, key, (long long)e->i);
    *v = e->i;
    return 0;
}

int ditto_avatar_read_memory(DittoAvatar **out, const void *data, size_t size, const char *name, const DittoLogger *log)
{
    *out = NULL;
    const uint8_t *b = data;
    if (size < HDR_SIZE || memcmp(b, DITTO_AVATAR_MAGIC, 8) != 0) {
        if (size >= 8 && memcmp(b, DITTO_AVATAR_MAGIC, 8) == 0)
            return ditto_fail(log, DITTO_ERR_FORMAT, "%s: truncated avatar file: %zu bytes, shorter than the %u-byte header", name, size, HDR_SIZE);
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: not an avatar file (bad magic; expected a file written by 'ditto bake')", name);
    }
    uint32_t version = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
    if (version != DITTO_AVATAR_VERSION)
        return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: avatar format version %u is not supported (this build reads version %u); bake it again",
                          name, version, DITTO_AVATAR_VERSION);
    uint64_t file_size = le64(b + 16), meta_off = le64(b + 24), meta_size = le64(b + 32), blob_off = le64(b + 40), blob_size = le64(b + 48);
    uint64_t n_kv = le64(b + 56), n_t = le64(b + 64);
    if (file_size != size)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: %s avatar file: the header says %llu bytes, the file has %zu", name,
                          size < file_size ? "truncated" : "corrupted", (unsigned long long)file_size, size);
    /* checksum first: any flipped bit anywhere outside the hash field fails here */
    unsigned char digest[32];
    unsigned dlen = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool hash_ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(md, b, HASH_AT) == 1 &&
                   EVP_DigestUpdate(md, b + HDR_SIZE, size - HDR_SIZE) == 1 && EVP_DigestFinal_ex(md, digest, &dlen) == 1;
    EVP_MD_CTX_free(md);
    if (!hash_ok)
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: cannot compute SHA-256", name);
    if (memcmp(digest, b + HASH_AT, 32) != 0)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: corrupted avatar file: SHA-256 checksum mismatch", name);
    for (size_t i = 12; i < 16; i++)
        if (b[i])
            return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: reserved header bytes are not zero", name);
    for (size_t i = 72; i < HASH_AT; i++)
        if (b[i])
            return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: reserved header bytes are not zero", name);
    if (meta_off != HDR_SIZE || meta_size > size - HDR_SIZE || blob_off % ALIGN || blob_off < HDR_SIZE + meta_size || blob_off > size ||
        blob_size != size - blob_off || n_kv > MAX_ENTRIES || n_t > MAX_ENTRIES)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: inconsistent section offsets or counts in the header", name);
    for (uint64_t i = HDR_SIZE + meta_size; i < blob_off; i++)
        if (b[i])
            return ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: non-zero padding before the data", name);

    DittoAvatar *a = ditto_calloc(1, sizeof *a);
    TEntry *te = n_t ? ditto_calloc((size_t)n_t, sizeof *te) : NULL;
    const TEntry **sorted = n_t ? ditto_calloc((size_t)n_t, sizeof *sorted) : NULL;
    int rc = 0;
    if (!a || (n_t && (!te || !sorted))) {
        rc = DITTO_ERR_NOMEM;
        goto fail;
    }
    Rd r = { b + HDR_SIZE, meta_size, 0, name, log };
    char key[MAX_NAME + 1];
    for (uint64_t i = 0; i < n_kv; i++) {
        uint32_t type;
        if (!rd_name(&r, key, sizeof key) || !rd_u32(&r, &type)) {
            rc = rd_fail(&r, "bad metadata key");
            goto fail;
        }
        if (ditto_avatar_kv_get(a, key)) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: metadata key '%s' appears twice", name, key);
            goto fail;
        }
        if (type == DITTO_KV_STRING) {
            uint32_t n;
            if (!rd_u32(&r, &n) || n > MAX_STR || r.n - r.at < n || memchr(r.p + r.at, 0, n)) {
                rc = rd_fail(&r, "bad metadata string");
                goto fail;
            }
            char *s = ditto_malloc((size_t)n + 1);
            if (!s) {
                rc = DITTO_ERR_NOMEM;
                goto fail;
            }
            memcpy(s, r.p + r.at, n);
            s[n] = 0;
            r.at += n;
            rc = ditto_avatar_kv_set_str(a, key, s);
            ditto_free(s);
        } else if (type == DITTO_KV_INT || type == DITTO_KV_FLOAT) {
            uint64_t bits;
            if (!rd_u64(&r, &bits)) {
                rc = rd_fail(&r, "metadata value runs past the header");
                goto fail;
            }
            double f;
            memcpy(&f, &bits, 8);
            rc = type == DITTO_KV_INT ? ditto_avatar_kv_set_int(a, key, (int64_t)bits) : ditto_avatar_kv_set_float(a, key, f);
        } else {
            rc = rd_fail(&r, "unknown metadata value type");
            goto fail;
        }
        if (rc < 0)
            goto fail;
    }
    for (uint64_t i = 0; i < n_t; i++) {
        TEntry *t = &te[i];
        if (!rd_name(&r, t->name, sizeof t->name) || !rd_u32(&r, &t->dtype) || !rd_u32(&r, &t->ndim) || t->ndim > DITTO_MAX_DIMS) {
            rc = rd_fail(&r, "bad tensor entry");
            goto fail;
        }
        uint64_t nb = t->dtype == FILE_U8 ? 1 : t->dtype == FILE_F32 ? 4 : 0;
        if (!nb) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensor '%s' has unknown dtype %u", name, t->name, t->dtype);
            goto fail;
        }
        bool ovf = false;
        for (uint32_t d = 0; d < t->ndim; d++) {
            if (!rd_u64(&r, &t->shape[d]) || t->shape[d] > (1u << 30)) {
                rc = rd_fail(&r, "bad tensor dimension");
                goto fail;
            }
            ovf |= ditto_mul_overflow_u64(nb, t->shape[d], &nb);
        }
        uint64_t end;
        if (!rd_u64(&r, &t->offset) || !rd_u64(&r, &t->nbytes)) {
            rc = rd_fail(&r, "tensor entry runs past the header");
            goto fail;
        }
        if (ovf || nb != t->nbytes || t->offset % ALIGN || ditto_add_overflow_u64(t->offset, t->nbytes, &end) || end > blob_size) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensor '%s' has an inconsistent size or lies outside the data",
                            name, t->name);
            goto fail;
        }
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(te[j].name, t->name)) {
                rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensor '%s' appears twice", name, t->name);
                goto fail;
            }
        sorted[i] = t;
    }
    if (r.at != r.n) {
        rc = rd_fail(&r, "trailing bytes after the tensor table");
        goto fail;
    }
    if (n_t)
        qsort(sorted, (size_t)n_t, sizeof *sorted, cmp_offset);
    for (uint64_t i = 1; i < n_t; i++)
        if (sorted[i - 1]->offset + sorted[i - 1]->nbytes > sorted[i]->offset) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensors '%s' and '%s' overlap", name, sorted[i - 1]->name,
                            sorted[i]->name);
            goto fail;
        }

    /* geometry from the metadata, then every tensor checked against it */
    int64_t frames, width, height;
    if ((rc = kv_int(a, name, "frames", 1, 1 << 20, &frames, log)) < 0 || (rc = kv_int(a, name, "width", 1, 1 << 16, &width, log)) < 0 ||
        (rc = kv_int(a, name, "height", 1, 1 << 16, &height, log)) < 0)
        goto fail;
    a->n_frames = (int)frames, a->width = (int)width, a->height = (int)height;
    const TEntry *found[P_COUNT] = { 0 };
    for (uint64_t i = 0; i < n_t; i++)
        for (int p = 0; p < P_COUNT; p++)
            if (!strcmp(te[i].name, part_names[p]))
                found[p] = &te[i];
    for (int p = 0; p < P_COUNT; p++)
        if (!found[p] && p != P_LMK && p != P_BOX) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensor '%s' is missing", name, part_names[p]);
            goto fail;
        }
    const TEntry *fs = found[P_FS];
    if (fs->ndim != 5 || fs->shape[0] != (uint64_t)frames) {
        rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: f_s must be (frames, C, D, H, W)", name);
        goto fail;
    }
    for (int i = 0; i < 4; i++)
        a->fs_shape[i] = (int64_t)fs->shape[1 + i];
    if (found[P_LMK]) {
        if (found[P_LMK]->ndim != 3 || found[P_LMK]->shape[1] < 1 || found[P_LMK]->shape[1] > 1000) {
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: lmk must be (frames, points, 2)", name);
            goto fail;
        }
        a->n_lmk = (int)found[P_LMK]->shape[1];
    }
    a->has_box = found[P_BOX] != NULL;

    /* every tensor against the geometry before anything is allocated: the allocation is then bounded by the file size */
    for (int p = 0; p < P_COUNT; p++) {
        const TEntry *t = found[p];
        if (!t)
            continue;
        PartDesc d;
        describe(a, (Part)p, &d);
        bool same = t->dtype == (uint32_t)d.dtype && t->ndim == (uint32_t)d.ndim;
        for (int k = 0; same && k < d.ndim; k++)
            same = t->shape[k] == (uint64_t)d.shape[k];
        if (!same) {
            char want[DITTO_SHAPE_STR_MAX];
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: tensor '%s' must be %s %s", name, t->name,
                            d.dtype == FILE_U8 ? "uint8" : "float32", ditto_shape_str(d.shape, d.ndim, want, sizeof want));
            goto fail;
        }
    }

    DittoAvatar *full = NULL;
    if ((rc = ditto_avatar_alloc(&full, a->n_frames, a->height, a->width, a->fs_shape, a->n_lmk)) < 0) {
        if (rc == DITTO_ERR_NOMEM)
            ditto_fail(log, rc, "%s: out of memory for %d frames", name, a->n_frames);
        else
            rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: malformed avatar file: implausible geometry", name);
        goto fail;
    }
    /* move the metadata over */
    full->kv = a->kv, full->n_kv = a->n_kv, full->cap_kv = a->cap_kv;
    full->has_box = a->has_box;
    a->kv = NULL, a->n_kv = a->cap_kv = 0;
    ditto_avatar_free(&a);
    a = full;

    const uint8_t *blob = b + blob_off;
    for (int p = 0; p < P_COUNT; p++) {
        const TEntry *t = found[p];
        if (!t)
            continue;
        void *dst = part_data(a, (Part)p);
        if (dst) {
            memcpy(dst, blob + t->offset, (size_t)t->nbytes);
        } else {
            size_t row = (size_t)(t->nbytes / (uint64_t)a->n_frames);
            for (int i = 0; i < a->n_frames; i++)
                memcpy(xinfo_row(&a->x_s_info[i], (Part)p), blob + t->offset + (uint64_t)i * row, row);
        }
    }
    ditto_free(te);
    ditto_free(sorted);
    *out = a;
    return 0;
fail:
    if (rc == DITTO_ERR_NOMEM)
        ditto_fail(log, rc, "%s: out of memory reading the avatar file", name);
    ditto_free(te);
    ditto_free(sorted);
    ditto_avatar_free(&a);
    return rc;
}

int ditto_avatar_read(DittoAvatar **out, const char *path, const DittoLogger *log)
{
    *out = NULL;
    DittoMap m;
    int rc = ditto_map_open(&m, path, log);
    if (rc < 0)
        return rc;
    rc = ditto_avatar_read_memory(out, m.data, m.size, path, log);
    ditto_map_close(&m);
    return rc;
}

int ditto_file_sha256(const char *path, char hex[65], const DittoLogger *log)
{
    DittoMap m;
    int rc = ditto_map_open(&m, path, log);
    if (rc < 0)
        return rc;
    unsigned char d[32];
    unsigned n = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && (m.size == 0 || EVP_DigestUpdate(md, m.data, m.size) == 1) &&
              EVP_DigestFinal_ex(md, d, &n) == 1;
    EVP_MD_CTX_free(md);
    ditto_map_close(&m);
    if (!ok)
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: cannot compute SHA-256", path);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}
