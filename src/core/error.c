#include <string.h>

#include "ditto/ditto.h"

const char *ditto_version(void)
{
    return "0.1.0";
}

const char *ditto_strerror(int err)
{
    switch (err) {
    case DITTO_OK:              return "success";
    case DITTO_ERR_NOMEM:       return "out of memory";
    case DITTO_ERR_INVAL:       return "invalid argument";
    case DITTO_ERR_IO:          return "input/output error";
    case DITTO_ERR_NOENT:       return "no such file or entry";
    case DITTO_ERR_AGAIN:       return "try again";
    case DITTO_ERR_RANGE:       return "value out of range";
    case DITTO_ERR_NOSPC:       return "no space left on device";
    case DITTO_ERR_FORMAT:      return "malformed or truncated file";
    case DITTO_ERR_UNSUPPORTED: return "not supported";
    case DITTO_ERR_SHAPE:       return "tensor shape mismatch";
    case DITTO_ERR_KEY:         return "checkpoint key missing, unknown or mis-shaped";
    case DITTO_ERR_BACKEND:     return "device failure";
    case DITTO_ERR_BADSTATE:    return "unusable after an earlier fatal error";
    case DITTO_ERR_NOFACE:      return "no face found";
    case DITTO_ERR_MISMATCH:    return "result outside tolerance";
    default:
        if (err < 0 && err > -1000)
            return strerror(-err);
        return "unknown error";
    }
}
