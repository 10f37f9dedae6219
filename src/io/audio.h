/*
 * Audio input through FFmpeg's libraries (libavformat + libavcodec +
 * libswresample): any container and codec FFmpeg decodes (wav, mp3, m4a,
 * flac, ogg, ...), read from its first audio stream.
 *
 * ditto_audio_load gives what the model consumes (ditto-architecture.md
 * 3.1 item 2, librosa.load(path, sr=16000)): mono as the mean of the
 * channels, float32 in [-1, 1] (integer PCM scaled by 1/2^(bits-1), like
 * soundfile), resampled to the requested rate with the best resampler
 * this FFmpeg has: libsoxr at 28-bit precision (soxr's "very high quality"
 * recipe; librosa's default soxr_hq is the 20-bit recipe of the same
 * resampler), else swresample's own windowed-sinc with a long filter. The
 * length is librosa's: ceil(n * rate / src_rate), computed in double, the
 * resampler's output cut or zero-padded to it. A file already at the
 * requested rate is not resampled.
 *
 * Without FFmpeg (DITTO_FFMPEG=OFF) every function returns
 * DITTO_ERR_UNSUPPORTED and logs why.
 *
 * Errors are one line through the logger naming the file and the problem:
 * DITTO_ERR_NOENT (missing file), DITTO_ERR_FORMAT (empty, not a media
 * file, no audio stream, nothing decodable), DITTO_ERR_UNSUPPORTED (no
 * decoder), DITTO_ERR_NOMEM, DITTO_ERR_IO.
 */
#ifndef DITTO_IO_AUDIO_H
#define DITTO_IO_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "ditto/ditto_types.h"

/** The sample rate of the audio encoder (HuBERT). */
#define DITTO_AUDIO_RATE 16000

typedef struct DittoPcm {
    float *samples;        /* n mono samples at rate; owned, free with ditto_pcm_free */
    int64_t n;
    int rate;
    int src_rate;          /* the file's sample rate */
    int src_channels;      /* and channel count */
    int64_t src_frames;    /* decoded samples per channel at src_rate */
    double src_duration;   /* src_frames / src_rate, seconds */
} DittoPcm;

/*
 * Decode path's first audio stream to mono float32 at `rate` Hz (> 0; use
 * DITTO_AUDIO_RATE for the model). On success *out owns the samples
 * (n >= 1); on error *out is zeroed. log may be NULL.
 */
int ditto_audio_load(const char *path, int rate, DittoPcm *out, const DittoLogger *log);
/* Accepts NULL and a zeroed struct; zeroes *pcm. */
void ditto_pcm_free(DittoPcm *pcm);

/*
 * Streaming decoder of the first audio stream, at the file's own rate and
 * channel count, as interleaved float32 (scaled like ditto_audio_load).
 * The H.264 writer uses it to re-encode the original audio as AAC.
 */
typedef struct DittoAudioReader DittoAudioReader;

int ditto_audio_reader_open(DittoAudioReader **out, const char *path, const DittoLogger *log);
/* Accepts NULL and *r == NULL; sets *r to NULL. */
void ditto_audio_reader_close(DittoAudioReader **r);
int ditto_audio_reader_rate(const DittoAudioReader *r);
int ditto_audio_reader_channels(const DittoAudioReader *r);
/*
 * Next block of decoded audio: *n frames of channels interleaved floats at
 * *samples, valid until the next call. *n == 0 at the end of the stream.
 * Packets the decoder rejects are skipped (as ffmpeg does); an input with
 * nothing decodable at all is DITTO_ERR_FORMAT at the end.
 */
int ditto_audio_reader_read(DittoAudioReader *r, const float **samples, int64_t *n);

#endif
