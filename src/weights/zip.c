/*
 * ZIP reader for PyTorch checkpoints. PyTorch (miniz) writes stored entries,
 * pads each local header's extra field so data starts on a 64-byte boundary,
 * sets the data-descriptor flag (local sizes are 0) and always adds ZIP64 end
 * records; sizes and offsets therefore come from the central directory, and
 * the local header only tells where the data starts.
 */
#include "weights/zip.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/tensor.h"

#define SIG_LOCAL   0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD    0x06054b50u
#define SIG_EOCD64  0x06064b50u
#define SIG_LOC64   0x07064b50u

#define EOCD_SIZE    22
#define LOC64_SIZE   20
#define EOCD64_SIZE  56
#define CENTRAL_SIZE 46
#define LOCAL_SIZE   30
#define MAX_COMMENT  65535

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

const char *ditto_zip_printable(char *buf, size_t n, const char *s, size_t len)
{
    size_t i = 0, k = 0;
    for (; i < len && k + 4 < n; i++)
        buf[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (i < len) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = 0;
    return buf;
}

typedef struct ZipCtx {
    const uint8_t *d;
    size_t size;
    const char *file;
    const DittoLogger *log;
} ZipCtx;

/* Locate the end-of-central-directory record: the last signature whose comment fits in the file. */
static int find_eocd(const ZipCtx *z, size_t *pos)
{
    if (z->size < EOCD_SIZE)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: not a zip archive: %zu bytes is too short for an end of central directory record",
                          z->file, z->size);
    size_t last = z->size - EOCD_SIZE;
    size_t first = last > MAX_COMMENT ? last - MAX_COMMENT : 0;
    for (size_t p = last + 1; p-- > first;) {
        if (rd32(z->d + p) == SIG_EOCD && p + EOCD_SIZE + rd16(z->d + p + 20) <= z->size) {
            *pos = p;
            return 0;
        }
    }
    if (rd32(z->d) == SIG_LOCAL)   /* starts like an archive: most likely cut short */
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: truncated zip archive: no end of central directory record in the last %zu bytes",
                          z->file, z->size - first);
    return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: not a zip archive (no end of central directory record in the last %zu bytes)",
                      z->file, z->size - first);
}

typedef struct CdInfo {
    uint64_t n, cd_size, cd_off;
    uint64_t end;   /* offset of the record that points at the directory: it must end before */
} CdInfo;

static int read_end_records(const ZipCtx *z, size_t eocd, CdInfo *cd)
{
    const uint8_t *e = z->d + eocd;
    uint32_t disk = rd16(e + 4), cd_disk = rd16(e + 6);
    uint64_t n_disk = rd16(e + 8);
    cd->n = rd16(e + 10);
    cd->cd_size = rd32(e + 12);
    cd->cd_off = rd32(e + 16);
    cd->end = eocd;
    if (eocd >= LOC64_SIZE && rd32(e - LOC64_SIZE) == SIG_LOC64) {
        /* ZIP64: the locator just before the EOCD points at the 64-bit record, whose values win */
        const uint8_t *l = e - LOC64_SIZE;
        uint64_t off = rd64(l + 8);
        uint64_t lim = eocd - LOC64_SIZE;
        if (off > lim || lim - off < EOCD64_SIZE)
            return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: zip64 end of central directory record at offset %llu is beyond its locator at offset %llu",
                              z->file, (unsigned long long)off, (unsigned long long)lim);
        const uint8_t *r = z->d + off;
        if (rd32(r) != SIG_EOCD64)
            return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: no zip64 end of central directory record at offset %llu", z->file,
                              (unsigned long long)off);
        disk = rd32(r + 16);
        cd_disk = rd32(r + 20);
        n_disk = rd64(r + 24);
        cd->n = rd64(r + 32);
        cd->cd_size = rd64(r + 40);
        cd->cd_off = rd64(r + 48);
        cd->end = off;
    }
    if (disk != 0 || cd_disk != 0 || n_disk != cd->n)
        return ditto_fail(z->log, DITTO_ERR_UNSUPPORTED, "%s: multi-disk zip archives are not supported", z->file);
    uint64_t cd_end;
    if (ditto_add_overflow_u64(cd->cd_off, cd->cd_size, &cd_end) || cd_end > z->size)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: truncated: central directory at offset %llu (%llu bytes) beyond end of file (%zu bytes)",
                          z->file, (unsigned long long)cd->cd_off, (unsigned long long)cd->cd_size, z->size);
    if (cd_end > cd->end)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: central directory at offset %llu (%llu bytes) overlaps its end record at offset %llu",
                          z->file, (unsigned long long)cd->cd_off, (unsigned long long)cd->cd_size, (unsigned long long)cd->end);
    if (cd->n > cd->cd_size / CENTRAL_SIZE)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: central directory of %llu bytes cannot hold %llu entries", z->file,
                          (unsigned long long)cd->cd_size, (unsigned long long)cd->n);
    return 0;
}

/* Zip64 extended information (tag 0x0001): 64-bit values for the fields that hold 0xffffffff, in this order. */
static int read_zip64_extra(const ZipCtx *z, const uint8_t *x, size_t len, const char *name, uint64_t *usize, uint64_t *csize,
                            uint64_t *local)
{
    uint64_t *want[3] = { *usize == 0xffffffffu ? usize : NULL, *csize == 0xffffffffu ? csize : NULL,
                          *local == 0xffffffffu ? local : NULL };
    if (!want[0] && !want[1] && !want[2])
        return 0;
    size_t p = 0;
    while (p + 4 <= len) {
        uint16_t tag = rd16(x + p), n = rd16(x + p + 2);
        p += 4;
        if (n > len - p)
            break;
        if (tag == 0x0001) {
            size_t q = 0;
            for (int i = 0; i < 3; i++) {
                if (!want[i])
                    continue;
                if (q + 8 > n)
                    return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: entry '%s': zip64 extra field too short (%u bytes)", z->file, name, n);
                *want[i] = rd64(x + p + q);
                q += 8;
            }
            return 0;
        }
        p += n;
    }
    return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: entry '%s': 32-bit size or offset is 0xffffffff but there is no zip64 extra field",
                      z->file, name);
}

static int cmp_entry(const void *a, const void *b)
{
    const DittoZipEntry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int read_entry(const ZipCtx *z, const uint8_t *h, uint64_t avail, uint64_t *used, DittoZipEntry *e)
{
    char nb[128];
    if (avail < CENTRAL_SIZE || rd32(h) != SIG_CENTRAL)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: bad central directory header at offset %llu", z->file,
                          (unsigned long long)(h - z->d));
    uint16_t flags = rd16(h + 8), name_len = rd16(h + 28), extra_len = rd16(h + 30), comment_len = rd16(h + 32);
    uint64_t rec = (uint64_t)CENTRAL_SIZE + name_len + extra_len + comment_len;
    if (rec > avail)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: central directory header at offset %llu runs past the directory", z->file,
                          (unsigned long long)(h - z->d));
    *used = rec;
    e->name = (const char *)h + CENTRAL_SIZE;
    e->name_len = name_len;
    e->method = rd16(h + 10);
    e->csize = rd32(h + 20);
    e->size = rd32(h + 24);
    uint64_t local = rd32(h + 42);
    const char *pn = ditto_zip_printable(nb, sizeof nb, e->name, e->name_len);
    DITTO_TRY(read_zip64_extra(z, h + CENTRAL_SIZE + name_len, extra_len, pn, &e->size, &e->csize, &local));
    if (flags & 1)
        return ditto_fail(z->log, DITTO_ERR_UNSUPPORTED, "%s: entry '%s' is encrypted", z->file, pn);
    if (e->method == 0 && e->csize != e->size)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: stored entry '%s' has %llu bytes in the file but %llu uncompressed", z->file, pn,
                          (unsigned long long)e->csize, (unsigned long long)e->size);

    /* the local header repeats the name and has its own extra field (PyTorch's alignment padding) */
    if (local > z->size || z->size - local < LOCAL_SIZE)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: truncated: entry '%s': local header at offset %llu beyond end of file (%zu bytes)",
                          z->file, pn, (unsigned long long)local, z->size);
    const uint8_t *l = z->d + local;
    if (rd32(l) != SIG_LOCAL)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: entry '%s': no local header at offset %llu", z->file, pn, (unsigned long long)local);
    uint16_t lname = rd16(l + 26), lextra = rd16(l + 28);
    uint64_t start = local + LOCAL_SIZE + lname + lextra, end;
    if (start > z->size || lname != name_len || memcmp(l + LOCAL_SIZE, e->name, name_len) != 0) {
        if (start > z->size)
            return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: truncated: entry '%s': local header at offset %llu beyond end of file (%zu bytes)",
                              z->file, pn, (unsigned long long)local, z->size);
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: entry '%s': local header at offset %llu names a different entry", z->file, pn,
                          (unsigned long long)local);
    }
    if (ditto_add_overflow_u64(start, e->csize, &end) || end > z->size)
        return ditto_fail(z->log, DITTO_ERR_FORMAT, "%s: truncated: entry '%s': data at offset %llu (%llu bytes) beyond end of file (%zu bytes)",
                          z->file, pn, (unsigned long long)start, (unsigned long long)e->csize, z->size);
    e->data_offset = start;
    return 0;
}

int ditto_zip_open(DittoZip *z, const uint8_t *data, size_t size, const char *file, const DittoLogger *log)
{
    DITTO_ASSERT(z && file);
    memset(z, 0, sizeof *z);
    ZipCtx c = { data, size, file, log };
    if (size == 0)
        return ditto_fail(log, DITTO_ERR_FORMAT, "%s: empty file", file);
    size_t eocd = 0;
    CdInfo cd;
    DITTO_TRY(find_eocd(&c, &eocd));
    DITTO_TRY(read_end_records(&c, eocd, &cd));

    DittoZipEntry *ents = ditto_calloc((size_t)cd.n ? (size_t)cd.n : 1, sizeof *ents);
    if (!ents)
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory for %llu zip entries", file, (unsigned long long)cd.n);
    uint64_t p = cd.cd_off, end = cd.cd_off + cd.cd_size;
    for (uint64_t i = 0; i < cd.n; i++) {
        uint64_t used = 0;
        int rc = read_entry(&c, data + p, end - p, &used, &ents[i]);
        if (rc < 0) {
            ditto_free(ents);
            return rc;
        }
        p += used;
    }
    qsort(ents, (size_t)cd.n, sizeof *ents, cmp_entry);
    for (uint64_t i = 1; i < cd.n; i++) {
        if (cmp_entry(&ents[i - 1], &ents[i]) == 0) {
            char nb[128];
            ditto_fail(log, DITTO_ERR_FORMAT, "%s: duplicate zip entry '%s'", file, ditto_zip_printable(nb, sizeof nb, ents[i].name, ents[i].name_len));
            ditto_free(ents);
            return DITTO_ERR_FORMAT;
        }
    }
    z->data = data;
    z->size = size;
    z->entries = ents;
    z->n = (size_t)cd.n;
    return 0;
}

void ditto_zip_close(DittoZip *z)
{
    if (!z)
        return;
    ditto_free(z->entries);
    memset(z, 0, sizeof *z);
}

const DittoZipEntry *ditto_zip_find(const DittoZip *z, const char *name, size_t len)
{
    DittoZipEntry key = { .name = name, .name_len = len };
    return z->n ? bsearch(&key, z->entries, z->n, sizeof *z->entries, cmp_entry) : NULL;
}
