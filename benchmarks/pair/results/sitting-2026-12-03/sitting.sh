#!/bin/bash
# Sitting 2026-12-03 (copy in benchmarks/pair/results/sitting-2026-12-03/): 12-02g's plan, never run there. Call 1 starts the long pair's
# training again (PRESET=h200-long into /tmp/pair-long; the pair kept on 12-02f's build host went with its
# checkout) while the wheel parts travel. Three correctness lanes beside it, then the timing jobs alone.
#
# Correctness:
#   - issue 25: the overlap stress on the tiny MLA target, DDTREE (lane a) and DFLASH (lane b): what the switch
#     needs before it can be the default; then on the gqa target again (0028-0029 changed the v2 step);
#   - issue 27: the core tests (row 18 should pass with a rounding warning; the sample-first draw).
# Timing, in the order of what each issue still lacks:
#   - issue 26: paired none vs DDTREE-16 at 256..8192, one round (the 8192 first difference's gap, measured by
#     paired_step itself) and the verify bench, so kernel table and served figures share one sitting;
#   - issue 28: options acceptance on the long pair;
#   - issue 27: the core bench;
#   - issue 25: paired none vs DDTREE-16 under overlap at 256 and 1024 (the v2 step to beat: 3.300 ms).
cd /tmp/proj || exit 1
END=${END:-1450}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 900 stress-overlap-mla stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 900 stress-overlap-mla stress-overlap
sleep 20
lane c 900 core-tests
# timing waits for the lanes and the training (call 1 writes /tmp/train.done)
wait_lanes 780 a b c
while [[ ! -f /tmp/train.done ]] && (($(left 700) > 0)); do sleep 3; done
cp /tmp/pair-long/metrics.json "$SITTING_OUT/long-pair-metrics.json" 2> /dev/null
echo "train.done: $(cat /tmp/train.done 2> /dev/null) at $SECONDS s" >> "$SITTING_OUT/timing-start.txt"
PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=256,1024,4096,8192 PAIRED_ROUNDS=1 timing t1 500 paired
timing t2 420 verify-bench
timing t3 120 options
timing t4 100 core-bench
PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256,1024 PAIRED_ROUNDS=3 timing t5 40 paired
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
