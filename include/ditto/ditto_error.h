/*
 * ditto.c — error codes.
 *
 * Every library function that can fail returns 0 on success or a negative
 * code. Codes are negated POSIX errno values where one fits (DITTO_ERR(e)),
 * and project-specific values below -1000 otherwise. A human-readable message
 * naming the file and the problem goes to the log callback of the object
 * that failed; ditto_strerror() gives the generic text of the code.
 */
#ifndef DITTO_ERROR_H
#define DITTO_ERROR_H

#include <errno.h>

#include "ditto/ditto_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Turn a positive errno value into a ditto error code. */
#define DITTO_ERR(e) (-(e))

enum {
    DITTO_OK = 0,
    DITTO_ERR_NOMEM       = DITTO_ERR(ENOMEM),  /**< allocation failed */
    DITTO_ERR_INVAL       = DITTO_ERR(EINVAL),  /**< invalid argument or shape */
    DITTO_ERR_IO          = DITTO_ERR(EIO),     /**< read/write failure */
    DITTO_ERR_NOENT       = DITTO_ERR(ENOENT),  /**< file or key not found */
    DITTO_ERR_AGAIN       = DITTO_ERR(EAGAIN),  /**< call the other function first */
    DITTO_ERR_RANGE       = DITTO_ERR(ERANGE),  /**< value out of range / overflow */
    DITTO_ERR_NOSPC       = DITTO_ERR(ENOSPC),  /**< disk full */
    DITTO_ERR_FORMAT      = -1001, /**< malformed or truncated file */
    DITTO_ERR_UNSUPPORTED = -1002, /**< op, dtype or feature not supported */
    DITTO_ERR_SHAPE       = -1003, /**< tensor shape mismatch */
    DITTO_ERR_KEY         = -1004, /**< checkpoint key missing, unknown or mis-shaped */
    DITTO_ERR_BACKEND     = -1005, /**< device/driver failure */
    DITTO_ERR_BADSTATE    = -1006, /**< object unusable after an earlier fatal error */
    DITTO_ERR_NOFACE      = -1007, /**< no face found in an avatar frame */
    DITTO_ERR_MISMATCH    = -1008, /**< result outside tolerance */
};

/**
 * Generic description of an error code.
 * @return a static string; never NULL ("unknown error" for unknown codes).
 */
DITTO_API const char *ditto_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* DITTO_ERROR_H */
