/* Protocol Buffers wire-format cursor (see protobuf.h). */
#include "weights/protobuf.h"

#include <string.h>

#include "core/log.h"

void ditto_pb_init(DittoPb *r, const uint8_t *base, size_t base_size, const uint8_t *data, size_t size)
{
    r->base = base;
    r->base_end = base + base_size;
    r->p = data;
    r->end = data + size;
    r->err = NULL;
    r->err_at = 0;
    r->truncated = false;
}

void ditto_pb_sub(DittoPb *r, const DittoPb *parent, const DittoPbField *f)
{
    DITTO_ASSERT(f->wire == DITTO_PB_LEN);
    r->base = parent->base;
    r->base_end = parent->base_end;
    r->p = f->data;
    r->end = f->data + f->len;
    r->err = NULL;
    r->err_at = 0;
    r->truncated = false;
}

static const char truncated_varint[] = "truncated varint";   /* compared by address: the only "ran out of bytes" case */

int ditto_pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v, const char **why)
{
    const uint8_t *p = *pp;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) {
            *why = truncated_varint;
            return DITTO_ERR_FORMAT;
        }
        uint8_t b = *p++;
        /* the 10th byte carries bit 63 only: anything more does not fit 64 bits */
        if (i == 9 && b > 1) {
            *why = b & 0x80 ? "varint longer than 10 bytes" : "varint overflows 64 bits";
            return DITTO_ERR_FORMAT;
        }
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return 0;
        }
    }
    DITTO_ASSERT(0);   /* the 10th byte either ends the varint or fails above */
    return DITTO_ERR_FORMAT;
}

int ditto_pb_packed_varints(const uint8_t *d, size_t n, size_t *count, const char **why)
{
    size_t k = 0, run = 0;
    for (size_t i = 0; i < n; i++) {
        if (++run == 10 && d[i] > 1) {
            *why = d[i] & 0x80 ? "varint longer than 10 bytes" : "varint overflows 64 bits";
            return DITTO_ERR_FORMAT;
        }
        if (!(d[i] & 0x80)) {
            k++;
            run = 0;
        }
    }
    if (run) {
        *why = "truncated varint in a packed field";
        return DITTO_ERR_FORMAT;
    }
    *count = k;
    return 0;
}

static int fail(DittoPb *r, const uint8_t *at, const char *why, bool truncated)
{
    r->err = why;
    r->err_at = (size_t)(at - r->base);
    r->truncated = truncated;
    r->p = r->end;   /* a failed cursor stays at the end */
    return DITTO_ERR_FORMAT;
}

int ditto_pb_next(DittoPb *r, DittoPbField *f)
{
    if (r->err)
        return DITTO_ERR_FORMAT;
    if (r->p >= r->end)
        return 0;
    const uint8_t *at = r->p, *p = r->p;
    const char *why = NULL;
    uint64_t tag;
    if (ditto_pb_varint(&p, r->end, &tag, &why) < 0)
        return fail(r, at, why, why == truncated_varint && r->end == r->base_end);
    if (tag >> 32)
        return fail(r, at, "field tag over 32 bits", false);
    uint32_t number = (uint32_t)(tag >> 3);
    unsigned wire = (unsigned)(tag & 7);
    if (number == 0)
        return fail(r, at, "field number 0", false);
    memset(f, 0, sizeof *f);
    f->number = number;
    f->at = (size_t)(at - r->base);
    size_t left = (size_t)(r->end - p);
    switch (wire) {
    case DITTO_PB_VARINT:
        if (ditto_pb_varint(&p, r->end, &f->v, &why) < 0)
            return fail(r, at, why, why == truncated_varint && r->end == r->base_end);
        break;
    case DITTO_PB_I64:
        if (left < 8)
            return fail(r, at, "fixed64 value runs past the end", (size_t)(r->base_end - p) < 8);
        f->v = ditto_pb_le64(p);
        p += 8;
        break;
    case DITTO_PB_I32:
        if (left < 4)
            return fail(r, at, "fixed32 value runs past the end", (size_t)(r->base_end - p) < 4);
        f->v = ditto_pb_le32(p);
        p += 4;
        break;
    case DITTO_PB_LEN: {
        uint64_t n;
        if (ditto_pb_varint(&p, r->end, &n, &why) < 0)
            return fail(r, at, why, why == truncated_varint && r->end == r->base_end);
        left = (size_t)(r->end - p);
        if (n > left)
            return fail(r, at, "length-delimited value runs past the end", n > (uint64_t)(r->base_end - p));
        f->data = p;
        f->len = (size_t)n;
        p += n;
        break;
    }
    case 3:
    case 4:
        return fail(r, at, "group wire type (not used by ONNX)", false);
    default:
        return fail(r, at, "invalid wire type", false);
    }
    f->wire = (DittoPbWire)wire;
    r->p = p;
    return 1;
}

uint32_t ditto_pb_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t ditto_pb_le64(const uint8_t *p)
{
    return (uint64_t)ditto_pb_le32(p) | (uint64_t)ditto_pb_le32(p + 4) << 32;
}

float ditto_pb_f32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

double ditto_pb_f64(uint64_t v)
{
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

const char *ditto_pb_wire_name(DittoPbWire w)
{
    switch (w) {
    case DITTO_PB_VARINT: return "varint";
    case DITTO_PB_I64: return "fixed64";
    case DITTO_PB_LEN: return "length-delimited";
    case DITTO_PB_I32: return "fixed32";
    }
    return "invalid";
}
