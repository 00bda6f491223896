#!/bin/bash
# Sitting 2026-12-02f (copy in benchmarks/pair/results/sitting-2026-12-02f/). Call 1 starts the LONG pair's training
# (PRESET=h200-long into /tmp/pair-long, full drafter with the 900 s guards) while the wheel parts travel. Two
# correctness lanes beside it (issue 25: 0025-0027's commit graph on the GPU, both overlap stresses, the tiny
# models' --stacks; issue 27: core tests with the row report), then the timing jobs alone on the long pair:
# tiny-model step profile v1 / v2 / none (25), paired none,ddtree-16 at 256..8192 (26), paired v1 vs v2 (25),
# options acceptance (28).
cd /tmp/proj || exit 1
END=${END:-1500}
export JOB_TIMEOUT=600
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
mkdir -p /tmp/out /tmp/runs
stacks_gqa() {
  PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
    timeout 300 python3 -m benchmarks.pair.profile_step --smoke-arch gqa --out /tmp/runs/stacks-gqa \
    --contexts 256 --modes ddtree-8,ddtree-8@overlap --stacks --steps 8 > /tmp/out/stacks-gqa.log 2>&1
  echo "stacks-gqa: exit $?" >> /tmp/out/stacks-gqa.log
}
( QUEUE_LANE=a OUT=/tmp/out/lanea RUNS=/tmp/runs/a DEADLINE=$(left 900) bash $Q commit-graph stress-overlap
  (($(left 700) > 0)) && stacks_gqa
  echo 0 > /tmp/out/lanea.done ) &
sleep 20
( QUEUE_LANE=b OUT=/tmp/out/laneb RUNS=/tmp/runs/b DEADLINE=$(left 900) bash $Q core-tests
  OVERLAP_ALGORITHM=DFLASH QUEUE_LANE=b OUT=/tmp/out/laneb2 RUNS=/tmp/runs/b2 DEADLINE=$(left 900) bash $Q stress-overlap
  echo 0 > /tmp/out/laneb.done ) &
for i in $(seq 900); do
  [[ -f /tmp/out/lanea.done && -f /tmp/out/laneb.done && -f /tmp/train.done ]] && break
  (($(left 560) < 0)) && break
  sleep 3
done
cp /tmp/pair-long/metrics.json /tmp/out/long-pair-metrics.json 2> /dev/null
echo "timing starts at $SECONDS s (train.done: $(cat /tmp/train.done 2> /dev/null))" > /tmp/out/timing-start.txt
(($(left 120) > 0)) && PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 timeout "$(left 20)" python3 -m benchmarks.pair.profile_step --smoke-arch gqa \
  --out /tmp/runs/profile-gqa --contexts 256 --modes ddtree-8,ddtree-8@overlap,none > /tmp/out/profile-gqa.log 2>&1
OUT=/tmp/out/t1 RUNS=/tmp/runs/t1 PAIR=/tmp/pair-long DEADLINE=$(left 150) \
  PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=256,1024,4096,8192 PAIRED_ROUNDS=3 bash $Q paired
OUT=/tmp/out/t2 RUNS=/tmp/runs/t2 PAIR=/tmp/pair-long DEADLINE=$(left 100) \
  PAIRED_MODES=ddtree-16,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=4 bash $Q paired
OUT=/tmp/out/t3 RUNS=/tmp/runs/t3 PAIR=/tmp/pair-long DEADLINE=$(left 200) bash $Q options
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
