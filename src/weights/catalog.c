/* Catalog: entries over a mapping, lookup by name, conversion to float32. */
#include "weights/catalog.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/log.h"
#include "core/mem.h"

typedef struct CatalogImpl {
    DittoCatalog pub;                  /* first: DittoCatalog * and CatalogImpl * convert */
    bool owns_map;
    void *heap;                        /* in-memory catalogs: data block freed at close */
    size_t cap;
    const DittoCatalogEntry **index;   /* sorted by name (after finish), NULL: search linearly */
    void **blocks;                     /* extra heap blocks (decoded tensors), freed at close */
    size_t n_blocks;
    DittoMap *maps;                    /* extra mappings (external data files), unmapped at close */
    size_t n_maps;
} CatalogImpl;

static CatalogImpl *impl(const DittoCatalog *c)
{
    return (CatalogImpl *)c;
}

int ditto_catalog_create(DittoCatalog **out, const char *path, const DittoMap *map, bool owns_map, const DittoLogger *log)
{
    DITTO_ASSERT(out && path && map);
    *out = NULL;
    CatalogImpl *ci = ditto_calloc(1, sizeof *ci);
    char *p = ditto_strdup(path);
    if (!ci || !p) {
        ditto_free(ci);
        ditto_free(p);
        if (owns_map) {
            DittoMap m = *map;
            ditto_map_close(&m);
        }
        return ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory", path);
    }
    ci->pub.path = p;
    ci->pub.map = *map;
    if (log)
        ci->pub.log = *log;
    ci->owns_map = owns_map;
    *out = &ci->pub;
    return 0;
}

int ditto_catalog_create_heap(DittoCatalog **out, const char *path, void *block, size_t size, const DittoLogger *log)
{
    DittoMap map = { block, size };
    int rc = ditto_catalog_create(out, path, &map, false, log);
    if (rc < 0) {
        ditto_free_aligned(block);
        return rc;
    }
    impl(*out)->heap = block;
    return 0;
}

int ditto_catalog_add(DittoCatalog *c, const DittoCatalogEntry *e)
{
    CatalogImpl *ci = impl(c);
    ditto_free(ci->index);   /* entries may move */
    ci->index = NULL;
    if (c->n == ci->cap) {
        size_t cap = ci->cap ? 2 * ci->cap : 64;
        DittoCatalogEntry *q = ditto_realloc(c->entries, cap * sizeof *q);
        if (!q)
            return ditto_fail(&c->log, DITTO_ERR_NOMEM, "%s: out of memory for %zu tensors", c->path, cap);
        c->entries = q;
        ci->cap = cap;
    }
    char *name = ditto_strdup(e->name);
    if (!name)
        return ditto_fail(&c->log, DITTO_ERR_NOMEM, "%s: out of memory", c->path);
    c->entries[c->n] = *e;
    c->entries[c->n].name = name;
    c->n++;
    return 0;
}

int ditto_catalog_adopt_block(DittoCatalog *c, void *block)
{
    CatalogImpl *ci = impl(c);
    void **q = ditto_realloc(ci->blocks, (ci->n_blocks + 1) * sizeof *q);
    if (!q) {
        ditto_free_aligned(block);
        return ditto_fail(&c->log, DITTO_ERR_NOMEM, "%s: out of memory", c->path);
    }
    ci->blocks = q;
    ci->blocks[ci->n_blocks++] = block;
    return 0;
}

int ditto_catalog_adopt_map(DittoCatalog *c, const DittoMap *m)
{
    CatalogImpl *ci = impl(c);
    DittoMap *q = ditto_realloc(ci->maps, (ci->n_maps + 1) * sizeof *q);
    if (!q) {
        DittoMap tmp = *m;
        ditto_map_close(&tmp);
        return ditto_fail(&c->log, DITTO_ERR_NOMEM, "%s: out of memory", c->path);
    }
    ci->maps = q;
    ci->maps[ci->n_maps++] = *m;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    const DittoCatalogEntry *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

int ditto_catalog_finish(DittoCatalog *c)
{
    CatalogImpl *ci = impl(c);
    ditto_free(ci->index);
    ci->index = ditto_malloc((c->n ? c->n : 1) * sizeof *ci->index);
    if (!ci->index)
        return ditto_fail(&c->log, DITTO_ERR_NOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < c->n; i++)
        ci->index[i] = &c->entries[i];
    qsort(ci->index, c->n, sizeof *ci->index, cmp_name);
    for (size_t i = 1; i < c->n; i++)
        if (!strcmp(ci->index[i - 1]->name, ci->index[i]->name))
            return ditto_fail(&c->log, DITTO_ERR_FORMAT, "%s: duplicate key '%s'", c->path, ci->index[i]->name);
    return 0;
}

void ditto_catalog_close(DittoCatalog **cp)
{
    if (!cp || !*cp)
        return;
    CatalogImpl *ci = impl(*cp);
    DittoCatalog *c = &ci->pub;
    for (size_t i = 0; i < c->n; i++)
        ditto_free(c->entries[i].name);
    ditto_free(c->entries);
    ditto_free(ci->index);
    if (ci->owns_map)
        ditto_map_close(&c->map);
    ditto_free_aligned(ci->heap);
    for (size_t i = 0; i < ci->n_blocks; i++)
        ditto_free_aligned(ci->blocks[i]);
    ditto_free(ci->blocks);
    for (size_t i = 0; i < ci->n_maps; i++)
        ditto_map_close(&ci->maps[i]);
    ditto_free(ci->maps);
    ditto_free(c->path);
    ditto_free(ci);
    *cp = NULL;
}

DittoCatalogEntry *ditto_catalog_get(DittoCatalog *c, const char *name)
{
    if (!c || !name)
        return NULL;
    const CatalogImpl *ci = impl(c);
    if (!ci->index) {
        for (size_t i = 0; i < c->n; i++)
            if (!strcmp(c->entries[i].name, name))
                return &c->entries[i];
        return NULL;
    }
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(name, ci->index[mid]->name);
        if (!r)
            return &c->entries[ci->index[mid] - c->entries];
        if (r < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const DittoCatalogEntry *ditto_catalog_find(const DittoCatalog *c, const char *name)
{
    return ditto_catalog_get((DittoCatalog *)c, name);
}

int64_t ditto_catalog_entry_numel(const DittoCatalogEntry *e)
{
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++)
        n *= e->shape[i];   /* readers check that this does not overflow */
    return n;
}

uint64_t ditto_catalog_entry_nbytes(const DittoCatalogEntry *e)
{
    return (uint64_t)ditto_catalog_entry_numel(e) * ditto_dtype_size(e->dtype);
}

int ditto_catalog_read_f32(const DittoCatalog *c, const DittoCatalogEntry *e, float *dst)
{
    if (!c || !e || !dst)
        return DITTO_ERR_INVAL;
    size_t es = ditto_dtype_size(e->dtype);
    int nd = e->ndim;
    if (!es || nd < 0 || nd > DITTO_MAX_DIMS)
        return ditto_fail(&c->log, DITTO_ERR_INVAL, "%s: tensor '%s': bad dtype or rank", c->path, e->name);
    if (ditto_catalog_entry_numel(e) == 0)
        return 0;
    /* Rows along the last axis are gathered into an aligned buffer (file data need not be
     * aligned, strides may be anything), then converted in one call. */
    uint64_t tmp[256];
    const size_t chunk = sizeof tmp / es;
    const uint8_t *base = e->data;
    int64_t inner = nd ? e->shape[nd - 1] : 1, istride = nd ? e->stride[nd - 1] : 1;
    int64_t idx[DITTO_MAX_DIMS] = { 0 };
    size_t out = 0;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * e->stride[d];
        const uint8_t *row = base + (size_t)off * es;
        for (int64_t j = 0; j < inner;) {
            size_t k = (size_t)(inner - j) < chunk ? (size_t)(inner - j) : chunk;
            if (istride == 1) {
                memcpy(tmp, row + (size_t)j * es, k * es);
            } else {
                for (size_t q = 0; q < k; q++)
                    memcpy((uint8_t *)tmp + q * es, row + (size_t)((j + (int64_t)q) * istride) * es, es);
            }
            ditto_convert(dst + out, DITTO_F32, tmp, e->dtype, k);
            out += k;
            j += (int64_t)k;
        }
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == e->shape[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return 0;
}
