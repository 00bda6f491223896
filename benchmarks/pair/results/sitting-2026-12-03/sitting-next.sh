#!/bin/bash
# The next sitting (written after 2026-12-03's; copy in benchmarks/pair/results/sitting-2026-12-03/). Call 1
# starts the long pair's training (PRESET=h200-long into /tmp/pair-long, about 930 s beside two lanes) while the
# wheel parts travel; call 14 installs, applies and verifies the series and starts this with END=1450.
#
# Correctness, beside the training (two lanes):
#   - issue 28: the options stresses (DDTREE, DFLASH, DDTREE under overlap) with the drafter's penalties on
#     (the default): outputs must stay plain decoding's, token for token;
#   - the default stress once more (DDTREE, every option and stop).
# Timing, alone, after the training, in the order of what each issue still lacks:
#   - issue 26: the verify bench first (63 s; needs no pair), then paired none vs DDTREE-16 at 256..8192, so
#     the kernel table and the served figures share one sitting;
#   - issue 28: options acceptance with and without the drafter's penalties (ddtree-16@nodraftpen);
#   - issue 25: what remains goes to the sitting after, on this pair kept. The last two calls (after
#     sitting.done; the pair is about 71 MB in 15 MiB parts, more than one call brings back):
#       PAIR=/tmp/pair-long OUT=/tmp/pp bash tests/gpu/device_pair.sh pack-pair &&
#         cp /tmp/pp/pair/pair.tar.sha256 /tmp/pp/pair/pair.tar.0[0-2] "$OUT"/
#       cp /tmp/pp/pair/pair.tar.0[3-9] "$OUT"/
#     and here: copy both calls' files into the ignored .device/pair-long/ (benchmarks/pair/README.md).
#   - issue 25, the sitting after (PAIR_PARTS=... unpack-pair instead of the training): PROFILE_MODES=
#     ddtree-16@overlap,ddtree-16,none PROFILE_CONTEXTS=256,1024 profile (the idle share; why the v2 step grows
#     1.94 -> 3.15 ms from 256 to 1024), paired none vs dflash@overlap, the serve bench at concurrency 32 with
#     none,dflash@overlap,ddtree-16@overlap (device_pair.sh serve, SERVE_ARGS="--contexts 256 --concurrency 1,32
#     --temperatures 0").
cd /tmp/proj || exit 1
END=${END:-1450}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 900 options-stress options-stress-overlap
sleep 20
lane b 900 options-stress-dflash stress
wait_lanes 700 a b
# the verify bench needs no pair, so its queue would not wait for the training: wait here (timing runs alone)
while [[ ! -f /tmp/train.done ]] && (($(left 600) > 0)); do sleep 3; done
echo "train.done: $(cat /tmp/train.done 2> /dev/null) at $SECONDS s" >> "$SITTING_OUT/timing-start.txt"
timing t1 600 verify-bench
PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=256,1024,4096,8192 PAIRED_ROUNDS=1 timing t2 450 paired
OPTIONS_MODES=none,ddtree-16,ddtree-16@nodraftpen timing t3 60 options
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
