#!/usr/bin/env python3
"""Write the .pth seed files of this folder with the standard library only.

torch is not needed: small stand-ins for torch.FloatStorage & co. and
torch._utils._rebuild_tensor_v2 are registered under their real module names,
so pickle writes exactly the globals and persistent ids torch.save writes
(GLOBAL / STACK_GLOBAL, BINPERSID ('storage', cls, key, 'cpu', numel),
REDUCE, OrderedDict + BUILD with _metadata). zipfile writes the archive
(stored entries; no 64-byte alignment, unlike PyTorch: the reader must not
depend on it). Run from anywhere: python3 make_seeds.py
"""
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
torch._utils = utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = utils

# storage class name -> struct format of one element
FORMATS = {
    "FloatStorage": "f", "DoubleStorage": "d", "HalfStorage": "e", "BFloat16Storage": "H",
    "LongStorage": "q", "IntStorage": "i", "ByteStorage": "B", "CharStorage": "b", "BoolStorage": "?",
}
for name in FORMATS:
    setattr(torch, name, type(name, (), {"__module__": "torch"}))


def _rebuild_tensor_v2(*args):
    raise RuntimeError("stand-in: never called")


def _rebuild_parameter(*args):
    raise RuntimeError("stand-in: never called")


_rebuild_tensor_v2.__module__ = _rebuild_parameter.__module__ = "torch._utils"
utils._rebuild_tensor_v2 = _rebuild_tensor_v2
utils._rebuild_parameter = _rebuild_parameter


class Storage:
    def __init__(self, key, cls, values):
        self.key, self.cls, self.values = key, cls, values

    def raw(self):
        if self.cls == "BFloat16Storage":   # upper half of binary32
            return b"".join(struct.pack("<f", v)[2:] for v in self.values)
        return struct.pack("<%d%s" % (len(self.values), FORMATS[self.cls]), *self.values)


class Tensor:
    def __init__(self, storage, offset, size, stride, param=False):
        self.storage, self.offset, self.size, self.stride, self.param = storage, offset, tuple(size), tuple(stride), param

    def __reduce_ex__(self, proto):
        t = (_rebuild_tensor_v2, (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))
        if not self.param:
            return t
        return (_rebuild_parameter, (_Plain(t), False, collections.OrderedDict()))


class _Plain:
    def __init__(self, red):
        self.red = red

    def __reduce_ex__(self, proto):
        return self.red


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", getattr(torch, obj.cls), obj.key, "cpu", len(obj.values))
        return None


def state_dict(items):
    sd = collections.OrderedDict(items)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def write(path, prefix, obj, storages, protocol=2, byteorder=True, zip64=False):
    buf = io.BytesIO()
    Pickler(buf, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        def add(name, data):
            info = zipfile.ZipInfo(prefix + "/" + name, date_time=(1980, 1, 1, 0, 0, 0))   # reproducible bytes
            with z.open(info, "w", force_zip64=zip64) as f:
                f.write(data)
        add("data.pkl", buf.getvalue())
        if byteorder:
            add("byteorder", b"little")
        for s in storages:
            add("data/" + s.key, s.raw())
        add("version", b"3\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    w = Storage("0", "FloatStorage", [i * 0.25 - 1 for i in range(24)])
    nbt = Storage("1", "LongStorage", [0])
    # 1: a module state_dict (protocol 2, GLOBAL, BINPUT/BINGET), shared storage, a transposed view, a 0-dim int64
    write(os.path.join(here, "state_dict_p2.pth"), "archive", state_dict([
        ("conv.weight", Tensor(w, 0, (2, 3, 4), (12, 4, 1))),
        ("conv.weight_t", Tensor(w, 0, (4, 3), (1, 4))),
        ("conv.bias", Tensor(w, 20, (4,), (1,), param=True)),
        ("bn.num_batches_tracked", Tensor(nbt, 0, (), ())),
    ]), [w, nbt])
    # 2: {'model_state_dict': ...} with every other dtype, protocol 4 (FRAME, STACK_GLOBAL, MEMOIZE), zip64 extra fields
    sts = [Storage(str(i), c, v) for i, (c, v) in enumerate([
        ("HalfStorage", [1.5, -2.0, 0.25, 65504.0]), ("BFloat16Storage", [1.0, -3.5, 256.0, 0.0078125]),
        ("DoubleStorage", [1.25, -1e300, 3.0]), ("IntStorage", [-5, 100000]), ("ByteStorage", [0, 255, 17, 3]),
        ("CharStorage", [-128, 5, 127]), ("BoolStorage", [True, False, True]), ("FloatStorage", []),
    ])]
    write(os.path.join(here, "nested_dtypes_p4.pth"), "nested_dtypes_p4", {"model_state_dict": state_dict([
        ("half", Tensor(sts[0], 0, (4,), (1,))), ("bf16", Tensor(sts[1], 0, (2, 2), (2, 1))),
        ("f64", Tensor(sts[2], 0, (3,), (1,))), ("i32", Tensor(sts[3], 0, (2,), (1,))),
        ("u8", Tensor(sts[4], 0, (2, 2), (1, 2))), ("i8", Tensor(sts[5], 0, (3,), (1,))),
        ("mask", Tensor(sts[6], 0, (3,), (1,))), ("empty", Tensor(sts[7], 0, (0, 5), (5, 1))),
    ]), "epoch": 3}, sts, protocol=4, zip64=True)
    # 3: an io-style plain dict without byteorder record (PyTorch < 1.12), broadcast stride 0
    x = Storage("0", "FloatStorage", [float(i) for i in range(6)])
    write(os.path.join(here, "io_dict_old.pth"), "io_dict_old", {
        "x": Tensor(x, 0, (2, 3), (3, 1)), "row": Tensor(x, 3, (4, 3), (0, 1)),
    }, [x], byteorder=False)


if __name__ == "__main__":
    main()
