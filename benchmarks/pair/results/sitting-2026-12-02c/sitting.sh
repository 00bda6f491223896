#!/bin/bash
# Next device sitting (copy to the repo root, untracked, before call 1; remove after). Two lanes beside the
# long pair's training (four were too many on 2026-12-02), timing alone after. Poll with
# `bash tests/gpu/sitting_poll.sh 100` (packs /tmp/out + /tmp/runs into $OUT every call).
cd /tmp/proj || exit 1
END=${END:-1150}  # seconds from this script's start by which every job should be done
export JOB_TIMEOUT=600
Q=tests/gpu/device_queue.sh
left() { echo $((END - SECONDS - ${1:-0})); }
lane() {  # lane NAME JOB...
  local name=$1; shift
  (QUEUE_LANE=$name OUT=/tmp/out/lane$name RUNS=/tmp/runs/$name DEADLINE=$(left 400) bash $Q "$@"
   echo 0 > /tmp/out/lane$name.done) &
  sleep 20
}
lane a smoke core-tests request-options   # smoke: every new default served (split-KV, Triton sampling, prefilter)
lane b stress-splitkv options-stress-dflash steps   # stress-splitkv = the default flags now
for i in $(seq 900); do
  [[ -f /tmp/out/lanea.done && -f /tmp/out/laneb.done ]] && break
  (($(left 420) < 0)) && break
  sleep 3
done
echo "timing starts at $SECONDS s" > /tmp/out/timing-start.txt
OUT=/tmp/out/t1 RUNS=/tmp/runs/t1 PAIR=/tmp/pair DEADLINE=$(left 60) bash $Q core-bench
OUT=/tmp/out/t2 RUNS=/tmp/runs/t2 PAIR=/tmp/pair-long TRAIN_DONE=/tmp/train-long.done DEADLINE=$(left 60) \
  PAIRED_MODES=none,ddtree-16 PAIRED_CONTEXTS=256,1024,4096,8192 PAIRED_ROUNDS=4 bash $Q paired
OUT=/tmp/out/t3 RUNS=/tmp/runs/t3 PAIR=/tmp/pair DEADLINE=$(left 60) \
  PAIRED_MODES=ddtree-16@extend,ddtree-16 PAIRED_CONTEXTS=256 PAIRED_ROUNDS=6 bash $Q paired options stacks stacks-c32
echo "sitting done at $SECONDS s" > /tmp/out/sitting.done
