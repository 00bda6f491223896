#!/bin/bash
# The next sitting as planned at the end of 2026-12-02f. Copy it to the repo root, untracked, before call 1,
# and remove it after. No training: the long pair comes from the build host.
#
# Calls before this script starts:
#   1. carry .device/pair-long/pair.tar.00..02:
#        `mkdir -p /tmp/pp && cp .device/pair-long/pair.tar.* /tmp/pp/`
#   2. carry .device/pair-long/pair.tar.03, pair.tar.04 and pair.tar.sha256:
#        the same cp, then
#        `PAIR_PARTS=/tmp/pp PAIR=/tmp/pair-long bash tests/gpu/device_pair.sh unpack-pair`,
#        which writes /tmp/train.done.
#   3-16. the 14 wheel parts, as always. The last call installs, applies the series, and starts this.
#
# Three correctness lanes:
#   - issue 25: the overlap stress on the tiny MLA target, DDTREE and DFLASH (Kimi's shape: what the switch
#     needs before it can be the default), then on the gqa target again (patch 0028 changed the v2 step: the
#     DFLASH server log should say "DFLASH chain tail (spec v2) captured"); the options stress under overlap
#     (0026 changed how penalties advance);
#   - issue 27: the core tests, where row 18 should now pass with a rounding warning.
# Then the timing jobs alone:
#   - issue 28: options acceptance on the long pair;
#   - issue 25: paired none vs DDTREE-16 under overlap at 256 and 1024 (the v2 step to beat: 3.300 ms), and
#     the tiny models' stacks v1 vs v2 for DDTREE-8 and DFLASH;
#   - issue 26: paired none vs DDTREE-16 at 8192 once more, for the gap at its first difference; the verify
#     bench, so the kernel table and the served figures come from one sitting;
#   - issue 27: the core bench.
cd /tmp/proj || exit 1
END=${END:-1400}
source tests/gpu/sitting_lib.sh
PAIR=/tmp/pair-long
export PAIR
lane a 1000 stress-overlap-mla stress-overlap
sleep 20
OVERLAP_ALGORITHM=DFLASH lane b 1000 stress-overlap-mla stress-overlap
sleep 20
lane c 800 core-tests options-stress-overlap
wait_lanes 700 a b c
timing t1 400 options
PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256,1024 PAIRED_ROUNDS=3 timing t2 200 paired
# issue 26: the 8192 first difference judged (paired_step now keeps the outputs and measures the gap itself)
PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=8192 PAIRED_ROUNDS=1 timing t2b 250 paired
timing t3 150 core-bench
(($(left 150) > 0)) && PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 timeout "$(left 20)" python3 -m benchmarks.pair.profile_step --smoke-arch gqa \
  --out /tmp/runs/stacks-gqa --contexts 256 --modes ddtree-8,ddtree-8@overlap,dflash,dflash@overlap --stacks \
  --steps 8 > /tmp/out/stacks-gqa.log 2>&1
timing t4 90 verify-bench
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
