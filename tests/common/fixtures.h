/*
 * Access to the golden fixtures of shared/fixtures/ditto for the model tests:
 * the manifest (cases, tolerances), the .pth io files (inputs as test
 * tensors, references as float32 / float64 host copies) and the comparison
 * of outputs with a reference, reported through test_report().
 *
 * Comparisons report "rel_l2 ... (tol ...) max_abs/max_ref ... (tol ...)"
 * and pass when every value is finite and both metrics are within tolerance.
 */
#ifndef DITTO_TEST_FIXTURES_H
#define DITTO_TEST_FIXTURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/log.h"
#include "models/lmdm.h"
#include "test_util.h"
#include "weights/catalog.h"

/* fixed values of the fixture README for networks (outputs without a tolerance of their own, intermediates) */
#define FIXTURE_NET_TOL_REL_L2 1e-4
#define FIXTURE_NET_TOL_MAX 1e-3

typedef struct Fixtures {
    char dir[4096];       /* <shared>/fixtures/ditto; "" without a shared folder */
    cJSON *manifest;      /* manifest.json, or NULL */
    DittoLogger log;      /* for opening fixture files */
} Fixtures;

/* Whole file as a NUL-terminated string (free), or NULL. */
char *test_read_text(const char *path);

/* Fill fx for <shared>/fixtures/ditto and parse its manifest.json; true when the manifest is there. */
bool fixtures_load(Fixtures *fx, DittoLogger log);
void fixtures_free(Fixtures *fx);

/* Manifest case `name`, or NULL. */
const cJSON *fixture_case(const Fixtures *fx, const char *name);
/* o[keys[0]][keys[1]]...[keys[n-1]], or NULL. */
const cJSON *json_path(const cJSON *o, const char *const *keys, int n);
/* tolerance.<out>.fp32 of a case (rel_l2, max_abs_over_max_ref); the FIXTURE_NET_TOL_* values when absent. */
void fixture_tol(const cJSON *cs, const char *out, double *rel, double *mx);

/* Path of a fixture file (in buf). */
const char *fixture_path(const Fixtures *fx, const char *file, char *buf, size_t cap);
/* Open a fixture .pth; NULL after reporting FAIL "<file>: cannot open <path>: <error>". */
DittoCatalog *fixture_open(TestCtx *c, const Fixtures *fx, const char *file);
/* The same without a report. */
DittoCatalog *fixture_try_open(const Fixtures *fx, const char *file);

/* LMDM of a fixture checkpoint with num_heads heads (0: the default); NULL after reporting FAIL <file>. */
DittoLmdm *fixture_load_lmdm(TestCtx *c, const Fixtures *fx, const char *file, int heads);

/* Host float32 copy of io tensor `name` (free) with its element count, or NULL when missing or unreadable. */
float *io_read(DittoCatalog *io, const char *name, size_t *n);
/* Host float64 copy of io tensor `name` when it has want's shape (free), else NULL. */
double *io_ref(DittoCatalog *io, const char *name, const DittoTensor *want);
/* Io tensor `name` as a float32 test tensor on the backend, or NULL when missing or unreadable. */
TT *io_input(TestCtx *c, DittoCatalog *io, const char *name);
/* The same, reporting FAIL "<name>: input missing from the io file" when it is missing. */
TT *io_input_required(TestCtx *c, DittoCatalog *io, const char *name);

/* Compare n host floats with a float64 reference and report `label`. */
bool check_values(TestCtx *c, const char *label, const float *out, const double *ref, size_t n, double tol, double tol_max);
/* Compare n host floats with io reference `ref`, which must have exactly n elements. */
bool check_ref(TestCtx *c, const char *label, const float *out, size_t n, DittoCatalog *io, const char *ref, double tol, double tol_max);
/* The same with the first n elements of a reference that may hold more. */
bool check_ref_prefix(TestCtx *c, const char *label, const float *out, size_t n, DittoCatalog *io, const char *ref, double tol,
                      double tol_max);
/* Compare host floats of the given shape with io reference `ref`, which must have that shape. */
bool check_ref_shape(TestCtx *c, const char *label, const float *out, int ndim, const int64_t *shape, DittoCatalog *io, const char *ref,
                     double tol, double tol_max);
/*
 * Download t (checking its guards) and compare it with io reference `ref` of
 * the same shape at the case's tolerance.<ref>.fp32 (fixture_tol).
 */
bool check_out(TestCtx *c, const char *label, TT *t, DittoCatalog *io, const cJSON *cs, const char *ref);

/* Item i of a batched host tensor as a new (1, ...) test tensor on the backend. */
TT *tt_item(TestCtx *c, TT *src, int64_t i);
/*
 * Bitwise comparison of item i of a batched result (items of n floats) with a
 * single-item result: the number of values that differ; *max_diff is raised to
 * their largest |difference| (and stays NaN once NaN).
 */
size_t item_diff(const float *batched, int64_t i, const float *single, size_t n, double *max_diff);

#endif
