/*
 * Asynchronous device -> host copies (backend.h: download_async, _notify,
 * _fence, _wait), as a session's render worker uses them: a copy starts
 * after the work queued before it (a fill that has not run yet when the
 * copy is queued), notifications run in order once their copies are done,
 * and a fence keeps later work from overwriting a copy's source first.
 * Exact: the bytes must be those of the device buffer at the copy's turn.
 * And upload_async: the bytes staged at the call, whatever the host buffer
 * holds later, in stream order with the ops around it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "ops/ops.h"
#include "test_ops.h"

#define XFER_N ((int64_t)1 << 20)   /* floats: a 4 MB copy, about a frame's planes */

typedef struct Seen {
    pthread_mutex_t mu;
    int order[2], n;
} Seen;

typedef struct Note {
    Seen *seen;
    int id;
} Note;

static void noted(void *arg)
{
    Note *nt = arg;
    pthread_mutex_lock(&nt->seen->mu);
    if (nt->seen->n < 2)
        nt->seen->order[nt->seen->n] = nt->id;
    nt->seen->n++;
    pthread_mutex_unlock(&nt->seen->mu);
}

/* Elements of h (n floats) that are not v. */
static int64_t count_not(const float *h, int64_t n, float v)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += h[i] != v;
    return bad;
}

#define UP_SLOTS 40   /* uploads of one host buffer: more than the CUDA staging ring has slots */
#define UP_N 256

static void case_upload_async(TestCtx *c)
{
    const char *name = "transfer upload_async";
    if (!test_selected(c, name))
        return;
    DittoBackend *be = c->be;
    const int64_t big = (int64_t)1 << 19;   /* 2 MB: past the staging limit, the plain upload */
    DittoBuffer dev = { 0 };
    float *src = malloc((size_t)(UP_N > big ? UP_N : big) * sizeof(float)), *out = malloc((size_t)(UP_SLOTS * UP_N + big) * sizeof(float));
    int rc = src && out ? ditto_buffer_alloc(&dev, &be->allocator, (size_t)(UP_SLOTS * UP_N + big) * sizeof(float)) : DITTO_ERR_NOMEM;
    const DittoUnaryParams twice = { DITTO_UNARY_AFFINE, 2.0f, 0.0f };
    for (int i = 0; i < UP_SLOTS && rc == 0; i++) {
        DittoTensor t = ditto_tensor((float *)dev.ptr + i * UP_N, DITTO_F32, 1, (const int64_t[]){ UP_N });
        t.device = be->device;
        for (int j = 0; j < UP_N; j++)
            src[j] = (float)(i * 1000 + j);
        rc = be->upload_async(be, t.data, src, UP_N * sizeof(float));
        for (int j = 0; j < UP_N; j++)   /* the host buffer changes at once: the staged bytes must not */
            src[j] = -1.0f;
        if (!rc && i % 2)   /* an op after the copy sees the copied values */
            rc = ditto_op_unary(be, &twice, &t, &t);
    }
    for (int64_t j = 0; j < big && rc == 0; j++)
        src[j] = (float)j;
    if (!rc) rc = be->upload_async(be, (float *)dev.ptr + UP_SLOTS * UP_N, src, (size_t)big * sizeof(float));
    if (!rc) rc = be->sync(be);
    if (!rc) rc = be->download(be, out, dev.ptr, (size_t)(UP_SLOTS * UP_N + big) * sizeof(float));
    int64_t bad = 0;
    for (int i = 0; i < UP_SLOTS && rc == 0; i++)
        for (int j = 0; j < UP_N; j++)
            bad += out[i * UP_N + j] != (float)(i * 1000 + j) * (i % 2 ? 2.0f : 1.0f);
    for (int64_t j = 0; j < big && rc == 0; j++)
        bad += out[UP_SLOTS * UP_N + j] != (float)j;
    test_report(c, name, rc == 0 && bad == 0, "rc %d: %lld wrong floats of %lld", rc, (long long)bad, (long long)(UP_SLOTS * UP_N + big));
    ditto_buffer_free(&dev);
    free(src);
    free(out);
}

void test_ops_transfer(TestCtx *c)
{
    case_upload_async(c);
    const char *name = "transfer download_async";
    if (!test_selected(c, name))
        return;
    DittoBackend *be = c->be;
    const size_t bytes = (size_t)XFER_N * sizeof(float);
    DittoBuffer dev = { 0 };
    float *h[2] = { NULL, NULL };
    bool pinned = be->host_alloc != NULL;
    Seen seen = { .n = 0 };
    pthread_mutex_init(&seen.mu, NULL);
    Note notes[2] = { { &seen, 1 }, { &seen, 2 } };
    int rc = ditto_buffer_alloc(&dev, &be->allocator, bytes);
    for (int i = 0; i < 2 && rc == 0; i++) {
        h[i] = pinned ? be->host_alloc(be, bytes) : malloc(bytes);
        if (!h[i])
            rc = DITTO_ERR_NOMEM;
        else
            memset(h[i], 0, bytes);
    }
    if (rc < 0) {
        test_report(c, name, false, "cannot allocate the buffers: %d", rc);
        goto done;
    }
    DittoTensor t = ditto_tensor(dev.ptr, DITTO_F32, 1, (const int64_t[]){ XFER_N });
    t.device = be->device;
    /* fill 3, copy (queued behind the fill, nothing waited for), then fence, fill 7 over the source, copy, wait */
    rc = ditto_op_fill(be, 3.0f, &t);
    if (!rc) rc = be->download_async(be, h[0], dev.ptr, bytes);
    if (!rc) rc = be->download_notify(be, noted, &notes[0]);
    if (!rc) rc = be->download_fence(be);
    if (!rc) rc = ditto_op_fill(be, 7.0f, &t);
    if (!rc) rc = be->download_async(be, h[1], dev.ptr, bytes);
    if (!rc) rc = be->download_notify(be, noted, &notes[1]);
    if (!rc) rc = be->download_wait(be);
    if (!rc) rc = be->sync(be);
    if (rc < 0) {
        test_report(c, name, false, "a call failed: %d", rc);
        goto done;
    }
    const int64_t bad0 = count_not(h[0], XFER_N, 3.0f), bad1 = count_not(h[1], XFER_N, 7.0f);
    pthread_mutex_lock(&seen.mu);
    const bool order = seen.n == 2 && seen.order[0] == 1 && seen.order[1] == 2;
    pthread_mutex_unlock(&seen.mu);
    test_report(c, name, bad0 == 0 && bad1 == 0 && order, "%lld and %lld wrong floats of %lld, notifications %d (%d, %d)",
                (long long)bad0, (long long)bad1, (long long)XFER_N, seen.n, seen.order[0], seen.order[1]);
done:
    for (int i = 0; i < 2; i++) {
        if (pinned)
            be->host_free(be, h[i]);
        else
            free(h[i]);
    }
    ditto_buffer_free(&dev);
    pthread_mutex_destroy(&seen.mu);
}
