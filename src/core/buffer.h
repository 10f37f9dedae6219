/*
 * Buffers (owned device or host allocations) and the activation arena: a bump
 * allocator over one buffer, sized at session open and reset per step, so
 * nothing is allocated per frame.
 */
#ifndef DITTO_CORE_BUFFER_H
#define DITTO_CORE_BUFFER_H

#include <stddef.h>

#include "core/tensor.h"

/* Allocator of one device; backends provide one. */
typedef struct DittoAllocator {
    void *(*alloc)(void *ctx, size_t n);   /* NULL on failure */
    void (*free)(void *ctx, void *p);
    void *ctx;
    DittoDevice device;
} DittoAllocator;

typedef struct DittoBuffer {
    void *ptr;
    size_t size;
    const DittoAllocator *allocator;
} DittoBuffer;

int ditto_buffer_alloc(DittoBuffer *b, const DittoAllocator *a, size_t size);
void ditto_buffer_free(DittoBuffer *b);   /* accepts a zeroed buffer */

/* The host allocator (256-byte aligned malloc). */
extern const DittoAllocator ditto_host_allocator;

#define DITTO_ARENA_ALIGN 256
#define DITTO_ARENA_MAX_BLOCKS 32

/*
 * Activation arena. It grows by whole blocks while a first (warm-up) pass
 * runs; ditto_arena_reset() then folds the blocks into one block of the peak
 * size, so every later pass of the same shapes runs without allocating and
 * with stable addresses (CUDA graphs rely on that).
 */
typedef struct DittoArena {
    const DittoAllocator *alloc;
    DittoBuffer blocks[DITTO_ARENA_MAX_BLOCKS];
    int nblocks;
    int cur;           /* block being filled */
    size_t used;       /* fill level of blocks[cur] */
    size_t live;       /* bytes handed out since the last reset (all blocks) */
    size_t peak;       /* high-water mark of live since creation */
    int grows;         /* blocks added after creation (0 in steady state) */
} DittoArena;

/* capacity may be 0: the first pass sizes it. */
int ditto_arena_init(DittoArena *a, const DittoAllocator *alloc, size_t capacity);
void ditto_arena_free(DittoArena *a);
/* Carve a contiguous tensor (device tag from the allocator). */
int ditto_arena_tensor(DittoArena *a, DittoDType dtype, int ndim, const int64_t *shape, DittoTensor *out);
/* NULL when out of memory. */
void *ditto_arena_bytes(DittoArena *a, size_t n);
/* Stack discipline: remember the fill level, then return to it. */
typedef struct DittoArenaMark { int cur; size_t used, live; } DittoArenaMark;
DittoArenaMark ditto_arena_mark(const DittoArena *a);
void ditto_arena_release(DittoArena *a, DittoArenaMark m);
/* Empty the arena; folds grown blocks into one of the peak size. */
int ditto_arena_reset(DittoArena *a);
size_t ditto_arena_capacity(const DittoArena *a);

#endif
