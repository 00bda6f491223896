#!/bin/bash
# Sitting 2026-12-02g, last hold (~330 s of device time after the wheels): issue 27 only. The core bench alone
# first (its figures are the goals), then the GPU core tests, the sample-first ones first, verbose, so a hold
# that ends mid-run still shows which tests passed in the last poll's snapshot.
cd /tmp/proj || exit 1
mkdir -p /tmp/out
python3 benchmarks/ddtree_core_bench.py --json /tmp/out/core_bench.json > /tmp/out/core-bench.log 2>&1
echo "core-bench: exit $? at $SECONDS s" >> /tmp/out/status.txt
python3 -m pytest -v -p no:cacheprovider tests/gpu/test_ddtree_core_gpu.py -k "sample_first or plain_temperature_outcomes" > /tmp/out/core-tests-sample-first.log 2>&1
echo "core-tests sample_first: exit $? at $SECONDS s" >> /tmp/out/status.txt
python3 -m pytest -v -p no:cacheprovider tests/gpu/test_ddtree_core_gpu.py -k "not sample_first and not plain_temperature_outcomes" > /tmp/out/core-tests-rest.log 2>&1
echo "core-tests rest: exit $? at $SECONDS s" >> /tmp/out/status.txt
