#!/usr/bin/env python3
"""Check the PyTorch reference (renderer.py) against the Ditto fixtures.

usage: check_fixtures.py FIXTURES_DIR [--dtypes float64,float32] [--cases NAME,...]
                         [--device cpu|cuda] [--intermediates] [--verbose]

Loads warp.pth / decoder.pth / stitching.pth into the modules of renderer.py with
load_state_dict(strict=True) (sizes inferred from the shapes), runs the cases
warp_b1/b3, decoder_b1/b3, stitching_b1/b3 (and the function cases
fn_make_coordinate_grid, fn_kp2gaussian, fn_grid_sample_3d) on the CPU in float64
and in float32, and compares every output with the stored float64 reference at
the manifest tolerance tolerance.<out>.fp32 (rel_l2 and max_abs_over_max_ref).
A float64 run must also be within 1e-6 of the reference (it computes the same
function as the reference, which is stored rounded to float32).

--device cuda runs the same on the GPU (float32 with TF32 off) and adds the dtype
"autocast16": fp32 module and inputs under torch.autocast("cuda", float16), as
upstream runs the renderer, judged at tolerance.<out>.fp16_or_mixed and printed
next to the error the stock module showed in that mode
(measured_error.<out>.cuda_fp16_autocast).

Prints one line per case, dtype and output, then "N passed, N failed".
Exit status: 0 all passed, 1 any failure, 2 setup error (missing files, bad
arguments).
"""

import argparse
import copy
import json
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import renderer  # noqa: E402

NET_CASES = ["warp_b1", "warp_b3", "decoder_b1", "decoder_b3", "stitching_b1", "stitching_b3"]
FN_CASES = ["fn_make_coordinate_grid", "fn_kp2gaussian", "fn_grid_sample_3d"]
MODULE_CLASS = {"WarpingNetwork": renderer.WarpingNetwork, "SPADEDecoder": renderer.SPADEDecoder,
                "StitchingNetwork": renderer.StitchingNetwork}
FLOAT64_EXTRA_TOL = 1e-6
DTYPES = {"float64": torch.float64, "float32": torch.float32, "autocast16": torch.float32}


def torch_load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:  # very old torch without weights_only
        return torch.load(path, map_location="cpu")


def errors(out, ref):
    """(rel_l2, max_abs_over_max_ref, max_abs) in float64; NaN if out is not finite."""
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(torch.float64)
    if not bool(torch.isfinite(out).all()):
        nan = float("nan")
        return nan, nan, nan
    diff = out - ref
    ref_norm = float(ref.norm())
    ref_max = float(ref.abs().max()) if ref.numel() else 0.0
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    rel_l2 = float(diff.norm()) / ref_norm if ref_norm > 0 else (0.0 if float(diff.norm()) == 0 else float("inf"))
    mar = max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf"))
    return rel_l2, mar, max_abs


def within(value, tol):
    # NaN compares False, so a non-finite output fails
    return tol is None or (value == value and value <= tol)


class Checker:
    def __init__(self, verbose):
        self.passed = 0
        self.failed = 0
        self.verbose = verbose
        self.lines = []

    def result(self, case, dtype, name, out, ref, tol_rel, tol_mar):
        if tuple(out.shape) != tuple(ref.shape):
            self.fail_line(case, dtype, name, "shape %s != reference %s" % (tuple(out.shape), tuple(ref.shape)))
            return
        rel, mar, mabs = errors(out, ref)
        ok = within(rel, tol_rel) and within(mar, tol_mar)
        fmt = lambda t: "-" if t is None else "%.1e" % t  # noqa: E731
        line = ("%-24s %-7s %-15s rel_l2 %.3e (tol %s)  max_abs/max_ref %.3e (tol %s)  %s"
                % (case, dtype, name, rel, fmt(tol_rel), mar, fmt(tol_mar), "PASS" if ok else "FAIL"))
        print(line, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def info(self, case, dtype, name, out, ref):
        if tuple(out.shape) != tuple(ref.shape):
            print("  info %-20s %-7s %-20s shape %s != %s" % (case, dtype, name, tuple(out.shape), tuple(ref.shape)))
            return
        rel, mar, mabs = errors(out, ref)
        print("  info %-20s %-7s %-20s rel_l2 %.3e  max_abs/max_ref %.3e  max_abs %.3e"
              % (case, dtype, name, rel, mar, mabs), flush=True)

    def fail_line(self, case, dtype, name, why):
        print("%-24s %-7s %-15s FAIL: %s" % (case, dtype, name, why), flush=True)
        self.failed += 1


def tolerances(case, out_name, dtype_name):
    if dtype_name == "autocast16":
        tol = case.get("tolerance", {}).get(out_name, {}).get("fp16_or_mixed")
        if not tol:
            raise KeyError("case %s has no tolerance.%s.fp16_or_mixed" % (case["name"], out_name))
        return tol.get("rel_l2"), tol.get("max_abs_over_max_ref")
    tol = case.get("tolerance", {}).get(out_name, {}).get("fp32")
    if not tol or ("rel_l2" not in tol and "max_abs_over_max_ref" not in tol):
        raise KeyError("case %s has no tolerance.%s.fp32" % (case["name"], out_name))
    rel = tol.get("rel_l2")
    mar = tol.get("max_abs_over_max_ref")
    if dtype_name == "float64":
        rel = FLOAT64_EXTRA_TOL if rel is None else min(rel, FLOAT64_EXTRA_TOL)
        mar = FLOAT64_EXTRA_TOL if mar is None else min(mar, FLOAT64_EXTRA_TOL)
    return rel, mar


def run_net_case(chk, fixtures, case, dtypes, weights_cache, show_intermediates, device):
    name = case["name"]
    wfile = case.get("weights_file")
    if not wfile:
        raise ValueError("case %s has no weights_file" % name)
    if wfile not in weights_cache:
        sd = torch_load(os.path.join(fixtures, wfile))
        weights_cache[wfile] = renderer.build_from_state_dict(sd)  # strict load inside
    model = weights_cache[wfile]
    cls_name = case["module"].split(".")[-1]
    want = MODULE_CLASS.get(cls_name)
    if want is None or not isinstance(model, want):
        raise TypeError("case %s is a %s but %s built a %s" % (name, cls_name, wfile, type(model).__name__))
    io = torch_load(os.path.join(fixtures, case["io_file"]))
    in_names = list(case["inputs"].keys())
    out_names = list(case["outputs"].keys())
    if len(out_names) != 1:
        raise ValueError("case %s: expected one output, got %s" % (name, out_names))
    for k in in_names + out_names:
        if k not in io:
            raise KeyError("case %s: io file lacks %s" % (name, k))
    for dname in dtypes:
        dt = DTYPES[dname]
        m = copy.deepcopy(model).to(device, dt).eval()
        inputs = {k: io[k].to(device, dt) for k in in_names}
        taps = {}
        with torch.no_grad():
            if dname == "autocast16":
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    out = m(**inputs, taps=taps)
                out = out.float()
            else:
                out = m(**inputs, taps=taps)
        oname = out_names[0]
        tol_rel, tol_mar = tolerances(case, oname, dname)
        chk.result(name, dname, oname, out, io[oname], tol_rel, tol_mar)
        if dname == "autocast16":
            stock = case.get("measured_error", {}).get(oname, {}).get("cuda_fp16_autocast")
            if stock:
                print("  (stock module under fp16 autocast: rel_l2 %.3e, max_abs %.3e)"
                      % (stock["rel_l2"], stock["max_abs"]), flush=True)
        if show_intermediates:
            if (oname + "_fp32") in io:
                chk.info(name, dname, oname + " vs stock fp32", out, io[oname + "_fp32"])
            for iname in case.get("intermediates", {}):
                if iname in taps and iname in io:
                    chk.info(name, dname, iname, taps[iname], io[iname])
                elif iname in io:
                    print("  info %-20s %-7s %-20s (not tapped)" % (name, dname, iname))


def run_fn_case(chk, fixtures, case, dtypes, device):
    name = case["name"]
    io = torch_load(os.path.join(fixtures, case["io_file"]))
    params = case.get("params", {})
    for dname in dtypes:
        if dname == "autocast16":
            continue  # the pure functions run in fp32 under autocast
        dt = DTYPES[dname]
        with torch.no_grad():
            if name == "fn_make_coordinate_grid":
                out = renderer.make_coordinate_grid(tuple(params["spatial_size"]),
                                                    torch.empty(0, dtype=dt, device=device))
            elif name == "fn_kp2gaussian":
                out = renderer.kp2gaussian(io["kp"].to(device, dt), tuple(params["spatial_size"]),
                                           float(params.get("kp_variance", 0.01)))
            elif name == "fn_grid_sample_3d":
                out = renderer.grid_sample_3d(io["input"].to(device, dt), io["grid"].to(device, dt))
            else:
                raise ValueError("no runner for %s" % name)
        tol_rel, tol_mar = tolerances(case, "out", dname)
        chk.result(name, dname, "out", out, io["out"], tol_rel, tol_mar)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixtures", metavar="FIXTURES_DIR", help="folder with manifest.json (shared/fixtures/ditto)")
    ap.add_argument("--dtypes", default=None,
                    help="comma list of float64, float32, autocast16 (cuda only); "
                         "default float64,float32 (cpu) or float64,float32,autocast16 (cuda)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda (float32 runs with TF32 off)")
    ap.add_argument("--cases", default=",".join(NET_CASES + FN_CASES), help="comma list of case names")
    ap.add_argument("--intermediates", action="store_true",
                    help="also print (not judge) the error of every stored intermediate and of the stock fp32 output")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("check_fixtures: CUDA is not available", file=sys.stderr)
            return 2
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cudnn.allow_tf32 = False  # float32 must be float32
        torch.backends.cuda.matmul.allow_tf32 = False
    if args.dtypes is None:
        args.dtypes = "float64,float32,autocast16" if device.type == "cuda" else "float64,float32"
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in DTYPES or (d == "autocast16" and device.type != "cuda"):
            print("check_fixtures: unknown dtype %r (autocast16 needs --device cuda)" % d, file=sys.stderr)
            return 2
    man_path = os.path.join(args.fixtures, "manifest.json")
    if not os.path.isfile(man_path):
        print("check_fixtures: %s not found" % man_path, file=sys.stderr)
        return 2
    with open(man_path) as f:
        manifest = json.load(f)
    cases = {c["name"]: c for c in manifest["cases"]}
    torch.set_grad_enabled(False)
    where = ("CPU, %d threads" % torch.get_num_threads() if device.type == "cpu"
             else "%s (%s, TF32 off)" % (device, torch.cuda.get_device_name(device)))
    print("torch %s, %s, fixtures %s (generated with torch %s)"
          % (torch.__version__, where, args.fixtures, manifest.get("torch_version", "?")), flush=True)

    chk = Checker(args.verbose)
    weights_cache = {}
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not wanted:
        print("check_fixtures: no cases selected", file=sys.stderr)
        return 2
    for name in wanted:
        case = cases.get(name)
        if case is None:
            chk.fail_line(name, "-", "-", "case not in manifest")
            continue
        try:
            if name.startswith("fn_"):
                run_fn_case(chk, args.fixtures, case, dtypes, device)
            else:
                run_net_case(chk, args.fixtures, case, dtypes, weights_cache, args.intermediates, device)
        except Exception as e:  # any error is a failure of that case, loudly
            if args.verbose:
                traceback.print_exc()
            chk.fail_line(name, "-", "-", "%s: %s" % (type(e).__name__, e))
    if chk.passed + chk.failed == 0:
        print("check_fixtures: nothing was checked", file=sys.stderr)
        return 2
    print("%d passed, %d failed" % (chk.passed, chk.failed), flush=True)
    return 0 if chk.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
