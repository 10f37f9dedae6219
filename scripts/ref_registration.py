#!/usr/bin/env python3
"""Reference registration of ../shared/media/image.png with the stand-in models.

Computes, with ONNX Runtime (CPU provider), OpenCV and NumPy, what
ditto.c's registration computes (ditto-architecture.md 4.2-4.4), with the
same preprocessing as src/pipeline/face_detect.c and landmarks.c:

  detector   SCRFD stand-in (scrfd/scrfd_500m_bnkps.onnx): letterbox into
             the model's 640x640 input (cv2.resize INTER_LINEAR, top-left),
             cv2.dnn.blobFromImage(rgb, 1/128, mean 127.5, swapRB=True)
             (the network sees BGR, defect 8.10), strides 8/16/32 with two
             anchors per cell, scores >= 0.5, NMS IoU 0.4 with +1 areas,
             the largest box;
  lmk106     pfld106_lite.onnx: 112x112 crop of 1.2 x max(w, h) around the
             box centre (cv2.warpAffine), BGR/255, output * 112, mapped back
             with cv2.invertAffineTransform;
  crop512    crop_image (4.3) from the 106 points in float32 NumPy:
             scale 2.3, vx 0, vy -0.125, rotation;
  mesh       BlazeFace short-range on the 512 crop resized to 128, weighted
             NMS, rotated ROI (1.5 x side), cv2.warpPerspective to 256,
             FaceMesh stand-in (fp16, NCHW, RGB/255), eye attributes (4.4).

The image is decoded with cv2.imread (libjpeg); ditto.c decodes with
FFmpeg, so pixels may differ by a few levels: the test's tolerances allow
for that. Writes JSON (default tests/data/registration_ref.json).

Usage: python3 scripts/ref_registration.py [--shared DIR] [-o FILE] [--no-mesh]
Needs: onnxruntime, opencv-python (cv2), numpy.
"""
import argparse
import hashlib
import json
import math
import os
import sys

import cv2
import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


# ---- SCRFD ----------------------------------------------------------------------

def detect(sess, rgb):
    inp = sess.get_inputs()[0]
    size = int(inp.shape[2])
    h, w = rgb.shape[:2]
    im_ratio = float(h) / w
    if im_ratio > 1.0:
        nh, nw = size, int(size / im_ratio)
    else:
        nw, nh = size, int(size * im_ratio)
    det_scale = float(nh) / h
    canvas = np.zeros((size, size, 3), np.uint8)
    canvas[:nh, :nw] = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_LINEAR)
    blob = cv2.dnn.blobFromImage(canvas, 1.0 / 128, (size, size), (127.5, 127.5, 127.5), swapRB=True)
    names = ["score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32"]
    outs = sess.run(names, {inp.name: blob})
    boxes, scores, kpss = [], [], []
    for k, s in enumerate((8, 16, 32)):
        g = size // s
        sc = outs[k].reshape(-1)
        bb = outs[3 + k].reshape(-1, 4) * np.float32(s)
        kp = outs[6 + k].reshape(-1, 10) * np.float32(s)
        cols, rows = np.meshgrid(np.arange(g), np.arange(g))
        centres = np.stack([cols, rows], axis=-1).reshape(-1, 2).astype(np.float32) * np.float32(s)
        centres = np.repeat(centres, 2, axis=0)        # two anchors per cell
        keep = np.where(sc >= np.float32(0.5))[0]
        c = centres[keep]
        d = bb[keep]
        boxes.append(np.stack([c[:, 0] - d[:, 0], c[:, 1] - d[:, 1], c[:, 0] + d[:, 2], c[:, 1] + d[:, 3]], axis=-1))
        scores.append(sc[keep])
        kpss.append((kp[keep].reshape(-1, 5, 2) + c[:, None, :]).reshape(-1, 10))
    ds = np.float32(det_scale)
    boxes = np.concatenate(boxes) / ds
    kpss = np.concatenate(kpss) / ds
    scores = np.concatenate(scores)
    order = np.argsort(-scores, kind="stable")
    boxes, kpss, scores = boxes[order], kpss[order], scores[order]
    # greedy NMS, +1 pixel areas, suppress IoU > 0.4
    keep, dead = [], np.zeros(len(scores), bool)
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    for i in range(len(scores)):
        if dead[i]:
            continue
        keep.append(i)
        for j in range(i + 1, len(scores)):
            if dead[j]:
                continue
            ww = max(np.float32(0), min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]) + 1)
            hh = max(np.float32(0), min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]) + 1)
            inter = ww * hh
            if not inter / (area[i] + area[j] - inter) <= np.float32(0.4):
                dead[j] = True
    boxes, kpss, scores = boxes[keep], kpss[keep], scores[keep]
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    best = int(np.argmax(areas))
    return {
        "size": size, "det_scale": det_scale,
        "box": [float(v) for v in boxes[best]], "score": float(scores[best]), "kps": [float(v) for v in kpss[best]],
        "boxes": [[float(v) for v in b] + [float(s)] for b, s in zip(boxes, scores)],
    }


# ---- 106 points -------------------------------------------------------------------

def landmarks106(sess, rgb, box, size=112, box_scale=1.2):
    w, h = box[2] - box[0], box[3] - box[1]
    cx, cy = (box[2] + box[0]) / 2, (box[3] + box[1]) / 2
    s = size / (max(w, h) * box_scale)
    M = np.array([[s, 0, size // 2 - s * cx], [0, s, size // 2 - s * cy]], np.float64)
    crop = cv2.warpAffine(rgb, M, (size, size), flags=cv2.INTER_LINEAR, borderValue=0.0)
    blob = (crop[:, :, ::-1].astype(np.float32) / np.float32(255)).transpose(2, 0, 1)[None].copy()
    inp = sess.get_inputs()[0]
    out = sess.run(["output"], {inp.name: blob})[0].reshape(-1, 2).astype(np.float32) * np.float32(size)
    IM = cv2.invertAffineTransform(M)
    pts = np.array([IM @ np.array([p[0], p[1], 1.0]) for p in out.astype(np.float64)], np.float32)
    return M, pts


# ---- crop_image (4.3) in float32 --------------------------------------------------

def crop_matrix(pts, dsize=512, scale=2.3, vx=0.0, vy=-0.125, rot=True):
    P = pts.astype(np.float32)
    n = len(P)
    if n == 106:
        e1, e2, lip = P[[33, 35, 40, 39]].mean(0), P[[87, 89, 94, 93]].mean(0), (P[52] + P[61]) / np.float32(2)
    else:
        e1, e2, lip = P[[0, 6, 12, 18]].mean(0), P[[24, 30, 36, 42]].mean(0), (P[48] + P[66]) / np.float32(2)
    eye_mid = (e1 + e2) / np.float32(2)
    uy = lip - eye_mid
    nrm = np.float32(np.linalg.norm(uy))
    uy = uy / nrm if nrm > np.float32(1e-3) else np.array([0, 1], np.float32)
    ux = np.array([uy[1], -uy[0]], np.float32)
    theta = math.acos(float(ux[0]))
    if ux[1] < 0:
        theta = -theta
    c0 = P.mean(0)
    R = np.stack([ux, uy])
    rp = (P - c0) @ R.T
    lt, rb = rp.min(0), rp.max(0)
    c1 = (lt + rb) / np.float32(2)
    size = np.float32(max(rb[0] - lt[0], rb[1] - lt[1])) * np.float32(scale)
    center = c0 + ux * c1[0] + uy * c1[1] + ux * (np.float32(vx) * size) + uy * (np.float32(vy) * size)
    s = np.float32(dsize) / size
    tc = np.float32(dsize / 2)
    cs, sn = (np.float32(math.cos(theta)), np.float32(math.sin(theta))) if rot else (np.float32(1), np.float32(0))
    cx, cy = center
    M = np.array([[s * cs, s * sn, tc - s * (cs * cx + sn * cy)],
                  [-s * sn, s * cs, tc - s * (-sn * cx + cs * cy)],
                  [0, 0, 1]], np.float32)
    return M, np.linalg.inv(M).astype(np.float32)


# ---- BlazeFace + FaceMesh (4.4) ------------------------------------------------------

def blaze_anchors():
    a = []
    for grid, per in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                a += [((x + 0.5) / grid, (y + 0.5) / grid)] * per
    return np.array(a, np.float32)


def mesh_eyes(blaze, mesh, crop):
    D = crop.shape[0]
    small = cv2.resize(crop, (128, 128), interpolation=cv2.INTER_LINEAR).astype(np.float32) / np.float32(127.5) - np.float32(1)
    bi = blaze.get_inputs()[0]
    x = small[None] if bi.shape[3] == 3 else small.transpose(2, 0, 1)[None]
    reg, cls = blaze.run(["regressors", "classificators"], {bi.name: np.ascontiguousarray(x)})
    reg, cls = reg.reshape(896, 16), cls.reshape(896)
    anc = blaze_anchors()
    score = 1 / (1 + np.exp(-np.clip(cls, -50, 100)))
    idx = np.where(score >= 0.5)[0]
    idx = idx[np.argsort(-score[idx], kind="stable")]
    dets = []
    for i in idx:
        r, (ax, ay) = reg[i] / 128.0, anc[i]
        xc, yc, w, h = r[0] + ax, r[1] + ay, r[2], r[3]
        kps = [(r[4 + 2 * k] + ax, r[5 + 2 * k] + ay) for k in range(6)]
        dets.append((np.array([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2] + [v for p in kps for v in p], np.float64), score[i]))
    if not dets:
        return None

    def iou(a, b):
        ix, iy = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
        if ix <= 0 or iy <= 0:
            return 0.0
        inter = ix * iy
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

    top = dets[0][0]
    group = [(v, s) for v, s in dets if iou(top, v) > 0.3 or v is top]
    wsum = sum(s for _, s in group)
    d = sum(v * s for v, s in group) / wsum
    x1, y1, x2, y2 = d[0] * D, d[1] * D, d[2] * D, d[3] * D
    side = max(x2 - x1, y2 - y1) * 1.5
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    rot = -math.atan2(d[5] - d[7], d[6] - d[4])
    rot = rot - 2 * math.pi * math.floor((rot + math.pi) / (2 * math.pi))
    c, s = math.cos(rot), math.sin(rot)
    corners = [(-0.5, -0.5), (0.5, -0.5), (0.5, 0.5), (-0.5, 0.5)]
    src = np.array([(cx + u * side * c - v * side * s, cy + u * side * s + v * side * c) for u, v in corners], np.float32)
    dst = np.array([(0, 0), (256, 0), (256, 256), (0, 256)], np.float32)
    P = cv2.getPerspectiveTransform(src, dst)
    roi = cv2.warpPerspective(crop, P, (256, 256), flags=cv2.INTER_LINEAR)
    mi = mesh.get_inputs()[0]
    x = roi.astype(np.float32) / np.float32(255)
    x = x[None] if mi.shape[3] == 3 else x.transpose(2, 0, 1)[None]
    if mi.type == "tensor(float16)":
        x = x.astype(np.float16)
    out = mesh.run(["Identity"], {mi.name: np.ascontiguousarray(x)})[0].astype(np.float64).reshape(478, 3)
    px, py, pz = out[:, 0] / 256 - 0.5, out[:, 1] / 256 - 0.5, out[:, 2] / 256
    lmk = np.stack([(px * c - py * s) * side + cx, (px * s + py * c) * side + cy, pz * side], -1) / np.array([D, D, D])

    def dist(a, b):
        return np.linalg.norm(lmk[a] - lmk[b])

    eps = 1e-8
    lo = (dist(145, 159) + dist(144, 160) + dist(153, 158)) / (dist(33, 133) + eps)
    ro = (dist(374, 386) + dist(373, 387) + dist(380, 385)) / (dist(263, 362) + eps)

    def ball(o, i, b):
        cc = (lmk[o] + lmk[i]) / 2
        dr = (lmk[o] - lmk[i]) / (dist(o, i) + eps)
        bc = np.linalg.norm(lmk[b] - cc)
        return ((lmk[b] - cc) / (bc + eps) - dr) * bc

    ml, mr = ball(33, 133, 468), ball(263, 362, 473)
    return {"roi": [cx, cy, side, side, rot], "eye_open": [lo, ro],
            "eye_ball": [ml[0], mr[0], ml[1], mr[1], ml[2], mr[2]]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shared_default = next((d for d in (os.path.join(HERE, "..", "..", "shared"), os.path.join(HERE, "..", "shared"))
                           if os.path.isdir(os.path.join(d, "models"))), os.path.join(HERE, "..", "..", "shared"))
    ap.add_argument("--shared", default=shared_default, help="the shared/ folder (default: ../shared or ./shared beside the repo)")
    ap.add_argument("--no-mesh", action="store_true", help="skip BlazeFace/FaceMesh (runtimes without fp16 support)")
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "..", "tests", "data", "registration_ref.json"))
    a = ap.parse_args()
    models = os.path.join(a.shared, "models")
    image = os.path.join(a.shared, "media", "image.png")
    files = {
        "detector": "scrfd/scrfd_500m_bnkps.onnx",
        "lmk106": "landmark106/pfld106_lite.onnx",
        "blaze": "blazeface/face_detection_short_range_nhwc.onnx",
        "mesh": "facemesh/face_landmarks_detector_478_fp16.onnx",
    }
    bgr = cv2.imread(image, cv2.IMREAD_COLOR)
    if bgr is None:
        sys.exit(f"{image}: cannot read")
    rgb = np.ascontiguousarray(bgr[:, :, ::-1])
    det = detect(session(os.path.join(models, files["detector"])), rgb)
    M106, pts = landmarks106(session(os.path.join(models, files["lmk106"])), rgb, det["box"])
    o2c, c2o = crop_matrix(pts)
    crop = cv2.warpAffine(rgb, o2c[:2].astype(np.float64), (512, 512), flags=cv2.INTER_LINEAR, borderValue=0.0)
    mesh = None
    if not a.no_mesh:
        mesh = mesh_eyes(session(os.path.join(models, files["blaze"])), session(os.path.join(models, files["mesh"])), crop)
    with open(image, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    ref = {
        "version": 1,
        "tool": f"onnxruntime {ort.__version__} (CPU), opencv {cv2.__version__}, numpy {np.__version__}",
        "image": "media/image.png", "image_sha256": sha, "width": rgb.shape[1], "height": rgb.shape[0],
        "models": files,
        "detector": det,
        "lmk106": {"size": 112, "box_scale": 1.2, "M": [float(v) for v in M106.reshape(-1)], "points": [float(v) for v in pts.reshape(-1)]},
        "crop512": {"scale": 2.3, "vx": 0.0, "vy": -0.125, "rot": True,
                    "M_o2c": [float(v) for v in o2c.reshape(-1)], "M_c2o": [float(v) for v in c2o.reshape(-1)]},
    }
    if mesh:
        ref["mesh"] = {k: ([float(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else v) for k, v in mesh.items()}
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    b = det["box"]
    print(f"box ({b[0]:.2f},{b[1]:.2f})-({b[2]:.2f},{b[3]:.2f}) score {det['score']:.4f}; "
          f"eye_open {mesh['eye_open'] if mesh else None}; wrote {a.output}")


if __name__ == "__main__":
    main()
