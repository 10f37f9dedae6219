#!/usr/bin/env python3
"""Time the PyTorch reference renderer (renderer.py) at the official size with
random weights, in the ways PyTorch users run it, so that `ditto bench` numbers
can be stated as ratios measured in the same run on the same GPU.

Modes (--modes, comma list):
  autocast  upstream mode: fp32 weights and inputs, each network call inside
            torch.autocast("cuda", dtype=torch.float16), eager, B = --autocast-batch
            (default 1, as upstream runs it); the stitching MLP in fp32 (upstream
            runs it without autocast); outputs cast back with .float()
  half      model.half(), fp16 inputs, eager, B = --batch (default 8)
  compile   torch.compile(model.half()), B = --batch; each --compile-modes entry
            (default max-autotune-no-cudagraphs, then default) is tried in order in
            a child process with a time limit; the first that works is used
            (--compile-all times every one); the table says which

Per mode: warp, decode, warp+decode and stitch times (CUDA events, --warmup
untimed calls, median of --iters), ms/frame and frames/s, peak memory
(torch.cuda.max_memory_allocated: over the timed calls, and including the first
call/compile; stats reset between modes; weights and inputs included), and the
fidelity against a float32 run of the same weights with TF32 off (or float64,
--ref-dtype float64): warp output rel-L2, decoded image cosine / rel-L2 / max
abs, stitched keypoints rel-L2. Host<->device copies are not timed.

Prints a table, writes JSON to --json (rewritten after each mode). Each mode
runs inside try/except: an error is printed and recorded, and the next mode
runs. Exit status 0 when every requested mode produced a result, 1 otherwise,
2 for a setup error (no CUDA, bad arguments).

--device cpu --small runs the same code on the CPU with the small (fixture-like)
configuration, as a smoke test (half = bfloat16 there).
"""

import argparse
import copy
import gc
import importlib
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import renderer  # noqa: E402

KINDS = ("autocast", "half", "compile")
ALIASES = {"autocast": "autocast", "autocast_b1": "autocast", "upstream": "autocast", "a": "autocast",
           "half": "half", "half_b8": "half", "b": "half",
           "compile": "compile", "compile_b8": "compile", "c": "compile"}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


class Ctx:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:  # torch.cuda.* calls below want an index
            self.device = torch.device("cuda", torch.cuda.current_device())
        if args.half_dtype:
            self.half = DTYPES[args.half_dtype]
        else:
            self.half = torch.float16 if self.cuda else torch.bfloat16

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def cleanup(self):
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()

    def reset_peak(self):
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self):
        return int(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None


def time_step(ctx, step, iters, warmup):
    """Median/min/mean milliseconds of one call of step() (CUDA events on the GPU)."""
    for _ in range(warmup):
        step()
    ctx.sync()
    times = []
    for _ in range(iters):
        if ctx.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(float(start.elapsed_time(end)))
        else:
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "mean_ms": sum(times) / len(times), "iters": len(times)}


def fidelity(out, ref):
    """rel_l2, cosine, max_abs of out vs ref (any dtypes, compared in float64)."""
    a = out.detach().to(torch.float64).flatten()
    b = ref.detach().to(a.device, torch.float64).flatten()
    if a.shape != b.shape:
        raise ValueError("fidelity: shape %s vs reference %s" % (tuple(out.shape), tuple(ref.shape)))
    finite = bool(torch.isfinite(a).all())
    d = a - b
    bn = float(b.norm())
    an = float(a.norm())
    return {"rel_l2": float(d.norm()) / bn if bn > 0 else float("nan"),
            "cosine": float(torch.dot(a, b)) / (an * bn) if an > 0 and bn > 0 else float("nan"),
            "max_abs": float(d.abs().max()),
            "max_abs_ref": float(b.abs().max()),
            "finite": finite}


def set_tf32(flag):
    """Set cuDNN/cuBLAS TF32 use; returns the previous values (None if it could not be set)."""
    try:
        old = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = flag
        torch.backends.cuda.matmul.allow_tf32 = flag
        return old
    except Exception as e:  # a future torch may only have the fp32_precision API
        log("warning: cannot set TF32 flags (%s: %s); the reference may use TF32" % (type(e).__name__, e))
        return None


def restore_tf32(old):
    if old is not None:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def module_bytes(*mods):
    n = 0
    for m in mods:
        for t in list(m.parameters()) + list(m.buffers()):
            n += t.numel() * t.element_size()
    return n


def make_inputs(batch, feature_shape, seed):
    g = torch.Generator().manual_seed(int(seed) + 12345)
    fs = torch.randn((batch,) + tuple(feature_shape), generator=g)
    ks = torch.rand((batch, 21, 3), generator=g) * 1.2 - 0.6
    kd = ks + 0.15 * torch.randn((batch, 21, 3), generator=g)
    return {"feature_3d": fs, "kp_source": ks, "kp_driving": kd}


def build_nets(args):
    t0 = time.perf_counter()
    if args.small:
        nets = renderer.random_small(args.seed)
        fshape = renderer.SMALL_FEATURE_SHAPE
    else:
        nets = renderer.random_full_size(args.seed)  # checks the official parameter counts
        fshape = renderer.FULL_FEATURE_SHAPE
    for m in nets.values():
        m.eval()
    return nets, fshape, time.perf_counter() - t0


# ---------------------------------------------------------------------------
# reference (for fidelity)
# ---------------------------------------------------------------------------


def compute_reference(ctx, nets, inputs, nsamples):
    """Outputs of the same weights in --ref-dtype (TF32 off), one sample at a time."""
    dt = DTYPES[ctx.args.ref_dtype]
    old = set_tf32(False) if ctx.cuda else None
    t0 = time.perf_counter()
    try:
        warp = copy.deepcopy(nets["warp"]).to(ctx.device, dt)
        dec = copy.deepcopy(nets["decoder"]).to(ctx.device, dt)
        st = copy.deepcopy(nets["stitching"]).to(ctx.device, dt)
        ws, imgs, kps = [], [], []
        with torch.no_grad():
            for i in range(nsamples):
                fs = inputs["feature_3d"][i:i + 1].to(ctx.device, dt)
                ks = inputs["kp_source"][i:i + 1].to(ctx.device, dt)
                kd = inputs["kp_driving"][i:i + 1].to(ctx.device, dt)
                w = warp(fs, ks, kd)
                img = dec(w)
                kp = st(ks, kd)
                ws.append(w.cpu())
                imgs.append(img.cpu())
                kps.append(kp.cpu())
        ref = {"warp": torch.cat(ws), "img": torch.cat(imgs), "kp": torch.cat(kps)}
        for k, v in ref.items():
            if not bool(torch.isfinite(v).all()):
                raise FloatingPointError("reference %s is not finite" % k)
        del warp, dec, st
    finally:
        if old is not None:
            restore_tf32(old)
        ctx.cleanup()
    log("reference: %s, %d samples, %.1f s (warp out %s, image %s)"
        % (ctx.args.ref_dtype, nsamples, time.perf_counter() - t0, tuple(ref["warp"].shape[1:]),
           tuple(ref["img"].shape[1:])))
    return ref


# ---------------------------------------------------------------------------
# one mode, in this process
# ---------------------------------------------------------------------------


def mode_label(kind, compile_mode=None):
    if kind == "autocast":
        return "autocast"
    if kind == "half":
        return "half"
    return "compile[%s]" % compile_mode


def run_mode(ctx, nets, inputs, ref, kind, batch, compile_mode=None):
    args = ctx.args
    res = {"mode": mode_label(kind, compile_mode), "kind": kind, "batch": batch,
           "compile_mode": compile_mode, "ok": False}
    ctx.cleanup()
    ctx.reset_peak()
    dev = ctx.device
    warp = copy.deepcopy(nets["warp"]).to(dev)
    dec = copy.deepcopy(nets["decoder"]).to(dev)
    st = copy.deepcopy(nets["stitching"]).to(dev)
    mark = None

    if kind == "autocast":
        in_dtype = torch.float32
        res["precision"] = "fp32 weights, torch.autocast(%s, %s) per network call; stitching fp32" % (
            dev.type, str(ctx.half).replace("torch.", ""))

        def warp_fn(fs, ks, kd):
            with torch.autocast(device_type=dev.type, dtype=ctx.half):
                out = warp(fs, ks, kd)
            return out.float()

        def dec_fn(x):
            with torch.autocast(device_type=dev.type, dtype=ctx.half):
                img = dec(x)
            return img.float()

        def stitch_fn(ks, kd):
            return st(ks, kd)
    elif kind in ("half", "compile"):
        in_dtype = ctx.half
        warp.to(ctx.half)
        dec.to(ctx.half)
        st.to(ctx.half)
        res["precision"] = "model.to(%s), %s inputs" % (str(ctx.half).replace("torch.", ""),
                                                        str(ctx.half).replace("torch.", ""))
        w_m, d_m, s_m = warp, dec, st
        if kind == "compile":
            if not hasattr(torch, "compile"):
                raise RuntimeError("torch.compile is not available in torch %s" % torch.__version__)
            dynamo = importlib.import_module("torch._dynamo")  # (a local `import torch...` would shadow torch)
            dynamo.reset()
            w_m = torch.compile(warp, mode=compile_mode, dynamic=False)
            d_m = torch.compile(dec, mode=compile_mode, dynamic=False)
            s_m = torch.compile(st, mode=compile_mode, dynamic=False)
            if compile_mode and "reduce-overhead" in compile_mode:
                mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
            res["precision"] += ", torch.compile(mode=%r, dynamic=False)" % compile_mode

        def warp_fn(fs, ks, kd):
            return w_m(fs, ks, kd)

        def dec_fn(x):
            return d_m(x)

        def stitch_fn(ks, kd):
            return s_m(ks, kd)
    else:
        raise ValueError("unknown mode %s" % kind)

    res["weights_bytes"] = module_bytes(warp, dec, st)
    ins = {k: v[:batch].to(dev, in_dtype) for k, v in inputs.items()}
    fs, ks, kd = ins["feature_3d"], ins["kp_source"], ins["kp_driving"]

    def step_wd():
        if mark:
            mark()
        return dec_fn(warp_fn(fs, ks, kd))

    def step_stitch():
        if mark:
            mark()
        return stitch_fn(ks, kd)

    with torch.no_grad():
        # first call (compiles in the compile mode)
        t0 = time.perf_counter()
        step_wd()
        step_stitch()
        ctx.sync()
        res["first_call_s"] = time.perf_counter() - t0
        log("  %s B=%d: first call %.2f s" % (res["mode"], batch, res["first_call_s"]))

        # outputs for the fidelity check
        if mark:
            mark()
        w_out = warp_fn(fs, ks, kd)
        img = dec_fn(w_out)
        kp = stitch_fn(ks, kd)
        w_out = w_out.clone()
        img = img.clone()
        kp = kp.clone()
        ctx.sync()
        shapes = {"warp": tuple(w_out.shape), "img": tuple(img.shape), "kp": tuple(kp.shape)}
        res["shapes"] = shapes
        if ref is not None:
            res["fidelity"] = {"warp": fidelity(w_out, ref["warp"][:batch]),
                               "img": fidelity(img, ref["img"][:batch]),
                               "kp": fidelity(kp, ref["kp"][:batch]),
                               "reference": args.ref_dtype + (" (TF32 off)" if ctx.cuda else "")}
        w_fixed = w_out.to(in_dtype)  # decoder input for the decode-only timing (upstream: fp32)
        del img, kp
        res["peak_mem_first_bytes"] = ctx.peak()

        def step_warp():
            if mark:
                mark()
            return warp_fn(fs, ks, kd)

        def step_dec():
            if mark:
                mark()
            return dec_fn(w_fixed)

        ctx.sync()
        ctx.reset_peak()
        it, wu = args.iters, args.warmup
        t = {"warp_decode": time_step(ctx, step_wd, it, wu),
             "warp": time_step(ctx, step_warp, it, wu),
             "decode": time_step(ctx, step_dec, it, wu),
             "stitch": time_step(ctx, step_stitch, it, wu)}
        res["peak_mem_bytes"] = ctx.peak()
    res["times"] = t
    for part in ("warp_decode", "warp", "decode", "stitch"):
        res[part + "_ms_per_frame"] = t[part]["median_ms"] / batch
    res["warp_decode_fps"] = 1000.0 / res["warp_decode_ms_per_frame"]
    res["ok"] = True
    return res


def run_mode_safe(ctx, nets, inputs, ref, kind, batch, compile_mode=None):
    label = mode_label(kind, compile_mode)
    log("mode %s, batch %d ..." % (label, batch))
    try:
        res = run_mode(ctx, nets, inputs, ref, kind, batch, compile_mode)
    except Exception as e:  # report and go on with the next mode
        traceback.print_exc(file=sys.stdout)
        log("mode %s FAILED: %s: %s" % (label, type(e).__name__, e))
        res = {"mode": label, "kind": kind, "batch": batch, "compile_mode": compile_mode, "ok": False,
               "error": "%s: %s" % (type(e).__name__, str(e)[:2000])}
    finally:
        if kind == "compile":
            try:
                importlib.import_module("torch._dynamo").reset()
            except Exception:
                pass
        ctx.cleanup()
    if res.get("ok"):
        log("  %s" % summary_line(res))
    return res


# ---------------------------------------------------------------------------
# compile modes in child processes (a time limit per mode)
# ---------------------------------------------------------------------------


def child_args(args, compile_mode, json_path):
    a = [sys.executable, os.path.abspath(__file__), "--child", "--modes", "compile",
         "--compile-modes", compile_mode, "--json", json_path,
         "--batch", str(args.batch), "--iters", str(args.iters), "--warmup", str(args.warmup),
         "--seed", str(args.seed), "--ref-dtype", args.ref_dtype, "--device", args.device]
    if args.no_fidelity:
        a.append("--no-fidelity")
    if args.cudnn_benchmark:
        a.append("--cudnn-benchmark")
    if args.small:
        a.append("--small")
    if args.half_dtype:
        a += ["--half-dtype", args.half_dtype]
    return a


def run_compile_child(args, compile_mode, timeout_s):
    label = mode_label("compile", compile_mode)
    fd, path = tempfile.mkstemp(prefix="bench_torch_child_", suffix=".json")
    os.close(fd)
    os.unlink(path)
    cmd = child_args(args, compile_mode, path)
    log("mode %s, batch %d: child process, time limit %d s" % (label, args.batch, timeout_s))
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers
        except ProcessLookupError:
            pass
        proc.wait()
        msg = "timed out after %d s (compiling or running)" % timeout_s
        log("mode %s FAILED: %s" % (label, msg))
        return {"mode": label, "kind": "compile", "batch": args.batch, "compile_mode": compile_mode,
                "ok": False, "error": msg}
    wall = time.perf_counter() - t0
    res = None
    try:
        with open(path) as f:
            data = json.load(f)
        for r in data.get("results", []):
            if r.get("kind") == "compile":
                res = r
                break
    except (OSError, ValueError) as e:
        res = {"error": "child wrote no result (rc %d): %s" % (rc, e)}
    finally:
        if os.path.exists(path):
            os.unlink(path)
    if res is None:
        res = {"error": "child rc %d and no compile result" % rc}
    res.setdefault("mode", label)
    res.setdefault("kind", "compile")
    res.setdefault("batch", args.batch)
    res.setdefault("compile_mode", compile_mode)
    res.setdefault("ok", False)
    res["child_wall_s"] = wall
    if not res["ok"]:
        log("mode %s FAILED: %s" % (label, res.get("error", "rc %d" % rc)))
    return res


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def summary_line(r):
    f = r.get("fidelity", {})
    return ("%s B=%d: warp+decode %.3f ms/frame (%.1f frames/s), warp %.3f, decode %.3f, stitch %.4f ms/frame, "
            "peak %s MiB, warp rel-L2 %s, image cosine %s"
            % (r["mode"], r["batch"], r["warp_decode_ms_per_frame"], r["warp_decode_fps"],
               r["warp_ms_per_frame"], r["decode_ms_per_frame"], r["stitch_ms_per_frame"],
               fmt(r["peak_mem_bytes"] / 2 ** 20 if r.get("peak_mem_bytes") else None, ".0f"),
               fmt(f.get("warp", {}).get("rel_l2"), ".2e"), fmt(f.get("img", {}).get("cosine"), ".7f")))


def print_table(results, header):
    log("")
    log(header)
    cols = ("%-36s %2s %9s %9s %9s %8s %9s %8s %9s %10s %9s"
            % ("mode", "B", "warp", "decode", "w+d", "frames/s", "stitch", "peak", "warp", "image", "image"))
    log(cols)
    log("%-36s %2s %9s %9s %9s %8s %9s %8s %9s %10s %9s"
        % ("", "", "ms/f", "ms/f", "ms/f", "", "ms/f", "MiB", "rel-L2", "cosine", "max-abs"))
    base = None
    for r in results:
        if r.get("ok") and r["kind"] == "autocast":
            base = r["warp_decode_ms_per_frame"]
            break
    for r in results:
        name = r["mode"] + (" *" if r.get("chosen") else "")
        if not r.get("ok"):
            log("%-36s %2s FAILED: %s" % (name, r.get("batch", ""), str(r.get("error", "?")).splitlines()[-1][:90]
                                           if r.get("error") else "?"))
            continue
        f = r.get("fidelity", {})
        log("%-36s %2d %9.3f %9.3f %9.3f %8.1f %9.4f %8s %9s %10s %9s"
            % (name, r["batch"], r["warp_ms_per_frame"], r["decode_ms_per_frame"], r["warp_decode_ms_per_frame"],
               r["warp_decode_fps"], r["stitch_ms_per_frame"],
               fmt(r["peak_mem_bytes"] / 2 ** 20 if r.get("peak_mem_bytes") else None, ".0f"),
               fmt(f.get("warp", {}).get("rel_l2"), ".2e"), fmt(f.get("img", {}).get("cosine"), ".7f"),
               fmt(f.get("img", {}).get("max_abs"), ".2e")))
    if base:
        parts = ["%s %.2fx" % (r["mode"], base / r["warp_decode_ms_per_frame"])
                 for r in results if r.get("ok") and r["kind"] != "autocast"]
        if parts:
            log("speed-up vs autocast B=1 (warp+decode ms/frame): " + ", ".join(parts))


def write_json(path, doc):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def env_info(ctx):
    info = {"torch": torch.__version__, "python": platform.python_version(), "device": str(ctx.device),
            "cuda_runtime": getattr(torch.version, "cuda", None)}
    if ctx.cuda:
        p = torch.cuda.get_device_properties(ctx.device)
        info.update({"gpu": p.name, "gpu_memory_bytes": int(p.total_memory),
                     "capability": "%d.%d" % (p.major, p.minor),
                     "cudnn": torch.backends.cudnn.version(),
                     "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                     "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                     "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)})
    return info


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="autocast,half,compile",
                    help="comma list of autocast (= autocast_b1), half (= half_b8), compile (= compile_b8)")
    ap.add_argument("--batch", type=int, default=8, help="batch of the half and compile modes (default 8)")
    ap.add_argument("--autocast-batch", type=int, default=1, help="batch of the autocast mode (default 1)")
    ap.add_argument("--iters", type=int, default=30, help="timed calls per measurement (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before each measurement (default 5)")
    ap.add_argument("--compile-modes", default="max-autotune-no-cudagraphs,default",
                    help="torch.compile modes to try in order (default max-autotune-no-cudagraphs,default); "
                         "also reduce-overhead, max-autotune")
    ap.add_argument("--compile-all", action="store_true", help="time every compile mode, not only the first that works")
    ap.add_argument("--compile-timeout-s", type=int, default=330,
                    help="time limit of one compile mode's child process (default 330)")
    ap.add_argument("--budget-s", type=int, default=540,
                    help="stop starting compile modes when this much wall time has passed (default 540; 0: none)")
    ap.add_argument("--ref-dtype", default="float32", choices=("float32", "float64"),
                    help="dtype of the fidelity reference run (TF32 off); default float32")
    ap.add_argument("--no-fidelity", action="store_true", help="skip the reference run and the fidelity numbers")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True (upstream leaves it False)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the results as JSON to this file")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    ap.add_argument("--small", action="store_true", help="small configuration (smoke test), not the official size")
    ap.add_argument("--half-dtype", default=None, choices=("float16", "bfloat16", "float32"),
                    help="dtype of the half/compile modes and of autocast (default float16 on cuda, bfloat16 on cpu)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    kinds = []
    for m in args.modes.split(","):
        m = m.strip()
        if not m:
            continue
        if m not in ALIASES:
            ap.error("unknown mode %r (choose from %s)" % (m, ", ".join(sorted(ALIASES))))
        if ALIASES[m] not in kinds:
            kinds.append(ALIASES[m])
    if not kinds:
        ap.error("no modes")
    args.kinds = kinds
    args.compile_mode_list = [c.strip() for c in args.compile_modes.split(",") if c.strip()]
    if "compile" in kinds and not args.compile_mode_list:
        ap.error("no compile modes")
    if args.batch < 1 or args.autocast_batch < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("batch and iters must be >= 1, warmup >= 0")
    return args


def main(argv):
    t_start = time.perf_counter()
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_torch: CUDA is not available (torch %s); use --device cpu --small for a smoke test"
              % torch.__version__, file=sys.stderr)
        return 2
    ctx = Ctx(args)
    if ctx.cuda:
        torch.cuda.set_device(ctx.device)
        torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    torch.set_grad_enabled(False)

    doc = {"tool": "bench/torch_ref/bench_torch.py", "argv": argv, "env": env_info(ctx),
           "size": "small" if args.small else "official",
           "iters": args.iters, "warmup": args.warmup, "seed": args.seed, "results": []}
    if not args.child:
        log("bench_torch: torch %s, %s%s, %s size, iters %d, warmup %d"
            % (torch.__version__, ctx.device, (" (%s)" % doc["env"].get("gpu")) if ctx.cuda else "",
               doc["size"], args.iters, args.warmup))

    need_in_process = [k for k in args.kinds if k != "compile" or args.child]
    batches = [args.autocast_batch if k == "autocast" else args.batch for k in args.kinds]
    nmax = max(batches)
    nets = inputs = ref = None
    if need_in_process:
        nets, fshape, build_s = build_nets(args)
        doc["param_counts"] = {k: renderer.count_params(m) for k, m in nets.items()}
        if not args.child:
            log("networks: %s parameters, random weights built in %.1f s"
                % (", ".join("%s %d" % kv for kv in doc["param_counts"].items()), build_s))
        inputs = make_inputs(nmax, fshape, args.seed)
        doc["input_shapes"] = {k: [nmax] + list(v.shape[1:]) for k, v in inputs.items()}
        if not args.no_fidelity:
            try:
                ref = compute_reference(ctx, nets, inputs, nmax)
            except Exception as e:
                traceback.print_exc(file=sys.stdout)
                log("reference run FAILED (%s: %s); fidelity numbers left out" % (type(e).__name__, e))
                doc["reference_error"] = "%s: %s" % (type(e).__name__, e)
                ref = None

    results = doc["results"]
    for kind in args.kinds:
        if kind == "autocast":
            results.append(run_mode_safe(ctx, nets, inputs, ref, "autocast", args.autocast_batch))
        elif kind == "half":
            results.append(run_mode_safe(ctx, nets, inputs, ref, "half", args.batch))
        elif args.child:
            results.append(run_mode_safe(ctx, nets, inputs, ref, "compile", args.batch,
                                         args.compile_mode_list[0]))
        else:
            ctx.cleanup()
            chosen = None
            for cm in args.compile_mode_list:
                timeout = args.compile_timeout_s
                if args.budget_s > 0:
                    left = args.budget_s - (time.perf_counter() - t_start)
                    if left < 60:
                        results.append({"mode": mode_label("compile", cm), "kind": "compile", "batch": args.batch,
                                        "compile_mode": cm, "ok": False,
                                        "error": "skipped: --budget-s %d s nearly spent" % args.budget_s})
                        log("mode %s skipped (budget)" % mode_label("compile", cm))
                        continue
                    timeout = int(min(timeout, left - 10))
                r = run_compile_child(args, cm, timeout)
                results.append(r)
                write_json(args.json, doc)
                if r.get("ok"):
                    if chosen is None or r["warp_decode_ms_per_frame"] < chosen["warp_decode_ms_per_frame"]:
                        chosen = r
                    if not args.compile_all:
                        break
            if chosen is not None:
                chosen["chosen"] = True
                doc["compile_chosen"] = chosen["compile_mode"]
        write_json(args.json, doc)

    doc["wall_s"] = time.perf_counter() - t_start
    write_json(args.json, doc)
    if not args.child:
        ok_kinds = {r["kind"] for r in results if r.get("ok")}
        print_table(results, "PyTorch reference renderer, %s size, %s%s; * = compile mode used"
                    % (doc["size"], doc["env"].get("gpu", str(ctx.device)),
                       ", cudnn.benchmark on" if args.cudnn_benchmark else ""))
        missing = [k for k in args.kinds if k not in ok_kinds]
        if missing:
            log("no result for: %s" % ", ".join(missing))
        if args.json:
            log("JSON: %s" % args.json)
        return 0 if not missing else 1
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
