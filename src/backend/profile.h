/*
 * Per-op profiler (ditto bench --profile): when on, the op front ends put a
 * timing mark before and after every backend call (CUDA events on the GPU,
 * the monotonic clock on the CPU). The report groups the calls by op, dtype
 * and the shapes of x, w and y, and lists the groups by total time.
 */
#ifndef DITTO_BACKEND_PROFILE_H
#define DITTO_BACKEND_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "backend/backend.h"

/* Start (or restart) recording on be; DITTO_ERR_UNSUPPORTED when the backend has no marks. */
int ditto_profile_start(DittoBackend *be);
/* Called by the op front ends around each backend call (x, w may be NULL). */
void ditto_profile_op(DittoBackend *be, int op, const DittoTensor *x, const DittoTensor *w, const DittoTensor *y, bool end);
/*
 * Stop recording, wait for the device, and print the top groups (top <= 0:
 * all) and per-op totals to f. ms_total receives the summed op time.
 */
int ditto_profile_report(DittoBackend *be, FILE *f, int top, double *ms_total);
/* Free the recorder (also done by ditto_backend_close). */
void ditto_profile_free(DittoBackend *be);

#endif
