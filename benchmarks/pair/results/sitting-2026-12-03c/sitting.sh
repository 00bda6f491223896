#!/bin/bash
# The second hold of 2026-12-03c. The first hold (13:20-13:37) ran both overlap options stresses (PASS) and
# options acceptance for `none`, then was lost (a gap of more than 30 s between calls); its last snapshot is
# in ../sitting-2026-12-03c/first-hold/. This one, on a fresh machine with what budget was left (about 500 s
# for jobs), runs what issue 28 still lacks, then issue 25's serve bench if time is left:
#   calls: as sitting-next.sh of 12-03b (wheel parts p00..p13, the pair's parts two per call: four at once
#   make the carried tree pass 64 MiB), then this with END set to the seconds left for jobs.
cd /tmp/proj || exit 1
END=${END:-450}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
echo "timing starts at $SECONDS s" > "$SITTING_OUT/timing-start.txt"
# issue 28: acceptance with every option, the drafter with and without the request's penalties (patch 0031);
# none's outputs came from the first hold
OPTIONS_MODES=ddtree-16,ddtree-16@nodraftpen timing t1 150 options
# issue 28: the penalties' cost at bs 32 with the drafter's pass beside the verify's (about 60 s)
timing t5 50 request-options
# issue 25: concurrency 1 and 32, none / DFLASH / DDTREE-16 under overlap (the 0.8x goal)
timing t3 150 serve
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
