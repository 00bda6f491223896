#!/bin/bash
# DDTree on the GPU device, from a checkout (repo root), after the pinned wheels are installed into /tmp/site
# (tests/gpu/README.md steps 1-3: stage_wheels.py, parts, install_wheels.sh):
#   1. apply the project's patch series to /tmp/site with the in-image patch engine, and verify it;
#   2. tests/gpu/test_ddtree_triton_mask.py: Triton tree-mask verify attention vs torch, eager and graphed;
#   3. `ddtree selfcheck --smoke`: tiny target + drafter served three times (baseline, DFLASH, DDTREE with the
#      pro6000 profile's block size, budget, top-k and window), greedy equality, acceptance, temperature test;
#   4. live (tests/gpu/live_tiny.py): the same tiny models (plus a byte-level tokenizer) behind ONE DDTREE server
#      (smoke's DDTREE flags, CUDA graphs on), then, as a user would run them:
#        ddtree bench --url URL --api generate --tokenizer TARGET_DIR --contexts 128,1024 --concurrency 1,4
#          --max-tokens 48 --repeats 1 --warmup 1 --no-plots --quiet --label tiny-ddtree --out $OUT/live/bench
#        ddtree selfcheck --live URL --max-tokens 128
#      selfcheck --live exits 0 REPRODUCED, 1 DEGRADED or FAILED, 2 COULD NOT RUN; a tiny model is judged
#      against the Kimi K2.6 reference, so DEGRADED/FAILED is expected and fine. live_tiny.py exits 1 only
#      when a command crashed: bench exiting non-zero or printing a traceback; selfcheck --live printing a
#      traceback, exiting other than 0/1, or printing no verdict. It exits 2 when the server never got ready.
#      Server logs, bench results and both outputs land in $OUT/live. About 1.5-2.5 minutes.
#   5. warm (tests/gpu/warm_start.py; not part of all): the tiny DDTREE server started three times with keyed
#      JIT caches (ddtree.serve.jit_cache): cold, the same image again (warm), a new image (cold again); time to
#      ready and cache files per start in $OUT/warm/warm_start.json. About 3-5 minutes.
#   6. stress (tests/gpu/stress_ddtree.py; not part of `all`, run it in its own call): the tiny models with a
#      noisy target, served with DDTREE then without speculation, CUDA graphs on, a 12288-token KV pool,
#      SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1 and SGLANG_TEST_RETRACT=1; 32 concurrent requests of 5..3000
#      prompt tokens and 1..300 new tokens with 4 aborts, the same with 12 stop strings, 4 of 2400 new tokens,
#      and a frequency_penalty request (DDTREE: 400). Greedy outputs must equal plain decoding's; at a
#      divergence the plain server's top-1 minus top-2 log-prob gap decides: > 0.25 a bug, else bf16 noise.
#      Exit 0 PASS, 1 FAIL, 2 cannot run; server logs and summary.json in $OUT/stress. About 4-6 minutes.
#   7. steps (tests/gpu/ddtree_step_checks.py, not in `all`): one tiny DDTREE server with
#      SGLANG_DDTREE_SYNC_DEBUG=1 and SGLANG_DDTREE_TRITON_SAMPLING=1; first vs second request latency per
#      sampling kind (no first-request JIT) and every host-device synchronisation torch's sync debug mode saw
#      inside DDTREE steps.
#   8. core (not in `all`): tests/gpu/test_ddtree_core_gpu.py (kernels vs torch, the Triton sampling kernels
#      vs the torch reference, no sync, graph replay) and benchmarks/ddtree_core_bench.py ($OUT/core_bench.json).
#   9. verify (not in `all`): tests/gpu/test_verify_attention_gpu.py (the split-KV target-verify attention of
#      patch ddtree-splitkv-verify vs extend_attention_fwd and torch, graph replay, no sync, the timing table;
#      under 2 minutes) and benchmarks/verify_attention_bench.py (contexts 256..32768 x bs 1/8/32, pair
#      shapes, $OUT/verify_attention_bench.json; about 1-2 minutes), then benchmarks/verify_metadata_bench.py
#      (patch ddtree-verify-metadata: host time of the target-verify replay metadata, torch ops vs one launch,
#      bs 1/8/32/64 x context 256/4096, $OUT/verify_metadata_bench.json; under a minute).
#  10. secrets (tests/gpu/secrets_tiny.py, not in `all`): `ddtree serve` over https (user key from a file, admin
#      key after --, HF_TOKEN set, an encrypted TLS key whose password is in a --config file; certificates made
#      with openssl at run time) and `ddtree router` (when sglang-router is staged: tests/gpu/README.md step 1)
#      on the tiny models; the keys must be enforced, TLS on, and no key, token or password may show in
#      /server_info, /get_server_info, any process's cmdline or environ, the logs, the request dumps, the
#      receipt or the Dockerfile. Exit 0 none found, 1 a leak (`LEAK <secret> in <place>`), 2 the server
#      never got ready (or no openssl). About 1.5-3 minutes.
#  11. options (not in `all`): tests/gpu/request_options_gpu.py: per-row request options (penalties,
#      min_new_tokens, logit_bias) on CUDA equal to CPU, no host sync, one CUDA graph replays like eager, the
#      Triton pass bit-identical to the torch ops; their cost (Triton and torch) at bs 32, budget 16,
#      vocabulary 163840 ($OUT/request_options.json). Under a minute.
# usage (device): OUT=/some/dir bash tests/gpu/device_ddtree.sh [MODE...]   (default: all)
#   MODE: pytest smoke live all warm stress steps core verify secrets options; several run in one call, in the order of the list above
#   (all = pytest smoke live), e.g. `bash tests/gpu/device_ddtree.sh core steps`; an unknown mode exits 2.
#   SMOKE_TP=2 (or 4): the smoke's servers run tensor-parallel over that many GPUs (the TP top-k merge).
#   DDTREE_SMOKE_ARCH=mla: the smoke's target is Kimi K2.6's architecture (DeepSeek-V3 MLA + MoE, tiny:
#   ddtree.smoke.models_mla) instead of Qwen3's; STRESS_ARGS="--arch mla" does the same for the stress.
#   STRESS_TP=2: the stress servers run tensor-parallel, and the odd requests sample (T 0.8, top-p 0.9).
#   STRESS_ARGS="--budget 4": more stress_ddtree.py flags (--budget 4: block size 8 > budget + 1;
#   --algorithm DFLASH: the same stress on upstream DFlash, to tell whose bug a failure is).
set -u
export PYTHONPATH=$PWD/entrypoint:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
modes=" ${*:-all} "
for mode in $modes; do
  case $mode in
    pytest | smoke | live | all | warm | stress | steps | core | verify | secrets | options) ;;
    *) echo "device_ddtree.sh: unknown mode '$mode' (pytest smoke live all warm stress steps core verify secrets options)" >&2; exit 2 ;;
  esac
done
# wants MODE: whether MODE was asked for (pytest, smoke and live also through `all`).
wants() {
  [[ $modes == *" $1 "* ]] || { [[ $1 =~ ^(pytest|smoke|live)$ ]] && [[ $modes == *" all "* ]]; }
}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
python3 -m ddtree.patchset apply --root /tmp/site --series patches/series.yaml || exit 1
python3 -m ddtree.patchset verify --root /tmp/site --series patches/series.yaml || exit 1
rc=0
# run_step NAME CMD...: run one mode's command, fold its exit code into rc, say how it ended and how long it took.
run_step() {
  local name=$1 t=$SECONDS src
  shift
  "$@"
  src=$?
  rc=$((rc | src))
  echo "$name: exit $src after $((SECONDS - t)) s"
}
if wants pytest; then
  t=$SECONDS
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_ddtree_triton_mask.py 2>&1 | tail -15
  rc=$((rc | PIPESTATUS[0]))
  echo "triton mask tests: $((SECONDS - t)) s"
fi
if wants smoke; then
  run_step smoke env DDTREE_TARGET="${DDTREE_TARGET:-pro6000}" DDTREE_SMOKE_LOGS="$OUT" \
    python3 -m ddtree.cli selfcheck --smoke --json --smoke-tp "${SMOKE_TP:-1}"
  grep -hE "Traceback|Error|DDTREE|DFLASH draft runner|Capture cuda graph" "$OUT"/server-*.log 2>/dev/null | sort | uniq -c | head -20
fi
if wants live; then
  run_step live python3 tests/gpu/live_tiny.py --out "$OUT/live"
  grep -hE "Traceback|Error|DDTREE|DFLASH draft runner|Capture cuda graph" "$OUT"/live/server-live-*.log 2>/dev/null | sort | uniq -c | head -20
fi
if wants warm; then
  run_step warm python3 tests/gpu/warm_start.py --out "$OUT/warm"
fi
if wants stress; then
  # shellcheck disable=SC2086  # STRESS_ARGS is a list of flags
  run_step stress python3 tests/gpu/stress_ddtree.py --out "$OUT/stress" --tp "${STRESS_TP:-1}" ${STRESS_ARGS:-}
  grep -hE "Traceback|Mem Leak|DFLASH draft OOM|#retracted_reqs|DDTREE" "$OUT"/stress/server-stress-*.log 2>/dev/null \
    | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -20
fi
if wants secrets; then
  run_step secrets python3 tests/gpu/secrets_tiny.py --out "$OUT/secrets"
fi
if wants steps; then
  run_step steps python3 tests/gpu/ddtree_step_checks.py --out "$OUT"
fi
if wants options; then
  run_step options python3 tests/gpu/request_options_gpu.py --json "$OUT/request_options.json"
fi
if wants core; then
  t=$SECONDS
  python3 -m pytest -q -p no:cacheprovider tests/gpu/test_ddtree_core_gpu.py 2>&1 | tail -15
  rc=$((rc | PIPESTATUS[0]))
  python3 benchmarks/ddtree_core_bench.py --json "$OUT/core_bench.json"
  rc=$((rc | $?))
  echo "core: $((SECONDS - t)) s"
fi
if wants verify; then
  t=$SECONDS
  python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_verify_attention_gpu.py 2>&1 | tail -40
  rc=$((rc | PIPESTATUS[0]))
  python3 benchmarks/verify_attention_bench.py --splits 4 8 16 32 64 --json "$OUT/verify_attention_bench.json" | tail -60
  rc=$((rc | PIPESTATUS[0]))
  python3 benchmarks/verify_metadata_bench.py --sglang /tmp/site --json "$OUT/verify_metadata_bench.json"
  rc=$((rc | $?))
  echo "verify: $((SECONDS - t)) s"
fi
exit $rc
