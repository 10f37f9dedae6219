/*
 * The pipeline behind include/ditto/ditto.h, with synthetic weights:
 *  - chunking arithmetic of the audio front end (spec 3.2): num_f, the
 *    double-precision offsets (i = 1615 -> 1033599), online frame counts;
 *  - the synthetic HuBERT graph through the ONNX executor: 6480 samples ->
 *    20 rows -> 5 frames, deterministic, depends on the audio;
 *  - offline features: the incremental extractor, fed in odd pieces, equals
 *    a direct transcription of upstream's wav2feat loop (speech_pad, rows
 *    [-14:-4), pair means, truncation); online chunking frame count;
 *  - the tiny synthetic networks load and keep the spatial pipeline (256 ->
 *    f_s -> warp -> 512 x 512 render);
 *  - sessions: frames in order, ceil(n/640) of them at the avatar's size,
 *    identical for batch 1 / 3 / 8 and for audio pushed whole or in chunks,
 *    seed changes the motion; errors: empty audio, push after the end, a
 *    second session on one model set, closing mid-clip.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "ditto/ditto.h"
#include "models/lmdm.h"
#include "models/models.h"
#include "pipeline/audio_features.h"
#include "pipeline/avatar.h"
#include "test_util.h"
#include "weights/synthetic.h"

static void make_audio(float *x, int64_t n, double f0)
{
    for (int64_t i = 0; i < n; i++) {
        double t = (double)i / 16000.0;
        x[i] = (float)(0.3 * sin(2 * M_PI * f0 * t) * (0.5 + 0.5 * sin(2 * M_PI * 3.0 * t)) + 0.05 * sin(2 * M_PI * 1234.5 * t));
    }
}

static void test_arith(TestCtx *c)
{
    test_report(c, "audio.offset.drift", ditto_audio_offline_start(1615) == 1033599 && ditto_audio_offline_start(5) == 3200 &&
                                               ditto_audio_offline_start(0) == 0,
                "start(1615) = %lld (upstream 1033599), start(5) = %lld", (long long)ditto_audio_offline_start(1615),
                (long long)ditto_audio_offline_start(5));
    /* 193 of the multiples of 5 below 200000 fall one sample short of 640 i (spec 3.2) */
    int short_ = 0;
    for (int64_t i = 0; i < 200000; i += 5)
        short_ += ditto_audio_offline_start(i) != 640 * i;
    test_report(c, "audio.offset.count", short_ == 193, "%d offsets short of 640 i (upstream 193)", short_);
    test_report(c, "audio.num_frames", ditto_audio_num_frames(252075) == 394 && ditto_audio_num_frames(640) == 1 &&
                                           ditto_audio_num_frames(641) == 2 && ditto_audio_num_frames(0) == 0,
                "252075 samples -> %lld frames (394)", (long long)ditto_audio_num_frames(252075));
    test_report(c, "audio.online_frames", ditto_audio_online_frames(1280) == 5 && ditto_audio_online_frames(1281) == 10,
                "1280 -> %lld, 1281 -> %lld", (long long)ditto_audio_online_frames(1280), (long long)ditto_audio_online_frames(1281));
}

typedef struct Rows {
    float *f;
    int64_t cap, n, calls;
    bool in_order;
} Rows;

static int take_rows(void *ctx, int64_t first, const float *feat, int64_t n)
{
    Rows *r = ctx;
    if (first != r->n)
        r->in_order = false;
    if (first + n > r->cap)
        return DITTO_ERR_RANGE;
    memcpy(r->f + first * DITTO_HUBERT_DIM, feat, (size_t)(n * DITTO_HUBERT_DIM) * sizeof(float));
    r->n = first + n;
    r->calls++;
    return 0;
}

static void test_features(TestCtx *c)
{
    DittoHubert *h = NULL;
    int rc = ditto_hubert_open(&h, c->be, NULL, 5, &c->be->log);
    test_report(c, "hubert.synthetic.open", rc == 0 && ditto_hubert_is_synthetic(h), "rc %d", rc);
    if (rc < 0)
        return;
    const int64_t n = 16000 + 777;   /* 1.05 s: num_f = 27, the last call reads the end padding */
    const int64_t num_f = ditto_audio_num_frames(n);
    float *pcm = malloc((size_t)n * sizeof *pcm);
    float *whole = calloc((size_t)num_f * DITTO_HUBERT_DIM, sizeof(float));
    float *ref = calloc((size_t)(num_f + 5) * DITTO_HUBERT_DIM, sizeof(float));
    float *chunk = calloc(DITTO_HUBERT_CHUNK, sizeof(float));
    float *f5 = malloc(5 * DITTO_HUBERT_DIM * sizeof(float)), *g5 = malloc(5 * DITTO_HUBERT_DIM * sizeof(float));
    make_audio(pcm, n, 180);

    /* one call: finite, deterministic, audio-dependent */
    memcpy(chunk, pcm, DITTO_HUBERT_CHUNK * sizeof(float));
    int r1 = ditto_hubert_run(h, chunk, f5), r2 = ditto_hubert_run(h, chunk, g5);
    bool finite = true;
    for (int i = 0; i < 5 * DITTO_HUBERT_DIM; i++)
        finite &= isfinite(f5[i]) != 0;
    bool same = !memcmp(f5, g5, 5 * DITTO_HUBERT_DIM * sizeof(float));
    chunk[3000] += 0.5f;   /* inside rows 6..15 (row r covers samples [320 r, 320 r + 400)) */
    ditto_hubert_run(h, chunk, g5);
    bool differs = memcmp(f5, g5, 5 * DITTO_HUBERT_DIM * sizeof(float)) != 0;
    test_report(c, "hubert.synthetic.run", r1 == 0 && r2 == 0 && finite && same && differs, "rc %d %d, finite %d, deterministic %d, audio-dependent %d",
                r1, r2, finite, same, differs);

    /* reference: upstream's loop, written out */
    int64_t padded = DITTO_AUDIO_PAD_OFFLINE + n + DITTO_HUBERT_CHUNK;
    float *speech_pad = calloc((size_t)padded, sizeof(float));
    memcpy(speech_pad + DITTO_AUDIO_PAD_OFFLINE, pcm, (size_t)n * sizeof(float));
    int64_t got = 0;
    for (int64_t i = 0; i < num_f; i += 5) {
        int64_t s = (int64_t)((double)i * 0.04 * 16000.0);
        ditto_hubert_run(h, speech_pad + s, ref + got * DITTO_HUBERT_DIM);
        got += 5;
    }
    free(speech_pad);

    rc = ditto_audio_features_offline(h, pcm, n, whole);
    bool eq = rc == 0 && !memcmp(whole, ref, (size_t)(num_f * DITTO_HUBERT_DIM) * sizeof(float));
    test_report(c, "features.offline.upstream_loop", eq, "rc %d, %lld frames, bit-identical to the transcribed loop: %d", rc, (long long)num_f, eq);

    /* incremental, odd pieces */
    Rows r = { calloc((size_t)num_f * DITTO_HUBERT_DIM, sizeof(float)), num_f, 0, 0, true };
    DittoAudioFeatures *af = NULL;
    rc = ditto_audio_features_open(&af, h, false, take_rows, &r, &c->be->log);
    const int64_t pieces[] = { 1, 999, 5000, 3, 7001 };
    int64_t pos = 0;
    int64_t before_finish = 0;
    for (int k = 0; rc == 0 && pos < n; k++) {
        int64_t len = pieces[k % 5];
        if (len > n - pos)
            len = n - pos;
        rc = ditto_audio_features_push(af, pcm + pos, len);
        pos += len;
    }
    before_finish = r.n;
    if (rc == 0)
        rc = ditto_audio_features_finish(af);
    int again = ditto_audio_features_push(af, pcm, 1);
    eq = rc == 0 && r.n == num_f && r.in_order && !memcmp(r.f, whole, (size_t)(num_f * DITTO_HUBERT_DIM) * sizeof(float));
    test_report(c, "features.offline.incremental", eq && before_finish >= 15 && again == DITTO_ERR_AGAIN,
                "rc %d, %lld frames (%lld before the end), in order %d, equal to whole-clip %d, push after finish %d", rc, (long long)r.n,
                (long long)before_finish, r.in_order, eq, again);
    ditto_audio_features_close(&af);

    /* online chunking: 5 frames per 3200 samples after 1920 zeros */
    Rows o = { calloc((size_t)(num_f + 10) * DITTO_HUBERT_DIM, sizeof(float)), num_f + 10, 0, 0, true };
    rc = ditto_audio_features_open(&af, h, true, take_rows, &o, &c->be->log);
    if (rc == 0)
        rc = ditto_audio_features_push(af, pcm, n);
    if (rc == 0)
        rc = ditto_audio_features_finish(af);
    /* frame 0..4 of the online stream = the call on 1920 zeros | audio[0, 4560) */
    memset(chunk, 0, DITTO_HUBERT_CHUNK * sizeof(float));
    memcpy(chunk + DITTO_AUDIO_PAD_ONLINE, pcm, (DITTO_HUBERT_CHUNK - DITTO_AUDIO_PAD_ONLINE) * sizeof(float));
    ditto_hubert_run(h, chunk, f5);
    eq = rc == 0 && o.n == ditto_audio_online_frames(n) && !memcmp(o.f, f5, 5 * DITTO_HUBERT_DIM * sizeof(float));
    test_report(c, "features.online", eq, "rc %d, %lld frames (want %lld)", rc, (long long)o.n, (long long)ditto_audio_online_frames(n));
    ditto_audio_features_close(&af);

    DittoAudioFeatures *empty = NULL;
    ditto_audio_features_open(&empty, h, false, take_rows, &r, NULL);
    test_report(c, "features.empty", ditto_audio_features_finish(empty) == DITTO_ERR_INVAL, "finish without audio");
    ditto_audio_features_close(&empty);

    free(o.f);
    free(r.f);
    free(pcm);
    free(whole);
    free(ref);
    free(chunk);
    free(f5);
    free(g5);
    ditto_hubert_close(&h);
}

/* The tiny preset keeps the spatial pipeline: 256 crop -> f_s -> warp -> 512 x 512. */
static void test_tiny(TestCtx *c)
{
    DittoCatalog *ca = NULL, *cw = NULL, *cg = NULL, *cl = NULL;
    DittoAppearance *app = NULL;
    DittoWarp *warp = NULL;
    DittoDecoder *dec = NULL;
    DittoLmdm *lm = NULL;
    DittoLmdmParams lp;
    ditto_lmdm_params_default(&lp);
    lp.num_heads = ditto_synthetic_lmdm_heads(DITTO_SYNTH_TINY);
    int rc = ditto_synthetic_catalog_size(&ca, DITTO_NET_APPEARANCE, DITTO_SYNTH_TINY, 1, &c->be->log);
    if (!rc) rc = ditto_appearance_load(&app, c->be, ca);
    if (!rc) rc = ditto_synthetic_catalog_size(&cw, DITTO_NET_WARP, DITTO_SYNTH_TINY, 2, &c->be->log);
    if (!rc) rc = ditto_warp_load(&warp, c->be, cw);
    if (!rc) rc = ditto_synthetic_catalog_size(&cg, DITTO_NET_DECODER, DITTO_SYNTH_TINY, 3, &c->be->log);
    if (!rc) rc = ditto_decoder_load(&dec, c->be, cg);
    if (!rc) rc = ditto_synthetic_lmdm_catalog(&cl, DITTO_SYNTH_TINY, 4, &c->be->log);
    if (!rc) rc = ditto_lmdm_load(&lm, c->be, cl, &lp);
    int64_t fs[5] = { 0 }, wo[4] = { 0 }, img[4] = { 0 };
    if (!rc) {
        DittoTensor x = ditto_tensor(NULL, DITTO_F32, 4, (const int64_t[]){ 2, 3, 256, 256 });
        rc = ditto_appearance_out_shape(app, &x, fs);
    }
    if (!rc) {
        DittoTensor f = ditto_tensor(NULL, DITTO_F32, 5, fs);
        rc = ditto_warp_out_shape(warp, &f, wo);
    }
    if (!rc) {
        DittoTensor w = ditto_tensor(NULL, DITTO_F32, 4, wo);
        rc = ditto_decoder_out_shape(dec, &w, img);
    }
    const DittoLmdmDims *d = lm ? ditto_lmdm_dims(lm) : NULL;
    test_report(c, "synthetic.tiny.shapes",
                rc == 0 && fs[1] == 4 && fs[2] == 2 && img[1] == 3 && img[2] == 512 && img[3] == 512 && d && d->seq_len == 80 && d->nfeats == 265 &&
                    d->cond_dim == 1103,
                "rc %d: f_s (%lld,%lld,%lld,%lld), warp (%lld,%lld,%lld), render %lldx%lld, LMDM window %lld x %lld, cond %lld", rc,
                (long long)fs[1], (long long)fs[2], (long long)fs[3], (long long)fs[4], (long long)wo[1], (long long)wo[2], (long long)wo[3],
                (long long)img[2], (long long)img[3], d ? (long long)d->seq_len : 0LL, d ? (long long)d->nfeats : 0LL,
                d ? (long long)d->cond_dim : 0LL);
    ditto_lmdm_free(&lm);
    ditto_decoder_free(&dec);
    ditto_warp_free(&warp);
    ditto_appearance_free(&app);
    ditto_catalog_close(&ca);
    ditto_catalog_close(&cw);
    ditto_catalog_close(&cg);
    ditto_catalog_close(&cl);
}

/* A 96 x 128 portrait as PPM. */
static int write_portrait(const char *path)
{
    const int w = 96, h = 128;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fprintf(f, "P6\n%d %d\n255\n", w, h);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double dx = (x - 48) / 30.0, dy = (y - 62) / 42.0;
            unsigned char px[3] = { (unsigned char)(40 + y), (unsigned char)(60 + x), 120 };
            if (dx * dx + dy * dy < 1)
                px[0] = 220, px[1] = 175, px[2] = 150;
            fwrite(px, 1, 3, f);
        }
    return fclose(f);
}

typedef struct Clip {
    int64_t frames;
    bool in_order;
    int w, h;
    unsigned char *rgb;     /* all frames */
    char (*hash)[65];
} Clip;

static int run_session(TestCtx *c, DittoModels *m, const char *avatar, int batch, uint64_t seed, const float *pcm, int64_t n, int64_t piece,
                       Clip *out)
{
    memset(out, 0, sizeof *out);
    out->in_order = true;
    DittoSessionParams sp;
    ditto_session_params_default(&sp);
    sp.avatar = avatar;
    sp.batch = batch;
    sp.seed = seed;
    sp.steps = 10;
    sp.log = c->be->log;
    DittoSession *s = NULL;
    int rc = ditto_session_open(&s, m, &sp);
    for (int64_t pos = 0; rc == 0 && pos < n; pos += piece)
        rc = ditto_session_push_audio(s, pcm + pos, pos + piece <= n ? piece : n - pos);
    if (rc == 0)
        rc = ditto_session_end_audio(s);
    int64_t want = ditto_audio_num_frames(n);
    while (rc == 0) {
        DittoFrame f;
        int r = ditto_session_pull_frame(s, &f);
        if (r <= 0) {
            rc = r;
            break;
        }
        if (f.index != out->frames)
            out->in_order = false;
        if (!out->rgb) {
            out->w = f.width;
            out->h = f.height;
            out->rgb = malloc((size_t)want * f.width * f.height * 3);
            out->hash = calloc((size_t)want, sizeof *out->hash);
        }
        if (out->frames < want) {
            memcpy(out->rgb + out->frames * f.width * f.height * 3, f.rgb, (size_t)f.width * f.height * 3);
            ditto_frame_sha256(&f, out->hash[out->frames]);
        }
        out->frames++;
    }
    ditto_session_close(&s);
    return rc;
}

static void test_sessions(TestCtx *c)
{
    char avatar[256];
    snprintf(avatar, sizeof avatar, "test_pipeline_portrait_%d.ppm", (int)getpid());
    if (write_portrait(avatar) != 0) {
        test_report(c, "session.setup", false, "cannot write %s", avatar);
        return;
    }
    DittoModelsParams mp;
    ditto_models_params_default(&mp);
    mp.weights = "synthetic";
    DittoLogger quiet = { 0 };
    mp.log = quiet;
    DittoModels *m = NULL;
    /* an unknown motion precision is refused at open */
    mp.motion_precision = 7;
    int rc = ditto_models_open(&m, &mp);
    test_report(c, "session.models.bad_motion_precision", rc == DITTO_ERR_INVAL && !m, "rc %d", rc);
    ditto_models_close(&m);
    mp.motion_precision = DITTO_PRECISION_AUTO;
    rc = ditto_models_open(&m, &mp);
    test_report(c, "session.models", rc == 0 && ditto_models_synthetic(m), "rc %d", rc);
    if (rc < 0) {
        remove(avatar);
        return;
    }
    const int64_t n = 16000 + 5000;   /* 1.3125 s -> 33 frames, one LMDM window */
    float *pcm = malloc((size_t)n * sizeof *pcm);
    make_audio(pcm, n, 140);

    Clip a, b, d, e;
    int ra = run_session(c, m, avatar, 8, 1, pcm, n, n, &a);
    test_report(c, "session.frames", ra == 0 && a.frames == 33 && a.in_order && a.w == 96 && a.h == 128,
                "rc %d: %lld frames (want 33) of %dx%d (want 96x128), in order %d", ra, (long long)a.frames, a.w, a.h, a.in_order);
    int rb = run_session(c, m, avatar, 1, 1, pcm, n, 777, &b);
    int rd = run_session(c, m, avatar, 3, 1, pcm, n, 5000, &d);
    bool same_b = ra == 0 && rb == 0 && a.frames == b.frames && a.rgb && b.rgb &&
                  !memcmp(a.rgb, b.rgb, (size_t)a.frames * a.w * a.h * 3);
    bool same_d = ra == 0 && rd == 0 && a.frames == d.frames && a.rgb && d.rgb &&
                  !memcmp(a.rgb, d.rgb, (size_t)a.frames * a.w * a.h * 3);
    test_report(c, "session.batch_and_chunks", same_b && same_d,
                "batch 8 whole audio vs batch 1 in 777-sample pieces: %s; vs batch 3 in 5000-sample pieces: %s",
                same_b ? "identical" : "DIFFERENT", same_d ? "identical" : "DIFFERENT");
    int re = run_session(c, m, avatar, 8, 2, pcm, n, n, &e);
    bool seed_matters = re == 0 && e.frames == a.frames && a.hash && e.hash && memcmp(a.hash, e.hash, (size_t)a.frames * 65) != 0;
    bool hashes_match_rgb = a.hash && b.hash && !memcmp(a.hash, b.hash, (size_t)a.frames * 65);
    test_report(c, "session.seed", seed_matters && hashes_match_rgb, "seed 2 differs from seed 1: %d; equal frames hash equal: %d", seed_matters,
                hashes_match_rgb);

    /* the same avatar baked into a .avatar file (registrar with the tiny synthetic extractors) renders the same frames */
    char baked[300];
    snprintf(baked, sizeof baked, "%s.avatar", avatar);
    DittoRegistrarConfig rcfg;
    memset(&rcfg, 0, sizeof rcfg);
    rcfg.synthetic = DITTO_SYNTH_TINY;
    rcfg.log = quiet;
    DittoRegistrar *reg = NULL;
    DittoAvatar *av = NULL;
    DittoRegisterParams rp;
    ditto_register_params_default(&rp);
    int rr = ditto_registrar_open(&reg, &rcfg);
    if (rr == 0)
        rr = ditto_registrar_run_file(reg, &rp, avatar, &av);
    if (rr == 0)
        rr = ditto_avatar_write(av, baked, &quiet);
    ditto_avatar_free(&av);
    ditto_registrar_close(&reg);
    Clip k;
    int rk = rr == 0 ? run_session(c, m, baked, 8, 1, pcm, n, n, &k) : rr;
    bool same_k = rk == 0 && k.frames == a.frames && k.rgb && a.rgb && !memcmp(k.rgb, a.rgb, (size_t)a.frames * a.w * a.h * 3);
    test_report(c, "session.avatar_file", same_k, "rc %d %d: .avatar frames %s the image's", rr, rk, same_k ? "equal" : "DIFFER from");
    if (rk == 0) {
        free(k.rgb);
        free(k.hash);
    }
    remove(baked);

    /*
     * The device-side output path on this backend (DITTO_POST=device: the
     * paste-back and colour conversion by the backend, frames copied out
     * asynchronously and handed over by the copies' notifications): the same
     * frames, at batch 3 in pieces too; and a close mid-clip, with copies
     * queued, stops the workers.
     */
    setenv("DITTO_POST", "device", 1);
    Clip p8, p3;
    int rp8 = run_session(c, m, avatar, 8, 1, pcm, n, n, &p8);
    int rp3 = run_session(c, m, avatar, 3, 1, pcm, n, 5000, &p3);
    bool same_p8 = rp8 == 0 && p8.frames == a.frames && p8.in_order && p8.rgb && a.rgb &&
                   !memcmp(p8.rgb, a.rgb, (size_t)a.frames * a.w * a.h * 3);
    bool same_p3 = rp3 == 0 && p3.frames == a.frames && p3.in_order && p3.rgb && a.rgb &&
                   !memcmp(p3.rgb, a.rgb, (size_t)a.frames * a.w * a.h * 3);
    DittoSessionParams spd;
    ditto_session_params_default(&spd);
    spd.avatar = avatar;
    spd.batch = 3;
    spd.steps = 10;
    DittoSession *sd = NULL;
    int rcd = ditto_session_open(&sd, m, &spd);
    if (rcd == 0)
        rcd = ditto_session_push_audio(sd, pcm, n);
    if (rcd == 0)
        rcd = ditto_session_end_audio(sd);
    DittoFrame fd;
    int gotd = rcd == 0 ? ditto_session_pull_frame(sd, &fd) : 0;
    ditto_session_close(&sd);
    unsetenv("DITTO_POST");
    test_report(c, "session.device_post", same_p8 && same_p3 && rcd == 0 && gotd == 1 && fd.index == 0,
                "rc %d %d: batch 8 %s, batch 3 in pieces %s the host paste-back's frames; close mid-clip after pulling frame %lld (rc %d, %d)",
                rp8, rp3, same_p8 ? "equal to" : "DIFFER from", same_p3 ? "equal to" : "DIFFER from", gotd == 1 ? (long long)fd.index : -1LL,
                rcd, gotd);
    Clip *clips[] = { &a, &b, &d, &e, &p8, &p3 };
    for (int i = 0; i < 6; i++) {
        free(clips[i]->rgb);
        free(clips[i]->hash);
    }

    /* errors */
    DittoSessionParams sp;
    ditto_session_params_default(&sp);
    sp.avatar = avatar;
    DittoSession *s = NULL, *s2 = NULL;
    rc = ditto_session_open(&s, m, &sp);
    int busy = ditto_session_open(&s2, m, &sp);
    int empty = rc == 0 ? ditto_session_end_audio(s) : rc;
    DittoFrame f;
    int pulled = rc == 0 ? ditto_session_pull_frame(s, &f) : 0;
    ditto_session_close(&s);
    test_report(c, "session.errors.empty", rc == 0 && busy == DITTO_ERR_AGAIN && !s2 && empty == DITTO_ERR_INVAL && pulled == DITTO_ERR_INVAL,
                "open %d, second session %d, end without audio %d, pull after it %d", rc, busy, empty, pulled);

    rc = ditto_session_open(&s, m, &sp);
    if (rc == 0)
        rc = ditto_session_push_audio(s, pcm, n);
    if (rc == 0)
        rc = ditto_session_end_audio(s);
    int after = rc == 0 ? ditto_session_push_audio(s, pcm, 10) : 0;
    int got = rc == 0 ? ditto_session_pull_frame(s, &f) : 0;
    ditto_session_close(&s);   /* mid-clip: the workers must stop */
    test_report(c, "session.errors.after_end", rc == 0 && after == DITTO_ERR_AGAIN && got == 1, "push after the end %d, first pull %d", after, got);

    sp.avatar = "no/such/avatar.png";
    rc = ditto_session_open(&s, m, &sp);
    test_report(c, "session.errors.missing_avatar", rc == DITTO_ERR_NOENT && !s, "rc %d", rc);

    free(pcm);
    ditto_models_close(&m);
    remove(avatar);
}

int main(int argc, char **argv)
{
    TestCtx c;
    int rc = test_init(&c, argc, argv);
    if (rc)
        return rc;
    test_arith(&c);
    test_features(&c);
    test_tiny(&c);
    test_sessions(&c);
    rc = test_summary(&c);
    test_close(&c);
    return rc;
}
