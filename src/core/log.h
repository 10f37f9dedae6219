/* Logging and error helpers for library code (no printf, no exit). */
#ifndef DITTO_CORE_LOG_H
#define DITTO_CORE_LOG_H

#include <assert.h>

#include "ditto/ditto_error.h"
#include "ditto/ditto_types.h"

#if defined(__GNUC__)
#define DITTO_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DITTO_PRINTF(a, b)
#endif

/* Send one formatted line to the logger (NULL logger: dropped). */
void ditto_log(const DittoLogger *lg, DittoLogLevel level, const char *fmt, ...) DITTO_PRINTF(3, 4);
void ditto_logv(const DittoLogger *lg, DittoLogLevel level, const char *fmt, va_list ap);

/* Log an error line and return the code, for `return ditto_fail(lg, DITTO_ERR_..., "...")`. */
int ditto_fail(const DittoLogger *lg, int err, const char *fmt, ...) DITTO_PRINTF(3, 4);

/* A logger that writes "ditto: level: msg" lines to stderr (for tools and tests). */
void ditto_log_stderr(void *cookie, DittoLogLevel level, const char *msg);
DittoLogger ditto_logger_stderr(DittoLogLevel level);

/* Internal invariant; never reachable from file bytes. */
#define DITTO_ASSERT(x) assert(x)

/* Propagate a negative return code. */
#define DITTO_TRY(expr) do { int ditto_try_rc_ = (expr); if (ditto_try_rc_ < 0) return ditto_try_rc_; } while (0)

#endif
