/*
 * Protocol Buffers wire format, read side only: a cursor over one message
 * that yields (field number, wire type, value) records. Nothing is copied:
 * length-delimited values point into the input. Every read is bounded by the
 * end of the enclosing message; a problem stops the cursor with a static
 * reason and the byte offset (from the start of the whole buffer), which the
 * caller turns into one error line naming the file.
 *
 * Wire types: 0 VARINT (int32/int64/uint64/bool/enum; at most 10 bytes),
 * 1 I64 (fixed64/double), 2 LEN (bytes/string/sub-message/packed repeated),
 * 5 I32 (fixed32/float). Groups (3, 4) are rejected: ONNX never uses them.
 */
#ifndef DITTO_WEIGHTS_PROTOBUF_H
#define DITTO_WEIGHTS_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum DittoPbWire {
    DITTO_PB_VARINT = 0,
    DITTO_PB_I64 = 1,
    DITTO_PB_LEN = 2,
    DITTO_PB_I32 = 5,
} DittoPbWire;

typedef struct DittoPbField {
    uint32_t number;           /* 1 .. 2^29-1 */
    DittoPbWire wire;
    uint64_t v;                /* VARINT, I64, I32 (zero-extended) */
    const uint8_t *data;       /* LEN: the payload */
    size_t len;
    size_t at;                 /* offset of the tag from the start of the buffer */
} DittoPbField;

typedef struct DittoPb {
    const uint8_t *base, *base_end;   /* the whole buffer (offsets, truncation test) */
    const uint8_t *p, *end;           /* the message being read */
    const char *err;                  /* reason of the first error, static text */
    size_t err_at;                    /* its offset from base */
    bool truncated;                   /* the error is a value running past the end of the buffer */
} DittoPb;

/* Cursor over data[0, size), which lies inside base[0, base_size). */
void ditto_pb_init(DittoPb *r, const uint8_t *base, size_t base_size, const uint8_t *data, size_t size);
/* Cursor over the payload of a LEN field read from parent (same base). */
void ditto_pb_sub(DittoPb *r, const DittoPb *parent, const DittoPbField *f);

/* Next field: 1 with *f filled, 0 at the end of the message, DITTO_ERR_FORMAT (r->err set) when malformed. */
int ditto_pb_next(DittoPb *r, DittoPbField *f);

/* One varint at *p (< end), advancing *p; 0 or DITTO_ERR_FORMAT (*why set). */
int ditto_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v, const char **why);

/* Number of varints in a packed run; DITTO_ERR_FORMAT (*why set) when the last one is cut off or one is too long. */
int ditto_pb_packed_varints(const uint8_t *d, size_t n, size_t *count, const char **why);

/* Little-endian fixed-width loads (any alignment). */
uint32_t ditto_pb_le32(const uint8_t *p);
uint64_t ditto_pb_le64(const uint8_t *p);
float ditto_pb_f32(uint64_t v);    /* bits of an I32 field as float */
double ditto_pb_f64(uint64_t v);   /* bits of an I64 field as double */

const char *ditto_pb_wire_name(DittoPbWire w);

#endif
