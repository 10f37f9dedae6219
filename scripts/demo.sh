#!/bin/sh
# The README's main job: render a talking-head demo clip and print where it is.
#
#   speech    synthesised with espeak-ng (installed by scripts/install-deps.sh)
#   portrait  the "astronaut" photo (Eileen Collins, NASA, public domain) from
#             Debian's python3-skimage package, fetched with `apt-get download`
#             and unpacked here (nothing is installed); when that is not
#             possible, a portrait drawn by this script
#   weights   DITTO_WEIGHTS or ./checkpoints (the official ditto_pytorch
#             folder) when present: a real render; otherwise synthetic
#             weights, and the face area of the video is noise
#
# Usage: scripts/demo.sh [BUILD_DIR]   (output in BUILD_DIR/demo, or DITTO_DEMO_DIR)
set -eu
BUILD=${1:-build}
DITTO="$BUILD/ditto"
OUT=${DITTO_DEMO_DIR:-$BUILD/demo}
WEIGHTS=${DITTO_WEIGHTS:-./checkpoints}
mkdir -p "$OUT"

# ---- speech ----------------------------------------------------------------------------
TEXT="Hello! I am a talking head, rendered by ditto dot c from this sentence and one portrait. \
The speech was synthesised on this machine, the motion comes from the audio, \
and every frame was computed in plain C."
if command -v espeak-ng >/dev/null 2>&1; then
    espeak-ng -v en-us -s 150 -w "$OUT/speech.wav" "$TEXT"
else
    echo "demo: espeak-ng is missing (run scripts/install-deps.sh)" >&2
    exit 1
fi

# ---- portrait --------------------------------------------------------------------------
PORTRAIT="$OUT/portrait.png"
if [ ! -s "$PORTRAIT" ]; then
    tmp=$(mktemp -d)
    if (cd "$tmp" && apt-get download python3-skimage >/dev/null 2>&1) &&
        dpkg-deb --fsys-tarfile "$tmp"/python3-skimage_*.deb |
        tar -xO ./usr/lib/python3/dist-packages/skimage/data/astronaut.png >"$PORTRAIT" 2>/dev/null &&
        [ -s "$PORTRAIT" ]; then
        echo "== portrait: astronaut.png (NASA, public domain) from Debian's python3-skimage package"
    else
        rm -f "$PORTRAIT"
    fi
    rm -rf "$tmp"
fi
if [ ! -s "$PORTRAIT" ]; then
    # a drawn portrait: skin-coloured oval, eyes, mouth on a gradient (PPM, 384x448)
    PORTRAIT="$OUT/portrait.ppm"
    awk 'BEGIN {
        w = 384; h = 448; print "P3"; print w, h; print 255
        cx = w / 2; cy = h * 0.5; rx = w * 0.3; ry = h * 0.34
        for (y = 0; y < h; y++) for (x = 0; x < w; x++) {
            r = 50 + int(80 * y / h); g = 70 + int(50 * x / w); b = 120
            dx = (x - cx) / rx; dy = (y - cy) / ry
            if (dx * dx + dy * dy <= 1) {
                r = 226; g = 182; b = 152
                for (e = -1; e <= 1; e += 2) {
                    ex = (x - (cx + e * 0.38 * rx)) / (0.15 * rx); ey = (y - (cy - 0.18 * ry)) / (0.07 * ry)
                    if (ex * ex + ey * ey <= 1) { r = 250; g = 250; b = 250 }
                    if (ex * ex + ey * ey <= 0.25) { r = 50; g = 35; b = 25 }
                }
                mx = (x - cx) / (0.33 * rx); my = (y - (cy + 0.45 * ry)) / (0.06 * ry)
                if (mx * mx + my * my <= 1) { r = 160; g = 45; b = 55 }
            }
            print r, g, b
        }
    }' >"$PORTRAIT"
    echo "== portrait: drawn by this script (no package download possible)"
fi

# ---- weights ---------------------------------------------------------------------------
if [ -d "$WEIGHTS" ] && find "$WEIGHTS" -name 'lmdm_v0.4_hubert.pth' | grep -q .; then
    W="$WEIGHTS"
    echo "== weights: $WEIGHTS (official checkpoints): a real render"
else
    W=synthetic
    echo "== weights: none found (DITTO_WEIGHTS or ./checkpoints): SYNTHETIC random networks."
    echo "==          The clip runs the whole pipeline, but the face area is NOISE, not a face."
fi
BACKEND=${DITTO_BACKEND:-cpu}
if [ -z "${DITTO_BACKEND:-}" ] && [ "$W" != synthetic ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    BACKEND=cuda
fi
if [ "$W" != synthetic ] && [ "$BACKEND" = cpu ]; then
    echo "== note: the official networks on the CPU take minutes per second of video (set DITTO_BACKEND=cuda on a GPU build)"
fi

# ---- render ----------------------------------------------------------------------------
"$DITTO" render --weights "$W" --backend "$BACKEND" --audio "$OUT/speech.wav" --avatar "$PORTRAIT" -o "$OUT/demo.mp4" --seed 1
echo "== demo clip: $(cd "$OUT" && pwd)/demo.mp4"
