#!/bin/bash
# Device sitting 2026-12-02e (the 835 s left after 12-02d's hold was lost): patch 0024 under the overlap stresses
# (DDTREE and DFLASH), the core tests with the top-p row report, then the tiny models' step profile with and
# without overlap scheduling (issue 25's first overlap figures), if time is left.
cd /tmp/proj || exit 1
END=${END:-560}
export JOB_TIMEOUT=420
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
mkdir -p /tmp/out /tmp/runs
( QUEUE_LANE=a OUT=/tmp/out/lanea RUNS=/tmp/runs/a DEADLINE=$(left 300) bash $Q stress-overlap; echo 0 > /tmp/out/lanea.done ) &
sleep 15
( OVERLAP_ALGORITHM=DFLASH QUEUE_LANE=b OUT=/tmp/out/laneb RUNS=/tmp/runs/b DEADLINE=$(left 300) bash $Q stress-overlap
  echo 0 > /tmp/out/laneb.done ) &
sleep 15
( QUEUE_LANE=c OUT=/tmp/out/lanec RUNS=/tmp/runs/c DEADLINE=$(left 300) bash $Q core-tests; echo 0 > /tmp/out/lanec.done ) &
for i in $(seq 900); do
  [[ -f /tmp/out/lanea.done && -f /tmp/out/laneb.done && -f /tmp/out/lanec.done ]] && break
  (($(left 150) < 0)) && break
  sleep 3
done
echo "timing starts at $SECONDS s" > /tmp/out/timing-start.txt
if (($(left 150) > 0)); then
  PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
    timeout $(left 20) python3 -m benchmarks.pair.profile_step --smoke-arch gqa --out /tmp/runs/profile-gqa \
    --modes ddtree-8,ddtree-8@overlap,none --contexts 256 > /tmp/out/profile-gqa.log 2>&1
fi
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
