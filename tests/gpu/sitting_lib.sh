#!/bin/bash
# The parts every sitting script repeats (tests/gpu/README.md, "A sitting that fits one hold"). A sitting
# script (benchmarks/pair/results/*/next-sitting.sh) sets END, the seconds from its start by which every job
# should be done, and sources this from the repo root's copy on the device:
#   left [S]                 seconds left before END, less S
#   lane NAME MARGIN JOB...  one correctness queue in the background, its files in $SITTING_OUT/laneNAME, its
#                            own servers; it starts no job later than MARGIN s before END; writes
#                            $SITTING_OUT/laneNAME.done when it ends. VAR=value before the call reaches the queue
#                            (e.g. OVERLAP_ALGORITHM=DFLASH lane b 900 stress-overlap)
#   wait_lanes MARGIN NAME...  until every named lane is done, or fewer than MARGIN s are left; then writes
#                            $SITTING_OUT/timing-start.txt (timing jobs run alone, after the lanes)
#   timing NAME MARGIN JOB...  one timing queue in the foreground ($SITTING_OUT/NAME, $PAIR)
# and exports PAIR (default /tmp/pair-long, the kept long pair) for every queue it starts.
SITTING_OUT=${SITTING_OUT:-/tmp/out} SITTING_RUNS=${SITTING_RUNS:-/tmp/runs}
SITTING_QUEUE=${SITTING_QUEUE:-tests/gpu/device_queue.sh}
export JOB_TIMEOUT=${JOB_TIMEOUT:-600}
# The trained pair every sitting since 2026-12-03 serves: the long pair, unpacked by device_pair.sh unpack-pair
# (device_queue.sh's own default, /tmp/pair, is where a training writes; a plan that trains sets PAIR itself).
export PAIR=${PAIR:-/tmp/pair-long}
mkdir -p "$SITTING_OUT" "$SITTING_RUNS"

left() { echo $((END - SECONDS - ${1:-0})); }

lane() {
  local name=$1 margin=$2
  shift 2
  (QUEUE_LANE=$name OUT=$SITTING_OUT/lane$name RUNS=$SITTING_RUNS/$name DEADLINE=$(left "$margin") \
    bash "$SITTING_QUEUE" "$@"
   echo $? > "$SITTING_OUT/lane$name.done") &
}

wait_lanes() {
  local margin=$1 name waiting
  shift
  while (($(left "$margin") > 0)); do
    waiting=0
    for name in "$@"; do [[ -f $SITTING_OUT/lane$name.done ]] || waiting=1; done
    ((waiting)) || break
    sleep "${SITTING_POLL_S:-3}"
  done
  echo "timing starts at $SECONDS s" > "$SITTING_OUT/timing-start.txt"
}

timing() {
  local name=$1 margin=$2
  shift 2
  OUT=$SITTING_OUT/$name RUNS=$SITTING_RUNS/$name DEADLINE=$(left "$margin") bash "$SITTING_QUEUE" "$@"
}
