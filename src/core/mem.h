/* Host allocation with statistics and a failure-injection hook for OOM tests. */
#ifndef DITTO_CORE_MEM_H
#define DITTO_CORE_MEM_H

#include <stddef.h>

void *ditto_malloc(size_t n);
void *ditto_calloc(size_t n, size_t size);
void *ditto_realloc(void *p, size_t n);
/* 256-byte aligned (arena and SIMD friendly); free with ditto_free_aligned. */
void *ditto_malloc_aligned(size_t n);
void ditto_free(void *p);
void ditto_free_aligned(void *p);
char *ditto_strdup(const char *s);
/*
 * Room for item n of an array p of *cap items of `size` bytes: p itself while
 * n < *cap, else p reallocated to twice the capacity (`first` items when
 * empty) with *cap updated; NULL when out of memory (p is then unchanged).
 */
void *ditto_grow(void *p, int n, int *cap, int first, size_t size);

/* Make the n-th allocation from now fail (n >= 0), or never (n < 0). Tests only. */
void ditto_mem_fail_after(long n);

#endif
