#include "backend/backend.h"

#include <string.h>

#include "backend/profile.h"
#include "core/log.h"

void ditto_backend_params_default(DittoBackendParams *p)
{
    memset(p, 0, sizeof *p);
    p->log.level = DITTO_LOG_WARN;
}

int ditto_backend_open(DittoBackend **out, const char *name, const DittoBackendParams *p)
{
    *out = NULL;
    if (!strcmp(name, "cpu"))
        return ditto_backend_cpu_open(out, p);
    if (!strcmp(name, "cuda")) {
#ifdef DITTO_HAVE_CUDA
        return ditto_backend_cuda_open(out, p);
#else
        return ditto_fail(&p->log, DITTO_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA support (configure with -DDITTO_CUDA=ON)");
#endif
    }
    return ditto_fail(&p->log, DITTO_ERR_INVAL, "unknown backend '%s' (expected cpu or cuda)", name);
}

void ditto_backend_close(DittoBackend **be)
{
    if (be && *be) {
        ditto_profile_free(*be);
        (*be)->destroy(*be);
        *be = NULL;
    }
}
