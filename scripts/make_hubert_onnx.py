#!/usr/bin/env python3
"""Build the HuBERT-architecture ONNX test case for `ditto verify` (kind "onnx").

Ditto's audio encoder (hubert_streaming_fix_kv.onnx, HuBERT-large, 1.2 GB) is
not public in a small form, so this script builds a network of the same
architecture from a small config with seeded random weights, exports it to
ONNX the way such a model is exported (opset 17, LayerNormalization, Erf-based
GELU, grouped positional conv with its last frame dropped, attention with
MatMul/Softmax, shape subgraphs for a dynamic sample count), runs ONNX Runtime
on seeded inputs, and writes a fixture folder:

  OUT/hubert_small.onnx          the model (< 2 MB)
  OUT/hubert_small_6480.io.pth   {input_values (1, 6480), encoding_out (20, 64)}
  OUT/hubert_small_3240.io.pth   the same graph at another length (symbolic dim)
  OUT/manifest.json              same format as ../shared/fixtures/onnx/manifest.json

Interface as Ditto's file: input `input_values` (1, L) float32 raw 16 kHz
audio, output `encoding_out` (T, hidden) with T = floor((L - 400) / 320) + 1,
the last hidden state without its batch axis.

Needs torch, transformers and onnxruntime (no internet: nothing is
downloaded). Usage:  python3 scripts/make_hubert_onnx.py OUT [--seed 0]
Then:                ditto verify --fixtures OUT
"""
import argparse
import collections
import hashlib
import json
import os
import sys

import numpy as np
import onnxruntime as ort
import torch
from transformers import HubertConfig, HubertModel

try:  # optional: checks and the op histogram
    import onnx
except ImportError:  # pragma: no cover
    onnx = None

MODEL_FILE = "hubert_small.onnx"
LENGTHS = (6480, 3240)   # Ditto's chunk, and the shortest length its TensorRT profile allows


def make_config():
    cfg = HubertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        conv_kernel=(10, 3, 3, 3, 3, 2, 2),
        conv_stride=(5, 2, 2, 2, 2, 2, 2),
        conv_bias=True,
        feat_extract_norm="layer",
        feat_extract_activation="gelu",
        hidden_act="gelu",
        do_stable_layer_norm=True,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        final_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
        mask_feature_prob=0.0,
    )
    return cfg


def make_model(cfg, seed):
    torch.manual_seed(seed)
    model = None
    # eager attention exports as plain MatMul / Softmax, like the older exports Ditto's file comes from
    for make in (lambda: HubertModel._from_config(cfg, attn_implementation="eager"), lambda: HubertModel(cfg)):
        try:
            model = make()
            break
        except Exception as e:  # noqa: BLE001 - API differences across transformers versions
            print(f"note: {e}", file=sys.stderr)
    if model is None:
        raise SystemExit("cannot build HubertModel")
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation("eager")
        except Exception as e:  # noqa: BLE001
            print(f"note: set_attn_implementation: {e}", file=sys.stderr)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        # HF init leaves every norm at weight 1 / bias 0: randomise them so the test sees their parameters
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                if name.endswith("weight"):
                    p.copy_(0.5 + torch.rand(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


class EncodingOut(torch.nn.Module):
    """input_values (1, L) -> encoding_out (T, hidden): the last hidden state without the batch axis."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_values):
        out = self.model(input_values)
        hidden = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
        return hidden[0]


def export(wrapper, path, opset):
    x = torch.zeros(1, LENGTHS[0])
    attempts = []
    # the TorchScript exporter first (opset 17, dynamic length), then the dynamo one
    attempts.append(("torchscript", dict(dynamo=False, opset_version=opset, do_constant_folding=True,
                                         dynamic_axes={"input_values": {1: "samples"}, "encoding_out": {0: "frames"}})))
    samples = torch.export.Dim("samples", min=400, max=16000)
    attempts.append(("dynamo", dict(dynamo=True, opset_version=max(opset, 18),
                                    dynamic_shapes={"input_values": {1: samples}})))
    attempts.append(("dynamo-static", dict(dynamo=True, opset_version=max(opset, 18))))
    for how, kw in attempts:
        try:
            if os.path.exists(path):
                os.remove(path)
            torch.onnx.export(wrapper, (x,), path, input_names=["input_values"], output_names=["encoding_out"], **kw)
            data = path + ".data"
            if os.path.exists(data):
                if onnx is None:
                    raise RuntimeError("the exporter wrote external data and the onnx package is missing to inline it")
                m = onnx.load(path)   # loads the external data too
                onnx.save_model(m, path, save_as_external_data=False)
                os.remove(data)
            if onnx is not None:
                onnx.checker.check_model(onnx.load(path))
            return how, kw["opset_version"]
        except Exception as e:  # noqa: BLE001
            print(f"export via {how} failed: {e}", file=sys.stderr)
    raise SystemExit("no exporter succeeded")


def stats(a):
    a = a.astype(np.float64)
    return {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()), "std": float(a.std())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output folder (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_grad_enabled(False)

    cfg = make_config()
    model = make_model(cfg, args.seed)
    wrapper = EncodingOut(model).eval()
    path = os.path.join(args.out, MODEL_FILE)
    how, opset = export(wrapper, path, args.opset)
    size = os.path.getsize(path)
    if size >= 2 << 20:
        raise SystemExit(f"{path} is {size} bytes, over 2 MB")
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    ops = collections.Counter(n.op_type for n in onnx.load(path).graph.node) if onnx is not None else {}
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    dims = sess.get_inputs()[0].shape
    dynamic = any(not isinstance(d, int) for d in dims)
    print(f"exported via {how}, opset {opset}, {size} bytes, input dims {dims}")
    print("ops: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))

    cases = []
    for i, length in enumerate(LENGTHS if dynamic else LENGTHS[:1]):
        g = torch.Generator().manual_seed(args.seed + 100 + i)
        # speech-like amplitude: a few tones plus noise, well inside [-1, 1]
        t = torch.arange(length, dtype=torch.float64) / 16000.0
        x = 0.1 * torch.randn(1, length, generator=g, dtype=torch.float64)
        for f0, a in ((180.0, 0.3), (440.0, 0.2), (1250.0, 0.1)):
            x += a * torch.sin(2 * np.pi * f0 * t)
        x = x.to(torch.float32).contiguous()
        ref = sess.run(["encoding_out"], {"input_values": x.numpy()})[0]
        pt = wrapper(x).numpy()
        frames = (length - 400) // 320 + 1
        if ref.shape != (frames, cfg.hidden_size):
            raise SystemExit(f"encoding_out has shape {ref.shape}, expected {(frames, cfg.hidden_size)}")
        diff = float(np.abs(ref - pt).max() / max(np.abs(pt).max(), 1e-30))
        print(f"L={length}: encoding_out {ref.shape}, onnxruntime vs torch max/ref {diff:.2e}")
        name = f"hubert_small_{length}"
        io_file = f"{name}.io.pth"
        torch.save({"input_values": x, "encoding_out": torch.from_numpy(np.ascontiguousarray(ref))},
                   os.path.join(args.out, io_file))
        cases.append({
            "name": name,
            "kind": "onnx",
            "model_file": MODEL_FILE,
            "model_sha256": sha,
            "io_file": io_file,
            "inputs": {"input_values": {"shape": list(x.shape), "dtype": "float32",
                                        "source": f"three tones + 0.1 N(0,1), torch seed {args.seed + 100 + i}"}},
            "outputs": {"encoding_out": {"shape": list(ref.shape), "dtype": "float32", "stats": stats(ref)}},
            "tolerance": {"encoding_out": {"rel_l2": 1e-4, "max_abs_over_max_ref": 1e-3}},
            "reference": f"onnxruntime {ort.__version__} CPUExecutionProvider, default session options",
        })
    manifest = {
        "set": "hubert_small",
        "kind": "onnx",
        "reference": f"onnxruntime {ort.__version__}",
        "model": {
            "what": "HubertModel (transformers) with a small config and seeded random weights, exported through "
                    "a wrapper returning last_hidden_state[0] as encoding_out (Ditto's hubert interface)",
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.to_dict().items()
                       if k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "conv_dim",
                                "conv_kernel", "conv_stride", "conv_bias", "feat_extract_norm", "do_stable_layer_norm",
                                "num_conv_pos_embeddings", "num_conv_pos_embedding_groups", "hidden_act")},
            "seed": args.seed,
            "exporter": f"torch {torch.__version__} ({how}), opset {opset}",
            "transformers": __import__("transformers").__version__,
            "ops": dict(sorted(ops.items())),
        },
        "io_conventions": "io file = torch.save(dict name -> contiguous CPU tensor); inputs under the graph input names, "
                          "reference outputs under the graph output names",
        "tolerance_metric": "rel_l2 = ||out-ref||/||ref||; max_abs_over_max_ref = max|out-ref|/max|ref|; both must hold per output",
        "cases": cases,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} case(s) to {args.out}")


if __name__ == "__main__":
    main()
