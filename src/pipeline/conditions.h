/*
 * Condition handler (ditto-architecture.md 3.3): the 1103-d LMDM condition
 * of every generated frame,
 *
 *   [0:1024)     HuBERT feature of the frame
 *   [1024:1032)  emotion probabilities (Angry, Disgust, Fear, Happy,
 *                Neutral, Sad, Surprise, Contempt)
 *   [1032:1034)  eye_open (L, R) of the source frame
 *   [1034:1040)  eye_ball (Lx, Rx, Ly, Ry, Lz, Rz) of the source frame
 *   [1040:1103)  sc: canonical keypoints of source frame 0 (21 x 3)
 *
 * For a window that starts at global frame idx (negative in online mode:
 * clamped to 0), frame i = idx + j uses
 *   emotion row  max(i,0) mod m,
 *   eye rows     mirror(max(i,0), n_src), or row 0 with eye_f0_mode.
 * With an alternative character source (upstream ch_info), pass its eye
 * data and sc here.
 */
#ifndef DITTO_PIPELINE_CONDITIONS_H
#define DITTO_PIPELINE_CONDITIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "ditto/ditto_types.h"

#define DITTO_AUD_DIM 1024
#define DITTO_EMO_DIM 8
#define DITTO_EYE_OPEN_DIM 2
#define DITTO_EYE_BALL_DIM 6
#define DITTO_COND_DIM 1103

/* Offsets of the parts in a condition row. */
#define DITTO_COND_OFF_AUD 0
#define DITTO_COND_OFF_EMO 1024
#define DITTO_COND_OFF_EYE_OPEN 1032
#define DITTO_COND_OFF_EYE_BALL 1034
#define DITTO_COND_OFF_SC 1040

/* Emotion label 4 (Neutral), the default. */
#define DITTO_EMO_NEUTRAL 4
/* Logit given to each selected label; the others get 0. */
#define DITTO_EMO_LOGIT 8.0

/* The forms upstream's `emo` setup option takes. */
typedef enum DittoEmoKind {
    DITTO_EMO_LABEL,       /* int: one label for every frame */
    DITTO_EMO_LABELS,      /* list of ints: one distribution with 8 at every listed label */
    DITTO_EMO_PER_FRAME,   /* list of lists: one distribution per list, cycled over frames */
    DITTO_EMO_ARRAY,       /* (m,8) probabilities used as given, cycled over frames */
} DittoEmoKind;

typedef struct DittoEmo {
    DittoEmoKind kind;
    int label;             /* LABEL: 0..7 */
    const int *labels;     /* LABELS: n_labels labels; PER_FRAME: all lists concatenated */
    int64_t n_labels;
    const int64_t *offsets;/* PER_FRAME: list j is labels[offsets[j] .. offsets[j+1]), m + 1 entries */
    const float *array;    /* ARRAY: (m,8) */
    int64_t m;             /* PER_FRAME, ARRAY: number of rows */
} DittoEmo;

/* Neutral label (4). */
void ditto_emo_default(DittoEmo *e);

/*
 * softmax of the 8 logits that are 8 at the n given labels and 0 elsewhere
 * (SciPy softmax, rounded to float32). Label 4 alone: p[4] = e^8/(e^8+7).
 * DITTO_ERR_RANGE for a label outside 0..7.
 */
int ditto_emo_from_labels(const int *labels, int64_t n, float out[DITTO_EMO_DIM]);

typedef struct DittoConditionsParams {
    DittoEmo emo;
    const float *eye_open;  /* (n_src,2) */
    const float *eye_ball;  /* (n_src,6) */
    int64_t n_src;          /* source frames (1 for an image) */
    const float *sc;        /* (63), canonical keypoints of source frame 0 (before smoothing) */
    bool eye_f0_mode;       /* eye data of source frame 0 for every frame */
} DittoConditionsParams;

/* Setup result: the arrays are copied, the emotion rows precomputed. */
typedef struct DittoConditions {
    float *emo;             /* (n_emo,8) */
    int64_t n_emo;
    float *eye_open;        /* (n_src,2) */
    float *eye_ball;        /* (n_src,6) */
    int64_t n_src;
    float sc[DITTO_COND_DIM - DITTO_COND_OFF_SC];   /* 63 */
    bool eye_f0_mode;
} DittoConditions;

/*
 * Copy the source data and build the emotion rows. Errors (logged to log,
 * which may be NULL): DITTO_ERR_INVAL for missing arrays or counts < 1,
 * DITTO_ERR_RANGE for a label outside 0..7, DITTO_ERR_NOMEM.
 */
int ditto_conditions_init(DittoConditions *c, const DittoConditionsParams *p, const DittoLogger *log);
/* Accepts a zeroed or freed struct. */
void ditto_conditions_free(DittoConditions *c);

/*
 * Conditions of n frames starting at global frame idx:
 * aud (n,1024) -> cond (n,1103).
 */
int ditto_conditions_build(const DittoConditions *c, const float *aud, int64_t n, int64_t idx, float *cond);

#endif
