#!/bin/bash
# Sitting 2026-12-03f: the checkout was new (no kept pair), so the h200 pair (the one issue 25's goals name)
# is trained again beside the correctness lanes. Calls (tree + carry under 64 MiB; check each call's rc):
#   1 (no carry, alone): mkdir -p /tmp/proj /tmp/out && cp -a . /tmp/proj/ && : > /tmp/w.tar && (setsid nohup
#       bash -c 'cd /tmp/proj && OUT=/tmp/out PAIR=/tmp/pair RUNS=/tmp/runs PRESET=h200 bash
#       tests/gpu/device_pair.sh train > /tmp/out/train.log 2>&1' > /dev/null 2>&1 < /dev/null &) && nproc
#   2-17 (carry .device/parts/pNN, p00..p15): cat .device/parts/pNN >> /tmp/w.tar && ls -la /tmp/w.tar
#   18 (carry .device/w.tar.sha256): install, apply, start this with END = the seconds left less about 200
#   then polls only, back to back: bash tests/gpu/sitting_poll.sh 150
# Correctness first (two lanes beside the training): what overlap scheduling needs before it is the served
# default at TP 1 (issue 25: "the default is the new path once it passes smoke and stress"): the smoke under
# the switch, both stresses under it with patch step-graphs-every-batch-size (new: the v2 stages replay at
# every batch size), then the v1 stress with that patch (stress-graphs).
# Timing, alone, after the training: the serve bench (context 256, greedy, 1 and 32 requests) of none, DFLASH
# and DDTREE-16 under overlap, and DDTREE-16 under overlap with the target's graph sizes only (the patch's
# effect at 32 requests); then paired none vs DDTREE-16 under overlap on the eval prompts.
cd /tmp/proj || exit 1
END=${END:-1300}
PAIR=/tmp/pair  # the h200 pair, trained in call 1
source tests/gpu/sitting_lib.sh
lane a 650 smoke-overlap stress-graphs
sleep 20
lane b 650 stress-overlap stress-overlap-dflash
wait_lanes 420 a b
SERVE_MODES=none,dflash@overlap,ddtree-16@overlap,ddtree-16@overlap-target-bs \
  SERVE_ARGS="--contexts 256 --concurrency 1,32 --temperatures 0" timing t1 180 serve
PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t2 40 paired
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
