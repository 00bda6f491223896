#!/bin/bash
# Device sitting 2026-12-02d: the short pair trains from call 1; three correctness lanes beside it (issue 25's
# overlap stresses + steps, issue 27's core-tests), then the timing jobs alone (issue 25 paired, issue 28 options).
cd /tmp/proj || exit 1
END=${END:-1350}
export JOB_TIMEOUT=600
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
mkdir -p /tmp/out /tmp/runs
( QUEUE_LANE=a OUT=/tmp/out/lanea RUNS=/tmp/runs/a DEADLINE=$(left 400) bash $Q stress-overlap
  SGLANG_DFLASH_OVERLAP=1 QUEUE_LANE=a OUT=/tmp/out/lanea2 RUNS=/tmp/runs/a2 DEADLINE=$(left 400) bash $Q steps
  echo 0 > /tmp/out/lanea.done ) &
sleep 20
( QUEUE_LANE=b OUT=/tmp/out/laneb RUNS=/tmp/runs/b DEADLINE=$(left 400) bash $Q options-stress-overlap
  OVERLAP_ALGORITHM=DFLASH QUEUE_LANE=b OUT=/tmp/out/laneb2 RUNS=/tmp/runs/b2 DEADLINE=$(left 400) bash $Q stress-overlap
  echo 0 > /tmp/out/laneb.done ) &
sleep 20
( QUEUE_LANE=c OUT=/tmp/out/lanec RUNS=/tmp/runs/c DEADLINE=$(left 400) bash $Q core-tests
  echo 0 > /tmp/out/lanec.done ) &
for i in $(seq 900); do
  [[ -f /tmp/out/lanea.done && -f /tmp/out/laneb.done && -f /tmp/out/lanec.done ]] && break
  (($(left 480) < 0)) && break
  sleep 3
done
echo "timing starts at $SECONDS s" > /tmp/out/timing-start.txt
OUT=/tmp/out/t1 RUNS=/tmp/runs/t1 PAIR=/tmp/pair DEADLINE=$(left 60) \
  PAIRED_MODES=ddtree-16,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=4 bash $Q paired
OUT=/tmp/out/t2 RUNS=/tmp/runs/t2 PAIR=/tmp/pair DEADLINE=$(left 60) bash $Q options
OUT=/tmp/out/t3 RUNS=/tmp/runs/t3 PAIR=/tmp/pair DEADLINE=$(left 60) \
  PAIRED_MODES=none,ddtree-16@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=4 bash $Q paired
OUT=/tmp/out/t4 RUNS=/tmp/runs/t4 PAIR=/tmp/pair DEADLINE=$(left 60) \
  PAIRED_MODES=dflash,dflash@overlap PAIRED_CONTEXTS=256 PAIRED_ROUNDS=4 bash $Q paired
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
