/*
 * ZIP central-directory reader over bytes in memory (a mapping), for the
 * PyTorch checkpoint container: no decompression, no copies. Every offset and
 * size is bounds-checked at open, so an entry's bytes can be used directly.
 */
#ifndef DITTO_WEIGHTS_ZIP_H
#define DITTO_WEIGHTS_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "ditto/ditto_types.h"

typedef struct DittoZipEntry {
    const char *name;      /* into the central directory; not NUL-terminated */
    size_t name_len;
    uint16_t method;       /* 0 = stored; anything else cannot be used in place */
    uint64_t size;         /* uncompressed bytes */
    uint64_t csize;        /* bytes in the file */
    uint64_t data_offset;  /* file offset of the entry's bytes (after its local header) */
} DittoZipEntry;

typedef struct DittoZip {
    const uint8_t *data;
    size_t size;
    DittoZipEntry *entries;   /* sorted by name */
    size_t n;
} DittoZip;

/*
 * Parse the central directory (ZIP64 included) and every local header.
 * Errors (DITTO_ERR_FORMAT, DITTO_ERR_UNSUPPORTED, DITTO_ERR_NOMEM) are logged
 * as one line starting with `file`. On error *z holds nothing to free.
 */
int ditto_zip_open(DittoZip *z, const uint8_t *data, size_t size, const char *file, const DittoLogger *log);
void ditto_zip_close(DittoZip *z);

/* An entry name (from the file) made safe for a one-line message: '?' for control bytes, "..." when cut to n. */
const char *ditto_zip_printable(char *buf, size_t n, const char *s, size_t len);

/* Entry with exactly this name, or NULL. */
const DittoZipEntry *ditto_zip_find(const DittoZip *z, const char *name, size_t len);

#endif
