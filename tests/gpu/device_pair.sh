#!/bin/bash
# The trained pair on the GPU device (benchmarks/pair/README.md): train it, then serve it three ways and bench.
#   train: python -m benchmarks.pair.train --out $PAIR --preset $PRESET (default h200)
#          (about 9 minutes on the H200; torch, tokenizers, safetensors and matplotlib only, no SGLang);
#          PRESET=h200 adds --expect benchmarks/pair/results/metrics.json and prints whether the retrained pair
#          reproduced the committed held-out losses and offline acceptance; PRESET=h200-long trains the
#          long-context pair (about 14 minutes beside two lanes; held-out loss and offline acceptance at 512 and
#          4096, expected against benchmarks/pair/results/long/metrics.json): give it its own PAIR (/tmp/pair-long);
#          writes its exit code to $TRAIN_DONE (default /tmp/train.done), which device_queue.sh waits for.
#   serve: after the pinned wheels are installed into /tmp/site (tests/gpu/README.md, steps 1-3):
#          applies and verifies the patch series, then benchmarks.pair.serve_bench over MODES (default
#          none,dflash,ddtree-8,ddtree-16,ddtree-32; each: greedy check + ddtree bench at T=0 and T=1.0 over
#          contexts 256,1024,4096 x concurrency 1,8,32,64), writing $RUNS.
#   summary: benchmarks.pair.summarize over $RUNS (offline acceptance on the served tokens, greedy equality,
#          ratios); exit 1 when a mode's greedy outputs differ from no speculation other than at a near-tie
#          (the target's top-1 minus top-2 logit at most 0.25 where they first differ: bf16 noise).
#   profile: benchmarks.pair.profile_step: SGLang's torch profiler over one greedy request per mode
#          (PROFILE_MODES, default none,dflash,ddtree-16) and context (PROFILE_CONTEXTS, default 256,4096);
#          per decode step: drafter forward, target forward, DDTree kernels, other kernels and copies, idle
#          GPU ($RUNS/profile/profile.json); PROFILE_ARGS=--stacks adds host time per Python function.
#   pack:  $RUNS without the profiler traces into $OUT/runs.tar.gz, and up to 7 traces under 16 MiB into
#          $OUT/traces/ (a call brings back at most 8 files of 16 MiB).
#   pack-pair: the trained pair as a tar in 15 MiB parts in $OUT/pair/ (pair.tar.NN + pair.tar.sha256; 78 MB,
#          six parts, more than one call brings back: fetch the rest in a second call), to keep it on the
#          host (an ignored folder, e.g. .device/pair/) for a later sitting.
#   unpack-pair: a kept pair back into $PAIR from $PAIR_PARTS (pair.tar.NN + pair.tar.sha256, carried in one
#          or two calls): refuses a tar whose sha256 differs; writes $TRAIN_DONE (0) as `train` does, so
#          device_queue.sh's timing jobs start at once instead of after nine minutes of training.
# usage (device, repo root): OUT=/some/dir PAIR=/tmp/pair RUNS=/tmp/runs bash tests/gpu/device_pair.sh STEP...
#   the long pair: PRESET=h200-long PAIR=/tmp/pair-long RUNS=/tmp/runs-long ... train, then serve with
#   SERVE_ARGS="--contexts 256,1024,4096,8192" (benchmarks/pair/README.md, "The long-context pair")
set -u
export PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out} PAIR=${PAIR:-/tmp/pair} RUNS=${RUNS:-/tmp/runs}
MODES=${MODES:-none,dflash,ddtree-8,ddtree-16,ddtree-32}
PRESET=${PRESET:-h200}
mkdir -p "$OUT" "$RUNS"
rc=0
for step in "$@"; do
  t=$SECONDS
  case $step in
    train)
      expect=()  # the committed metrics each device preset's retrain must reproduce
      [[ $PRESET == h200 ]] && expect=(--expect benchmarks/pair/results/metrics.json)
      [[ $PRESET == h200-long ]] && expect=(--expect benchmarks/pair/results/long/metrics.json)
      python3 -m benchmarks.pair.train --out "$PAIR" --preset "$PRESET" ${expect[@]+"${expect[@]}"}
      src=$?
      echo $src > "${TRAIN_DONE:-/tmp/train.done}" ;;
    serve)
      { python3 -m ddtree.patchset apply --root /tmp/site --series patches/series.yaml &&
        python3 -m ddtree.patchset verify --root /tmp/site --series patches/series.yaml; } || exit 1
      python3 -m benchmarks.pair.serve_bench --pair "$PAIR" --out "$RUNS" --modes "$MODES" \
        --deadline "${DEADLINE:-480}" ${SERVE_ARGS:-}
      src=$? ;;
    summary)
      python3 -m benchmarks.pair.summarize --runs "$RUNS" --pair "$PAIR" --device cuda
      src=$? ;;
    profile)
      python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/profile" \
        --modes "${PROFILE_MODES:-none,dflash,ddtree-16}" --contexts "${PROFILE_CONTEXTS:-256,4096}" ${PROFILE_ARGS:-}
      src=$? ;;
    pack)
      # One call brings back at most 8 files of 16 MiB: the results without traces in one gzip'd tar, then
      # the profiler traces one by one (the largest left out, and said so).
      tar -C "$RUNS" --exclude='*.trace.json.gz' -czf "$OUT/runs.tar.gz" . && ls -la "$OUT/runs.tar.gz"
      src=$?
      mkdir -p "$OUT/traces"
      find "$RUNS" -name '*.trace.json.gz' -size -16777216c | sort | head -7 | while read -r trace; do
        rel=${trace#"$RUNS"/}
        name=${rel//\//_}
        cp "$trace" "$OUT/traces/${name//@/-}"  # a name with '@' does not come back from the device
      done
      find "$RUNS" -name '*.trace.json.gz' -size +16777215c -printf 'left out (over 16 MiB): %p %s bytes\n'
      ls -la "$OUT/traces" ;;
    pack-pair)
      mkdir -p "$OUT/pair"
      work=$(mktemp -d)
      tar -C "$PAIR" -cf "$work/pair.tar" . && (cd "$work" && sha256sum pair.tar > "$OUT/pair/pair.tar.sha256") &&
        split -b 15M -d "$work/pair.tar" "$OUT/pair/pair.tar."
      src=$?
      rm -rf "$work"
      ls -la "$OUT/pair" ;;
    unpack-pair)
      parts=$(realpath "${PAIR_PARTS:-.device/pair}")
      work=$(mktemp -d)
      cat "$parts"/pair.tar.[0-9]* > "$work/pair.tar" && (cd "$work" && sha256sum -c "$parts/pair.tar.sha256") &&
        mkdir -p "$PAIR" && tar -C "$PAIR" -xf "$work/pair.tar"
      src=$?
      rm -rf "$work"
      [[ $src == 0 ]] && echo 0 > "${TRAIN_DONE:-/tmp/train.done}" ;;
    *) echo "unknown step $step (train, serve, summary, profile, pack, pack-pair, unpack-pair)"; exit 2 ;;
  esac
  echo "== $step: exit $src after $((SECONDS - t)) s"
  rc=$((rc | src))
done
exit $rc
