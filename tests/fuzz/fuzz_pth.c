/*
 * Fuzz target for the .pth reader (ZIP + pickle + catalog).
 *
 * With -DDITTO_LIBFUZZER=ON (clang) libFuzzer drives LLVMFuzzerTestOneInput.
 * Otherwise main() replays files and folders given on the command line and,
 * for each file, deterministic mutations: truncations, bit flips and byte
 * overwrites biased towards the structure (local headers, the pickle at the
 * start, the central directory at the end). Any broken invariant aborts.
 *
 * Invariants: an error returns a negative code with exactly one error line
 * naming the file; a success yields entries whose bytes lie inside the input
 * (read back through ditto_catalog_read_f32, so ASan sees every access).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "weights/catalog.h"

#define NAME "fuzz.pth"

typedef struct LogCount {
    int errors, lines;
    char first[1024];
} LogCount;

static void count_cb(void *cookie, DittoLogLevel level, const char *msg)
{
    LogCount *lc = cookie;
    if (!lc->lines++)
        snprintf(lc->first, sizeof lc->first, "%s", msg);
    lc->errors += level == DITTO_LOG_ERROR;
}

static float scratch[1 << 16];
static int last_loaded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    LogCount lc = { 0 };
    DittoLogger lg = { count_cb, &lc, DITTO_LOG_DEBUG };
    DittoCatalog *c = NULL;
    int rc = ditto_catalog_open_pth_memory(&c, data, size, NAME, &lg);
    last_loaded = rc == 0;
    if (rc < 0) {
        if (c || lc.errors != 1 || lc.lines != 1 || strncmp(lc.first, NAME ": ", sizeof NAME + 1)) {
            fprintf(stderr, "fuzz_pth: rc %d with %d log line(s), first: '%s'\n", rc, lc.lines, lc.first);
            abort();
        }
        return 0;
    }
    for (size_t i = 0; i < c->n; i++) {
        const DittoCatalogEntry *e = &c->entries[i];
        const uint8_t *p = e->data;
        if (e->offset > size || e->span > size - e->offset || p != data + e->offset || ditto_catalog_find(c, e->name) != e) {
            fprintf(stderr, "fuzz_pth: entry '%s' outside the input (offset %llu span %llu, %zu bytes)\n", e->name,
                    (unsigned long long)e->offset, (unsigned long long)e->span, size);
            abort();
        }
        if (ditto_catalog_entry_numel(e) <= (int64_t)(sizeof scratch / sizeof *scratch) && ditto_catalog_read_f32(c, e, scratch) < 0)
            abort();
    }
    ditto_catalog_close(&c);
    return 0;
}

#ifndef DITTO_LIBFUZZER

#include "fuzz_driver.h"

static int one(const uint8_t *data, size_t size)
{
    LLVMFuzzerTestOneInput(data, size);
    return last_loaded;
}

/* bit flips and byte overwrites */
static void mutate(uint8_t *b, long k, uint64_t r)
{
    if (k % 4 == 3)
        *b = (uint8_t)((r & 1) ? 0xff : (r & 2) ? 0 : r >> 8);   /* overwrite: 0xff, 0 or random */
    else
        *b ^= (uint8_t)(1u << (r & 7));
}

int main(int argc, char **argv)
{
    static const FuzzTarget t = { "fuzz_pth", ".pth", 20261129, one, mutate };
    return fuzz_driver_main(argc, argv, &t);
}

#endif
