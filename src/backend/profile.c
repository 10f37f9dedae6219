#include "backend/profile.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"

#define PROF_MAX_DIM 6

typedef struct ProfShape {
    int8_t nd;
    int64_t s[PROF_MAX_DIM];
} ProfShape;

typedef struct ProfRec {
    int op;
    int dtype;
    ProfShape x, w, y;
    void *m0, *m1;          /* backend marks, owned by the pool below */
} ProfRec;

struct DittoProfile {
    ProfRec *recs;
    size_t n, cap;
    void **marks;           /* every mark ever made: 2 per record slot, reused across restarts */
    size_t nmarks;
    bool on;
    int open;               /* index of the record whose end mark is pending, -1 none */
};

typedef struct ProfGroup {
    ProfRec key;
    size_t calls;
    double ms;
} ProfGroup;

static void shape_of(ProfShape *s, const DittoTensor *t)
{
    memset(s, 0, sizeof *s);
    if (!t)
        return;
    s->nd = (int8_t)(t->ndim < PROF_MAX_DIM ? t->ndim : PROF_MAX_DIM);
    for (int i = 0; i < s->nd; i++)
        s->s[i] = t->shape[i];
}

int ditto_profile_start(DittoBackend *be)
{
    if (!be->mark_new)
        return ditto_fail(&be->log, DITTO_ERR_UNSUPPORTED, "profile: the %s backend has no timing marks", be->name);
    if (!be->prof) {
        be->prof = ditto_calloc(1, sizeof *be->prof);
        if (!be->prof)
            return DITTO_ERR_NOMEM;
    }
    be->prof->n = 0;
    be->prof->open = -1;
    be->prof->on = true;
    return 0;
}

void ditto_profile_op(DittoBackend *be, int op, const DittoTensor *x, const DittoTensor *w, const DittoTensor *y, bool end)
{
    DittoProfile *p = be->prof;
    if (!p || !p->on)
        return;
    if (!end) {
        if (p->n == p->cap) {
            size_t cap = p->cap ? 2 * p->cap : 1024;
            ProfRec *r = ditto_realloc(p->recs, cap * sizeof *r);
            void **m = ditto_realloc(p->marks, 2 * cap * sizeof *m);
            if (m)
                p->marks = m;
            if (!r || !m) {
                if (r)
                    p->recs = r;
                p->on = false;     /* out of memory: stop recording, the report says so */
                ditto_log(&be->log, DITTO_LOG_WARN, "profile: out of memory, recording stopped after %zu ops", p->n);
                return;
            }
            p->recs = r;
            p->cap = cap;
        }
        while (p->nmarks < 2 * (p->n + 1)) {
            if (be->mark_new(be, &p->marks[p->nmarks]) < 0) {
                p->on = false;
                return;
            }
            p->nmarks++;
        }
        ProfRec *r = &p->recs[p->n];
        memset(r, 0, sizeof *r);
        r->op = op;
        r->dtype = y ? (int)y->dtype : x ? (int)x->dtype : 0;
        shape_of(&r->x, x);
        shape_of(&r->w, w);
        shape_of(&r->y, y);
        r->m0 = p->marks[2 * p->n];
        r->m1 = p->marks[2 * p->n + 1];
        be->mark_record(be, r->m0);
        p->open = (int)p->n;
    } else if (p->open >= 0) {
        be->mark_record(be, p->recs[p->open].m1);
        p->n++;
        p->open = -1;
    }
}

static bool same_key(const ProfRec *a, const ProfRec *b)
{
    return a->op == b->op && a->dtype == b->dtype && !memcmp(&a->x, &b->x, sizeof a->x) && !memcmp(&a->w, &b->w, sizeof a->w) &&
           !memcmp(&a->y, &b->y, sizeof a->y);
}

static int by_ms(const void *a, const void *b)
{
    double d = ((const ProfGroup *)b)->ms - ((const ProfGroup *)a)->ms;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static void print_shape(FILE *f, const ProfShape *s)
{
    if (!s->nd) {
        fputs("-", f);
        return;
    }
    fputc('(', f);
    for (int i = 0; i < s->nd; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)s->s[i]);
    fputc(')', f);
}

int ditto_profile_report(DittoBackend *be, FILE *f, int top, double *ms_total)
{
    DittoProfile *p = be->prof;
    if (ms_total)
        *ms_total = 0;
    if (!p)
        return 0;
    p->on = false;
    DITTO_TRY(be->sync(be));
    ProfGroup *g = ditto_calloc(p->n ? p->n : 1, sizeof *g);
    double per_op[DITTO_OP_COUNT] = { 0 };
    size_t calls_op[DITTO_OP_COUNT] = { 0 };
    if (!g)
        return DITTO_ERR_NOMEM;
    size_t ng = 0;
    double total = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ProfRec *r = &p->recs[i];
        double ms = be->mark_elapsed(be, r->m0, r->m1);
        total += ms;
        if (r->op >= 0 && r->op < DITTO_OP_COUNT) {
            per_op[r->op] += ms;
            calls_op[r->op]++;
        }
        size_t j = 0;
        while (j < ng && !same_key(&g[j].key, r))
            j++;
        if (j == ng)
            g[ng++].key = *r;
        g[j].calls++;
        g[j].ms += ms;
    }
    qsort(g, ng, sizeof *g, by_ms);
    fprintf(f, "profile: %zu op calls, %.3f ms in ops (%zu distinct op/shape groups)\n", p->n, total, ng);
    fprintf(f, "%8s %6s %7s %8s  %-15s %-4s  x -> y [w]\n", "total ms", "%", "calls", "us/call", "op", "dt");
    for (size_t j = 0; j < ng && (top <= 0 || (int)j < top); j++) {
        fprintf(f, "%8.3f %6.2f %7zu %8.1f  %-15s %-4s  ", g[j].ms, total > 0 ? 100.0 * g[j].ms / total : 0.0, g[j].calls,
                1e3 * g[j].ms / (double)g[j].calls, ditto_op_name((DittoOp)g[j].key.op), ditto_dtype_name((DittoDType)g[j].key.dtype));
        print_shape(f, &g[j].key.x);
        fputs(" -> ", f);
        print_shape(f, &g[j].key.y);
        if (g[j].key.w.nd) {
            fputs(" w", f);
            print_shape(f, &g[j].key.w);
        }
        fputc('\n', f);
    }
    fprintf(f, "per op:\n");
    for (int o = 0; o < DITTO_OP_COUNT; o++)
        if (calls_op[o])
            fprintf(f, "  %-16s %9.3f ms %6.2f %% %7zu calls\n", ditto_op_name((DittoOp)o), per_op[o],
                    total > 0 ? 100.0 * per_op[o] / total : 0.0, calls_op[o]);
    ditto_free(g);
    if (ms_total)
        *ms_total = total;
    return 0;
}

void ditto_profile_free(DittoBackend *be)
{
    DittoProfile *p = be->prof;
    if (!p)
        return;
    for (size_t i = 0; i < p->nmarks; i++)
        be->mark_free(be, p->marks[i]);
    ditto_free(p->marks);
    ditto_free(p->recs);
    ditto_free(p);
    be->prof = NULL;
}
