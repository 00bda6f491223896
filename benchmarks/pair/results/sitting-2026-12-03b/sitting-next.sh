#!/bin/bash
# The next sitting (written after 2026-12-03b's), on the long pair kept in .device/pair-long/ (no training):
#   call 1 (carry .device/parts/p00): mkdir -p /tmp/proj /tmp/out /tmp/pairparts && cp -a . /tmp/proj/ &&
#     cat .device/parts/p00 > /tmp/w.tar
#   call 2 (carry .device/pair-long/pair.tar.00 .. .03, 60 MiB): cp .device/pair-long/pair.tar.0[0-3] /tmp/pairparts/
#   calls 3-15: wheel parts p01..p13 (`cat .device/parts/pNN >> /tmp/w.tar`); the last also carries
#     .device/pair-long/pair.tar.04, .device/pair-long/pair.tar.sha256 and .device/w.tar.sha256, copies the two
#     pair files into /tmp/pairparts, installs the wheels, applies and verifies the series, then
#     `PAIR=/tmp/pair-long PAIR_PARTS=/tmp/pairparts bash tests/gpu/device_pair.sh unpack-pair` (writes
#     /tmp/train.done) and starts this with END=1300 (shrink the lane margins with END if the start is late).
# Correctness first (two lanes, nothing to time beside them), issue 28's patch 0031 under overlap:
#   lane a: the options stress, DDTREE, SGLANG_DFLASH_OVERLAP=1; lane b: the same for DFLASH.
# Timing, alone, in the order of what each issue still lacks:
#   - issue 28: options acceptance with and without the drafter's penalties (0031);
#   - issue 25: host time per Python function of DDTREE-16 under overlap at 256 and 1024 (what of the v2 step
#     grows with context: 1.72 -> 2.57 ms on 12-03b), the serve bench at concurrency 1 and 32 (none, DFLASH and
#     DDTREE-16 under overlap: the 0.8x goal over the bench's rounds), paired none vs DFLASH under overlap.
cd /tmp/proj || exit 1
END=${END:-1300}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 500 options-stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 500 options-stress-overlap
wait_lanes 700 a b
OPTIONS_MODES=none,ddtree-16,ddtree-16@nodraftpen timing t1 300 options
STACKS_MODES=ddtree-16@overlap,ddtree-16 STACKS_CONTEXTS=256,1024 timing t2 250 stacks
timing t3 200 serve
PAIRED_MODES=none,dflash@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t4 100 paired
# issue 28: the penalties' cost at bs 32 with the drafter's pass (0031) beside the verify's (about 60 s)
timing t5 60 request-options
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
