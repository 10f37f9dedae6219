/* Read-only file mappings for checkpoints: weights are never copied at open. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "weights/catalog.h"

int ditto_map_open(DittoMap *m, const char *path, const DittoLogger *log)
{
    if (!m || !path)
        return DITTO_ERR_INVAL;
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return ditto_fail(log, e == ENOENT ? DITTO_ERR_NOENT : DITTO_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return ditto_fail(log, DITTO_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ditto_fail(log, DITTO_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: file too large to map (%lld bytes)", path, (long long)st.st_size);
    }
    if (st.st_size == 0) {   /* mmap rejects length 0; the readers report the empty file */
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);   /* the mapping keeps the file alive */
    if (p == MAP_FAILED)
        return ditto_fail(log, DITTO_ERR_IO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size, strerror(e));
    m->data = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void ditto_map_close(DittoMap *m)
{
    if (!m)
        return;
    if (m->data)
        munmap((void *)(uintptr_t)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
