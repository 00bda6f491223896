#!/bin/bash
# Sitting 2026-12-03e, on the long pair kept in .device/pair-long/ (no training). The calls are those of
# ../sitting-2026-12-03d/sitting-next.sh's header (1 alone with no carry; 2-14 one wheel part each; 15 p13 and
# pair.tar.00; 16 pair.tar.01-03; 17 pair.tar.04, the sums, install, apply, unpack, start) with this file
# copied to /tmp/sitting.sh. Timing first this time (issue 25's open goals need one sitting's figures side by
# side), the overlap stresses after:
#   t1 phases: none, DDTREE-16 under overlap and v1 at 256 and 1024: the loop's phases without the profiler
#      (patch scheduler-step-phases) at 1 and 32 requests, the syncs made while launching, the idle estimate,
#      the non-streamed aggregate at 32 (the concurrency goal, all three modes from one machine)
#   t2 paired none vs DDTREE-16 under overlap at 256 (the 1.1x goal at one request)
#   t3 stacks-c32: the v1 step's host time per function at 32 requests (after 0032 and 0034)
#   t4 paired 0033 against its switch at 1024 (where the v2 step grows)
#   lanes: stress-overlap DDTREE and DFLASH (0033 on), the bench client's ceiling on this host beside them
#   t5 serve (streamed, the fixed client) if time is left
cd /tmp/proj || exit 1
END=${END:-1300}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
PROFILE_MODES=none,ddtree-16@overlap,ddtree-16 PROFILE_CONTEXTS=256,1024 timing t1 900 phases
PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=3 timing t2 700 paired
timing t3 550 stacks-c32
PAIRED_MODES=ddtree-16@overlap-pageable,ddtree-16@overlap PAIRED_CONTEXTS=1024 PAIRED_ROUNDS=2 timing t4 450 paired
OVERLAP_ALGORITHM=DDTREE lane a 420 stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 400 stress-overlap
(($(left 200) > 0)) && timeout 150 python3 -m benchmarks.bench_client_stream --old '' > "$SITTING_OUT/client-bench.txt" 2>&1
wait_lanes 0 a b
timing t5 100 serve
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
