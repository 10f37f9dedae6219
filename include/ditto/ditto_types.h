/* ditto.c — types shared by the public API: log levels and callbacks. */
#ifndef DITTO_TYPES_H
#define DITTO_TYPES_H

#include <stdarg.h>

#include "ditto/ditto_version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum DittoLogLevel {
    DITTO_LOG_ERROR = 0,
    DITTO_LOG_WARN  = 1,
    DITTO_LOG_INFO  = 2,
    DITTO_LOG_DEBUG = 3,
} DittoLogLevel;

/**
 * Log callback. Called synchronously, possibly from worker threads of the
 * object that logs; must be thread-safe. msg is one line without a trailing
 * newline and is only valid during the call.
 */
typedef void (*DittoLogCallback)(void *cookie, DittoLogLevel level, const char *msg);

/** Per-instance logger: a callback plus the most verbose level passed on. */
typedef struct DittoLogger {
    DittoLogCallback cb;  /**< NULL: messages are dropped */
    void *cookie;         /**< passed to cb */
    DittoLogLevel level;  /**< messages above this level are dropped */
} DittoLogger;

#ifdef __cplusplus
}
#endif
#endif /* DITTO_TYPES_H */
