#include "core/mem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_countdown = -1;

void ditto_mem_fail_after(long n)
{
    atomic_store(&fail_countdown, n);
}

static int should_fail(void)
{
    long c = atomic_load(&fail_countdown);
    while (c >= 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1))
            return c == 0;
    }
    return 0;
}

void *ditto_malloc(size_t n)
{
    return should_fail() ? NULL : malloc(n ? n : 1);
}

void *ditto_calloc(size_t n, size_t size)
{
    return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *ditto_realloc(void *p, size_t n)
{
    return should_fail() ? NULL : realloc(p, n ? n : 1);
}

void *ditto_grow(void *p, int n, int *cap, int first, size_t size)
{
    if (n < *cap)
        return p;
    int c = *cap ? *cap * 2 : first;
    void *q = ditto_realloc(p, (size_t)c * size);
    if (q)
        *cap = c;
    return q;
}

void *ditto_malloc_aligned(size_t n)
{
    if (should_fail())
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 256, n ? (n + 255) & ~(size_t)255 : 256))
        return NULL;
    return p;
}

void ditto_free(void *p)
{
    free(p);
}

void ditto_free_aligned(void *p)
{
    free(p);
}

char *ditto_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ditto_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
