/*
 * `ditto verify` runner for kind "onnx" (any model): the case's model_file,
 * relative to the fixtures folder, runs on the ONNX executor with every graph
 * input taken from the io file by its graph name; each manifest output is
 * compared by its graph name. So any ONNX model with reference outputs in a
 * manifest (../shared/fixtures/onnx/README.md format) can be checked.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "onnx/onnx_exec.h"
#include "tools/verify.h"
#include "weights/onnx.h"

typedef struct OnnxCase {
    DittoOnnxModel *model;
    DittoOnnxRunner *runner;
} OnnxCase;

static void onnx_release(void *p)
{
    OnnxCase *c = p;
    if (!c)
        return;
    ditto_onnx_runner_close(&c->runner);
    ditto_onnx_close(&c->model);
    ditto_free(c);
}

static int onnx_load(DittoVerifyRun *r, void **out)
{
    const cJSON *mf = cJSON_GetObjectItemCaseSensitive(r->json, "model_file");
    if (!cJSON_IsString(mf) || !mf->valuestring[0])
        return ditto_fail(&r->log, DITTO_ERR_INVAL, "%s: the manifest gives no model_file", r->name);
    const char *file = mf->valuestring;
    size_t n = strlen(r->dir) + strlen(file) + 2;
    char *path = ditto_malloc(n);
    OnnxCase *c = ditto_calloc(1, sizeof *c);
    if (!path || !c) {
        ditto_free(path);
        ditto_free(c);
        return DITTO_ERR_NOMEM;
    }
    snprintf(path, n, "%s%s%s", file[0] == '/' ? "" : r->dir, file[0] == '/' ? "" : "/", file);
    int rc = ditto_onnx_open(&c->model, path, &r->log);
    ditto_free(path);
    if (rc >= 0)
        rc = ditto_onnx_runner_open(&c->runner, c->model, r->be, NULL);
    if (rc < 0) {
        onnx_release(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int onnx_forward(DittoVerifyRun *r, void *p)
{
    OnnxCase *c = p;
    const DittoOnnxModel *m = c->model;
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(r->json, "outputs");
    int nin = (int)m->n_inputs, nout = cJSON_GetArraySize(outs);
    DittoOnnxIO *in = ditto_calloc((size_t)(nin > 0 ? nin : 1), sizeof *in);
    DittoOnnxIO *out = ditto_calloc((size_t)(nout > 0 ? nout : 1), sizeof *out);
    int rc = in && out ? 0 : DITTO_ERR_NOMEM;
    for (int i = 0; i < nin && rc >= 0; i++) {
        in[i].name = m->inputs[i].name;
        rc = ditto_verify_input(r, in[i].name, &in[i].t);
    }
    const cJSON *o;
    int k = 0;
    cJSON_ArrayForEach(o, outs) {
        if (k < nout)
            out[k++].name = o->string;
    }
    if (rc >= 0)
        rc = ditto_onnx_runner_run(c->runner, r->ws, in, nin, out, k);
    for (int i = 0; i < k && rc >= 0; i++)
        rc = ditto_verify_submit(r, out[i].name, &out[i].t);
    ditto_free(in);
    ditto_free(out);
    return rc;
}

const DittoVerifyRunner ditto_verify_runners_onnx[] = {
    { "onnx", NULL, onnx_load, onnx_forward, onnx_release },
    { NULL, NULL, NULL, NULL, NULL },
};
