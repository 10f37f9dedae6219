/*
 * Backend lanes (backend.h: lane_select, lane_wait, ditto_backend_halves),
 * as the renderer runs a batch in two halves: lane 1 sees the work queued
 * on lane 0 before the split, lane 0's work after the split sees both
 * halves, each half uses its own arena, and under graph capture the two
 * lanes join into one graph that replays the same. Exact: the halves must
 * give the bytes of one pass over the whole batch. Backends without lanes
 * run the halves in turn (the same contract).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "test_ops.h"

#define LANE_ITEMS 5
#define LANE_ITEM ((int64_t)1 << 20)   /* floats an item: long enough that an unordered lane would read stale data */

typedef struct LaneJob {
    DittoBackend *be;
    DittoTensor x, y;   /* (LANE_ITEMS, LANE_ITEM) */
} LaneJob;

/* y[a..a+n) = (2 x + 1) * x + x, through a scratch tensor from ws. */
static int lane_half(void *ctx, int64_t a, int64_t n, DittoArena *ws)
{
    LaneJob *j = ctx;
    DittoTensor x, y, t;
    int rc = ditto_tensor_slice(&j->x, 0, a, a + n, 1, &x);
    if (!rc) rc = ditto_tensor_slice(&j->y, 0, a, a + n, 1, &y);
    if (!rc) rc = ditto_arena_tensor(ws, DITTO_F32, 2, (const int64_t[]){ n, LANE_ITEM }, &t);
    const DittoUnaryParams aff = { DITTO_UNARY_AFFINE, 2.0f, 1.0f };
    if (!rc) rc = ditto_op_unary(j->be, &aff, &x, &t);
    if (!rc) rc = ditto_op_binary(j->be, DITTO_BINARY_MUL, &t, &x, &t);
    if (!rc) rc = ditto_op_binary(j->be, DITTO_BINARY_ADD, &t, &x, &y);
    return rc;
}

static int lane_fill(DittoBackend *be, DittoTensor *x, uint64_t seed)
{
    const size_t n = (size_t)ditto_tensor_numel(x);
    float *h = malloc(n * sizeof *h);
    if (!h)
        return DITTO_ERR_NOMEM;
    ditto_rng_fill_uniform(seed, 0, 0, h, n);
    int rc = be->upload(be, x->data, h, n * sizeof *h);
    free(h);
    return rc;
}

/*
 * x = x / 2 + 1/4 on lane 0, then the halves into y (lane 1 must wait for
 * that update), then one serial pass into ref; y's bytes against ref's.
 */
static int lane_check(DittoBackend *be, LaneJob *j, DittoArena *const ws[2], void *graph, const DittoTensor *ref, float *hy, float *hr,
                      bool *same)
{
    LaneJob serial = *j;
    serial.y = *ref;
    const size_t bytes = (size_t)ditto_tensor_nbytes(ref);
    const DittoUnaryParams upd = { DITTO_UNARY_AFFINE, 0.5f, 0.25f };
    int rc = ditto_op_unary(be, &upd, &j->x, &j->x);
    if (!rc) rc = graph ? be->graph_launch(be, graph) : ditto_backend_halves(be, LANE_ITEMS, ws, lane_half, j);
    if (!rc) rc = lane_half(&serial, 0, LANE_ITEMS, ws[0]);
    if (!rc) rc = be->download(be, hy, j->y.data, bytes);   /* on lane 0: after the join */
    if (!rc) rc = be->download(be, hr, ref->data, bytes);
    if (!rc) rc = ditto_arena_reset(ws[0]);
    if (!rc && !graph) rc = ditto_arena_reset(ws[1]);
    *same = !rc && !memcmp(hy, hr, bytes);
    return rc;
}

void test_ops_lanes(TestCtx *c)
{
    const char *name = "lanes halves";
    if (!test_selected(c, name))
        return;
    DittoBackend *be = c->be;
    const int64_t shape[2] = { LANE_ITEMS, LANE_ITEM };
    const size_t bytes = (size_t)(LANE_ITEMS * LANE_ITEM) * sizeof(float);
    DittoBuffer bx = { 0 }, by = { 0 }, br = { 0 };
    DittoArena a0, a1;
    ditto_arena_init(&a0, &be->allocator, 0);
    ditto_arena_init(&a1, &be->allocator, 0);
    DittoArena *const ws[2] = { &a0, &a1 };
    float *hy = malloc(bytes), *hr = malloc(bytes);
    void *graph = NULL;
    bool eager = false, captured = false, replay = false;
    int rc = hy && hr ? 0 : DITTO_ERR_NOMEM;
    if (!rc) rc = ditto_buffer_alloc(&bx, &be->allocator, bytes);
    if (!rc) rc = ditto_buffer_alloc(&by, &be->allocator, bytes);
    if (!rc) rc = ditto_buffer_alloc(&br, &be->allocator, bytes);
    LaneJob j = { be, ditto_tensor(bx.ptr, DITTO_F32, 2, shape), ditto_tensor(by.ptr, DITTO_F32, 2, shape) };
    DittoTensor ref = ditto_tensor(br.ptr, DITTO_F32, 2, shape);
    j.x.device = j.y.device = ref.device = be->device;
    if (!rc) rc = lane_fill(be, &j.x, 11);
    if (!rc) rc = lane_check(be, &j, ws, NULL, &ref, hy, hr, &eager);
    if (!rc && be->capture_begin) {
        /* the halves as one graph (the arenas have their sizes from the eager pass), replayed on new inputs */
        rc = be->capture_begin(be);
        if (!rc) {
            rc = ditto_backend_halves(be, LANE_ITEMS, ws, lane_half, &j);
            int rc2 = be->capture_end(be, &graph);
            if (!rc) rc = rc2;
        }
        captured = !rc && graph;
        if (!rc) rc = ditto_arena_reset(&a0);
        if (!rc) rc = ditto_arena_reset(&a1);
        if (!rc) rc = lane_fill(be, &j.x, 12);
        if (!rc) rc = lane_check(be, &j, ws, graph, &ref, hy, hr, &replay);
    } else {
        captured = replay = !rc;   /* no graphs on this backend */
    }
    if (!rc) rc = be->sync(be);
    test_report(c, name, !rc && eager && captured && replay, "rc %d: %s%s, eager %s, graph replay %s one serial pass", rc,
                be->lane_select ? "two lanes" : "no lanes (halves in turn)", captured ? "" : ", capture failed",
                eager ? "equal to" : "DIFFERS from", replay ? "equal to" : "DIFFERS from");
    if (graph)
        be->graph_free(be, graph);
    ditto_arena_free(&a0);
    ditto_arena_free(&a1);
    ditto_buffer_free(&bx);
    ditto_buffer_free(&by);
    ditto_buffer_free(&br);
    free(hy);
    free(hr);
}
