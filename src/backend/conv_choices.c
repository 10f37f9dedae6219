/*
 * The file of tuned convolution choices (conv_choices.h).
 */
#include "backend/conv_choices.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mem.h"
#include "ditto/ditto_error.h"

int ditto_conv_choices_path(char *dir, size_t ndir, char *path, size_t npath)
{
    const char *d = getenv("DITTO_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int k;
    if (d && *d)
        k = snprintf(dir, ndir, "%s", d);
    else if (x && *x)
        k = snprintf(dir, ndir, "%s/ditto", x);
    else if (h && *h)
        k = snprintf(dir, ndir, "%s/.cache/ditto", h);
    else
        return -1;
    if (k <= 0 || (size_t)k >= ndir)
        return -1;
    k = snprintf(path, npath, "%s/" DITTO_CONV_CHOICES_FILE, dir);
    return k > 0 && (size_t)k < npath ? 0 : -1;
}

void ditto_conv_choices_scope(const char *device, unsigned long version, char *scope, size_t n)
{
    char dev[256];
    size_t i = 0;
    for (; device && device[i] && i + 1 < sizeof dev; i++) {
        unsigned char ch = (unsigned char)device[i];
        dev[i] = ch == '|' || ch == ',' || ch == ':' || ch <= ' ' || ch >= 0x7f ? '_' : (char)ch;
    }
    dev[i] = 0;
    snprintf(scope, n, "%s|%lu", i ? dev : "unknown", version);
}

/* A decimal integer from *s up to one of the stop characters (or the end when stops has 0); *s moves past it. */
static bool parse_int(const char **s, const char *stops, int64_t *v)
{
    const char *p = *s;
    if (!((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')))
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || !strchr(stops, *end))   /* strchr finds the terminator too: "" stops only at the end */
        return false;
    *v = x;
    *s = end;
    return true;
}

bool ditto_conv_choice_parse(char *line, const char *scope, DittoConvChoice *c)
{
    const size_t ls = strlen(scope);
    const size_t lv = strlen(DITTO_CONV_CHOICES_VERSION);
    if (strncmp(line, DITTO_CONV_CHOICES_VERSION, lv) || line[lv] != '|' || strncmp(line + lv + 1, scope, ls) || line[lv + 1 + ls] != '|')
        return false;
    memset(c, 0, sizeof *c);
    const char *p = line + lv + 2 + ls;
    for (int i = 0; i < DITTO_CONV_KEY_LEN; i++) {
        if (!parse_int(&p, i + 1 < DITTO_CONV_KEY_LEN ? "," : "|", &c->key[i]) || !*p)
            return false;
        p++;
    }
    if (!strcmp(p, "legacy")) {
        c->legacy = true;
        return true;
    }
    if (!parse_int(&p, "|", &c->engine) || *p != '|' || c->engine < 0)
        return false;
    for (p++; *p;) {   /* "type:value,..." (none: an engine without knobs) */
        int64_t t, v;
        if (c->nknobs == DITTO_CONV_MAX_KNOBS || !parse_int(&p, ":", &t) || *p != ':' || t < 0)
            return false;
        p++;
        if (!parse_int(&p, ",", &v))
            return false;
        c->knob_type[c->nknobs] = t;
        c->knob_value[c->nknobs++] = v;
        if (*p == ',' && !*++p)
            return false;   /* a trailing comma */
    }
    return true;
}

/* printf at out + *k (n bytes in all), *k advanced; false when it does not fit. */
static bool put(char *out, size_t n, size_t *k, const char *fmt, ...)
{
    if (*k >= n)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + *k, n - *k, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *k)
        return false;
    *k += (size_t)w;
    return true;
}

int ditto_conv_choice_format(const DittoConvChoice *c, const char *scope, char *out, size_t n)
{
    if (!c->legacy && (c->engine < 0 || c->nknobs < 0 || c->nknobs > DITTO_CONV_MAX_KNOBS))
        return -1;
    for (int i = 0; !c->legacy && i < c->nknobs; i++)
        if (c->knob_type[i] < 0)
            return -1;
    size_t k = 0;
    bool ok = put(out, n, &k, "%s|%s|", DITTO_CONV_CHOICES_VERSION, scope);
    for (int i = 0; ok && i < DITTO_CONV_KEY_LEN; i++)
        ok = put(out, n, &k, "%s%lld", i ? "," : "", (long long)c->key[i]);
    if (c->legacy) {
        ok = ok && put(out, n, &k, "|legacy");
    } else {
        ok = ok && put(out, n, &k, "|%lld|", (long long)c->engine);
        for (int i = 0; ok && i < c->nknobs; i++)
            ok = put(out, n, &k, "%s%lld:%lld", i ? "," : "", (long long)c->knob_type[i], (long long)c->knob_value[i]);
    }
    ok = ok && put(out, n, &k, "\n");
    return ok && k <= (size_t)INT32_MAX ? (int)k : -1;
}

int ditto_conv_choices_read(const char *path, const char *scope, DittoConvChoice **out, int *n)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? 0 : DITTO_ERR_IO;
    char *buf = ditto_malloc(DITTO_CONV_CHOICES_MAX + 1);
    if (!buf) {
        fclose(f);
        return DITTO_ERR_NOMEM;
    }
    size_t len = fread(buf, 1, DITTO_CONV_CHOICES_MAX, f);
    int rc = ferror(f) ? DITTO_ERR_IO : 0;
    fclose(f);
    buf[len] = 0;
    int cap = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line && !rc; line = strtok_r(NULL, "\n", &save)) {
        DittoConvChoice c;
        if (!ditto_conv_choice_parse(line, scope, &c))
            continue;
        if (*n == cap) {
            int nc = cap ? 2 * cap : 64;
            DittoConvChoice *p = ditto_realloc(*out, sizeof **out * (size_t)nc);
            if (!p) {
                rc = DITTO_ERR_NOMEM;
                break;
            }
            *out = p;
            cap = nc;
        }
        (*out)[(*n)++] = c;
    }
    ditto_free(buf);
    if (rc < 0) {
        ditto_free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int ditto_conv_choices_append(const char *dir, const char *path, const char *scope, const DittoConvChoice *c)
{
    char line[2048];
    int k = ditto_conv_choice_format(c, scope, line, sizeof line);
    if (k < 0)
        return DITTO_ERR_INVAL;
    char parent[4096];
    if (snprintf(parent, sizeof parent, "%s", dir) < (int)sizeof parent) {
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = 0;
            mkdir(parent, 0755);   /* e.g. ~/.cache; an existing one is fine */
        }
    }
    mkdir(dir, 0755);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return DITTO_ERR_IO;
    ssize_t w = write(fd, line, (size_t)k);
    int rc = close(fd);
    return w == k && rc == 0 ? 0 : DITTO_ERR_IO;
}
