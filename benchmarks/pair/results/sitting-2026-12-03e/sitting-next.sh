#!/bin/bash
# The next sitting (written after 2026-12-03e), on the long pair kept in .device/pair-long/ (no training).
# Calls (tree + carry must stay under 64 MiB: the tree is about 7.6 MiB, a wheel part 48 MiB, a pair part
# 15 MiB; check each call's rc and output before the next; never `pkill -f` a pattern that the call's own
# command line holds (write `sglang[.]launch_server`); keep less than 30 s between calls while warm):
#   1 (no carry, alone, until a machine answers):
#       mkdir -p /tmp/proj /tmp/out /tmp/pairparts && cp -a . /tmp/proj/ && : > /tmp/w.tar && nproc
#   2-17 (carry .device/parts/pNN, one each, p00..p15): cat .device/parts/pNN >> /tmp/w.tar && ls -la /tmp/w.tar
#   18 (carry .device/pair-long/pair.tar.00, .01, .02): cp .device/pair-long/pair.tar.0[012] /tmp/pairparts/
#   19 (carry .device/pair-long/pair.tar.03, .04, .device/pair-long/pair.tar.sha256, .device/w.tar.sha256):
#       cp .device/pair-long/pair.tar.03 .device/pair-long/pair.tar.04 .device/pair-long/pair.tar.sha256
#       /tmp/pairparts/ && cp .device/w.tar.sha256 /tmp/ && cd /tmp/proj && bash tests/gpu/install_wheels.sh
#       /tmp/w.tar.sha256 > /tmp/install.log 2>&1; tail -5 /tmp/install.log; export
#       PYTHONPATH=/tmp/proj/entrypoint:/tmp/site && python3 -m ddtree.patchset apply --root /tmp/site --series
#       patches/series.yaml 2>&1 | tail -3 && PAIR=/tmp/pair-long PAIR_PARTS=/tmp/pairparts
#       TRAIN_DONE=/tmp/train.done bash tests/gpu/device_pair.sh unpack-pair 2>&1 | tail -3 && cp
#       benchmarks/pair/results/sitting-2026-12-03e/sitting-next.sh /tmp/sitting.sh && (END=...
#       setsid nohup bash /tmp/sitting.sh > /tmp/out/sitting.log 2>&1 < /dev/null &)
#   then polls only, back to back: bash tests/gpu/sitting_poll.sh 150
# END: the seconds left after call 19 less about 200 (12-03e: 1563 left, END 1300, the sitting 1179 s).
# Correctness first this time (two lanes): patch step-graphs-every-batch-size replays the step's graphs at
# batch sizes that ran eagerly before (5, 17, 31, ...): the v1 stress with retractions (batch sizes vary) and
# the overlap stress. Timing, alone: the serve bench of the served default (v1) beside none, overlap and the
# default with the target's graph sizes only (`@target-bs`: the patch off; its effect is at 32 requests);
# then the loop's phases of v1 and overlap at 256 and 1024 with every context measured before any profiled
# window (does the v2 step still grow with context?).
cd /tmp/proj || exit 1
END=${END:-1300}
source tests/gpu/sitting_lib.sh  # PAIR: the long pair, /tmp/pair-long
lane a 700 stress-graphs
sleep 20
OVERLAP_ALGORITHM=DDTREE lane b 700 stress-overlap
wait_lanes 850 a b
SERVE_MODES=none,ddtree-16,ddtree-16@target-bs,ddtree-16@overlap timing t1 420 serve
PROFILE_MODES=ddtree-16@overlap,ddtree-16 PROFILE_CONTEXTS=256,1024 timing t2 120 phases
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
