/*
 * Motion layout and keypoint math (ditto-architecture.md 3.6, 3.8, 4.2 step 10).
 *
 * Upstream passes a per-frame dict "x_info" around ({scale, pitch, yaw, roll,
 * t, exp} for driving motion, plus kp for a source frame). DittoXInfo is that
 * dict as a struct; arrays of DittoXInfo are batches of frames. Everything
 * here is host-side float32 math (NumPy float32 upstream); sums are
 * accumulated in double and rounded once, which keeps the results within
 * float32 rounding of the float64 reference.
 *
 * The 265-d LMDM motion vector (3.6):
 *   [0:1)     scale - 1
 *   [1:67)    pitch, 66 bin logits
 *   [67:133)  yaw
 *   [133:199) roll
 *   [199:202) t (tx, ty, tz)
 *   [202:265) exp (21 keypoints x (x,y,z))
 * kp (the canonical keypoints, 63) is not part of it.
 */
#ifndef DITTO_PIPELINE_MOTION_H
#define DITTO_PIPELINE_MOTION_H

#include <stdbool.h>
#include <stdint.h>

#define DITTO_NUM_KP 21
#define DITTO_KP_DIM 63          /* 21 x 3 */
#define DITTO_POSE_BINS 66
#define DITTO_MOTION_DIM 265

/* Offsets of the keys in the 265-d motion vector. */
#define DITTO_MOTION_OFF_SCALE 0
#define DITTO_MOTION_OFF_PITCH 1
#define DITTO_MOTION_OFF_YAW 67
#define DITTO_MOTION_OFF_ROLL 133
#define DITTO_MOTION_OFF_T 199
#define DITTO_MOTION_OFF_EXP 202

/* Keys of an x_info dict, in the order of the motion vector (kp last). */
typedef enum DittoXKey {
    DITTO_XK_SCALE,
    DITTO_XK_PITCH,
    DITTO_XK_YAW,
    DITTO_XK_ROLL,
    DITTO_XK_T,
    DITTO_XK_EXP,
    DITTO_XK_KP,
    DITTO_XK_COUNT
} DittoXKey;

/* Key sets (use_d_keys, fade_out_keys) are bit masks of DITTO_XK_BIT(key). */
#define DITTO_XK_BIT(k) (1u << (k))
#define DITTO_XK_ALL ((1u << DITTO_XK_COUNT) - 1u)

/*
 * One head angle. Upstream keeps it as (1,66) bin logits until a per-frame
 * control (delta_pitch, ...) turns it into (1,) degrees; both forms then go
 * through the same arithmetic (NumPy broadcasting). deg == true: v[0] holds
 * degrees and v[1..65] are unused.
 */
typedef struct DittoPose {
    float v[DITTO_POSE_BINS];
    bool deg;
} DittoPose;

/* Upstream x_info of one frame. Driving infos (x_d_info) leave kp unused. */
typedef struct DittoXInfo {
    float scale;                 /* (1,1) */
    DittoPose pitch, yaw, roll;  /* (1,66) logits or (1,) degrees */
    float t[3];                  /* (1,3); tz is never used by transform_keypoint */
    float exp[DITTO_KP_DIM];     /* (1,63) */
    float kp[DITTO_KP_DIM];      /* (1,63), source infos only */
} DittoXInfo;

/* Pointer to the pose of key DITTO_XK_PITCH/YAW/ROLL (NULL for the others). */
DittoPose *ditto_xinfo_pose(DittoXInfo *x, DittoXKey key);
const DittoPose *ditto_xinfo_pose_c(const DittoXInfo *x, DittoXKey key);

/*
 * cvt_fmt (3.6): n motion vectors (n,265) -> n driving infos (kp zeroed,
 * poses as logits). v_min_max (2,265) = per-dim [min; max] applied to each
 * frame first (np.clip), or NULL.
 */
void ditto_motion_to_xinfo(const float *motion, int64_t n, const float *v_min_max, DittoXInfo *out);
/*
 * dic2arr: n infos -> (n,265), scale stored as scale - 1 (kp dropped).
 * DITTO_ERR_INVAL when a pose is in degrees (the layout holds logits only).
 */
int ditto_xinfo_to_motion(const DittoXInfo *x, int64_t n, float *motion);

/*
 * bin66_to_degree (3.8): sum_i softmax(logits)_i * i * 3 - 97.5, in
 * [-97.5, 97.5]. pred (n,66) -> deg (n).
 */
float ditto_bin66_to_degree(const float logits[DITTO_POSE_BINS]);
void ditto_bin66_to_degree_n(const float *pred, int64_t n, float *deg);
/* Degrees of a pose: converted from logits, or passed through. */
float ditto_pose_degree(const DittoPose *p);

/*
 * get_rotation_matrix (3.8), angles in degrees: R = Rz(roll) Ry(yaw) Rx(pitch);
 * writes R^T row-major (3,3), the matrix that row-vector keypoints are
 * multiplied with on the right (kp @ rot).
 */
void ditto_rotation_matrix(float pitch, float yaw, float roll, float rot[9]);

/*
 * transform_keypoint (3.8) for n infos:
 *   out[b,k,:] = scale * (kp[b,k,:] @ rot_b + exp[b,k,:]) + [tx, ty, 0]
 * out (n,21,3). Poses may be logits or degrees.
 */
void ditto_transform_keypoint(const DittoXInfo *x, int64_t n, float *out);

/*
 * smooth_x_s_info_lst (4.2 step 10): truncated moving average of width k
 * over the n frames of a video source, every key (pose logits included):
 *   out[i] = mean(in[max(0, i - k/2) .. min(n, i + k/2 + 1)))
 * (k = 13: frames i-6 .. i+6, fewer at the ends). in and out must not overlap.
 * DITTO_ERR_INVAL for k < 1 or a pose in degrees.
 */
int ditto_xinfo_smooth(const DittoXInfo *in, int64_t n, int k, DittoXInfo *out);

/*
 * Ping-pong frame index (3.3): turn = i / n, r = i % n; r for even turns,
 * n - 1 - r for odd ones. Negative i is clamped to 0; n < 1 gives 0.
 */
int64_t ditto_mirror_index(int64_t i, int64_t n);

#endif
