#!/bin/bash
# This session's device sitting (2026-12-02; not committed): three correctness lanes side by side, then timing alone.
cd /tmp/proj || exit 1
END=${END:-950}  # seconds from this script's start by which every job should be done
export PAIR=/tmp/pair JOB_TIMEOUT=420
echo 0 > /tmp/train.done  # no pair this sitting: the pairless timing jobs only
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
(QUEUE_LANE=b OUT=/tmp/out/laneB RUNS=/tmp/runs/b DEADLINE=$(left 300) bash $Q stress-mla options-stress-dflash
 echo 0 > /tmp/laneb.done) &
sleep 20
(QUEUE_LANE=c OUT=/tmp/out/laneC RUNS=/tmp/runs/c DEADLINE=$(left 300) bash $Q options-stress steps
 echo 0 > /tmp/lanec.done) &
sleep 20
OUT=/tmp/out/laneA RUNS=/tmp/runs/a DEADLINE=$(left 300) bash $Q smoke-mla-graphs secrets
for i in $(seq 600); do
  [[ -f /tmp/laneb.done && -f /tmp/lanec.done ]] && break
  (($(left 150) < 0)) && break
  sleep 3
done
echo "timing starts at $SECONDS s" > /tmp/out/timing-start.txt
OUT=/tmp/out/t1 RUNS=/tmp/runs/t1 DEADLINE=$(left 60) bash $Q core-bench profile-mla verify-bench
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
