#!/bin/bash
# Sitting 2026-12-02g, third hold with what the session had left (~890 s of device time). The first hold was lost
# after 100 s and the second before its wheels arrived: a tool call beside the poll, in the same batch, ran after
# it and left the machine idle past 30 s. Without time for the long pair (864 s of training), only the jobs that
# need no pair: the overlap stress on the tiny MLA target for DDTREE and DFLASH (issue 25), the core tests
# (issue 27) beside them; then the core bench (27) and the verify bench (26) alone.
cd /tmp/proj || exit 1
END=${END:-640}
source tests/gpu/sitting_lib.sh
lane a 300 stress-overlap-mla
sleep 15
OVERLAP_ALGORITHM=DFLASH lane b 300 stress-overlap-mla
sleep 15
lane c 300 core-tests
wait_lanes 150 a b c
timing t1 60 core-bench
timing t2 0 verify-bench
echo "sitting done at $SECONDS s" > "$SITTING_OUT/sitting.done"
