/*
 * Still-image input (the avatar photo, ditto-architecture.md 4.1): any
 * format FFmpeg decodes, recognised by its first bytes, not by the file
 * name (the example "image.png" is a JPEG): JPEG, PNG, BMP, GIF, WebP,
 * TIFF, PNM/PAM, QOI; other content is left to FFmpeg's probe. The result
 * is packed RGB24, H x W x 3 uint8 (alpha dropped, grey expanded).
 *
 * EXIF orientation (tags 1..8, JPEG) is applied, as cv2.imread does, so a
 * phone photo comes out upright; orientation stored in other formats'
 * metadata (PNG eXIf, TIFF) is not read.
 *
 * Decoding goes through FFmpeg's decoders, not libjpeg: a JPEG can differ
 * from OpenCV's decode (libjpeg's IDCT and "fancy" chroma upsampling) by a
 * few levels per pixel. Upstream parity checks should take the decoded
 * frame from the fixtures (frame_rgb), as the verify runners do.
 *
 * Resizing to the loader's limits (max_size, even sides) is not done here.
 * Without FFmpeg (DITTO_FFMPEG=OFF) the loader returns DITTO_ERR_UNSUPPORTED.
 */
#ifndef DITTO_IO_IMAGE_H
#define DITTO_IO_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ditto/ditto_types.h"

typedef struct DittoImage {
    uint8_t *data;          /* height x width x 3, rows 3*width bytes apart; owned, free with ditto_image_free */
    int width, height;
} DittoImage;

/* Formats recognised by their first bytes. */
typedef enum DittoImageKind {
    DITTO_IMAGE_UNKNOWN = 0,
    DITTO_IMAGE_JPEG,
    DITTO_IMAGE_PNG,
    DITTO_IMAGE_BMP,
    DITTO_IMAGE_GIF,
    DITTO_IMAGE_WEBP,
    DITTO_IMAGE_TIFF,
    DITTO_IMAGE_PNM,
    DITTO_IMAGE_QOI,
} DittoImageKind;

/* Kind of an image from its first n bytes (12 are enough). */
DittoImageKind ditto_image_sniff(const uint8_t *head, size_t n);

/*
 * Decode path (its first frame for an animated format) to RGB24. On error
 * *out is zeroed; errors name the file (DITTO_ERR_NOENT, DITTO_ERR_FORMAT,
 * DITTO_ERR_UNSUPPORTED, DITTO_ERR_NOMEM, DITTO_ERR_IO). log may be NULL.
 */
int ditto_image_load(const char *path, DittoImage *out, const DittoLogger *log);
/* Accepts NULL and a zeroed struct; zeroes *img. */
void ditto_image_free(DittoImage *img);

#endif
