#include "core/buffer.h"

#include <string.h>

#include "core/mem.h"
#include "ditto/ditto_error.h"

static void *host_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return ditto_malloc_aligned(n);
}

static void host_free(void *ctx, void *p)
{
    (void)ctx;
    ditto_free_aligned(p);
}

const DittoAllocator ditto_host_allocator = { host_alloc, host_free, NULL, DITTO_DEVICE_CPU };

int ditto_buffer_alloc(DittoBuffer *b, const DittoAllocator *a, size_t size)
{
    memset(b, 0, sizeof *b);
    b->ptr = a->alloc(a->ctx, size);
    if (!b->ptr)
        return DITTO_ERR_NOMEM;
    b->size = size;
    b->allocator = a;
    return 0;
}

void ditto_buffer_free(DittoBuffer *b)
{
    if (b->ptr && b->allocator)
        b->allocator->free(b->allocator->ctx, b->ptr);
    memset(b, 0, sizeof *b);
}

int ditto_arena_init(DittoArena *a, const DittoAllocator *alloc, size_t capacity)
{
    memset(a, 0, sizeof *a);
    a->alloc = alloc;
    if (capacity) {
        int rc = ditto_buffer_alloc(&a->blocks[0], alloc, capacity);
        if (rc < 0)
            return rc;
        a->nblocks = 1;
    }
    return 0;
}

void ditto_arena_free(DittoArena *a)
{
    for (int i = 0; i < a->nblocks; i++)
        ditto_buffer_free(&a->blocks[i]);
    const DittoAllocator *alloc = a->alloc;
    memset(a, 0, sizeof *a);
    a->alloc = alloc;
}

size_t ditto_arena_capacity(const DittoArena *a)
{
    size_t n = 0;
    for (int i = 0; i < a->nblocks; i++)
        n += a->blocks[i].size;
    return n;
}

static size_t align_up(size_t n)
{
    return (n + DITTO_ARENA_ALIGN - 1) & ~(size_t)(DITTO_ARENA_ALIGN - 1);
}

void *ditto_arena_bytes(DittoArena *a, size_t n)
{
    n = align_up(n ? n : 1);
    for (;;) {
        if (a->cur < a->nblocks) {
            DittoBuffer *b = &a->blocks[a->cur];
            if (b->size >= a->used && n <= b->size - a->used) {
                void *p = (char *)b->ptr + a->used;
                a->used += n;
                a->live += n;
                if (a->live > a->peak)
                    a->peak = a->live;
                return p;
            }
            if (a->cur + 1 < a->nblocks) {   /* next existing block */
                a->cur++;
                a->used = 0;
                continue;
            }
        }
        /* grow: a new block of at least n and at least the size so far */
        if (a->nblocks == DITTO_ARENA_MAX_BLOCKS)
            return NULL;
        size_t want = ditto_arena_capacity(a);
        if (want < n)
            want = n;
        if (want < ((size_t)1 << 20))
            want = (size_t)1 << 20;
        if (ditto_buffer_alloc(&a->blocks[a->nblocks], a->alloc, want) < 0)
            return NULL;
        a->cur = a->nblocks++;
        a->used = 0;
        a->grows++;
    }
}

int ditto_arena_tensor(DittoArena *a, DittoDType dtype, int ndim, const int64_t *shape, DittoTensor *out)
{
    DittoTensor t = ditto_tensor(NULL, dtype, ndim, shape);
    t.device = a->alloc ? a->alloc->device : DITTO_DEVICE_CPU;
    t.data = ditto_arena_bytes(a, ditto_tensor_nbytes(&t));
    if (!t.data)
        return DITTO_ERR_NOMEM;
    *out = t;
    return 0;
}

DittoArenaMark ditto_arena_mark(const DittoArena *a)
{
    DittoArenaMark m = { a->cur, a->used, a->live };
    return m;
}

void ditto_arena_release(DittoArena *a, DittoArenaMark m)
{
    a->cur = m.cur;
    a->used = m.used;
    a->live = m.live;
}

int ditto_arena_reset(DittoArena *a)
{
    a->cur = 0;
    a->used = 0;
    a->live = 0;
    if (a->nblocks <= 1)
        return 0;
    size_t peak = a->peak;
    for (int i = 0; i < a->nblocks; i++)
        ditto_buffer_free(&a->blocks[i]);
    a->nblocks = 0;
    int rc = ditto_buffer_alloc(&a->blocks[0], a->alloc, peak);
    if (rc < 0)
        return rc;
    a->nblocks = 1;
    return 0;
}
