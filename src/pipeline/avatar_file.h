/*
 * The `.avatar` file: everything registration produces for one avatar
 * (DESIGN.md "Caches" (a)), so that renders start without running the
 * detector, the landmark models or the extractors again.
 *
 * Layout, version 1 (all integers little-endian; the reader rejects other
 * versions):
 *
 *   offset  size  field
 *   0       8     magic "DITTOAVT"
 *   8       4     u32 version = 1
 *   12      4     u32 reserved = 0
 *   16      8     u64 file_size        total bytes of the file
 *   24      8     u64 meta_offset      = 128
 *   32      8     u64 meta_size        bytes of the KV list + tensor table
 *   40      8     u64 blob_offset      64-byte aligned, >= meta_offset + meta_size
 *   48      8     u64 blob_size        = file_size - blob_offset
 *   56      8     u64 n_kv
 *   64      8     u64 n_tensors
 *   72      24    reserved, zero
 *   96      32    SHA-256 of bytes [0, 96) followed by bytes [128, file_size)
 *   128           meta: n_kv KV entries, then n_tensors tensor entries
 *                 zero padding up to blob_offset
 *   blob_offset   tensor data, each tensor at a 64-byte aligned offset,
 *                 zero padding between tensors
 *
 *   KV entry:     u32 key_len, key bytes (1..255, printable ASCII),
 *                 u32 type (1 string, 2 int64, 3 float64),
 *                 string: u32 len (<= 65535) + bytes (UTF-8, no NUL);
 *                 int64 / float64: 8 bytes
 *   tensor entry: u32 name_len, name bytes (1..255, printable ASCII),
 *                 u32 dtype (1 uint8, 2 float32), u32 ndim (0..6),
 *                 ndim x u64 dims, u64 offset (from blob_offset, multiple
 *                 of 64), u64 nbytes (= product of dims x element size)
 *
 * The checksum makes a truncated or bit-flipped file fail before anything
 * is parsed; the parser is strict anyway (bounds, overlaps, duplicate
 * names, shapes against the frame count), so a crafted file with a valid
 * checksum cannot make it read out of bounds either.
 *
 * Tensors (n = frames; f_s (C,D,H,W) per frame, (32,16,64,64) official):
 *   img_rgb          u8  (n,H,W,3)  source frames after the max_size rule
 *                                   (video frames are stored too, so the
 *                                   file is self-contained: a render never
 *                                   needs the source video again)
 *   M_c2o            f32 (n,3,3)    crop -> original, per frame
 *   x_s_info.scale   f32 (n,1)      the 7 keys of x_s_info, per frame
 *   x_s_info.pitch   f32 (n,66)     (smoothed over frames with k = 13 for
 *   x_s_info.yaw     f32 (n,66)      videos, 4.2 step 10)
 *   x_s_info.roll    f32 (n,66)
 *   x_s_info.t       f32 (n,3)
 *   x_s_info.exp     f32 (n,63)
 *   x_s_info.kp      f32 (n,63)
 *   f_s              f32 (n,C,D,H,W) appearance features
 *   eye_open         f32 (n,2)
 *   eye_ball         f32 (n,6)
 *   sc               f32 (63)       kp of frame 0 before smoothing
 *   lmk              f32 (n,P,2)    optional: the landmarks the crop used (P = 106 or 203)
 *   face_box         f32 (5)        optional: frame 0 detector box x1,y1,x2,y2,score
 * Unknown tensor names and KV keys are checked like the others and ignored.
 *
 * KV keys written by registration: format ("ditto.avatar"), creator,
 * source.type ("image"/"video"), source.path, source.sha256, source.width,
 * source.height (original), frames, width, height (stored frames),
 * fps (videos), options.* (max_size, n_frames, crop_scale, crop_vx,
 * crop_vy, rotation, smooth_k), landmarks ("203"/"106"/"none"), mesh,
 * synthetic (1 when the networks were synthetic: not a real avatar), and
 * for every model file model.<role> (file name) and model.<role>.sha256.
 * frames, width and height are required and must match the tensors.
 */
#ifndef DITTO_PIPELINE_AVATAR_FILE_H
#define DITTO_PIPELINE_AVATAR_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ditto/ditto_types.h"
#include "pipeline/motion.h"

#define DITTO_AVATAR_MAGIC "DITTOAVT"
#define DITTO_AVATAR_VERSION 1u

typedef enum DittoKVType {
    DITTO_KV_STRING = 1,
    DITTO_KV_INT = 2,
    DITTO_KV_FLOAT = 3,
} DittoKVType;

typedef struct DittoKV {
    char *key;
    DittoKVType type;
    char *s;                 /* STRING */
    int64_t i;               /* INT */
    double f;                /* FLOAT */
} DittoKV;

/* One registered avatar in host memory (every array owned). */
typedef struct DittoAvatar {
    int n_frames;
    int height, width;       /* stored frames */
    int64_t fs_shape[4];     /* per-frame f_s (C, D, H, W) */
    int n_lmk;               /* points per frame in lmk (0: none stored) */
    bool has_box;

    uint8_t *img_rgb;        /* (n, H, W, 3) */
    float *m_c2o;            /* (n, 9) */
    DittoXInfo *x_s_info;    /* (n), kp included */
    float *f_s;              /* (n, C*D*H*W) */
    float *eye_open;         /* (n, 2) */
    float *eye_ball;         /* (n, 6) */
    float sc[DITTO_KP_DIM];
    float *lmk;              /* (n, n_lmk, 2) or NULL */
    float face_box[5];

    DittoKV *kv;
    int n_kv, cap_kv;
} DittoAvatar;

/* Allocate every per-frame array (zeroed). n_lmk may be 0. */
int ditto_avatar_alloc(DittoAvatar **out, int n_frames, int height, int width, const int64_t fs_shape[4], int n_lmk);
void ditto_avatar_free(DittoAvatar **a);
/* Elements of one frame's f_s. */
int64_t ditto_avatar_fs_numel(const DittoAvatar *a);

/* Metadata (a key set twice keeps the last value). */
int ditto_avatar_kv_set_str(DittoAvatar *a, const char *key, const char *v);
int ditto_avatar_kv_set_int(DittoAvatar *a, const char *key, int64_t v);
int ditto_avatar_kv_set_float(DittoAvatar *a, const char *key, double v);
const DittoKV *ditto_avatar_kv_get(const DittoAvatar *a, const char *key);

/*
 * Write a to path: a temporary file in the same folder, fsync, rename;
 * on any failure the temporary file is removed and path is untouched.
 * frames, width and height are written from a (any KV values for them are
 * replaced).
 */
int ditto_avatar_write(DittoAvatar *a, const char *path, const DittoLogger *log);

/*
 * Read and validate a file. DITTO_ERR_FORMAT for anything malformed,
 * truncated or corrupted (checksum), DITTO_ERR_UNSUPPORTED for another
 * version; each with one log line naming the file and the problem.
 */
int ditto_avatar_read(DittoAvatar **out, const char *path, const DittoLogger *log);
/* The same over bytes in memory; `name` stands for the file in messages (tests, fuzzing). */
int ditto_avatar_read_memory(DittoAvatar **out, const void *data, size_t size, const char *name, const DittoLogger *log);

/* SHA-256 of a file as 64 lowercase hex digits (+ NUL). */
int ditto_file_sha256(const char *path, char hex[65], const DittoLogger *log);

#endif
