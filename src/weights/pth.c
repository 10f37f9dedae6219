/*
 * PyTorch checkpoints (torch.save since 1.6): a ZIP archive whose top folder
 * name varies ("archive/", "<file stem>/", ...), holding "<prefix>/data.pkl"
 * and one raw little-endian record "<prefix>/data/<key>" per storage. Each
 * tensor of the pickle becomes a catalog entry pointing into the mapping,
 * after checking that every element it can address lies inside both the
 * storage the pickle declares and the record the archive holds.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "weights/catalog.h"
#include "weights/pickle.h"
#include "weights/zip.h"

typedef struct PthCtx {
    DittoCatalog *c;
    const DittoZip *zip;
    const char *file;
    const DittoLogger *log;
    const char *prefix;   /* "<top>/" (points into the zip directory), or "" */
    size_t prefix_len;
} PthCtx;

/* "<prefix><rest>" looked up in the archive. */
static const DittoZipEntry *find_record(const PthCtx *p, const char *rest)
{
    char name[1024];   /* the top folder is the file stem PyTorch saw: at most a file name long */
    size_t n = strlen(rest);
    if (p->prefix_len + n > sizeof name)
        return NULL;
    memcpy(name, p->prefix, p->prefix_len);
    memcpy(name + p->prefix_len, rest, n);
    return ditto_zip_find(p->zip, name, p->prefix_len + n);
}

static int check_stored(const PthCtx *p, const DittoZipEntry *e)
{
    if (e->method == 0)
        return 0;
    char nb[256];
    return ditto_fail(p->log, DITTO_ERR_UNSUPPORTED, "%s: zip entry '%s' is compressed (method %u); PyTorch stores records uncompressed",
                      p->file, ditto_zip_printable(nb, sizeof nb, e->name, e->name_len), e->method);
}

static int on_tensor(void *ctx, const DittoPickleTensor *t)
{
    const PthCtx *p = ctx;
    char rec[DITTO_SHAPE_STR_MAX + 8], shp[DITTO_SHAPE_STR_MAX], str[DITTO_SHAPE_STR_MAX];
    snprintf(rec, sizeof rec, "data/%s", t->storage_key);
    const DittoZipEntry *e = find_record(p, rec);
    if (!e) {
        char nb[256];
        return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: tensor '%s': storage record '%s%s' is missing from the archive", p->file, t->name,
                          ditto_zip_printable(nb, sizeof nb, p->prefix, p->prefix_len), rec);
    }
    DITTO_TRY(check_stored(p, e));

    size_t es = ditto_dtype_size(t->dtype);
    uint64_t storage_bytes;
    if (ditto_mul_overflow_u64(t->storage_numel, es, &storage_bytes) || storage_bytes > e->size)
        return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: tensor '%s': storage '%s' should hold %llu %s elements but its record has %llu bytes",
                          p->file, t->name, t->storage_key, (unsigned long long)t->storage_numel, ditto_dtype_name(t->dtype),
                          (unsigned long long)e->size);

    /* the furthest element: offset + sum (size-1)*stride; a zero-size tensor addresses nothing */
    uint64_t numel = 1, last = t->storage_offset, prod;
    bool empty = false;
    for (int i = 0; i < t->ndim; i++)
        empty |= t->shape[i] == 0;
    for (int i = 0; i < t->ndim && !empty; i++) {
        if (ditto_mul_overflow_u64(numel, (uint64_t)t->shape[i], &numel) ||
            ditto_mul_overflow_u64((uint64_t)t->shape[i] - 1, (uint64_t)t->stride[i], &prod) || ditto_add_overflow_u64(last, prod, &last))
            return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: tensor '%s': size %s and stride %s overflow 64 bits", p->file, t->name,
                              ditto_shape_str(t->shape, t->ndim, shp, sizeof shp), ditto_shape_str(t->stride, t->ndim, str, sizeof str));
    }
    uint64_t nbytes;
    if (!empty && (numel > INT64_MAX || ditto_mul_overflow_u64(numel, es, &nbytes) || nbytes > INT64_MAX))
        return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: tensor '%s': size %s is too large", p->file, t->name,
                          ditto_shape_str(t->shape, t->ndim, shp, sizeof shp));
    if (!empty && last >= t->storage_numel)
        return ditto_fail(p->log, DITTO_ERR_FORMAT,
                          "%s: tensor '%s': size %s, stride %s at offset %llu reaches element %llu of storage '%s', which has %llu",
                          p->file, t->name, ditto_shape_str(t->shape, t->ndim, shp, sizeof shp),
                          ditto_shape_str(t->stride, t->ndim, str, sizeof str), (unsigned long long)t->storage_offset,
                          (unsigned long long)last, t->storage_key, (unsigned long long)t->storage_numel);

    DittoCatalogEntry ce = { .name = (char *)t->name, .dtype = t->dtype, .ndim = t->ndim };
    memcpy(ce.shape, t->shape, sizeof ce.shape);
    memcpy(ce.stride, t->stride, sizeof ce.stride);
    /* last < storage_numel and storage_numel * es <= record size: no overflow below */
    ce.offset = e->data_offset + (empty ? 0 : t->storage_offset * es);
    ce.span = empty ? 0 : (last - t->storage_offset + 1) * es;
    ce.data = p->c->map.data + ce.offset;
    return ditto_catalog_add(p->c, &ce);
}

/* PyTorch names every record "<top>/<record>"; the top folder is whatever the writer chose. */
static int find_pickle(PthCtx *p, const DittoZipEntry **pkl)
{
    const DittoZipEntry *found = NULL;
    for (size_t i = 0; i < p->zip->n; i++) {
        const DittoZipEntry *e = &p->zip->entries[i];
        if (e->name_len < 8 || memcmp(e->name + e->name_len - 8, "data.pkl", 8))
            continue;
        size_t top = e->name_len - 8;
        if (top > 0 && (e->name[top - 1] != '/' || memchr(e->name, '/', top - 1)))
            continue;   /* not "<top>/data.pkl" with a single folder level */
        if (found) {
            char a[256], b[256];
            return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: several data.pkl records ('%s' and '%s')", p->file,
                              ditto_zip_printable(a, sizeof a, found->name, found->name_len), ditto_zip_printable(b, sizeof b, e->name, e->name_len));
        }
        found = e;
        p->prefix = e->name;
        p->prefix_len = top;
    }
    if (!found)
        return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: no data.pkl record in the zip archive (not a PyTorch checkpoint?)", p->file);
    *pkl = found;
    return check_stored(p, found);
}

static int check_byteorder(const PthCtx *p)
{
    const DittoZipEntry *e = find_record(p, "byteorder");
    if (!e)
        return 0;   /* files written before PyTorch 1.12 have none: they are little-endian */
    DITTO_TRY(check_stored(p, e));
    const char *s = (const char *)p->zip->data + e->data_offset;
    if (e->size == 6 && !memcmp(s, "little", 6))
        return 0;
    if (e->size == 3 && !memcmp(s, "big", 3))
        return ditto_fail(p->log, DITTO_ERR_UNSUPPORTED, "%s: big-endian checkpoint (byteorder 'big'); only little-endian is supported",
                          p->file);
    return ditto_fail(p->log, DITTO_ERR_FORMAT, "%s: unknown byteorder record (%llu bytes)", p->file, (unsigned long long)e->size);
}

static int pth_fill(DittoCatalog *c, const char *file, const DittoLogger *log)
{
    const uint8_t *d = c->map.data;
    size_t size = c->map.size;
    /* the two pre-1.6 formats: a bare pickle stream starting with the magic number, or a tar */
    static const uint8_t legacy_magic[] = { 0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19 };
    if ((size >= sizeof legacy_magic && !memcmp(d, legacy_magic, sizeof legacy_magic)) || (size >= 262 && !memcmp(d + 257, "ustar", 5)))
        return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: legacy torch.save format (PyTorch < 1.6); re-save it with a newer PyTorch", file);

    DittoZip zip;
    DITTO_TRY(ditto_zip_open(&zip, d, size, file, log));
    PthCtx p = { .c = c, .zip = &zip, .file = file, .log = log };
    const DittoZipEntry *pkl = NULL;
    int rc = find_pickle(&p, &pkl);
    if (rc >= 0)
        rc = check_byteorder(&p);
    if (rc >= 0)
        rc = ditto_pickle_tensors(d + pkl->data_offset, (size_t)pkl->size, file, log, on_tensor, &p);
    if (rc >= 0)
        rc = ditto_catalog_finish(c);
    ditto_zip_close(&zip);
    return rc;
}

int ditto_catalog_open_pth(DittoCatalog **out, const char *path, const DittoLogger *log)
{
    if (!out || !path)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoMap m;
    DITTO_TRY(ditto_map_open(&m, path, log));
    DittoCatalog *c;
    DITTO_TRY(ditto_catalog_create(&c, path, &m, true, log));
    int rc = pth_fill(c, path, log);
    if (rc < 0) {
        ditto_catalog_close(&c);
        return rc;
    }
    *out = c;
    return 0;
}

int ditto_catalog_open_pth_memory(DittoCatalog **out, const void *data, size_t size, const char *name, const DittoLogger *log)
{
    if (!out || (!data && size) || !name)
        return DITTO_ERR_INVAL;
    *out = NULL;
    DittoMap m = { size ? data : NULL, size };
    DittoCatalog *c;
    DITTO_TRY(ditto_catalog_create(&c, name, &m, false, log));
    int rc = pth_fill(c, name, log);
    if (rc < 0) {
        ditto_catalog_close(&c);
        return rc;
    }
    *out = c;
    return 0;
}
