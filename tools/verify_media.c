/*
 * `ditto verify` runners for the image stages of the avatar path:
 * crop_image (src/pipeline/crop.h) and putback (src/pipeline/putback.h).
 * Both take the decoded frame from the io file (frame_rgb, OpenCV's
 * decode), so the result does not depend on our JPEG decoder.
 *
 *   crop_image: M_o2c, M_c2o and pt_crop from the landmarks; img_crop is
 *     warped with the stored M_o2c (the README's condition for max_abs 1:
 *     a matrix that differs in its last bits moves fixed-point coordinates).
 *   putback: render = img_crop + render_tile tiled; the whole output frame
 *     is built, then rows putback_rows_y, columns [x0, x1) of putback_box
 *     are compared.
 */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "pipeline/crop.h"
#include "pipeline/putback.h"
#include "tools/verify.h"

/* Host float32 copy of io tensor `name` with exactly `numel` values (free with ditto_free). */
static int io_f32(DittoVerifyRun *r, const char *name, int64_t numel, float **out)
{
    *out = NULL;
    const DittoCatalogEntry *e = ditto_catalog_find(r->io, name);
    if (!e)
        return ditto_fail(&r->log, DITTO_ERR_NOENT, "%s: no tensor '%s' in the io file", r->name, name);
    if (ditto_catalog_entry_numel(e) != numel)
        return ditto_fail(&r->log, DITTO_ERR_SHAPE, "%s: io '%s' has %lld values, expected %lld", r->name, name,
                          (long long)ditto_catalog_entry_numel(e), (long long)numel);
    float *d = ditto_malloc((size_t)(numel > 0 ? numel : 1) * sizeof *d);
    if (!d)
        return DITTO_ERR_NOMEM;
    int rc = ditto_catalog_read_f32(r->io, e, d);
    if (rc < 0) {
        ditto_free(d);
        return ditto_fail(&r->log, rc, "%s: cannot read '%s' of the io file: %s", r->name, name, ditto_strerror(rc));
    }
    *out = d;
    return 0;
}

/* A backend tensor in a buffer the caller frees; data uploaded from host when given. */
static int be_tensor(DittoVerifyRun *r, DittoBuffer *buf, DittoDType dt, int ndim, const int64_t *shape, const void *host, DittoTensor *t)
{
    *t = ditto_tensor(NULL, dt, ndim, shape);
    size_t n = ditto_tensor_nbytes(t);
    int rc = ditto_buffer_alloc(buf, &r->be->allocator, n ? n : 1);
    if (rc >= 0 && host)
        rc = r->be->upload(r->be, buf->ptr, host, n);
    if (rc < 0)
        return ditto_fail(&r->log, rc, "%s: cannot place a tensor on the %s backend: %s", r->name, r->be->name, ditto_strerror(rc));
    t->data = buf->ptr;
    t->device = r->be->allocator.device;
    return 0;
}

/* io 'frame_rgb' (H,W,3) uint8 as a backend tensor. */
static int frame_tensor(DittoVerifyRun *r, DittoBuffer *buf, DittoTensor *t)
{
    const DittoCatalogEntry *e = ditto_catalog_find(r->io, "frame_rgb");
    if (!e)
        return ditto_fail(&r->log, DITTO_ERR_NOENT, "%s: no tensor 'frame_rgb' in the io file", r->name);
    if (e->dtype != DITTO_U8 || e->ndim != 3 || e->shape[2] != 3 || e->stride[2] != 1 || e->stride[1] != 3 || e->stride[0] != 3 * e->shape[1])
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: io 'frame_rgb' is not a contiguous uint8 (H,W,3) image", r->name);
    return be_tensor(r, buf, DITTO_U8, 3, e->shape, e->data, t);
}

static int submit_host(DittoVerifyRun *r, const char *name, int ndim, const int64_t *shape, const float *host)
{
    DittoTensor t;
    DITTO_TRY(ditto_verify_output(r, ndim, shape, &t));
    DITTO_TRY(r->be->upload(r->be, t.data, host, ditto_tensor_nbytes(&t)));
    return ditto_verify_submit(r, name, &t);
}

static double param_num(const DittoVerifyRun *r, const char *key, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->params, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* ---- crop_image ---- */

static int crop_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    DittoCropParams p;
    ditto_crop_params_default(&p);
    p.dsize = (int)param_num(r, "dsize", p.dsize);
    p.scale = param_num(r, "scale", p.scale);
    p.vx_ratio = param_num(r, "vx_ratio", p.vx_ratio);
    p.vy_ratio = param_num(r, "vy_ratio", p.vy_ratio);
    const cJSON *rot = cJSON_GetObjectItemCaseSensitive(r->params, "flag_do_rot");
    if (rot)
        p.do_rot = cJSON_IsTrue(rot);

    const DittoCatalogEntry *pe = ditto_catalog_find(r->io, "pts");
    if (!pe || pe->ndim != 2 || pe->shape[1] != 2)
        return ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: io 'pts' missing or not (N,2)", r->name);
    int npts = (int)pe->shape[0];
    float *pts = NULL, *stored = NULL, *pt_crop = NULL;
    DittoBuffer fbuf = { 0 }, cbuf = { 0 };
    float M_o2c[9], M_c2o[9];
    int rc = io_f32(r, "pts", 2 * (int64_t)npts, &pts);
    if (rc >= 0)
        rc = ditto_crop_matrix(pts, npts, &p, M_o2c, M_c2o, &r->log);
    if (rc >= 0)
        rc = submit_host(r, "M_o2c", 2, (int64_t[]){ 3, 3 }, M_o2c);
    if (rc >= 0)
        rc = submit_host(r, "M_c2o", 2, (int64_t[]){ 3, 3 }, M_c2o);
    if (rc >= 0 && !(pt_crop = ditto_malloc((size_t)npts * 2 * sizeof *pt_crop)))
        rc = DITTO_ERR_NOMEM;
    if (rc >= 0) {
        ditto_crop_transform_pts(pts, npts, M_o2c, pt_crop);
        rc = submit_host(r, "pt_crop", 2, (int64_t[]){ npts, 2 }, pt_crop);
    }
    /* img_crop from the stored matrix (see the file comment) */
    DittoTensor frame, crop;
    if (rc >= 0)
        rc = io_f32(r, "M_o2c", 9, &stored);
    if (rc >= 0)
        rc = frame_tensor(r, &fbuf, &frame);
    if (rc >= 0)
        rc = be_tensor(r, &cbuf, DITTO_U8, 3, (int64_t[]){ p.dsize, p.dsize, 3 }, NULL, &crop);
    if (rc >= 0)
        rc = ditto_crop_image(r->be, &frame, stored, &crop);
    if (rc >= 0)
        rc = ditto_verify_submit(r, "img_crop", &crop);
    ditto_buffer_free(&fbuf);
    ditto_buffer_free(&cbuf);
    ditto_free(pts);
    ditto_free(stored);
    ditto_free(pt_crop);
    return rc;
}

/* ---- putback ---- */

static int putback_forward(DittoVerifyRun *r, void *model)
{
    (void)model;
    const int64_t C = DITTO_PUTBACK_CROP, T = 64;
    float *crop = NULL, *tile = NULL, *M = NULL, *boxf = NULL, *rows_y = NULL;
    DittoBuffer fbuf = { 0 }, rbuf = { 0 }, obuf = { 0 };
    DittoPutback *pb = NULL;
    DittoTensor frame, render, out;
    int rc = io_f32(r, "img_crop", C * C * 3, &crop);
    if (rc >= 0)
        rc = io_f32(r, "render_tile", T * T * 3, &tile);
    if (rc >= 0)
        rc = io_f32(r, "M_c2o", 9, &M);
    if (rc >= 0)
        rc = io_f32(r, "putback_box", 4, &boxf);
    const DittoCatalogEntry *ye = ditto_catalog_find(r->io, "putback_rows_y");
    int64_t nrows = ye ? ditto_catalog_entry_numel(ye) : 0;
    if (rc >= 0 && nrows < 1)
        rc = ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: io 'putback_rows_y' missing or empty", r->name);
    if (rc >= 0)
        rc = io_f32(r, "putback_rows_y", nrows, &rows_y);
    if (rc >= 0) {
        /* render[y, x, c] = img_crop[y, x, c] + render_tile[y % T, x % T, c], exact in float32 */
        for (int64_t y = 0; y < C; y++)
            for (int64_t x = 0; x < C; x++)
                for (int64_t c = 0; c < 3; c++)
                    crop[(y * C + x) * 3 + c] += tile[((y % T) * T + x % T) * 3 + c];
        rc = frame_tensor(r, &fbuf, &frame);
    }
    if (rc >= 0)
        rc = be_tensor(r, &rbuf, DITTO_F32, 3, (int64_t[]){ C, C, 3 }, crop, &render);
    if (rc >= 0)
        rc = be_tensor(r, &obuf, DITTO_U8, 3, frame.shape, NULL, &out);
    if (rc >= 0)
        rc = ditto_putback_open(&pb, r->be, frame.shape[1], frame.shape[0], &r->log);
    if (rc >= 0)
        rc = ditto_putback_run(pb, &frame, &render, M, &out, NULL);

    /* rows y0, y0 + step, ... of the box, columns [x0, x1) */
    DittoTensor rows = out;
    if (rc >= 0) {
        int64_t y0 = (int64_t)rows_y[0], step = nrows > 1 ? (int64_t)rows_y[1] - y0 : 1;
        int64_t x0 = (int64_t)boxf[2], x1 = (int64_t)boxf[3];
        bool ok = step > 0 && x0 >= 0 && x1 > x0 && x1 <= frame.shape[1];
        for (int64_t i = 0; i < nrows && ok; i++)
            ok = rows_y[i] == (float)(y0 + i * step) && y0 + i * step < frame.shape[0];
        if (!ok)
            rc = ditto_fail(&r->log, DITTO_ERR_FORMAT, "%s: putback_rows_y / putback_box do not describe evenly spaced rows inside the frame",
                            r->name);
        DittoTensor sel;
        if (rc >= 0)
            rc = ditto_tensor_slice(&out, 0, y0, y0 + (nrows - 1) * step + 1, step, &sel);
        if (rc >= 0)
            rc = ditto_tensor_slice(&sel, 1, x0, x1, 1, &rows);
    }
    if (rc >= 0)
        rc = ditto_verify_submit(r, "putback_rows", &rows);
    ditto_putback_close(&pb);
    ditto_buffer_free(&fbuf);
    ditto_buffer_free(&rbuf);
    ditto_buffer_free(&obuf);
    ditto_free(crop);
    ditto_free(tile);
    ditto_free(M);
    ditto_free(boxf);
    ditto_free(rows_y);
    return rc;
}

const DittoVerifyRunner ditto_verify_runners_media[] = {
    { "pipeline", "crop_image", NULL, crop_forward, NULL },
    { "pipeline", "putback", NULL, putback_forward, NULL },
    { NULL, NULL, NULL, NULL, NULL },
};
