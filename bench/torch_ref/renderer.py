"""PyTorch reference of the Ditto renderer networks, written from the project's
architecture specification (shared/ditto-architecture.md, sections 5.1, 5.4,
5.5, 5.6 and 6.1).

It exists only to check the fixtures and to time PyTorch side by side with
`ditto bench` (see README.md in this folder); the product never imports it.

Modules (state_dict keys are the official ones, so official checkpoints and the
reduced fixture checkpoints load with load_state_dict(strict=True)):

  WarpingNetwork(feature_3d, kp_source, kp_driving)  -> (B, 256, 64, 64)
      DenseMotionNetwork, Hourglass (Encoder/Decoder of DownBlock3d/UpBlock3d),
      SameBlock2d `third`, 1x1 `fourth`
  SPADEDecoder(feature)                               -> (B, 3, 512, 512)
      SPADEResnetBlock, SPADE, SpectralNormConv2d (weight_orig/weight_u/weight_v)
  StitchingNetwork(kp_source, kp_driving)             -> (B, 21, 3)

Every constructor default is the official full size. build_from_state_dict(sd)
infers the sizes from the tensor shapes (so the reduced fixture files load) and
random_full_size(seed) builds full-size modules with deterministic random
weights in the fixture style, for timing.

Every forward takes an optional `taps` dict; when given, named intermediates
(the names the fixtures use) are stored in it.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Pure functions (spec 5.1 "Coordinate grid", 5.4 steps 2 and 4)
# ---------------------------------------------------------------------------


def make_coordinate_grid(spatial_size, ref):
    """Grid of shape (D, H, W, 3) in the dtype/device of `ref`.

    grid[d, h, w] = (2w/(W-1) - 1, 2h/(H-1) - 1, 2d/(D-1) - 1): last axis is
    (x over W, y over H, z over D), the order grid_sample expects.
    """
    d, h, w = (int(s) for s in spatial_size)
    dtype, device = ref.dtype, ref.device
    x = torch.arange(w, device=device).to(dtype)
    y = torch.arange(h, device=device).to(dtype)
    z = torch.arange(d, device=device).to(dtype)
    x = 2 * (x / (w - 1)) - 1
    y = 2 * (y / (h - 1)) - 1
    z = 2 * (z / (d - 1)) - 1
    xx = x.view(1, 1, w).expand(d, h, w)
    yy = y.view(1, h, 1).expand(d, h, w)
    zz = z.view(d, 1, 1).expand(d, h, w)
    return torch.stack([xx, yy, zz], dim=3)


def kp2gaussian(kp, spatial_size, kp_variance=0.01):
    """Gaussian heatmaps of keypoints kp (..., 3) on the (D, H, W) grid.

    out[..., d, h, w] = exp(-0.5 * |grid[d, h, w] - kp|^2 / kp_variance),
    shape kp.shape[:-1] + (D, H, W).
    """
    grid = make_coordinate_grid(spatial_size, kp)  # (D, H, W, 3)
    lead = tuple(kp.shape[:-1])
    grid = grid.view((1,) * len(lead) + tuple(grid.shape))
    mean = kp.view(lead + (1, 1, 1, 3))
    diff = grid - mean
    return torch.exp(-0.5 * (diff ** 2).sum(-1) / kp_variance)


def grid_sample_3d(inp, grid):
    """Trilinear sampling, zero padding, align_corners=False (spec 5.1)."""
    return F.grid_sample(inp, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _tap(taps, name, value):
    if taps is not None:
        taps[name] = value


# ---------------------------------------------------------------------------
# Warping network (spec 5.4)
# ---------------------------------------------------------------------------


class DownBlock3d(nn.Module):
    """conv3x3x3 (pad 1) -> BatchNorm3d -> ReLU -> AvgPool (1,2,2). Keys: conv, norm."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.conv = nn.Conv3d(in_features, out_features, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm3d(out_features)

    def forward(self, x):
        x = F.relu(self.norm(self.conv(x)))
        return F.avg_pool3d(x, kernel_size=(1, 2, 2))


class UpBlock3d(nn.Module):
    """nearest x(1,2,2) -> conv3x3x3 (pad 1) -> BatchNorm3d -> ReLU. Keys: conv, norm."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.conv = nn.Conv3d(in_features, out_features, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm3d(out_features)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=(1, 2, 2), mode="nearest")
        return F.relu(self.norm(self.conv(x)))


def _hg_width(block_expansion, max_features, i):
    return min(max_features, block_expansion * (2 ** i))


class HourglassEncoder(nn.Module):
    """down_blocks.i: (in_features if i == 0 else min(mf, be*2^i)) -> min(mf, be*2^(i+1))."""

    def __init__(self, block_expansion, in_features, num_blocks, max_features):
        super().__init__()
        blocks = []
        for i in range(num_blocks):
            cin = in_features if i == 0 else _hg_width(block_expansion, max_features, i)
            cout = _hg_width(block_expansion, max_features, i + 1)
            blocks.append(DownBlock3d(cin, cout))
        self.down_blocks = nn.ModuleList(blocks)

    def forward(self, x):
        outs = [x]
        for block in self.down_blocks:
            outs.append(block(outs[-1]))
        return outs


class HourglassDecoder(nn.Module):
    """up_blocks.j (j = 0 is the deepest): i = num_blocks-1-j,
    in = (1 if i == num_blocks-1 else 2) * min(mf, be*2^(i+1)), out = min(mf, be*2^i);
    after each, concat [upsampled, skip] with the skips taken deepest first;
    then conv/norm/ReLU at out_filters = block_expansion + in_features."""

    def __init__(self, block_expansion, in_features, num_blocks, max_features):
        super().__init__()
        blocks = []
        for i in reversed(range(num_blocks)):
            mult = 1 if i == num_blocks - 1 else 2
            cin = mult * _hg_width(block_expansion, max_features, i + 1)
            cout = _hg_width(block_expansion, max_features, i)
            blocks.append(UpBlock3d(cin, cout))
        self.up_blocks = nn.ModuleList(blocks)
        self.out_filters = block_expansion + in_features
        self.conv = nn.Conv3d(self.out_filters, self.out_filters, kernel_size=3, padding=1)
        self.norm = nn.BatchNorm3d(self.out_filters)

    def forward(self, encoder_outs):
        skips = list(encoder_outs)
        out = skips.pop()
        for block in self.up_blocks:
            out = block(out)
            skip = skips.pop()
            out = torch.cat([out, skip], dim=1)
        return F.relu(self.norm(self.conv(out)))


class Hourglass(nn.Module):
    def __init__(self, block_expansion, in_features, num_blocks=3, max_features=256):
        super().__init__()
        self.encoder = HourglassEncoder(block_expansion, in_features, num_blocks, max_features)
        self.decoder = HourglassDecoder(block_expansion, in_features, num_blocks, max_features)
        self.out_filters = self.decoder.out_filters

    def forward(self, x):
        return self.decoder(self.encoder(x))


class DenseMotionNetwork(nn.Module):
    """Spec 5.4 steps 1-9. Returns dict(mask, deformation, occlusion_map)."""

    def __init__(self, block_expansion=32, num_blocks=5, max_features=1024, num_kp=21,
                 feature_channel=32, reshape_depth=16, compress=4, estimate_occlusion_map=True):
        super().__init__()
        self.num_kp = num_kp
        self.reshape_depth = reshape_depth
        in_features = (num_kp + 1) * (compress + 1)
        self.hourglass = Hourglass(block_expansion, in_features, num_blocks, max_features)
        out_filters = self.hourglass.out_filters
        self.mask = nn.Conv3d(out_filters, num_kp + 1, kernel_size=7, padding=3)
        self.compress = nn.Conv3d(feature_channel, compress, kernel_size=1)
        self.norm = nn.BatchNorm3d(compress)
        if estimate_occlusion_map:
            self.occlusion = nn.Conv2d(out_filters * reshape_depth, 1, kernel_size=7, padding=3)
        else:
            self.occlusion = None

    def forward(self, feature, kp_source, kp_driving, taps=None):
        bs, _, d, h, w = feature.shape
        k = self.num_kp
        if kp_source.shape != (bs, k, 3) or kp_driving.shape != (bs, k, 3):
            raise ValueError("keypoints must be (%d, %d, 3), got %s and %s"
                             % (bs, k, tuple(kp_source.shape), tuple(kp_driving.shape)))

        # 1. compress: conv1x1x1 -> BN -> ReLU
        feat = self.norm(self.compress(feature))
        _tap(taps, "dm_compress_bn", feat)
        feat = F.relu(feat)
        c = feat.shape[1]

        # 2. sparse motions S_0 = G, S_{k+1} = G - kp_driving[k] + kp_source[k]
        grid = make_coordinate_grid((d, h, w), kp_source)             # (d,h,w,3)
        grid = grid.view(1, 1, d, h, w, 3)
        kd = kp_driving.view(bs, k, 1, 1, 1, 3)
        ks = kp_source.view(bs, k, 1, 1, 1, 3)
        driving_to_source = (grid - kd) + ks                          # (bs,k,d,h,w,3)
        identity = grid.expand(bs, 1, d, h, w, 3).to(driving_to_source.dtype)
        sparse_motion = torch.cat([identity, driving_to_source], dim=1)  # (bs,k+1,d,h,w,3)

        # 3. deformed features: grid_sample(feat, S_m) for each of the k+1 motions
        feat_rep = feat.unsqueeze(1).expand(bs, k + 1, c, d, h, w).reshape(bs * (k + 1), c, d, h, w)
        motion_flat = sparse_motion.reshape(bs * (k + 1), d, h, w, 3)
        deformed = grid_sample_3d(feat_rep, motion_flat).view(bs, k + 1, c, d, h, w)

        # 4. heatmaps: gaussian(driving) - gaussian(source), zero map prepended
        heat = kp2gaussian(kp_driving, (d, h, w), 0.01) - kp2gaussian(kp_source, (d, h, w), 0.01)
        zeros = torch.zeros(bs, 1, d, h, w, dtype=heat.dtype, device=heat.device)
        heat = torch.cat([zeros, heat], dim=1).unsqueeze(2)          # (bs,k+1,1,d,h,w)

        # 5. hourglass input: channel m*(c+1) = heatmap m, then its c deformed channels
        hg_in = torch.cat([heat, deformed], dim=2).view(bs, (k + 1) * (c + 1), d, h, w)
        _tap(taps, "dm_hourglass_in", hg_in)

        # 6. hourglass
        prediction = self.hourglass(hg_in)
        _tap(taps, "dm_hourglass_out", prediction)

        # 7. mask: softmax over the k+1 motions
        mask = F.softmax(self.mask(prediction), dim=1)                # (bs,k+1,d,h,w)
        _tap(taps, "dm_mask", mask)

        # 8. deformation = sum_m mask_m * S_m
        deformation = (sparse_motion * mask.unsqueeze(-1)).sum(dim=1)  # (bs,d,h,w,3)
        _tap(taps, "dm_deformation", deformation)

        out = {"mask": mask, "deformation": deformation, "occlusion_map": None}
        # 9. occlusion: prediction viewed (bs, C*D, h, w), channel index c*D + d
        if self.occlusion is not None:
            pb, pc, pd, ph, pw = prediction.shape
            occ = torch.sigmoid(self.occlusion(prediction.reshape(pb, pc * pd, ph, pw)))
            _tap(taps, "dm_occlusion_map", occ)
            out["occlusion_map"] = occ
        return out


class SameBlock2d(nn.Module):
    """conv (k, pad) -> BatchNorm2d -> LeakyReLU(0.01) (or ReLU). Keys: conv, norm."""

    def __init__(self, in_features, out_features, kernel_size=3, padding=1, lrelu=True):
        super().__init__()
        self.conv = nn.Conv2d(in_features, out_features, kernel_size=kernel_size, padding=padding)
        self.norm = nn.BatchNorm2d(out_features)
        self.lrelu = lrelu

    def forward(self, x):
        x = self.norm(self.conv(x))
        return F.leaky_relu(x, 0.01) if self.lrelu else F.relu(x)


# Official sizes (spec 5.4): the WarpingNetwork's DenseMotionNetwork.
DENSE_MOTION_DEFAULTS = dict(block_expansion=32, max_features=1024, num_blocks=5,
                             reshape_depth=16, compress=4)


class WarpingNetwork(nn.Module):
    """Spec 5.4. forward(feature_3d (B,C,D,H,W), kp_source (B,K,3), kp_driving (B,K,3))
    -> (B, block_expansion * 2^num_down_blocks, H, W).

    `third` maps max_features (= reshape_channel * D) channels to
    block_expansion * 2^num_down_blocks; `fourth` is a 1x1 conv at that width.
    """

    def __init__(self, num_kp=21, block_expansion=64, max_features=512, num_down_blocks=2,
                 reshape_channel=32, estimate_occlusion_map=True, dense_motion_params=None):
        super().__init__()
        dm = dict(DENSE_MOTION_DEFAULTS)
        if dense_motion_params:
            dm.update(dense_motion_params)
        self.dense_motion_network = DenseMotionNetwork(
            num_kp=num_kp, feature_channel=reshape_channel,
            estimate_occlusion_map=estimate_occlusion_map, **dm)
        width = block_expansion * (2 ** num_down_blocks)
        self.third = SameBlock2d(max_features, width, kernel_size=3, padding=1, lrelu=True)
        self.fourth = nn.Conv2d(width, width, kernel_size=1)
        self.config = dict(num_kp=num_kp, block_expansion=block_expansion, max_features=max_features,
                           num_down_blocks=num_down_blocks, reshape_channel=reshape_channel,
                           estimate_occlusion_map=estimate_occlusion_map, dense_motion_params=dm)

    def forward(self, feature_3d, kp_source, kp_driving, taps=None):
        dm = self.dense_motion_network(feature_3d, kp_source, kp_driving, taps)
        warped = grid_sample_3d(feature_3d, dm["deformation"])      # (B,C,D,H,W)
        b, c, d, h, w = warped.shape
        warped = warped.reshape(b, c * d, h, w)                     # channel c*D + d
        _tap(taps, "warped_feature", warped)
        out = self.fourth(self.third(warped))
        _tap(taps, "pre_occlusion_out", out)
        occ = dm["occlusion_map"]
        if occ is not None:
            out = out * occ
        return out


# ---------------------------------------------------------------------------
# SPADE decoder (spec 5.5)
# ---------------------------------------------------------------------------


class SpectralNormConv2d(nn.Module):
    """Conv2d whose weight is stored the spectral-norm way.

    Keys: weight_orig (out, in, k, k) [parameter], bias (out) [parameter, optional],
    weight_u (out) and weight_v (in*k*k) [buffers]. At eval the effective weight is
    weight_orig / sigma with sigma = u . (W_mat v), W_mat = weight_orig viewed
    (out, in*k*k), u and v exactly as stored (no power iteration). It is computed
    in every forward, as the stock eval hook does.
    """

    def __init__(self, in_channels, out_channels, kernel_size, padding=0, bias=True):
        super().__init__()
        self.padding = padding
        fan_in = in_channels * kernel_size * kernel_size
        w = torch.randn(out_channels, in_channels, kernel_size, kernel_size) / math.sqrt(fan_in)
        v = torch.randn(fan_in)
        v = v / v.norm()
        u = torch.mv(w.reshape(out_channels, -1), v)
        u = u / u.norm()
        self.weight_orig = nn.Parameter(w)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_channels))
        else:
            self.register_parameter("bias", None)
        self.register_buffer("weight_u", u)
        self.register_buffer("weight_v", v)

    def sigma(self):
        w = self.weight_orig
        return torch.dot(self.weight_u, torch.mv(w.reshape(w.shape[0], -1), self.weight_v))

    def effective_weight(self):
        return self.weight_orig / self.sigma()

    def forward(self, x):
        return F.conv2d(x, self.effective_weight(), self.bias, padding=self.padding)


class SPADE(nn.Module):
    """n = InstanceNorm(x) (no affine, eps 1e-5); s = nearest_resize(seg, x.HxW);
    a = ReLU(mlp_shared.0(s)); return n * (1 + mlp_gamma(a)) + mlp_beta(a)."""

    def __init__(self, norm_nc, label_nc, nhidden=128):
        super().__init__()
        self.mlp_shared = nn.Sequential(nn.Conv2d(label_nc, nhidden, kernel_size=3, padding=1), nn.ReLU())
        self.mlp_gamma = nn.Conv2d(nhidden, norm_nc, kernel_size=3, padding=1)
        self.mlp_beta = nn.Conv2d(nhidden, norm_nc, kernel_size=3, padding=1)

    def forward(self, x, seg):
        normalized = F.instance_norm(x, eps=1e-5)
        seg = F.interpolate(seg, size=tuple(x.shape[2:]), mode="nearest")
        actv = self.mlp_shared(seg)
        gamma = self.mlp_gamma(actv)
        beta = self.mlp_beta(actv)
        return normalized * (1 + gamma) + beta


class SPADEResnetBlock(nn.Module):
    """fmid = min(fin, fout); dx = conv_0(lrelu0.2(norm_0(x))), dx = conv_1(lrelu0.2(norm_1(dx)));
    shortcut = conv_s(norm_s(x)) (1x1, no bias) when fin != fout, else x; out = shortcut + dx."""

    def __init__(self, fin, fout, label_nc, nhidden=128):
        super().__init__()
        fmid = min(fin, fout)
        self.learned_shortcut = fin != fout
        self.conv_0 = SpectralNormConv2d(fin, fmid, 3, padding=1, bias=True)
        self.conv_1 = SpectralNormConv2d(fmid, fout, 3, padding=1, bias=True)
        if self.learned_shortcut:
            self.conv_s = SpectralNormConv2d(fin, fout, 1, padding=0, bias=False)
        self.norm_0 = SPADE(fin, label_nc, nhidden)
        self.norm_1 = SPADE(fmid, label_nc, nhidden)
        if self.learned_shortcut:
            self.norm_s = SPADE(fin, label_nc, nhidden)

    def forward(self, x, seg):
        if self.learned_shortcut:
            x_s = self.conv_s(self.norm_s(x, seg))
        else:
            x_s = x
        dx = self.conv_0(F.leaky_relu(self.norm_0(x, seg), 0.2))
        dx = self.conv_1(F.leaky_relu(self.norm_1(dx, seg), 0.2))
        return x_s + dx


class SPADEDecoder(nn.Module):
    """Spec 5.5. forward(feature (B, C, H, W)) -> (B, 3, 4H*u, 4W*u) in (0, 1), u = 2 if upscale > 1.

    C = input_channels = min(max_features, block_expansion * 2^num_down_blocks) unless given.
    fc: C -> 2C; G_middle_0..5: (2C, 2C); x2; up_0: (2C, C); x2; up_1: (C, out_channels);
    lrelu 0.2 -> conv_img (-> PixelShuffle(2) when upscale > 1) -> sigmoid.
    """

    NUM_MIDDLE = 6

    def __init__(self, upscale=2, max_features=256, block_expansion=64, out_channels=64,
                 num_down_blocks=2, spade_hidden=128, input_channels=None):
        super().__init__()
        if input_channels is None:
            input_channels = min(max_features, block_expansion * (2 ** num_down_blocks))
        ic = input_channels
        label_nc = ic
        self.upscale = upscale
        self.fc = nn.Conv2d(ic, 2 * ic, kernel_size=3, padding=1)
        for i in range(self.NUM_MIDDLE):
            setattr(self, "G_middle_%d" % i, SPADEResnetBlock(2 * ic, 2 * ic, label_nc, spade_hidden))
        self.up_0 = SPADEResnetBlock(2 * ic, ic, label_nc, spade_hidden)
        self.up_1 = SPADEResnetBlock(ic, out_channels, label_nc, spade_hidden)
        if upscale is not None and upscale > 1:
            self.conv_img = nn.Sequential(nn.Conv2d(out_channels, 3 * 4, kernel_size=3, padding=1),
                                          nn.PixelShuffle(2))
        else:
            self.conv_img = nn.Conv2d(out_channels, 3, kernel_size=3, padding=1)
        self.config = dict(upscale=upscale, input_channels=ic, out_channels=out_channels,
                           spade_hidden=spade_hidden)

    def forward(self, feature, taps=None):
        seg = feature
        x = self.fc(feature)
        _tap(taps, "fc_out", x)
        for i in range(self.NUM_MIDDLE):
            x = getattr(self, "G_middle_%d" % i)(x, seg)
            _tap(taps, "G_middle_%d_out" % i, x)
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = self.up_0(x, seg)
        _tap(taps, "up_0_out", x)
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = self.up_1(x, seg)
        _tap(taps, "up_1_out", x)
        x = self.conv_img(F.leaky_relu(x, 0.2))
        _tap(taps, "logits", x)
        return torch.sigmoid(x)


# ---------------------------------------------------------------------------
# Stitching network (spec 5.6)
# ---------------------------------------------------------------------------


class StitchingNetwork(nn.Module):
    """mlp.0/2/4/6 (Linear, ReLU between). delta = mlp(cat(kp_source.flat, kp_driving.flat));
    out[k] = kp_driving[k] + delta[3k:3k+3]; out[k].xy += delta[3K:3K+2]."""

    def __init__(self, input_size=126, hidden_sizes=(128, 128, 64), output_size=65):
        super().__init__()
        layers = []
        prev = input_size
        for hsz in hidden_sizes:
            layers.append(nn.Linear(prev, hsz))
            layers.append(nn.ReLU())
            prev = hsz
        layers.append(nn.Linear(prev, output_size))
        self.mlp = nn.Sequential(*layers)
        self.config = dict(input_size=input_size, hidden_sizes=tuple(hidden_sizes), output_size=output_size)

    def forward(self, kp_source, kp_driving, taps=None):
        bs, k = kp_source.shape[0], kp_source.shape[1]
        x = torch.cat([kp_source.reshape(bs, -1), kp_driving.reshape(bs, -1)], dim=1)
        delta = self.mlp(x)
        _tap(taps, "delta", delta)
        if delta.shape[1] < 3 * k + 2:
            raise ValueError("stitching output has %d values, need %d" % (delta.shape[1], 3 * k + 2))
        delta_exp = delta[:, : 3 * k].reshape(bs, k, 3)
        delta_xy = delta[:, 3 * k: 3 * k + 2].reshape(bs, 1, 2)
        shift = torch.cat([delta_xy, torch.zeros_like(delta_xy[:, :, :1])], dim=2)  # (bs,1,3), z += 0
        return (kp_driving + delta_exp) + shift


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def clean_state_dict(sd):
    """Unwrap {'retarget_shoulder': sd} and drop every 'module.' substring (DDP prefix)."""
    if isinstance(sd, dict) and "retarget_shoulder" in sd and isinstance(sd["retarget_shoulder"], dict):
        sd = sd["retarget_shoulder"]
    out = {}
    for key, val in sd.items():
        if not torch.is_tensor(val):
            raise TypeError("state_dict entry %r is not a tensor (%s)" % (key, type(val).__name__))
        out[key.replace("module.", "")] = val
    return out


def _count_indexed(sd, prefix, suffix):
    n = 0
    while (prefix + "%d" % n + suffix) in sd:
        n += 1
    return n


def _warp_from_sd(sd):
    p = "dense_motion_network."
    num_kp = sd[p + "mask.weight"].shape[0] - 1
    compress, feature_channel = (int(s) for s in sd[p + "compress.weight"].shape[:2])
    hgp = p + "hourglass."
    num_blocks = _count_indexed(sd, hgp + "encoder.down_blocks.", ".conv.weight")
    if num_blocks < 1:
        raise ValueError("warp state_dict: no hourglass encoder blocks")
    in_features = int(sd[hgp + "encoder.down_blocks.0.conv.weight"].shape[1])
    if in_features != (num_kp + 1) * (compress + 1):
        raise ValueError("warp state_dict: hourglass input %d != (num_kp+1)*(compress+1) = %d"
                         % (in_features, (num_kp + 1) * (compress + 1)))
    out_filters = int(sd[hgp + "decoder.conv.weight"].shape[0])
    dm_be = out_filters - in_features
    # the widest encoder output is min(max_features, be * 2^num_blocks); using it as
    # max_features builds identical shapes whether or not the clamp was active
    dm_mf = int(sd[hgp + "encoder.down_blocks.%d.conv.weight" % (num_blocks - 1)].shape[0])
    occ = (p + "occlusion.weight") in sd
    third_out, third_in = (int(s) for s in sd["third.conv.weight"].shape[:2])
    if occ:
        occ_in = int(sd[p + "occlusion.weight"].shape[1])
        if occ_in % out_filters:
            raise ValueError("warp state_dict: occlusion input %d not a multiple of %d" % (occ_in, out_filters))
        reshape_depth = occ_in // out_filters
    else:
        reshape_depth = third_in // feature_channel
    if third_in != feature_channel * reshape_depth:
        raise ValueError("warp state_dict: third input %d != feature_channel %d * depth %d"
                         % (third_in, feature_channel, reshape_depth))
    if third_out % 4 == 0:
        be, ndown = third_out // 4, 2
    else:
        be, ndown = third_out, 0
    return WarpingNetwork(num_kp=num_kp, block_expansion=be, max_features=third_in,
                          num_down_blocks=ndown, reshape_channel=feature_channel,
                          estimate_occlusion_map=occ,
                          dense_motion_params=dict(block_expansion=dm_be, max_features=dm_mf,
                                                   num_blocks=num_blocks, reshape_depth=reshape_depth,
                                                   compress=compress))


def _decoder_from_sd(sd):
    ic = int(sd["fc.weight"].shape[1])
    if int(sd["fc.weight"].shape[0]) != 2 * ic:
        raise ValueError("decoder state_dict: fc is %s, expected (2C, C, 3, 3)" % (tuple(sd["fc.weight"].shape),))
    out_channels = int(sd["up_1.conv_1.weight_orig"].shape[0])
    nhidden = int(sd["G_middle_0.norm_0.mlp_shared.0.weight"].shape[0])
    upscale = 2 if "conv_img.0.weight" in sd else 1
    return SPADEDecoder(upscale=upscale, out_channels=out_channels, spade_hidden=nhidden, input_channels=ic)


def _stitching_from_sd(sd):
    idx = sorted(int(k.split(".")[1]) for k in sd if k.startswith("mlp.") and k.endswith(".weight"))
    if not idx or idx != list(range(0, 2 * len(idx), 2)):
        raise ValueError("stitching state_dict: linear layers at mlp.%s, expected mlp.0, mlp.2, ..." % idx)
    shapes = [tuple(sd["mlp.%d.weight" % i].shape) for i in idx]
    return StitchingNetwork(input_size=shapes[0][1], hidden_sizes=tuple(s[0] for s in shapes[:-1]),
                            output_size=shapes[-1][0])


def build_from_state_dict(sd):
    """Build the module a checkpoint belongs to, with sizes inferred from the shapes,
    load it with strict=True and return it in eval mode (float32, CPU)."""
    sd = clean_state_dict(sd)
    if "dense_motion_network.mask.weight" in sd:
        model = _warp_from_sd(sd)
    elif "fc.weight" in sd and "G_middle_0.conv_0.weight_orig" in sd:
        model = _decoder_from_sd(sd)
    elif "mlp.0.weight" in sd:
        model = _stitching_from_sd(sd)
    else:
        raise ValueError("state_dict belongs to no known renderer network (first keys: %s)" % list(sd)[:5])
    model.load_state_dict(sd, strict=True)
    return model.eval()


# ---------------------------------------------------------------------------
# Random weights in the fixture style (for timing at full size)
# ---------------------------------------------------------------------------

# Official parameter counts (spec 5.4, 5.5, 5.6): learned parameters, weight_orig
# counted, BN running stats and spectral u/v not.
OFFICIAL_PARAM_COUNTS = {"warp": 45529829, "decoder": 55365388, "stitching": 45249}

WARP_GAINS = {"dense_motion_network.mask.weight": 10.0, "dense_motion_network.occlusion.weight": 5.0}


SPECTRAL_POWER_ITERS = 2


def fill_random_(module, seed, gains=None):
    """Deterministic random weights: conv/linear (incl. weight_orig) N(0, 1/fan_in),
    biases 0.1 N(0,1), 1-D norm weights 1 + 0.2 N(0,1), BN running_mean 0.1 N(0,1),
    running_var U(0.5, 1.5); spectral norm: v = a random unit vector after
    SPECTRAL_POWER_ITERS power iterations (v <- W^T W v / |.|), u = W v / |W v|, so
    sigma = |W v| is near the largest singular value (as in the fixtures; with a
    plain random v, sigma would be ~sqrt(out/fan_in) and the decoder would saturate).
    `gains` multiplies named weights afterwards. Returns the module."""
    g = torch.Generator().manual_seed(int(seed))
    sd = module.state_dict()
    new = {}
    for key in sd:  # state_dict order is deterministic
        t = sd[key]
        shape = tuple(t.shape)
        if key.endswith("num_batches_tracked"):
            new[key] = t.clone()
        elif key.endswith("running_mean"):
            new[key] = 0.1 * torch.randn(shape, generator=g)
        elif key.endswith("running_var"):
            new[key] = 0.5 + torch.rand(shape, generator=g)
        elif key.endswith("weight_u") or key.endswith("weight_v"):
            continue  # set together with weight_orig
        elif key.endswith("weight_orig"):
            fan_in = int(t.numel() // shape[0])
            w = torch.randn(shape, generator=g) / math.sqrt(fan_in)
            w_mat = w.reshape(shape[0], -1)
            v = torch.randn(fan_in, generator=g)
            v = v / v.norm()
            for _ in range(SPECTRAL_POWER_ITERS):  # as the fixtures: a few power iterations
                wtu = torch.mv(w_mat.t(), torch.mv(w_mat, v))
                v = wtu / wtu.norm()
            wv = torch.mv(w_mat, v)
            new[key] = w
            new[key[: -len("orig")] + "u"] = wv / wv.norm()
            new[key[: -len("orig")] + "v"] = v
        elif key.endswith("weight") and len(shape) >= 2:
            fan_in = int(t.numel() // shape[0])
            new[key] = torch.randn(shape, generator=g) / math.sqrt(fan_in)
        elif key.endswith("weight") and len(shape) == 1:
            new[key] = 1.0 + 0.2 * torch.randn(shape, generator=g)
        elif key.endswith("bias"):
            new[key] = 0.1 * torch.randn(shape, generator=g)
        else:
            raise KeyError("fill_random_: no rule for %s %s" % (key, shape))
    for key, gain in (gains or {}).items():
        if key not in new:
            raise KeyError("fill_random_: gain for missing key %s" % key)
        new[key] = new[key] * gain
    module.load_state_dict(new, strict=True)
    return module.eval()


def count_params(module):
    return sum(p.numel() for p in module.parameters())


def random_warp(seed=1, **kwargs):
    return fill_random_(WarpingNetwork(**kwargs), seed, WARP_GAINS)


def random_decoder(seed=2, **kwargs):
    return fill_random_(SPADEDecoder(**kwargs), seed)


def random_stitching(seed=3, **kwargs):
    return fill_random_(StitchingNetwork(**kwargs), seed)


def random_full_size(seed=0, check_counts=True):
    """Full-size warp, decoder and stitching modules (float32, CPU, eval) with
    deterministic random weights. Checks the parameter counts against the spec."""
    nets = {"warp": random_warp(seed * 10 + 1), "decoder": random_decoder(seed * 10 + 2),
            "stitching": random_stitching(seed * 10 + 3)}
    if check_counts:
        for name, model in nets.items():
            n = count_params(model)
            if n != OFFICIAL_PARAM_COUNTS[name]:
                raise AssertionError("%s: %d parameters, the official network has %d"
                                     % (name, n, OFFICIAL_PARAM_COUNTS[name]))
    return nets


# Small configuration (warp and decoder of the fixture's sizes, made consistent so
# the warp output feeds the decoder): for smoke tests of the benchmark on a CPU.
SMALL_WARP = dict(num_kp=21, block_expansion=4, max_features=32, num_down_blocks=2, reshape_channel=8,
                  dense_motion_params=dict(block_expansion=8, num_blocks=3, max_features=32,
                                           reshape_depth=4, compress=2))
SMALL_DECODER = dict(upscale=2, out_channels=4, spade_hidden=128, input_channels=16)
SMALL_FEATURE_SHAPE = (8, 4, 16, 24)  # (C, D, H, W) of feature_3d
FULL_FEATURE_SHAPE = (32, 16, 64, 64)


def random_small(seed=0):
    return {"warp": random_warp(seed * 10 + 1, **SMALL_WARP),
            "decoder": random_decoder(seed * 10 + 2, **SMALL_DECODER),
            "stitching": random_stitching(seed * 10 + 3)}
