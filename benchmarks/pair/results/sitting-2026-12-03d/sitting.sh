#!/bin/bash
# The next sitting (written after 2026-12-03c), on the long pair kept in .device/pair-long/ (no training).
# Calls (tree + carry must stay under 64 MiB: a wheel part is 56 MiB, a pair part about 16 MiB; check each
# call's rc and output before the next; never `pkill -f` a pattern that the call's own command line holds):
#   1 (carry .device/parts/p00, alone, until a machine answers):
#       mkdir -p /tmp/proj /tmp/out /tmp/pairparts && cp -a . /tmp/proj/ && cat .device/parts/p00 > /tmp/w.tar
#   2-14 (carry .device/parts/pNN, one each, in order): cat .device/parts/pNN >> /tmp/w.tar && ls -la /tmp/w.tar
#   15 (carry .device/pair-long/pair.tar.00 and .01): cp .device/pair-long/pair.tar.0[01] /tmp/pairparts/
#   16 (carry .device/pair-long/pair.tar.02 and .03): cp .device/pair-long/pair.tar.0[23] /tmp/pairparts/
#   17 (carry .device/pair-long/pair.tar.04, .device/pair-long/pair.tar.sha256, .device/w.tar.sha256):
#       cp .device/pair-long/pair.tar.04 .device/pair-long/pair.tar.sha256 /tmp/pairparts/ &&
#       cp .device/w.tar.sha256 /tmp/ && cd /tmp/proj && bash tests/gpu/install_wheels.sh /tmp/w.tar.sha256 &&
#       export PYTHONPATH=/tmp/proj/entrypoint:/tmp/site && python3 -m ddtree.patchset apply --root /tmp/site
#       --series patches/series.yaml && PAIR=/tmp/pair-long PAIR_PARTS=/tmp/pairparts TRAIN_DONE=/tmp/train.done
#       bash tests/gpu/device_pair.sh unpack-pair && cp benchmarks/pair/results/sitting-2026-12-03c/sitting-next.sh
#       /tmp/sitting.sh && (END=... setsid nohup bash /tmp/sitting.sh > /tmp/out/sitting.log 2>&1 < /dev/null &)
#   then polls only, back to back: bash tests/gpu/sitting_poll.sh 150
# END: the seconds left after call 17 less about 150 (the last polls); shrink the lane margins with it.
# Correctness first (two lanes), patch 0032 (v1's verify append) on the GPU: the stress on DDTREE's default
# step (retractions, aborts, stops, request options) and the options stress on DFLASH's.
# Timing, alone: issue 28 (options acceptance with and without 0031; its cost at bs 32), issue 25 (the stacks
# at 256 and 1024, the serve bench at concurrency 1 and 32, paired none vs DFLASH under overlap).
cd /tmp/proj || exit 1
END=${END:-1300}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 700 stress-graphs
sleep 20
lane b 700 options-stress-dflash
wait_lanes 900 a b
OPTIONS_MODES=none,ddtree-16,ddtree-16@nodraftpen timing t1 500 options
timing t2 300 request-options
STACKS_MODES=ddtree-16@overlap,ddtree-16 STACKS_CONTEXTS=256,1024 timing t3 250 stacks
timing t4 200 serve
PAIRED_MODES=none,dflash@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t5 100 paired
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
