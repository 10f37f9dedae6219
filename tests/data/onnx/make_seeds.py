#!/usr/bin/env python3
"""Write the .onnx seed files of this folder with the standard library only.

No onnx / protobuf package: a few lines below encode the protobuf wire format
(varints, fixed32/64, length-delimited fields) with the field numbers of
onnx/onnx.proto. The output is deterministic. Run from anywhere:
    python3 tests/data/onnx/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# TensorProto.DataType
FLOAT, UINT8, INT8, INT32, INT64, BOOL, FLOAT16, DOUBLE, BFLOAT16 = 1, 2, 3, 6, 7, 9, 10, 11, 16
# AttributeProto.AttributeType
A_FLOAT, A_INT, A_STRING, A_TENSOR, A_FLOATS, A_INTS, A_STRINGS = 1, 2, 3, 4, 6, 7, 8


# ---- wire format ---------------------------------------------------------------

def varint(v):
    v &= (1 << 64) - 1          # negative int32/int64 values: two's complement, 10 bytes
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(field, wire):
    return varint(field << 3 | wire)


def f_int(field, v):
    return tag(field, 0) + varint(v)


def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return tag(field, 2) + varint(len(b)) + b


def f_float(field, v):
    return tag(field, 5) + struct.pack("<f", v)


def f_ints(field, vals, packed=True):
    if packed:
        return f_bytes(field, b"".join(varint(v) for v in vals))
    return b"".join(f_int(field, v) for v in vals)


def f_floats(field, vals, packed=True):
    if packed:
        return f_bytes(field, struct.pack("<%df" % len(vals), *vals))
    return b"".join(f_float(field, v) for v in vals)


def f_doubles(field, vals, packed=True):
    if packed:
        return f_bytes(field, struct.pack("<%dd" % len(vals), *vals))
    return b"".join(tag(field, 1) + struct.pack("<d", v) for v in vals)


# ---- ONNX messages -----------------------------------------------------------------

def tensor(name, dtype, dims, raw=None, body=b"", packed_dims=True):
    """TensorProto: name 8, dims 1, data_type 2, raw_data 9, typed fields in body."""
    t = b""
    if name is not None:
        t += f_bytes(8, name)
    t += f_ints(1, dims, packed_dims) + f_int(2, dtype)
    if raw is not None:
        t += f_bytes(9, raw)
    return t + body


def external(name, dims, location, offset=None, length=None):
    """FLOAT tensor in a side file: external_data 13 (key 1 / value 2), data_location 14 = EXTERNAL."""
    body = b""
    for key, val in (("location", location), ("offset", offset), ("length", length)):
        if val is not None:
            body += f_bytes(13, f_bytes(1, key) + f_bytes(2, str(val)))
    return tensor(name, FLOAT, dims, body=body + f_int(14, 1))


def value_info(name, elem, dims):
    """ValueInfoProto: name 1, type 2 -> tensor_type 1 -> elem_type 1, shape 2 -> dim 1 -> dim_value 1 | dim_param 2."""
    shape = b""
    for d in dims:
        shape += f_bytes(1, f_bytes(2, d) if isinstance(d, str) else f_int(1, d))
    tt = f_int(1, elem) + f_bytes(2, shape)
    return f_bytes(1, name) + f_bytes(2, f_bytes(1, tt))


def attr(name, atype, payload):
    """AttributeProto: name 1, type 20, value fields 2 (f), 3 (i), 4 (s), 5 (t), 7 (floats), 8 (ints), 9 (strings)."""
    return f_bytes(1, name) + payload + f_int(20, atype)


def node(op, inputs, outputs, attrs=(), name=None):
    """NodeProto: input 1, output 2, name 3, op_type 4, attribute 5."""
    n = b"".join(f_bytes(1, i) for i in inputs) + b"".join(f_bytes(2, o) for o in outputs)
    if name:
        n += f_bytes(3, name)
    n += f_bytes(4, op)
    return n + b"".join(f_bytes(5, a) for a in attrs)


def graph(nodes, inits, inputs, outputs, value_infos=(), name="g"):
    """GraphProto: node 1, name 2, initializer 5, input 11, output 12, value_info 13."""
    g = b"".join(f_bytes(1, n) for n in nodes) + f_bytes(2, name)
    g += b"".join(f_bytes(5, t) for t in inits)
    g += b"".join(f_bytes(11, v) for v in inputs) + b"".join(f_bytes(12, v) for v in outputs)
    return g + b"".join(f_bytes(13, v) for v in value_infos)


def model(g, ir=8, opset=13, producer="ditto-seeds"):
    """ModelProto: ir_version 1, producer_name 2, graph 7, opset_import 8 (domain 1, version 2)."""
    return f_int(1, ir) + f_bytes(2, producer) + f_bytes(7, g) + f_bytes(8, f_bytes(1, "") + f_int(2, opset))


def f16_bits(v):
    return struct.unpack("<H", struct.pack("<e", v))[0]


def bf16_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16   # exact for these values


# ---- seeds -------------------------------------------------------------------------

def typed_fields():
    inits = [
        tensor("raw_f32", FLOAT, [2, 3], raw=struct.pack("<6f", 1, -2, 3.5, 0.25, -1e-3, 1e6)),
        tensor("packed_f32", FLOAT, [3], body=f_floats(4, [0.5, -0.5, 2.0])),
        tensor("unpacked_f32", FLOAT, [2], body=f_floats(4, [7.0, 8.0], packed=False), packed_dims=False),
        tensor("i64", INT64, [3], body=f_ints(7, [-1, 0, 1 << 40], packed=False)),
        tensor("i32", INT32, [1, 3], body=f_ints(5, [-7, 0, 2147483647])),
        tensor("u8", UINT8, [4], body=f_ints(5, [0, 1, 200, 255])),
        tensor("i8", INT8, [3], body=f_ints(5, [-128, 0, 127])),
        tensor("flag", BOOL, [2], body=f_ints(5, [1, 0])),
        tensor("f16", FLOAT16, [3], body=f_ints(5, [f16_bits(v) for v in (1.5, -2.0, 65504.0)])),
        tensor("bf16", BFLOAT16, [2], body=f_ints(5, [bf16_bits(v) for v in (1.0, -3.5)], packed=False)),
        tensor("f64", DOUBLE, [2], body=f_doubles(10, [1.0 / 3.0, -1e300])),
    ]
    g = graph([node("Add", ["x", "raw_f32"], ["y"])], inits,
              [value_info("x", FLOAT, ["N", 3])], [value_info("y", FLOAT, ["N", 3])])
    return model(g)


def attributes_constants():
    value = tensor(None, INT64, [2], raw=struct.pack("<2q", 1, -1))
    fill = tensor(None, FLOAT, [1], body=f_floats(4, [0.75]))
    nodes = [
        node("Constant", [], ["shape"], [attr("value", A_TENSOR, f_bytes(5, value))], name="c0"),
        node("Constant", [], ["scales"], [attr("value_floats", A_FLOATS, f_floats(7, [1.0, 2.0]))]),
        node("ConstantOfShape", ["shape"], ["filled"], [attr("value", A_TENSOR, f_bytes(5, fill))], name="fill"),
        node("Conv", ["x", "w", ""], ["z"], [
            attr("kernel_shape", A_INTS, f_ints(8, [3, 3])),
            attr("pads", A_INTS, f_ints(8, [1, 1, 1, 1], packed=False)),
            attr("group", A_INT, f_int(3, 1)),
            attr("alpha", A_FLOAT, f_float(2, 0.125)),
            attr("auto_pad", A_STRING, f_bytes(4, "NOTSET")),
            attr("names", A_STRINGS, f_bytes(9, "a") + f_bytes(9, "")),
        ], name="conv1"),
        node("Relu", ["z"], ["out"]),
    ]
    w = tensor("w", FLOAT, [1, 1, 3, 3], raw=struct.pack("<9f", *range(9)))
    g = graph(nodes, [w], [value_info("x", FLOAT, [1, 1, "H", "W"])], [value_info("out", FLOAT, [1, 1, "H", "W"])],
              [value_info("z", FLOAT, [1, 1, "H", "W"])])
    return model(g, opset=17)


def init_as_input_ir3():
    """The old PyTorch exporter: every weight is a graph input too; IR 3, opset 9."""
    w = tensor("conv.weight", FLOAT, [2, 1, 1, 1], raw=struct.pack("<2f", 1.0, -1.0))
    b = tensor("conv.bias", FLOAT, [2], raw=struct.pack("<2f", 0.5, 0.25))
    nodes = [node("Conv", ["input", "conv.weight", "conv.bias"], ["c"], [attr("kernel_shape", A_INTS, f_ints(8, [1, 1]))]),
             node("Relu", ["c"], ["output"])]
    inputs = [value_info("input", FLOAT, [1, 1, 4, 4]), value_info("conv.weight", FLOAT, [2, 1, 1, 1]),
              value_info("conv.bias", FLOAT, [2])]
    g = graph(nodes, [w, b], inputs, [value_info("output", FLOAT, [1, 2, 4, 4])], name="torch-jit-export")
    return model(g, ir=3, opset=9, producer="pytorch")


def external_model():
    """Weights in external/weights.bin: w = bytes [0, 16), b = [16, 24) (offset and length given)."""
    raw = struct.pack("<6f", 1, 2, 3, 4, -5, 6.5)
    inits = [external("w", [2, 2], "weights.bin"), external("b", [2], "weights.bin", offset=16, length=8)]
    g = graph([node("Add", ["x", "w"], ["y"])], inits, [value_info("x", FLOAT, [2, 2])], [value_info("y", FLOAT, [2, 2])])
    return model(g), raw


def main():
    files = {
        "typed_fields.onnx": typed_fields(),
        "attributes_constants.onnx": attributes_constants(),
        "init_as_input_ir3.onnx": init_as_input_ir3(),
    }
    ext, raw = external_model()
    files["external/model.onnx"] = ext
    files["external/weights.bin"] = raw
    for name, data in files.items():
        path = os.path.join(HERE, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        print("%-28s %5d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
