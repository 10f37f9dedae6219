#!/bin/sh
# The README's main job. Until `ditto render` lands this runs the most useful
# tools there are: it lists the official checkpoints when they are present
# (DITTO_WEIGHTS or ./checkpoints), then times one frame of the renderer
# networks (stitching, warp, decoder) at their official size on synthetic
# weights, on the CPU.
set -eu
BUILD=${1:-build}
DITTO="$BUILD/ditto"
WEIGHTS=${DITTO_WEIGHTS:-./checkpoints}

if [ -d "$WEIGHTS" ]; then
    found=$(find "$WEIGHTS" -name '*.pth' | sort)
    if [ -n "$found" ]; then
        echo "== official checkpoints in $WEIGHTS"
        # shellcheck disable=SC2086
        "$DITTO" info $found
    fi
else
    echo "== no checkpoint folder ($WEIGHTS): using synthetic weights (the output is noise, not a face)"
fi

echo "== one frame of the renderer networks at the official size (synthetic weights, CPU)"
"$DITTO" bench --batch 1 --iters 1 --warmup 0
