"""Best cuDNN time per convolution shape of the renderer, as PyTorch finds it
with cudnn.benchmark (every engine configuration tried), channels-last, fp16
storage, fp32 accumulation. Compared in docs/PERF.md (session 16) with the
op profile of `ditto bench --fp16 --profile`, to see which shapes our plans
leave slow; also the mask head's depth-split variants (outputs 154, 160,
128, and the (kd, ky) split with 1078 outputs).

    python3 bench/torch_ref/conv_best.py
    python3 bench/torch_ref/conv_best.py --mask-split   # the depth-split conv per output count
    python3 bench/torch_ref/conv_best.py --reshape      # other forms of the warp's slow 3-D convs
    python3 bench/torch_ref/conv_best.py --composite    # norm_s's gamma/beta conv with beta folded into conv_s

--mask-split times the mask head's depth-split 2-D convolution (144 inputs,
7x7, 64x64 slices of 8 items) for each output count a split of its 154
(depth tap, output) columns into pieces could use.
"""
import sys

import torch
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True


def timeit(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(iters):
        fn()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / iters   # ms


def report(label, n, ms, flop):
    print(f"{label:40s} n={n:<4d} {ms * 1e3:9.1f} us  {flop / ms / 1e9:7.1f} TFLOP/s", flush=True)


def conv3d(n, ci, co, d, h, w, k, label):
    x = torch.randn(n, ci, d, h, w, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last_3d)
    wt = (torch.randn(co, ci, k, k, k, device="cuda", dtype=torch.half) * 0.01).to(memory_format=torch.channels_last_3d)
    ms = timeit(lambda: F.conv3d(x, wt, padding=k // 2))
    report(label, n, ms, 2 * n * ci * co * k ** 3 * d * h * w)


def conv2d(n, ci, co, h, w, kh, kw, label, pad=None):
    x = torch.randn(n, ci, h, w, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    wt = (torch.randn(co, ci, kh, kw, device="cuda", dtype=torch.half) * 0.01).to(memory_format=torch.channels_last)
    pad = pad if pad is not None else (kh // 2, kw // 2)
    ms = timeit(lambda: F.conv2d(x, wt, padding=pad))
    oh, ow = h + 2 * pad[0] - kh + 1, w + 2 * pad[1] - kw + 1
    report(label, n, ms, 2 * n * ci * co * kh * kw * oh * ow)


def main():
    with torch.no_grad():
        for n in (3, 8):   # the warp's chunk, the batch
            conv3d(n, 142, 22, 16, 64, 64, 7, "mask 3d 142->22 7x7x7")
            conv2d(n * 16, 144, 154, 64, 64, 7, 7, "mask depth-split 144->154 7x7")
            conv2d(n * 16, 144, 160, 64, 64, 7, 7, "mask depth-split 144->160 7x7")
            conv2d(n * 16, 144, 128, 64, 64, 7, 7, "mask depth-split 144->128 7x7")
            conv2d(n * 16, 144, 1078, 64, 64, 1, 7, "mask (kd,ky)-split 144->1078 1x7")
            conv3d(n, 142, 142, 16, 64, 64, 3, "hg_out 142->142 3x3x3")
            conv3d(n, 144, 144, 16, 64, 64, 3, "hg_out 144->144 3x3x3")
            conv3d(n, 128, 32, 16, 64, 64, 3, "up4 128->32 3x3x3")
            conv3d(n, 110, 64, 16, 64, 64, 3, "down0 110->64 3x3x3")
            conv3d(n, 112, 64, 16, 64, 64, 3, "down0 112->64 3x3x3")
            conv3d(n, 64, 128, 16, 32, 32, 3, "down1 64->128 3x3x3")
            conv3d(n, 256, 64, 16, 32, 32, 3, "up3 256->64 3x3x3")
            conv3d(n, 1024, 512, 16, 4, 4, 3, "up0 1024->512 3x3x3")
        conv2d(8, 512, 512, 64, 64, 3, 3, "G_middle 512->512")
        conv2d(8, 128, 1024, 64, 64, 3, 3, "G_middle gamma/beta 128->1024")
        conv2d(8, 256, 128, 64, 64, 3, 3, "G_middle mlp_shared 256->128")
        conv2d(8, 256, 1536, 64, 64, 3, 3, "G_middle 12 mlp_shared 256->1536")
        conv2d(8, 512, 256, 64, 64, 3, 3, "third 512->256")
        for n in (1, 2):   # the up blocks' chunks
            conv2d(n, 128, 512, 256, 256, 3, 3, "up_1 gamma/beta 128->512 @256")
            conv2d(n, 128, 128, 256, 256, 3, 3, "up_1 gamma/beta 128->128 @256")
            conv2d(n, 256, 64, 256, 256, 3, 3, "up_1 conv_0 256->64 @256")
            conv2d(n, 64, 64, 256, 256, 3, 3, "up_1 conv_1 64->64 @256")
            conv2d(n, 256, 64, 256, 256, 1, 1, "up_1 conv_s 256->64 1x1 @256")
            conv2d(n, 256, 512, 128, 128, 2, 2, "up_1 phase 256->512 2x2 @128", pad=(1, 1))
            conv2d(n, 128, 1024, 128, 128, 3, 3, "up_0 gamma/beta 128->1024 @128")
            conv2d(n, 512, 256, 128, 128, 3, 3, "up_0 conv_0 512->256 @128")


def mask_split():
    with torch.no_grad():
        for n in (48, 128):   # 3 items, 8 items of 16 slices
            for co in (16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 256):
                conv2d(n, 144, co, 64, 64, 7, 7, f"mask depth-split 144->{co} 7x7")


def reshape():
    """The warp's slow convolutions (8 items) against other forms of the same
    sums: dec 4 (128 -> 32) and hg_out (144 -> 144) as depth splits (a 2-D
    conv over the 128 slices with kd * O outputs), hg_out's outputs in two
    pieces, the mask head with its
    inputs split 128 + 16, and with its 7 kw taps unfolded into 1008 (1024)
    channels of a 7x1 conv."""
    with torch.no_grad():
        conv3d(8, 128, 32, 16, 64, 64, 3, "dec4 3d 128->32 3x3x3")
        for co in (96, 128):
            conv2d(128, 128, co, 64, 64, 3, 3, f"dec4 split 128->{co} 3x3")
        conv3d(8, 144, 144, 16, 64, 64, 3, "hg_out 3d 144->144 3x3x3")
        conv3d(8, 144, 128, 16, 64, 64, 3, "hg_out 3d 144->128 3x3x3")
        conv3d(8, 128, 128, 16, 64, 64, 3, "3d 128->128 3x3x3")
        for co in (128, 192, 256, 432):
            conv2d(128, 144, co, 64, 64, 3, 3, f"hg_out split 144->{co} 3x3")
        for co in (96, 48, 16):   # hg_out's outputs in pieces that fill cuDNN's tiles: 96 + 48, 128 + 16
            conv3d(8, 144, co, 16, 64, 64, 3, f"hg_out 3d 144->{co} 3x3x3")
        conv3d(8, 112, 64, 16, 64, 64, 3, "enc0 3d 112->64 3x3x3")
        conv2d(128, 112, 192, 64, 64, 3, 3, "enc0 split 112->192 3x3")
        for ci in (128, 16, 32, 192):
            for co in (64, 96, 128, 160):
                conv2d(128, ci, co, 64, 64, 7, 7, f"mask split {ci}->{co} 7x7")
        for ci in (1008, 1024):
            for co in (64, 96, 128, 160, 192):
                conv2d(128, ci, co, 64, 64, 7, 1, f"mask kw-unfold {ci}->{co} 7x1")
        for n in (4, 8, 16, 32):   # slices unfolded at a time
            conv2d(n, 1008, 160, 64, 64, 7, 1, "mask kw-unfold 1008->160 7x1")


def composite():
    """The up blocks' norm_s: its gamma/beta convolution (128 -> 2 fin, 3x3)
    against gamma alone (128 -> fin) plus beta folded into the 1x1 conv_s
    that follows (Ws * beta = (Ws o Wbeta) * a: 128 -> fout), at the
    decoder's chunk sizes (up_0: 3 items at 128x128, up_1: 1 item at
    256x256)."""
    with torch.no_grad():
        for n, hw, fin, fout, blk in ((3, 128, 512, 256, "up_0"), (1, 256, 256, 64, "up_1")):
            conv2d(n, 128, 2 * fin, hw, hw, 3, 3, f"{blk} gamma+beta 128->{2 * fin}")
            conv2d(n, 128, fin, hw, hw, 3, 3, f"{blk} gamma 128->{fin}")
            conv2d(n, 128, fout, hw, hw, 3, 3, f"{blk} folded beta 128->{fout}")
            conv2d(n, 128, fin + fout, hw, hw, 3, 3, f"{blk} gamma+folded beta 128->{fin + fout}")


if __name__ == "__main__":
    if "--mask-split" in sys.argv[1:]:
        mask_split()
    elif "--reshape" in sys.argv[1:]:
        reshape()
    elif "--composite" in sys.argv[1:]:
        composite()
    else:
        main()
