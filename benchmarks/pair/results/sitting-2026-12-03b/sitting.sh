#!/bin/bash
# Sitting 2026-12-03b (written after 2026-12-03's sitting-next.sh). Call 1 starts the long pair's training
# (PRESET=h200-long into /tmp/pair-long, about 930 s beside two lanes) while the wheel parts travel; the call
# after the last part installs, applies and verifies the series and starts this with END=1400.
#
# Correctness, beside the training (two lanes), issue 28's patch 0031 (the drafter sees the request's
# penalties, on by default): the options stresses must stay plain decoding's, token for token:
#   lane a: DDTREE (v1), then DDTREE under overlap; lane b: DFLASH (v1), then DFLASH under overlap.
# Timing, alone, after the training, in the order of what each issue still lacks:
#   - issue 26: the verify bench (63 s; needs no pair), then paired none vs DDTREE-16 at 256..8192, so the
#     kernel table and the served figures share one sitting;
#   - issue 28: options acceptance with and without the drafter's penalties (ddtree-16@nodraftpen);
#   - issue 25: the profile of DDTREE-16 under overlap beside v1 and none at 256 and 1024 (the idle share;
#     why the v2 step grows 1.94 -> 3.15 ms from 256 to 1024), then paired none vs DFLASH under overlap.
# Last: the pair packed into /tmp/pp (CPU only), so two calls after sitting.done bring it back:
#   cp /tmp/pp/pair/pair.tar.sha256 /tmp/pp/pair/pair.tar.0[0-2] "$OUT"/
#   cp /tmp/pp/pair/pair.tar.0[3-9] "$OUT"/
# and here: both calls' files into the ignored .device/pair-long/ (benchmarks/pair/README.md).
cd /tmp/proj || exit 1
END=${END:-1400}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 900 options-stress options-stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 900 options-stress-dflash options-stress-overlap
wait_lanes 700 a b
# the verify bench needs no pair, so its queue would not wait for the training: wait here (timing runs alone)
while [[ ! -f /tmp/train.done ]] && (($(left 600) > 0)); do sleep 3; done
echo "train.done: $(cat /tmp/train.done 2> /dev/null) at $SECONDS s" >> "$SITTING_OUT/timing-start.txt"
timing t1 120 verify-bench
PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=256,1024,4096,8192 PAIRED_ROUNDS=1 timing t2 260 paired
OPTIONS_MODES=none,ddtree-16,ddtree-16@nodraftpen timing t3 320 options
PROFILE_MODES=ddtree-16@overlap,ddtree-16,none PROFILE_CONTEXTS=256,1024 timing t4 200 profile
PAIRED_MODES=none,dflash@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t5 100 paired
if [[ -f /tmp/train.done ]]; then
  PAIR=/tmp/pair-long OUT=/tmp/pp bash tests/gpu/device_pair.sh pack-pair > "$SITTING_OUT/pack-pair.log" 2>&1
  ls -la /tmp/pp/pair >> "$SITTING_OUT/pack-pair.log" 2>&1
fi
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
