/*
 * Avatar registration: the SCRFD decode (letterbox, blob, anchors, NMS with
 * the +1 convention, largest box), landmark and mesh geometry, eye
 * attributes, the .avatar container (round trip, truncation, bit flips,
 * atomic writes), and, when ../shared is present, registration of
 * ../shared/media/image.png with the stand-in models: the box and the crop
 * matrix against tests/data/registration_ref.json (ONNX Runtime + OpenCV,
 * scripts/ref_registration.py) or, without it, against the README's
 * approximate box; clear errors for no face, unreadable sources and a
 * truncated .onnx; a synthetic bake written and read back.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/image.h"
#include "pipeline/avatar.h"
#include "pipeline/avatar_file.h"
#include "pipeline/crop.h"
#include "pipeline/face_detect.h"
#include "pipeline/landmarks.h"
#include "test_util.h"

static DittoLogger quiet_log(void)
{
    DittoLogger lg = { NULL, NULL, DITTO_LOG_ERROR };
    return lg;
}

/* A logger that keeps the last error line (to check messages). */
static char last_msg[1024];
static int n_msgs;
static void keep_msg(void *cookie, DittoLogLevel level, const char *msg)
{
    (void)cookie;
    if (level == DITTO_LOG_ERROR) {
        snprintf(last_msg, sizeof last_msg, "%s", msg);
        n_msgs++;
    }
}
static DittoLogger keep_log(void)
{
    last_msg[0] = 0;
    n_msgs = 0;
    DittoLogger lg = { keep_msg, NULL, DITTO_LOG_ERROR };
    return lg;
}

static const char *tmp_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/ditto_test_avatar_XXXXXX");
        if (!mkdtemp(dir))
            snprintf(dir, sizeof dir, "/tmp");
    }
    return dir;
}

/* ---- SCRFD pieces ------------------------------------------------------------------ */

static void test_letterbox(TestCtx *c)
{
    int nh, nw;
    double ds;
    ditto_det_letterbox_dims(1432, 1432, 640, &nh, &nw, &ds);
    bool ok = nh == 640 && nw == 640 && fabs(ds - 640.0 / 1432) < 1e-12;
    ditto_det_letterbox_dims(1080, 1920, 512, &nh, &nw, &ds);
    ok &= nh == 288 && nw == 512 && fabs(ds - 288.0 / 1080) < 1e-12;
    ditto_det_letterbox_dims(1920, 1080, 640, &nh, &nw, &ds);
    ok &= nh == 640 && nw == 360 && fabs(ds - 640.0 / 1920) < 1e-12;
    test_report(c, "avatar.det_letterbox", ok, "");

    uint8_t img[4 * 4 * 3];
    for (int i = 0; i < 48; i++)
        img[i] = (uint8_t)(i * 5);
    float blob[48];
    ditto_det_blob(img, 4, blob);
    /* plane 0 is B (RGB index 2), (x - 127.5) / 128 */
    ok = blob[0] == (10.0f - 127.5f) / 128.0f && blob[16] == (5.0f - 127.5f) / 128.0f && blob[32] == (0.0f - 127.5f) / 128.0f &&
         blob[15] == ((15 * 3 + 2) * 5 - 127.5f) / 128.0f;
    test_report(c, "avatar.det_blob_bgr", ok, "");
}

static void test_decode(TestCtx *c)
{
    const int S = 64;
    float *sc[3], *bx[3], *kp[3];
    for (int k = 0; k < 3; k++) {
        int64_t na = ditto_det_anchor_count(S, 8 << k);
        sc[k] = calloc((size_t)na, sizeof(float));
        bx[k] = calloc((size_t)na * 4, sizeof(float));
        kp[k] = calloc((size_t)na * 10, sizeof(float));
    }
    bool ok = ditto_det_anchor_count(S, 8) == 128 && ditto_det_anchor_count(512, 8) == 8192 && ditto_det_anchor_count(512, 32) == 512;
    /* stride 8, cell (row 3, col 5), second anchor: centre (40, 24) */
    int a = 2 * (3 * 8 + 5) + 1;
    sc[0][a] = 0.9f;
    float d[4] = { 1, 2, 3, 4 };
    memcpy(bx[0] + a * 4, d, sizeof d);
    for (int j = 0; j < 10; j++)
        kp[0][a * 10 + j] = 0.5f * (float)j;
    /* stride 32, cell (1, 0), first anchor, below threshold */
    sc[2][2 * 2] = 0.49f;
    /* stride 16, cell (0, 1): exactly at the threshold (kept: >= 0.5) */
    sc[1][2] = 0.5f;
    DittoFaceBox out[8];
    int n = ditto_det_decode((const float *const *)sc, (const float *const *)bx, (const float *const *)kp, S, 0.5f, 0.5, out, 8);
    ok &= n == 2 && out[0].score == 0.9f;
    ok &= out[0].x1 == (40 - 8) / 0.5f && out[0].y1 == (24 - 16) / 0.5f && out[0].x2 == (40 + 24) / 0.5f && out[0].y2 == (24 + 32) / 0.5f;
    ok &= out[0].kps[0] == 40 / 0.5f && out[0].kps[3] == (24 + 1.5f * 8) / 0.5f;
    ok &= n == 2 && out[1].x1 == 16 / 0.5f && out[1].score == 0.5f;
    test_report(c, "avatar.det_decode", ok, "n %d box (%g,%g,%g,%g)", n, n ? out[0].x1 : 0, n ? out[0].y1 : 0, n ? out[0].x2 : 0,
                n ? out[0].y2 : 0);
    for (int k = 0; k < 3; k++)
        free(sc[k]), free(bx[k]), free(kp[k]);

    /* NMS: IoU with +1 areas. (0,0,9,9) vs (0,4,9,13): 60/140 = 0.43 > 0.4 -> suppressed
     * (without +1 it would be 45/117 = 0.38 and kept); vs (0,5,9,14): 50/150 -> kept. */
    DittoFaceBox b[3] = { { 0, 0, 9, 9, 0.9f, { 0 } }, { 0, 4, 9, 13, 0.8f, { 0 } }, { 0, 5, 9, 14, 0.7f, { 0 } } };
    DittoFaceBox b2[2] = { b[0], b[1] };
    int kept = ditto_det_nms(b2, 2, 0.4f);
    ok = kept == 1 && b2[0].score == 0.9f;
    DittoFaceBox b3[2] = { b[0], b[2] };
    kept = ditto_det_nms(b3, 2, 0.4f);
    ok &= kept == 2;
    test_report(c, "avatar.det_nms_plus1", ok, "");

    DittoFaceBox l[3] = { { 0, 0, 10, 10, 0.9f, { 0 } }, { 0, 0, 20, 5, 0.8f, { 0 } }, { 100, 100, 111, 110, 0.6f, { 0 } } };
    test_report(c, "avatar.det_pick_largest", ditto_det_pick_largest(l, 3) == 2 && ditto_det_pick_largest(l, 0) == -1, "");
}

static void test_source_dims(TestCtx *c)
{
    int h, w;
    bool ok = !ditto_source_dims(1432, 1432, 1920, &h, &w) && h == 1432 && w == 1432;
    ok &= ditto_source_dims(3000, 2000, 1920, &h, &w) && h == 1920 && w == 1280;
    ok &= ditto_source_dims(1081, 1921, 1920, &h, &w) && h == 1080 && w == 1920;
    ok &= ditto_source_dims(5, 7, 1920, &h, &w) && h == 4 && w == 6;
    ok &= ditto_source_dims(1432, 1432, 512, &h, &w) && h == 512 && w == 512;
    test_report(c, "avatar.source_dims", ok, "%d x %d", h, w);
}

/* ---- landmark geometry -------------------------------------------------------------- */

static void test_geometry(TestCtx *c)
{
    DittoFaceBox box = { 100, 200, 300, 450, 0.9f, { 0 } };
    double M[6];
    ditto_lmk106_matrix(&box, 192, 1.5, M);
    double s = 192.0 / (250 * 1.5);
    bool ok = fabs(M[0] - s) < 1e-12 && fabs(M[2] - (96 - s * 200)) < 1e-9 && fabs(M[5] - (96 - s * 325)) < 1e-9;
    float raw[212], pts[212];
    for (int i = 0; i < 212; i++)
        raw[i] = (float)((i * 37) % 200) / 100.0f - 1.0f;
    ditto_lmk106_decode(ditto_lmk106_spec_find("x/2d106det.onnx"), raw, M, pts);
    double err = 0;
    for (int i = 0; i < 106; i++) {
        double u = M[0] * pts[2 * i] + M[1] * pts[2 * i + 1] + M[2], v = M[3] * pts[2 * i] + M[4] * pts[2 * i + 1] + M[5];
        err = fmax(err, fabs(u - (raw[2 * i] + 1) * 96));
        err = fmax(err, fabs(v - (raw[2 * i + 1] + 1) * 96));
    }
    ok &= err < 1e-3;
    const DittoLmk106Spec *pf = ditto_lmk106_spec_find("/a/b/pfld106_lite.onnx");
    ok &= pf->size == 112 && pf->out == DITTO_LMK_OUT_UNIT && pf->in == DITTO_LMK_IN_BGR_UNIT;
    test_report(c, "avatar.lmk106_geometry", ok, "round-trip error %.2e", err);

    float anchors[2 * DITTO_BLAZE_ANCHORS];
    ditto_blaze_anchors(anchors);
    ok = anchors[0] == 1.0f / 32 && anchors[1] == 1.0f / 32 && anchors[2] == 1.0f / 32 && anchors[2 * 511] == 31.0f / 32 &&
         anchors[2 * 512] == 1.0f / 16 && anchors[2 * 517 + 1] == 1.0f / 16 && anchors[2 * 518] == 3.0f / 16 &&
         anchors[2 * 895] == 15.0f / 16 && anchors[2 * 895 + 1] == 15.0f / 16;
    test_report(c, "avatar.blaze_anchors", ok, "");

    /* ROI crop and projection are inverses */
    DittoMeshRoi roi = { 250, 240, 300, 300, 0.3 };
    double R[6];
    ditto_mesh_roi_matrix(&roi, 256, R);
    float mraw[3 * DITTO_MESH_N], proj[3 * DITTO_MESH_N];
    for (int i = 0; i < DITTO_MESH_N; i++) {
        mraw[3 * i] = (float)(i % 256);
        mraw[3 * i + 1] = (float)((i * 7) % 256);
        mraw[3 * i + 2] = 10.0f;
    }
    ditto_mesh_project(mraw, &roi, 256, 512, 512, proj);
    err = 0;
    for (int i = 0; i < DITTO_MESH_N; i++) {
        double x = proj[3 * i] * 512.0, y = proj[3 * i + 1] * 512.0;
        err = fmax(err, fabs(R[0] * x + R[1] * y + R[2] - mraw[3 * i]));
        err = fmax(err, fabs(R[3] * x + R[4] * y + R[5] - mraw[3 * i + 1]));
    }
    ok = err < 1e-3 && fabs(proj[2] - 10.0 / 256 * 300 / 512) < 1e-6;
    /* eye line level with keypoint 1 right of keypoint 0: no rotation */
    DittoBlazeDet det = { 0.25f, 0.25f, 0.75f, 0.75f, { 0.4f, 0.4f, 0.6f, 0.4f }, 0.9f };
    ditto_mesh_roi(&det, 512, 512, &roi);
    ok &= fabs(roi.rot) < 1e-12 && fabs(roi.cx - 256) < 1e-9 && fabs(roi.w - 384) < 1e-9;
    det.kps[3] = 0.6f;   /* right eye lower: the face is rolled clockwise, rot = -atan2(-0.2, 0.2) = pi/4 */
    ditto_mesh_roi(&det, 512, 512, &roi);
    ok &= fabs(roi.rot - 0.78539816339) < 1e-6;
    test_report(c, "avatar.mesh_roi", ok, "round-trip error %.2e rot %.4f", err, roi.rot);

    /* weighted NMS merges overlapping detections by score */
    DittoBlazeDet dd[3] = { { 0, 0, 1, 1, { 0 }, 0.9f }, { 0, 0, 1.1f, 1.1f, { 0 }, 0.6f }, { 2, 2, 3, 3, { 0 }, 0.7f } };
    int nk = ditto_blaze_wnms(dd, 3, 0.3f);
    ok = nk == 2 && fabsf(dd[0].x2 - (0.9f + 0.6f * 1.1f) / 1.5f) < 1e-6f && fabsf(dd[0].score - 0.75f) < 1e-6f && dd[1].x1 == 2;
    test_report(c, "avatar.blaze_wnms", ok, "n %d", nk);
}

static void test_eye_attrs(TestCtx *c)
{
    float *m = calloc(3 * DITTO_MESH_N, sizeof(float));
    /* left eye: corners 33 (0,0) and 133 (1,0); lids 0.2 apart; iris 0.1 below the centre */
#define P(i, x, y) (m[3 * (i)] = (x), m[3 * (i) + 1] = (y))
    P(33, 0, 0), P(133, 1, 0);
    P(145, 0.5f, 0.1f), P(159, 0.5f, -0.1f), P(144, 0.3f, 0.1f), P(160, 0.3f, -0.1f), P(153, 0.7f, 0.1f), P(158, 0.7f, -0.1f);
    P(468, 0.5f, 0.1f);
    /* right eye: corners 263 (3,0) and 362 (2,0), lids 0.1 apart, iris at the centre */
    P(263, 3, 0), P(362, 2, 0);
    P(374, 2.5f, 0.05f), P(386, 2.5f, -0.05f), P(373, 2.3f, 0.05f), P(387, 2.3f, -0.05f), P(380, 2.7f, 0.05f), P(385, 2.7f, -0.05f);
    P(473, 2.5f, 0);
#undef P
    float open[2], ball[6];
    ditto_eye_attrs(m, open, ball);
    /* L: 0.6 / 1; R: 0.3 / 1; L ball: ((0,1) - (-1,0)) * 0.1 = (0.1, 0.1, 0); R ball: 0 (iris at the centre) */
    bool ok = fabsf(open[0] - 0.6f) < 1e-6f && fabsf(open[1] - 0.3f) < 1e-6f && fabsf(ball[0] - 0.1f) < 1e-6f && fabsf(ball[2] - 0.1f) < 1e-6f &&
              fabsf(ball[4]) < 1e-6f && fabsf(ball[1]) < 1e-6f && fabsf(ball[3]) < 1e-6f;
    test_report(c, "avatar.eye_attrs", ok, "open %.4f %.4f ball %.4f %.4f %.4f %.4f", open[0], open[1], ball[0], ball[1], ball[2], ball[3]);
    free(m);
}

/* ---- .avatar container ---------------------------------------------------------------- */

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static DittoAvatar *make_avatar(int n, int h, int w, int n_lmk)
{
    DittoAvatar *a = NULL;
    if (ditto_avatar_alloc(&a, n, h, w, (int64_t[]){ 4, 2, 8, 8 }, n_lmk) < 0)
        return NULL;
    uint32_t s = 7;
    for (size_t i = 0; i < (size_t)n * h * w * 3; i++)
        a->img_rgb[i] = (uint8_t)lcg(&s);
    for (int64_t i = 0; i < n * ditto_avatar_fs_numel(a); i++)
        a->f_s[i] = (float)lcg(&s) / 65536.0f - 128.0f;
    for (int f = 0; f < n; f++) {
        DittoXInfo *x = &a->x_s_info[f];
        x->scale = 1.0f + f;
        for (int k = 0; k < 66; k++)
            x->pitch.v[k] = (float)k + f, x->yaw.v[k] = -(float)k, x->roll.v[k] = 0.5f * k;
        for (int k = 0; k < 63; k++)
            x->exp[k] = 0.01f * k, x->kp[k] = -0.02f * k + f;
        x->t[0] = 1, x->t[1] = 2, x->t[2] = 3;
        for (int k = 0; k < 9; k++)
            a->m_c2o[9 * f + k] = (float)k * 1.5f;
        a->eye_open[2 * f] = 0.3f, a->eye_open[2 * f + 1] = 0.31f;
        for (int k = 0; k < 6; k++)
            a->eye_ball[6 * f + k] = 0.001f * k;
    }
    for (int k = 0; k < 63; k++)
        a->sc[k] = 0.5f * k;
    for (int i = 0; i < n * n_lmk * 2; i++)
        a->lmk[i] = (float)i;
    a->has_box = true;
    const float b[5] = { 1, 2, 3, 4, 0.9f };
    memcpy(a->face_box, b, sizeof b);
    ditto_avatar_kv_set_str(a, "source.type", n > 1 ? "video" : "image");
    ditto_avatar_kv_set_float(a, "options.crop_scale", 2.3);
    ditto_avatar_kv_set_int(a, "synthetic", 1);
    return a;
}

static bool avatar_equal(const DittoAvatar *a, const DittoAvatar *b)
{
    if (a->n_frames != b->n_frames || a->height != b->height || a->width != b->width || a->n_lmk != b->n_lmk || a->has_box != b->has_box ||
        memcmp(a->fs_shape, b->fs_shape, sizeof a->fs_shape))
        return false;
    size_t n = (size_t)a->n_frames;
    bool ok = !memcmp(a->img_rgb, b->img_rgb, n * a->height * a->width * 3) && !memcmp(a->m_c2o, b->m_c2o, n * 9 * 4) &&
              !memcmp(a->f_s, b->f_s, n * (size_t)ditto_avatar_fs_numel(a) * 4) && !memcmp(a->eye_open, b->eye_open, n * 2 * 4) &&
              !memcmp(a->eye_ball, b->eye_ball, n * 6 * 4) && !memcmp(a->sc, b->sc, sizeof a->sc) &&
              (!a->n_lmk || !memcmp(a->lmk, b->lmk, n * a->n_lmk * 2 * 4)) && (!a->has_box || !memcmp(a->face_box, b->face_box, 20));
    for (size_t f = 0; f < n && ok; f++) {
        const DittoXInfo *x = &a->x_s_info[f], *y = &b->x_s_info[f];
        ok = x->scale == y->scale && !memcmp(x->pitch.v, y->pitch.v, 264) && !memcmp(x->yaw.v, y->yaw.v, 264) &&
             !memcmp(x->roll.v, y->roll.v, 264) && !memcmp(x->t, y->t, 12) && !memcmp(x->exp, y->exp, 252) && !memcmp(x->kp, y->kp, 252) &&
             !x->pitch.deg && !y->pitch.deg;
    }
    return ok;
}

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static void test_avatar_file(TestCtx *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/rt.avatar", tmp_dir());
    DittoLogger lg = keep_log();
    DittoAvatar *a = make_avatar(3, 6, 10, 106), *b = NULL;
    int rc = a ? ditto_avatar_write(a, path, &lg) : -1;
    if (rc == 0)
        rc = ditto_avatar_read(&b, path, &lg);
    bool ok = rc == 0 && b && avatar_equal(a, b);
    const DittoKV *kv = b ? ditto_avatar_kv_get(b, "options.crop_scale") : NULL;
    ok &= kv && kv->type == DITTO_KV_FLOAT && kv->f == 2.3;
    kv = b ? ditto_avatar_kv_get(b, "source.type") : NULL;
    ok &= kv && kv->type == DITTO_KV_STRING && !strcmp(kv->s, "video");
    kv = b ? ditto_avatar_kv_get(b, "frames") : NULL;
    ok &= kv && kv->type == DITTO_KV_INT && kv->i == 3;
    test_report(c, "avatar.file_round_trip", ok, "rc %d %s", rc, last_msg);
    ditto_avatar_free(&b);

    size_t size = 0;
    uint8_t *bytes = read_all(path, &size);
    ok = bytes && size > 256 && size % 64 == 0;
    /* every truncation fails cleanly */
    int bad = 0, tries = 0;
    for (size_t cut = 0; bytes && cut < size; cut += cut < 300 ? 1 : 97) {
        DittoAvatar *t = NULL;
        lg = keep_log();
        rc = ditto_avatar_read_memory(&t, bytes, cut, "cut.avatar", &lg);
        tries++;
        if (rc != DITTO_ERR_FORMAT || t || n_msgs != 1 || !strstr(last_msg, "cut.avatar"))
            bad++;
        ditto_avatar_free(&t);
    }
    test_report(c, "avatar.file_truncated", ok && bad == 0, "%d of %d truncations not rejected cleanly (%s)", bad, tries, last_msg);

    /* bit flips anywhere (header, hash, metadata, padding, data) fail */
    bad = tries = 0;
    uint32_t s = 99;
    for (int i = 0; bytes && i < 400; i++) {
        size_t at = i < 160 ? (size_t)i : lcg(&s) % size;
        int bit = (int)(lcg(&s) % 8);
        bytes[at] ^= (uint8_t)(1u << bit);
        DittoAvatar *t = NULL;
        lg = keep_log();
        rc = ditto_avatar_read_memory(&t, bytes, size, "flip.avatar", &lg);
        tries++;
        if (rc >= 0 || t || n_msgs != 1)
            bad++;
        ditto_avatar_free(&t);
        bytes[at] ^= (uint8_t)(1u << bit);
    }
    test_report(c, "avatar.file_bit_flips", bad == 0, "%d of %d flips not rejected (%s)", bad, tries, last_msg);

    /* files with a valid checksum but a broken structure: the parser itself must hold */
    bad = tries = 0;
    for (int i = 0; bytes && i < 300; i++) {
        uint8_t *m = malloc(size);
        memcpy(m, bytes, size);
        if (i == 0) {
            /* eye_open (n,2) claims (n,3): its byte count no longer matches */
            uint8_t *at = NULL;
            for (size_t q = 128; q + 8 < size && !at; q++)
                if (!memcmp(m + q, "eye_open", 8))
                    at = m + q;
            if (at)
                at[8 + 8 + 8] = 3;
        } else {
            /* random bytes of the header and the metadata */
            int k = 1 + (int)(lcg(&s) % 4);
            for (int j = 0; j < k; j++)
                m[lcg(&s) % 1024] = (uint8_t)lcg(&s);
            memcpy(m, "DITTOAVT\1\0\0\0", 12);
        }
        unsigned char dg[32];
        unsigned dl = 0;
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), NULL);
        EVP_DigestUpdate(md, m, 96);
        EVP_DigestUpdate(md, m + 128, size - 128);
        EVP_DigestFinal_ex(md, dg, &dl);
        EVP_MD_CTX_free(md);
        memcpy(m + 96, dg, 32);
        DittoAvatar *t = NULL;
        lg = keep_log();
        rc = ditto_avatar_read_memory(&t, m, size, "crafted.avatar", &lg);
        tries++;
        if (i == 0 && !(rc == DITTO_ERR_FORMAT && strstr(last_msg, "'eye_open'")))
            bad++;
        if (rc < 0 && (t || n_msgs != 1))
            bad++;
        ditto_avatar_free(&t);
        free(m);
    }
    test_report(c, "avatar.file_crafted", bad == 0, "%d of %d re-hashed corruptions mishandled (%s)", bad, tries, last_msg);

    /* a newer version is refused by name */
    if (bytes) {
        bytes[8] = 2;
        DittoAvatar *t = NULL;
        lg = keep_log();
        rc = ditto_avatar_read_memory(&t, bytes, size, "v2.avatar", &lg);
        bytes[8] = 1;
        test_report(c, "avatar.file_version", rc == DITTO_ERR_UNSUPPORTED && strstr(last_msg, "version 2"), "%s", last_msg);
        lg = keep_log();
        rc = ditto_avatar_read_memory(&t, "hello world, not an avatar file at all, long enough to be past the header size. "
                                          "hello world, not an avatar file at all, long enough",
                                      130, "text.avatar", &lg);
        test_report(c, "avatar.file_magic", rc == DITTO_ERR_FORMAT && strstr(last_msg, "not an avatar file"), "%s", last_msg);
    }
    free(bytes);

    /* a failed write leaves nothing: missing folder, and a rename onto a folder */
    char bad_path[512], dir_path[512];
    snprintf(bad_path, sizeof bad_path, "%s/no/such/dir/x.avatar", tmp_dir());
    snprintf(dir_path, sizeof dir_path, "%s/adir.avatar", tmp_dir());
    mkdir(dir_path, 0700);
    lg = keep_log();
    int rc1 = ditto_avatar_write(a, bad_path, &lg);
    int rc2 = ditto_avatar_write(a, dir_path, &lg);
    struct stat st;
    bool no_file = stat(bad_path, &st) != 0;
    /* no temporary file left beside the target */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp > /dev/null", tmp_dir());
    bool no_tmp = system(cmd) != 0;
    test_report(c, "avatar.file_atomic", rc1 < 0 && rc2 < 0 && no_file && no_tmp, "rc %d %d, %s", rc1, rc2, last_msg);
    rmdir(dir_path);

    /* a second write replaces the first */
    a->eye_open[0] = 0.77f;
    rc = ditto_avatar_write(a, path, &lg);
    if (rc == 0)
        rc = ditto_avatar_read(&b, path, &lg);
    test_report(c, "avatar.file_overwrite", rc == 0 && b && b->eye_open[0] == 0.77f, "rc %d", rc);
    ditto_avatar_free(&b);
    ditto_avatar_free(&a);
    unlink(path);
}

/* ---- with ../shared: the stand-in models on the example portrait ---------------------------- */

typedef struct Shared {
    char det[512], l106[512], blaze[512], mesh[512], image[512];
    bool ok;
    DittoImage img;
    cJSON *ref;
} Shared;

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static double jnum(const cJSON *o, const char *k, int i)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (i >= 0)
        v = cJSON_GetArrayItem(v, i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_shared_errors(TestCtx *c, Shared *sh)
{
    /* truncated .onnx: half of the detector */
    char cut[512];
    snprintf(cut, sizeof cut, "%s/cut.onnx", tmp_dir());
    size_t n = 0;
    uint8_t *b = read_all(sh->det, &n);
    FILE *f = fopen(cut, "wb");
    if (f && b) {
        fwrite(b, 1, n / 2, f);
        fclose(f);
    }
    free(b);
    DittoFaceDetector *d = NULL;
    DittoLogger lg = keep_log();
    int rc = ditto_face_detector_open(&d, cut, c->cpu, &lg);
    test_report(c, "avatar.err_truncated_onnx", rc == DITTO_ERR_FORMAT && !d && n_msgs == 1 && strstr(last_msg, "cut.onnx"), "rc %d: %s", rc,
                last_msg);
    unlink(cut);
    lg = keep_log();
    rc = ditto_face_detector_open(&d, "/nonexistent/det_10g.onnx", c->cpu, &lg);
    test_report(c, "avatar.err_missing_onnx", rc == DITTO_ERR_NOENT && strstr(last_msg, "/nonexistent/det_10g.onnx"), "rc %d: %s", rc, last_msg);
}

static DittoRegistrar *open_registrar(TestCtx *c, Shared *sh, DittoLogger lg)
{
    DittoRegistrarConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.paths[DITTO_AUX_DETECTOR] = sh->det;
    cfg.paths[DITTO_AUX_LMK106] = sh->l106;
    cfg.paths[DITTO_AUX_BLAZE] = exists(sh->blaze) ? sh->blaze : NULL;
    cfg.paths[DITTO_AUX_MESH] = exists(sh->mesh) ? sh->mesh : NULL;
    cfg.synthetic = 2;
    cfg.be = c->be;
    cfg.log = lg;
    DittoRegistrar *r = NULL;
    int rc = ditto_registrar_open(&r, &cfg);
    if (rc < 0)
        fprintf(stderr, "registrar open: %s (%s)\n", ditto_strerror(rc), last_msg);
    return r;
}

static void test_shared_registration(TestCtx *c, Shared *sh)
{
    DittoLogger lg = keep_log();
    DittoRegistrar *r = open_registrar(c, sh, lg);
    test_report(c, "avatar.registrar_open", r != NULL, "%s", last_msg);
    if (!r)
        return;
    /* the warm-up (a blank crop through the extractors) leaves no state: the checks below hold after it */
    int wrc = ditto_registrar_warmup(r);
    test_report(c, "avatar.registrar_warmup", wrc == 0, "rc %d %s", wrc, wrc ? last_msg : "");
    DittoRegisterParams p;
    ditto_register_params_default(&p);
    DittoFrameReg *st = calloc(1, sizeof *st);
    uint8_t *crop = malloc(512 * 512 * 3);
    int rc = ditto_registrar_frame(r, &p, sh->image, sh->img.data, sh->img.height, sh->img.width, 0, st, crop);
    test_report(c, "avatar.register_frame", rc == 0 && st->detected && st->has_106 && st->has_mesh, "rc %d %s", rc, last_msg);
    const cJSON *ref_det = sh->ref ? cJSON_GetObjectItemCaseSensitive(sh->ref, "detector") : NULL;
    if (rc == 0) {
        /* box: within 2 px of ONNX Runtime's, or near the README's approximate box without the reference */
        double want[4] = { 485, 302, 1017, 970 }, tol = 12;
        const char *against = "README approximate box (loose 12 px: no tests/data/registration_ref.json yet)";
        if (ref_det) {
            for (int i = 0; i < 4; i++)
                want[i] = jnum(ref_det, "box", i);
            tol = 2;
            against = "ONNX Runtime reference";
        }
        double got[4] = { st->box.x1, st->box.y1, st->box.x2, st->box.y2 }, err = 0;
        for (int i = 0; i < 4; i++)
            err = fmax(err, fabs(got[i] - want[i]));
        test_report(c, "avatar.register_box", err <= tol, "box (%.2f,%.2f)-(%.2f,%.2f) score %.4f, max diff %.3f px vs the %s", got[0], got[1], got[2],
                    got[3], (double)st->box.score, err, against);
        /* 106 points: eyes of the stand-in near SCRFD's eye keypoints */
        double le[2] = { 0, 0 }, re[2] = { 0, 0 };
        const int L[4] = { 33, 35, 40, 39 }, R[4] = { 87, 89, 94, 93 };
        for (int k = 0; k < 4; k++) {
            le[0] += st->lmk106[2 * L[k]] / 4, le[1] += st->lmk106[2 * L[k] + 1] / 4;
            re[0] += st->lmk106[2 * R[k]] / 4, re[1] += st->lmk106[2 * R[k] + 1] / 4;
        }
        double de = hypot(le[0] - st->box.kps[0], le[1] - st->box.kps[1]) + hypot(re[0] - st->box.kps[2], re[1] - st->box.kps[3]);
        test_report(c, "avatar.register_lmk106_eyes", de < 40, "eyes (%.1f,%.1f) (%.1f,%.1f), SCRFD (%.1f,%.1f) (%.1f,%.1f)", le[0], le[1], re[0],
                    re[1], (double)st->box.kps[0], (double)st->box.kps[1], (double)st->box.kps[2], (double)st->box.kps[3]);
        test_report(c, "avatar.register_eyes", st->eye_open[0] > 0.05f && st->eye_open[0] < 1.5f && st->eye_open[1] > 0.05f && st->eye_open[1] < 1.5f,
                    "eye_open %.4f %.4f eye_ball %.4f %.4f %.4f %.4f %.4f %.4f", st->eye_open[0], st->eye_open[1], st->eye_ball[0], st->eye_ball[1],
                    st->eye_ball[2], st->eye_ball[3], st->eye_ball[4], st->eye_ball[5]);
    }
    const cJSON *ref_l = sh->ref ? cJSON_GetObjectItemCaseSensitive(sh->ref, "lmk106") : NULL;
    const cJSON *ref_c = sh->ref ? cJSON_GetObjectItemCaseSensitive(sh->ref, "crop512") : NULL;
    if (rc == 0 && ref_l && ref_c) {
        /* the crop math alone: OpenCV/NumPy's matrix from ONNX Runtime's points vs ours from the same points */
        float pts[212], o2c[9], c2o[9];
        for (int i = 0; i < 212; i++)
            pts[i] = (float)jnum(ref_l, "points", i);
        DittoCropParams cp;
        ditto_crop_params_default(&cp);
        int rc2 = ditto_crop_matrix(pts, 106, &cp, o2c, c2o, &lg);
        double e1 = 0, e2 = 0, e3 = 0;
        for (int i = 0; i < 6; i++) {
            double tol_scale = i % 3 == 2 ? 512.0 : 1.0;
            e1 = fmax(e1, fabs(o2c[i] - jnum(ref_c, "M_o2c", i)) / tol_scale);
            e2 = fmax(e2, fabs(st->M_o2c[i] - jnum(ref_c, "M_o2c", i)) / tol_scale);
        }
        for (int i = 0; i < 212; i++)
            e3 = fmax(e3, fabs(st->lmk106[i] - jnum(ref_l, "points", i)));
        test_report(c, "avatar.crop_matrix_vs_reference", rc2 == 0 && e1 < 1e-5, "same points: max scaled diff %.2e", e1);
        /* whole pipeline: our JPEG decode (FFmpeg) differs from cv2.imread by a level here and there, which moves the box by
         * a fraction of a pixel; the stand-in 106-point model amplifies that about tenfold. With OpenCV's pixels the box,
         * the points and the matrix agree to float rounding (see the report of scripts/ref_registration.py). */
        test_report(c, "avatar.lmk106_vs_reference", e3 < 8.0, "max point diff %.3f px", e3);
        test_report(c, "avatar.crop_vs_reference", e2 < 1.5e-2, "whole pipeline: max M_o2c diff %.2e (translation / 512)", e2);
        const cJSON *ref_m = cJSON_GetObjectItemCaseSensitive(sh->ref, "mesh");
        if (ref_m && st->has_mesh) {
            double eo = fmax(fabs(st->eye_open[0] - jnum(ref_m, "eye_open", 0)), fabs(st->eye_open[1] - jnum(ref_m, "eye_open", 1)));
            test_report(c, "avatar.eyes_vs_reference", eo < 0.05, "eye_open max diff %.4f", eo);
        }
    } else if (rc == 0) {
        test_report(c, "avatar.crop_sane", st->M_o2c[0] > 0.2f && st->M_o2c[0] < 0.6f, "M_o2c scale %.4f (no reference JSON)", st->M_o2c[0]);
    }

    /* no face: a flat grey image */
    uint8_t *grey = malloc(480 * 640 * 3);
    memset(grey, 128, 480 * 640 * 3);
    lg = keep_log();
    DittoRegistrar *r2 = open_registrar(c, sh, lg);
    rc = r2 ? ditto_registrar_frame(r2, &p, "grey.png", grey, 480, 640, 0, st, NULL) : -1;
    test_report(c, "avatar.err_no_face", rc == DITTO_ERR_NOFACE && strstr(last_msg, "grey.png: frame 0: no face"), "rc %d: %s", rc, last_msg);
    free(grey);

    /* unreadable sources */
    char junk[512];
    snprintf(junk, sizeof junk, "%s/junk.png", tmp_dir());
    FILE *f = fopen(junk, "wb");
    if (f) {
        fputs("this is not an image\n", f);
        fclose(f);
    }
    DittoAvatar *a = NULL;
    lg = keep_log();
    rc = r2 ? ditto_registrar_run_file(r2, &p, junk, &a) : -1;
    test_report(c, "avatar.err_unreadable", rc < 0 && !a && strstr(last_msg, "junk.png"), "rc %d: %s", rc, last_msg);
    lg = keep_log();
    rc = r2 ? ditto_registrar_run_file(r2, &p, "/nonexistent/face.jpg", &a) : -1;
    test_report(c, "avatar.err_missing_source", rc == DITTO_ERR_NOENT && strstr(last_msg, "/nonexistent/face.jpg"), "rc %d: %s", rc, last_msg);
    unlink(junk);
    ditto_registrar_close(&r2);

    /* video tracking: the portrait shifted by 24 px per frame; the crop centre follows the face. The
     * stand-in 106-point model is jittery (its points move by several pixels when the crop moves), hence
     * the loose tolerance. */
    const int n = 3, H = 512, W = 512, sx = 24;
    uint8_t *small = malloc((size_t)H * W * 3), *frames = calloc((size_t)n * H * W * 3, 1);
    DittoTensor x = ditto_tensor(sh->img.data, DITTO_U8, 3, (int64_t[]){ sh->img.height, sh->img.width, 3 });
    DittoTensor y = ditto_tensor(small, DITTO_U8, 3, (int64_t[]){ H, W, 3 });
    rc = ditto_op_resize_bilinear(c->cpu, &x, &y);
    for (int i = 0; i < n; i++)
        for (int row = 0; row < H; row++)
            memcpy(frames + ((size_t)i * H + row) * W * 3 + (size_t)i * sx * 3, small + (size_t)row * W * 3, (size_t)(W - i * sx) * 3);
    lg = keep_log();
    rc = rc ? rc : ditto_registrar_run(r, &p, "shifted video", frames, n, H, W, true, &a);
    bool ok = rc == 0 && a;
    if (ok) {
        double cx[3], cy[3];
        for (int i = 0; i < n; i++) {
            const float *m = a->m_c2o + 9 * i;
            cx[i] = m[0] * 256.0 + m[1] * 256.0 + m[2];
            cy[i] = m[3] * 256.0 + m[4] * 256.0 + m[5];
        }
        double dx1 = cx[1] - cx[0], dx2 = cx[2] - cx[1], dy1 = cy[1] - cy[0], dy2 = cy[2] - cy[1];
        ok = fabs(dx1 - sx) < 10 && fabs(dx2 - sx) < 10 && fabs(dy1) < 12 && fabs(dy2) < 12;
        /* smoothing: 3 frames with k = 13 all average to the same x_s_info */
        ok &= !memcmp(&a->x_s_info[0].exp, &a->x_s_info[2].exp, sizeof a->x_s_info[0].exp);
        test_report(c, "avatar.video_tracking", ok, "crop centre moved by (%.2f, %.2f) then (%.2f, %.2f) px for %d px shifts", dx1, dy1, dx2, dy2, sx);
        /* sc: frame 0 before smoothing, so it differs from the smoothed kp of frame 0 */
        const DittoKV *kv = ditto_avatar_kv_get(a, "source.type");
        test_report(c, "avatar.video_meta", kv && !strcmp(kv->s, "video") && a->n_lmk == 106 && a->has_box, "");
    } else {
        test_report(c, "avatar.video_tracking", false, "rc %d: %s", rc, last_msg);
    }
    ditto_avatar_free(&a);
    free(small);
    free(frames);

    /* synthetic bake of the portrait: write, read back, identical tensors */
    p.max_size = 256;
    lg = keep_log();
    rc = ditto_registrar_run_file(r, &p, sh->image, &a);
    if (rc == 0)
        rc = ditto_registrar_describe(r, a);
    char path[512];
    snprintf(path, sizeof path, "%s/bake.avatar", tmp_dir());
    DittoAvatar *b = NULL;
    if (rc == 0)
        rc = ditto_avatar_write(a, path, &lg);
    if (rc == 0)
        rc = ditto_avatar_read(&b, path, &lg);
    ok = rc == 0 && a && b && avatar_equal(a, b) && a->width == 256 && a->height == 256;
    const DittoKV *kv = b ? ditto_avatar_kv_get(b, "model.detector.sha256") : NULL;
    ok &= kv && !strcmp(kv->s, "b467f878e26ff1e7ee05cd9936fdff63fa2a5af5d732ed17ee231f2dd5cc07ae");
    kv = b ? ditto_avatar_kv_get(b, "source.sha256") : NULL;
    ok &= kv && !strcmp(kv->s, "362a14590bbfa4517e00338941f87f51fa9d6da0beaa827f6ba28a0e490888d4");
    test_report(c, "avatar.bake_round_trip", ok, "rc %d %s", rc, last_msg);
    ditto_avatar_free(&a);
    ditto_avatar_free(&b);
    unlink(path);
    free(st);
    free(crop);
    ditto_registrar_close(&r);
}

static void test_shared(TestCtx *c)
{
    const char *shared = test_shared_dir();
    Shared sh = { 0 };
    if (shared) {
        snprintf(sh.det, sizeof sh.det, "%s/models/scrfd/scrfd_500m_bnkps.onnx", shared);
        snprintf(sh.l106, sizeof sh.l106, "%s/models/landmark106/pfld106_lite.onnx", shared);
        snprintf(sh.blaze, sizeof sh.blaze, "%s/models/blazeface/face_detection_short_range_nhwc.onnx", shared);
        snprintf(sh.mesh, sizeof sh.mesh, "%s/models/facemesh/face_landmarks_detector_478_fp16.onnx", shared);
        snprintf(sh.image, sizeof sh.image, "%s/media/image.png", shared);
    }
    if (!shared || !exists(sh.det) || !exists(sh.l106) || !exists(sh.image)) {
        printf("SKIP avatar.shared (../shared models or media absent)\n");
        c->skipped++;
        return;
    }
    test_shared_errors(c, &sh);
    DittoLogger lg = keep_log();
    int rc = ditto_image_load(sh.image, &sh.img, &lg);
    if (rc == DITTO_ERR_UNSUPPORTED) {
        printf("SKIP avatar.shared_registration (built without FFmpeg)\n");
        c->skipped++;
        return;
    }
    test_report(c, "avatar.load_image", rc == 0 && sh.img.width == 1432 && sh.img.height == 1432, "rc %d %s", rc, last_msg);
    if (rc < 0)
        return;
    size_t n = 0;
    /* DITTO_REG_REF overrides the reference file (e.g. a fresh scripts/ref_registration.py output) */
    const char *ref_path = getenv("DITTO_REG_REF") ? getenv("DITTO_REG_REF") : DITTO_SOURCE_DIR "/tests/data/registration_ref.json";
    char *json = (char *)read_all(ref_path, &n);
    if (json) {
        json = realloc(json, n + 1);
        json[n] = 0;
        sh.ref = cJSON_Parse(json);
        free(json);
    }
    if (!sh.ref)
        printf("note: tests/data/registration_ref.json absent: the box is checked against the README's approximate box only\n");
    test_shared_registration(c, &sh);
    cJSON_Delete(sh.ref);
    ditto_image_free(&sh.img);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    (void)quiet_log;
    test_letterbox(&c);
    test_decode(&c);
    test_source_dims(&c);
    test_geometry(&c);
    test_eye_attrs(&c);
    test_avatar_file(&c);
    test_shared(&c);
    rmdir(tmp_dir());
    test_close(&c);
    return test_summary(&c);
}
