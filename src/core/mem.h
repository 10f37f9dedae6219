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

/* Make the n-th allocation from now fail (n >= 0), or never (n < 0). Tests only. */
void ditto_mem_fail_after(long n);

#endif
