#!/bin/bash
# The next sitting (written after 2026-12-03f). Patch 0037 made overlap the default at TP 1, so the served
# default on the H200 is now the v2 step: `ddtree-16` and `ddtree-16@overlap` serve the same step, `@v1` the
# old default. If .device/ holds no wheel parts or pair (a new checkout), stage the wheels
# (`.venv/bin/python -m tests.gpu.stage_wheels`) and train the h200 pair in call 1 as 12-03f's sitting.sh does
# (its header lists the calls; about 530 s of training beside the lanes). Between calls while warm: no more than
# a few seconds; send the polls back to back and read nothing between them (12-03f lost a hold that way).
#
# Correctness (lanes, beside the training):
#   a: stress-v1 (the v1 step with patch 0036's every-batch-size graphs: 12-03f's stress-graphs lost with the hold)
#   b: smoke (the served default at TP 1, now overlap: the default path's own smoke)
# Timing, alone, after the training (issue 25's figures for the new default, one sitting):
#   t1 the serve bench at 256, greedy, 1 and 32 requests: none, the default DDTREE-16 and DFLASH, DDTREE-16 with
#      the target's graph sizes only (0036 off: its effect at 32 requests) and the v1 step
#   t2 phases of the default and v1 at 256 (bs_counts at 32 requests: how many batched steps ran between the
#      target's graph sizes)
cd /tmp/proj || exit 1
END=${END:-1300}
PAIR=${PAIR:-/tmp/pair}  # the h200 pair, trained in call 1
source tests/gpu/sitting_lib.sh
lane a 650 stress-v1
sleep 20
lane b 650 smoke
wait_lanes 480 a b
SERVE_MODES=none,ddtree-16,dflash,ddtree-16@target-bs,ddtree-16@v1 \
  SERVE_ARGS="--contexts 256 --concurrency 1,32 --temperatures 0" timing t1 200 serve
PROFILE_MODES=ddtree-16,ddtree-16@v1 PROFILE_CONTEXTS=256 timing t2 40 phases
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
