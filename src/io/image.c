/*
 * Still images: sniff the format from the first bytes, decode the first
 * frame through the video reader with that demuxer forced (a probe could
 * be swayed by a misleading extension), then apply EXIF orientation.
 */
#include "io/image.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "io/av_util.h"
#include "io/video_in.h"

#ifdef DITTO_HAVE_FFMPEG
#include <libavformat/avformat.h>
#endif

DittoImageKind ditto_image_sniff(const uint8_t *h, size_t n)
{
    if (n >= 3 && h[0] == 0xFF && h[1] == 0xD8 && h[2] == 0xFF)
        return DITTO_IMAGE_JPEG;
    if (n >= 8 && !memcmp(h, "\x89PNG\r\n\x1a\n", 8))
        return DITTO_IMAGE_PNG;
    if (n >= 6 && (!memcmp(h, "GIF87a", 6) || !memcmp(h, "GIF89a", 6)))
        return DITTO_IMAGE_GIF;
    if (n >= 12 && !memcmp(h, "RIFF", 4) && !memcmp(h + 8, "WEBP", 4))
        return DITTO_IMAGE_WEBP;
    if (n >= 4 && (!memcmp(h, "II*\0", 4) || !memcmp(h, "MM\0*", 4)))
        return DITTO_IMAGE_TIFF;
    if (n >= 4 && !memcmp(h, "qoif", 4))
        return DITTO_IMAGE_QOI;
    if (n >= 2 && h[0] == 'B' && h[1] == 'M')
        return DITTO_IMAGE_BMP;
    if (n >= 3 && h[0] == 'P' && h[1] >= '1' && h[1] <= '7' && (h[2] == ' ' || h[2] == '\n' || h[2] == '\r' || h[2] == '\t'))
        return DITTO_IMAGE_PNM;
    return DITTO_IMAGE_UNKNOWN;
}

void ditto_image_free(DittoImage *img)
{
    if (!img)
        return;
    ditto_free(img->data);
    memset(img, 0, sizeof *img);
}

#ifndef DITTO_HAVE_FFMPEG

int ditto_image_load(const char *path, DittoImage *out, const DittoLogger *log)
{
    memset(out, 0, sizeof *out);
    return ditto_fail(log, DITTO_ERR_UNSUPPORTED, "%s: cannot decode images: this build has no FFmpeg (DITTO_FFMPEG=OFF)", path ? path : "(null)");
}

#else /* DITTO_HAVE_FFMPEG */

/* The libavformat demuxer for a sniffed kind (NULL: let FFmpeg probe). */
static const char *demuxer(DittoImageKind k, const uint8_t *head)
{
    static const char *const pnm[] = { "pbm_pipe", "pgm_pipe", "ppm_pipe", "pbm_pipe", "pgm_pipe", "ppm_pipe", "pam_pipe" };
    const char *name = NULL;
    switch (k) {
    case DITTO_IMAGE_JPEG: name = "jpeg_pipe"; break;
    case DITTO_IMAGE_PNG: name = "png_pipe"; break;
    case DITTO_IMAGE_BMP: name = "bmp_pipe"; break;
    case DITTO_IMAGE_GIF: name = "gif"; break;
    case DITTO_IMAGE_WEBP: name = "webp_pipe"; break;
    case DITTO_IMAGE_TIFF: name = "tiff_pipe"; break;
    case DITTO_IMAGE_PNM: name = pnm[head[1] - '1']; break;
    case DITTO_IMAGE_QOI: name = "qoi_pipe"; break;
    default: break;
    }
    /* an FFmpeg built without that demuxer still gets a chance through its probe */
    return name && av_find_input_format(name) ? name : NULL;
}

int ditto_image_load(const char *path, DittoImage *out, const DittoLogger *log)
{
    memset(out, 0, sizeof *out);
    if (!path)
        return ditto_fail(log, DITTO_ERR_INVAL, "image: no file name");
    DITTO_TRY(ditto_io_check_file(path, "image", log));
    uint8_t head[16] = { 0 };
    FILE *f = fopen(path, "rb");
    if (!f)
        return ditto_fail(log, errno == ENOENT ? DITTO_ERR_NOENT : DITTO_ERR_IO, "%s: cannot open image file: %s", path, strerror(errno));
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);

    DittoVideoReaderParams p;
    ditto_video_reader_params_default(&p);
    p.max_frames = 1;
    p.format = demuxer(ditto_image_sniff(head, n), head);
    DittoVideoReader *r;
    DITTO_TRY(ditto_video_reader_open(&r, path, &p, log));
    const uint8_t *rgb;
    int w, h;
    int rc = ditto_video_reader_read(r, &rgb, &w, &h);
    if (rc >= 0 && !rgb)
        rc = ditto_fail(log, DITTO_ERR_FORMAT, "%s: no image could be decoded", path);
    if (rc >= 0) {
        size_t bytes = (size_t)w * (size_t)h * 3;
        int o = ditto_video_reader_orientation(r);
        out->data = ditto_malloc(bytes);
        if (!out->data) {
            rc = ditto_fail(log, DITTO_ERR_NOMEM, "%s: out of memory for a %dx%d image", path, w, h);
        } else if (o != 1) {
            ditto_rgb_orient(rgb, w, h, o, out->data, &out->width, &out->height);
        } else {
            memcpy(out->data, rgb, bytes);
            out->width = w;
            out->height = h;
        }
    }
    ditto_video_reader_close(&r);
    if (rc < 0)
        ditto_image_free(out);
    return rc;
}

#endif /* DITTO_HAVE_FFMPEG */
