#include "core/log.h"

#include <stdio.h>

static const char *level_name(DittoLogLevel l)
{
    switch (l) {
    case DITTO_LOG_ERROR: return "error";
    case DITTO_LOG_WARN:  return "warning";
    case DITTO_LOG_INFO:  return "info";
    default:              return "debug";
    }
}

void ditto_logv(const DittoLogger *lg, DittoLogLevel level, const char *fmt, va_list ap)
{
    if (!lg || !lg->cb || level > lg->level)
        return;
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    lg->cb(lg->cookie, level, buf);
}

void ditto_log(const DittoLogger *lg, DittoLogLevel level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ditto_logv(lg, level, fmt, ap);
    va_end(ap);
}

int ditto_fail(const DittoLogger *lg, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ditto_logv(lg, DITTO_LOG_ERROR, fmt, ap);
    va_end(ap);
    return err;
}

void ditto_log_stderr(void *cookie, DittoLogLevel level, const char *msg)
{
    (void)cookie;
    fprintf(stderr, "ditto: %s: %s\n", level_name(level), msg);
}

DittoLogger ditto_logger_stderr(DittoLogLevel level)
{
    DittoLogger lg = { ditto_log_stderr, NULL, level };
    return lg;
}
