#!/bin/bash
# The next sitting (written after 2026-12-03d), on the long pair kept in .device/pair-long/ (no training).
# Calls (tree + carry must stay under 64 MiB: the tree is about 8 MiB now, a wheel part 56 MiB, a pair part
# 15 MiB; check each call's rc and output before the next; never `pkill -f` a pattern that the call's own
# command line holds; keep less than 30 s between calls while the machine is warm):
#   1 (no carry, alone, until a machine answers):
#       mkdir -p /tmp/proj /tmp/out /tmp/pairparts && cp -a . /tmp/proj/ && : > /tmp/w.tar && nproc
#   2-14 (carry .device/parts/pNN, one each, p00..p12): cat .device/parts/pNN >> /tmp/w.tar && ls -la /tmp/w.tar
#   15 (carry .device/parts/p13 and .device/pair-long/pair.tar.00):
#       cat .device/parts/p13 >> /tmp/w.tar && cp .device/pair-long/pair.tar.00 /tmp/pairparts/ && ls -la /tmp/w.tar
#   16 (carry .device/pair-long/pair.tar.01, .02, .03): cp .device/pair-long/pair.tar.0[123] /tmp/pairparts/
#   17 (carry .device/pair-long/pair.tar.04, .device/pair-long/pair.tar.sha256, .device/w.tar.sha256):
#       cp .device/pair-long/pair.tar.04 .device/pair-long/pair.tar.sha256 /tmp/pairparts/ &&
#       cp .device/w.tar.sha256 /tmp/ && cd /tmp/proj && bash tests/gpu/install_wheels.sh /tmp/w.tar.sha256 >
#       /tmp/install.log 2>&1; tail -5 /tmp/install.log; export PYTHONPATH=/tmp/proj/entrypoint:/tmp/site &&
#       python3 -m ddtree.patchset apply --root /tmp/site --series patches/series.yaml 2>&1 | tail -3 &&
#       PAIR=/tmp/pair-long PAIR_PARTS=/tmp/pairparts TRAIN_DONE=/tmp/train.done bash tests/gpu/device_pair.sh
#       unpack-pair 2>&1 | tail -3 && cp benchmarks/pair/results/sitting-2026-12-03d/sitting-next.sh /tmp/sitting.sh
#       && (END=... setsid nohup bash /tmp/sitting.sh > /tmp/out/sitting.log 2>&1 < /dev/null &)
#   then polls only, back to back: bash tests/gpu/sitting_poll.sh 150
# END: the seconds left after call 17 less about 200 (12-03d: 1589 left, END 1350, 160 s left at the end).
# Correctness first (two lanes): patch 0033 (pinned reservation bounds) under overlap, DDTREE and DFLASH.
# Timing, alone: 0033 paired against its switch at 256 and 1024; the v1 step's host time per function at
# 32 requests (issue 25's concurrency goal; after 0032); issue 25's goals at 256 without streaming (none vs DDTREE-16@overlap paired; the three modes' step,
# idle share and non-streamed concurrency-32 aggregate); the serve bench (streamed) last.
cd /tmp/proj || exit 1
END=${END:-1300}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
OVERLAP_ALGORITHM=DDTREE lane a 700 stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 700 stress-overlap
wait_lanes 900 a b
PAIRED_MODES=ddtree-16@overlap-pageable,ddtree-16@overlap PAIRED_CONTEXTS=256,1024 PAIRED_ROUNDS=2 timing t1 450 paired
timing t2 300 stacks-c32
PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t3 250 paired
PROFILE_MODES=none,ddtree-16@overlap,ddtree-16 PROFILE_CONTEXTS=256 timing t4 200 profile
# the bench client's ceiling on this host (no GPU; about a minute): what the streamed serve figures can reach
(($(left 180) > 0)) && timeout 150 python3 -m benchmarks.bench_client_stream --old '' > "$SITTING_OUT/client-bench.txt" 2>&1
timing t5 120 serve
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
