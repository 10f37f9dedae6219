"""Times the renderer's convolution shapes through cuDNN (via PyTorch) in the
layouts our CUDA backend could use: NCHW one item per call (what ditto does
now), NCHW batched, channels-last batched, channels-last with the channel
counts padded to a multiple of 8. fp16 storage, fp32 accumulation. Prints
ms per frame and TFLOP/s per shape, and totals weighted by the number of
times each shape runs per frame. Used to decide the conv layout (issue 7).

    python3 bench/torch_ref/conv_layouts.py [--batch 8]
"""
import argparse
import json

import torch
import torch.nn.functional as F

# (name, calls per frame, Cin, Cout, kernel, spatial) at the official sizes
SHAPES = [
    ("warp.mask 7^3", 1, 142, 22, 7, (16, 64, 64)),
    ("warp.hg_out 3^3", 1, 142, 142, 3, (16, 64, 64)),
    ("warp.down0 3^3", 1, 110, 64, 3, (16, 64, 64)),
    ("warp.up4 3^3", 1, 128, 32, 3, (16, 64, 64)),
    ("warp.down1 3^3", 1, 64, 128, 3, (16, 32, 32)),
    ("warp.up3 3^3", 1, 256, 64, 3, (16, 32, 32)),
    ("warp.up2 3^3", 1, 512, 128, 3, (16, 16, 16)),
    ("warp.occlusion 7^2", 1, 2272, 1, 7, (64, 64)),
    ("warp.third 3^2", 1, 512, 256, 3, (64, 64)),
    ("dec.mid conv 512", 12, 512, 512, 3, (64, 64)),
    ("dec.mid shared", 12, 256, 128, 3, (64, 64)),
    ("dec.mid shared x2 cat", 6, 256, 256, 3, (64, 64)),
    ("dec.mid gamma", 24, 128, 512, 3, (64, 64)),
    ("dec.mid gamma+beta cat", 12, 128, 1024, 3, (64, 64)),
    ("dec.up0 gamma 512", 4, 128, 512, 3, (128, 128)),
    ("dec.up0 shared", 3, 256, 128, 3, (128, 128)),
    ("dec.up0 conv_0", 1, 512, 256, 3, (128, 128)),
    ("dec.up1 gamma 256", 4, 128, 256, 3, (256, 256)),
    ("dec.up1 gamma+beta cat", 2, 128, 512, 3, (256, 256)),
    ("dec.up1 shared", 3, 256, 128, 3, (256, 256)),
    ("dec.up1 shared x3 cat", 1, 256, 384, 3, (256, 256)),
    ("dec.up1 conv_0", 1, 256, 64, 3, (256, 256)),
    ("dec.up1 gamma 64", 2, 128, 64, 3, (256, 256)),
    ("dec.conv_img", 1, 64, 12, 3, (256, 256)),
]


def pad8(c):
    return (c + 7) // 8 * 8


def timeit(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    B = a.batch
    dev = "cuda"
    rows = []
    tot = {"item_nchw": 0.0, "nchw": 0.0, "nhwc": 0.0, "nhwc_pad8": 0.0}
    print(f"{'shape':24s} {'n/f':>4s} {'GF/f':>7s} | ms/frame: {'item nchw':>9s} {'nchw':>7s} {'nhwc':>7s} {'nhwc p8':>7s} | TF/s nhwc p8")
    for name, calls, cin, cout, k, sp in SHAPES:
        nd = len(sp)
        conv = F.conv3d if nd == 3 else F.conv2d
        mf = torch.channels_last_3d if nd == 3 else torch.channels_last
        gf = 2 * cin * cout * k ** nd * torch.tensor(sp).prod().item() / 1e9
        res = {}
        for mode in tot:
            ci, co = (pad8(cin), pad8(cout)) if mode == "nhwc_pad8" else (cin, cout)
            n = 1 if mode == "item_nchw" else B
            x = torch.randn(n, ci, *sp, device=dev, dtype=torch.half)
            w = torch.randn(co, ci, *([k] * nd), device=dev, dtype=torch.half) * 0.01
            if mode.startswith("nhwc"):
                x = x.contiguous(memory_format=mf)
                w = w.contiguous(memory_format=mf)
            try:
                ms = timeit(lambda: conv(x, w, padding=k // 2))
                res[mode] = ms / n
            except RuntimeError as e:   # out of memory or unsupported
                res[mode] = float("nan")
                print("  ", mode, str(e).splitlines()[0])
            del x, w
            torch.cuda.empty_cache()
        for m in tot:
            tot[m] += calls * res[m]
        print(f"{name:24s} {calls:4d} {gf:7.2f} | {res['item_nchw']:18.3f} {res['nchw']:7.3f} {res['nhwc']:7.3f} {res['nhwc_pad8']:7.3f} |"
              f" {gf / res['nhwc_pad8'] if res['nhwc_pad8'] > 0 else 0:6.0f}")
        rows.append({"name": name, "calls": calls, "gflop": gf, **res})
    print("weighted total ms/frame (calls x ms; 'cat' rows are alternatives, counted too):",
          {k: round(v, 3) for k, v in tot.items()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"batch": B, "rows": rows, "total": tot}, f, indent=1)


if __name__ == "__main__":
    main()
