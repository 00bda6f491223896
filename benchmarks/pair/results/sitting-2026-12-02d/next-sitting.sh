#!/bin/bash
# The next sitting as planned at the end of 2026-12-02e (copy to the repo root, untracked, before call 1; remove
# after). Call 1 starts the short pair's training (PRESET=h200, about 11 min beside lanes) while the 14 wheel parts
# travel; the last part's call installs, applies the series, and starts this. Three correctness lanes beside the
# training (issue 25: patches 0025-0027's graphs on the GPU, both overlap stresses, the options stress; issue 27:
# the core tests with the top-p row report), then the timing jobs alone: the tiny models' step profile v1 / v2 /
# eager / none, its --stacks, the pair's paired v1 vs v2 and the options acceptance (issue 28).
cd /tmp/proj || exit 1
END=${END:-1400}
export JOB_TIMEOUT=600
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
mkdir -p /tmp/out /tmp/runs
( QUEUE_LANE=a OUT=/tmp/out/lanea RUNS=/tmp/runs/a DEADLINE=$(left 400) bash $Q commit-graph stress-overlap
  echo 0 > /tmp/out/lanea.done ) &
sleep 20
( OVERLAP_ALGORITHM=DFLASH QUEUE_LANE=b OUT=/tmp/out/laneb RUNS=/tmp/runs/b DEADLINE=$(left 400) bash $Q stress-overlap
  QUEUE_LANE=b OUT=/tmp/out/laneb2 RUNS=/tmp/runs/b2 DEADLINE=$(left 400) bash $Q options-stress-overlap
  echo 0 > /tmp/out/laneb.done ) &
sleep 20
( QUEUE_LANE=c OUT=/tmp/out/lanec RUNS=/tmp/runs/c DEADLINE=$(left 400) bash $Q core-tests; echo 0 > /tmp/out/lanec.done ) &
for i in $(seq 900); do
  [[ -f /tmp/out/lanea.done && -f /tmp/out/laneb.done && -f /tmp/out/lanec.done ]] && break
  (($(left 480) < 0)) && break
  sleep 3
done
echo "timing starts at $SECONDS s" > /tmp/out/timing-start.txt
profile() {  # profile NAME ARGS...: the tiny gqa models' step profile (no trained pair needed)
  local name=$1; shift
  (($(left 120) > 0)) || { echo "$name: skipped, past the deadline" > "/tmp/out/$name.log"; return; }
  PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
    timeout "$(left 20)" python3 -m benchmarks.pair.profile_step --smoke-arch gqa --out "/tmp/runs/$name" \
    --contexts 256 "$@" > "/tmp/out/$name.log" 2>&1
}
profile profile-gqa --modes ddtree-8,ddtree-8@overlap,ddtree-8@eager,none
profile stacks-gqa --modes ddtree-8,ddtree-8@overlap --stacks --steps 8
OUT=/tmp/out/t1 RUNS=/tmp/runs/t1 PAIR=/tmp/pair DEADLINE=$(left 60) \
  PAIRED_MODES=ddtree-16,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=4 bash $Q paired
OUT=/tmp/out/t2 RUNS=/tmp/runs/t2 PAIR=/tmp/pair DEADLINE=$(left 60) bash $Q options
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
