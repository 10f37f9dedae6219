/*
 * Backends: a struct of function pointers (memory + the op table). The CPU
 * backend fills every op; the CUDA backend fills what it implements. Model
 * code talks to a backend only through this struct.
 */
#ifndef DITTO_BACKEND_BACKEND_H
#define DITTO_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "core/buffer.h"
#include "core/thread.h"
#include "ditto/ditto_types.h"
#include "ops/ops.h"

typedef struct DittoBackendParams {
    int nthreads;          /* CPU worker threads; <= 0: all cores */
    int device_index;      /* CUDA device */
    bool fp16;             /* activations and network weights in float16 storage (act_dtype F16); CUDA only */
    bool high_priority;    /* CUDA: the stream's kernels go first when backends share the device */
    DittoLogger log;
} DittoBackendParams;

void ditto_backend_params_default(DittoBackendParams *p);

/*
 * Device memory as a backend sees it. used / peak: bytes held through the
 * backend's allocator plus its scratch workspace, now and at the high-water
 * mark since open (what ditto itself allocates: weights, arenas, buffers).
 * device_used / device_total: the whole device at the time of the call
 * (cudaMemGetInfo: also the CUDA context, library handles and other processes).
 */
typedef struct DittoMemInfo {
    size_t used, peak;
    size_t device_used, device_total;
} DittoMemInfo;

typedef struct DittoProfile DittoProfile;

typedef struct DittoBackend {
    const char *name;      /* "cpu", "cuda" */
    DittoDevice device;
    /*
     * Storage dtype of network activations and conv/linear/norm-affine
     * weights: DITTO_F32 (default; the only choice on the CPU) or DITTO_F16
     * (CUDA with DittoBackendParams.fp16; fp32 math inside every op).
     * Coordinates, sampling grids, keypoints and norm statistics stay F32.
     */
    DittoDType act_dtype;
    DittoAllocator allocator;
    DittoOps ops;
    DittoLogger log;
    DittoThreadPool *pool; /* CPU work (also host-side work of other backends) */
    int bad_state;         /* sticky after a fatal device error */
    /* host <-> device transfers; on the CPU these are memcpy */
    int (*upload)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    int (*download)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    /*
     * upload without waiting for the device: the bytes are staged (CUDA: a
     * page-locked ring) and copied in stream order, so src may change as soon
     * as the call returns. For small per-batch inputs; not while capturing.
     */
    int (*upload_async)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    /*
     * Host memory the device copies to and from at full speed (CUDA: page-
     * locked), or NULL on backends without such memory: use malloc there.
     * host_alloc returns NULL when out of memory; host_free accepts NULL.
     */
    void *(*host_alloc)(struct DittoBackend *be, size_t n);
    void (*host_free)(struct DittoBackend *be, void *p);
    /*
     * Device -> host copies that overlap later work (CUDA: a copy stream;
     * the CPU copies at once). download_async queues a copy of n bytes that
     * starts after all work queued so far (dst: host_alloc memory where there
     * is such, not read until the copy is done). download_notify queues
     * fn(arg), run once every copy queued before it is done, on another
     * thread (CUDA's host-function thread; the CPU runs it in the caller):
     * it must not call the backend. download_fence makes the work queued
     * after it wait for the queued copies and notifications (their sources
     * may then be overwritten). download_wait blocks until they are done.
     */
    int (*download_async)(struct DittoBackend *be, void *dst, const void *src, size_t n);
    int (*download_notify)(struct DittoBackend *be, void (*fn)(void *arg), void *arg);
    int (*download_fence)(struct DittoBackend *be);
    int (*download_wait)(struct DittoBackend *be);
    int (*sync)(struct DittoBackend *be);
    /* Device memory (DittoMemInfo); NULL on backends that do not track it (the CPU: see peak RSS). */
    int (*mem_info)(struct DittoBackend *be, DittoMemInfo *info);
    void (*destroy)(struct DittoBackend *be);
    /*
     * Timing marks for the op profiler (backend/profile.h) and the renderer's
     * stage times: make a mark, record it in stream order, wait for it, read
     * the milliseconds between two recorded marks (after they are reached),
     * free it. NULL: no marks on this backend.
     */
    int (*mark_new)(struct DittoBackend *be, void **mark);
    void (*mark_record)(struct DittoBackend *be, void *mark);
    int (*mark_wait)(struct DittoBackend *be, void *mark);   /* until the work before the recorded mark is done */
    double (*mark_elapsed)(struct DittoBackend *be, void *a, void *b);
    void (*mark_free)(struct DittoBackend *be, void *mark);
    struct DittoProfile *prof;  /* the recorder while profiling (ditto_profile_start), else NULL */
    /*
     * Measurement only (ditto bench --skip-ops): ops matching this list are
     * not run, so what they would write keeps its old contents. NULL: all run.
     * "NAME[:TEXT];..." matches op NAME whose "NAME x -> y wW" shape text
     * contains TEXT, e.g. "conv:w(512,512,3,3);copy".
     */
    const char *skip_ops;
    /*
     * Graph capture (CUDA graphs; NULL on backends without it): ops issued
     * between capture_begin and capture_end are recorded instead of run, and
     * graph_launch replays them in stream order. Every buffer the recorded ops
     * touch (arena blocks, workspace) must stay allocated and in place while
     * the graph lives, and nothing recorded may sync or transfer to the host:
     * run the same work once before capturing so all sizes are settled.
     */
    int (*capture_begin)(struct DittoBackend *be);
    int (*capture_end)(struct DittoBackend *be, void **graph);
    int (*graph_launch)(struct DittoBackend *be, void *graph);
    void (*graph_free)(struct DittoBackend *be, void *graph);
    /*
     * Lanes (NULL on backends without them: everything runs in order): two
     * streams of work that may run concurrently, also inside one captured
     * graph. lane_select(be, i) sends the ops that follow to lane i (0: the
     * main one; each lane has its own scratch, so two lanes may run ops
     * at once); lane_wait(be, i, j) makes lane i's later work wait for
     * everything issued on lane j so far. sync waits for every lane; capture
     * begins and ends on lane 0, with every other lane joined back
     * (lane_wait(be, 0, j)) before capture_end.
     */
    int (*lane_select)(struct DittoBackend *be, int lane);
    int (*lane_wait)(struct DittoBackend *be, int lane, int on);
    void *priv;
} DittoBackend;

/*
 * fn over the items [0, n) of a batch in two halves: items [0, h) on lane 0
 * with arena ws[0], [h, n) on lane 1 with ws[1], h = (n + 1) / 2; lane 1
 * starts after lane 0's work issued so far, and lane 0's later work waits
 * for both. Without lanes (or with n < 2) the halves run one after the
 * other on the backend's one stream. The batch's ops are per item, so the
 * results are those of one call over [0, n).
 */
typedef int (*DittoHalfFn)(void *ctx, int64_t first, int64_t count, DittoArena *ws);
/* Lanes a render batch uses by default: DITTO_LANES=1|2, else 2 where the backend has lanes, else 1. */
int ditto_backend_lanes(const DittoBackend *be);
int ditto_backend_halves(DittoBackend *be, int64_t n, DittoArena *const ws[2], DittoHalfFn fn, void *ctx);

/*
 * Stage times of a batch queued on be: boundary i recorded as a mark in
 * stream order (ditto_marks_record), read once the last one is reached
 * (ditto_marks_wait, then ditto_marks_seconds). On a backend without marks
 * each boundary waits for the device and reads the host clock.
 */
#define DITTO_MARKS_MAX 8
typedef struct DittoMarks {
    void *m[DITTO_MARKS_MAX];   /* NULL without marks */
    double host[DITTO_MARKS_MAX];
    int n;
} DittoMarks;
int ditto_marks_init(DittoBackend *be, DittoMarks *k, int n);
void ditto_marks_free(DittoBackend *be, DittoMarks *k);
int ditto_marks_record(DittoBackend *be, DittoMarks *k, int i);
int ditto_marks_wait(DittoBackend *be, const DittoMarks *k, int i);
double ditto_marks_seconds(DittoBackend *be, const DittoMarks *k, int a, int b);

/* name: "cpu" or "cuda". DITTO_ERR_UNSUPPORTED when not built in. */
int ditto_backend_open(DittoBackend **out, const char *name, const DittoBackendParams *p);
void ditto_backend_close(DittoBackend **be);

int ditto_backend_cpu_open(DittoBackend **out, const DittoBackendParams *p);
#ifdef DITTO_HAVE_CUDA
int ditto_backend_cuda_open(DittoBackend **out, const DittoBackendParams *p);
#endif

#endif
