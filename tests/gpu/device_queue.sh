#!/bin/bash
# One device sitting's job queue (../shared/device/README.md, "A sitting that fits one hold"), started in the
# background after the wheels are installed, while the pair trains (device_pair.sh train, started in call 1,
# writes $TRAIN_DONE with its exit code when it ends). Jobs run one at a time, in the order given:
#   correctness jobs (servers on the tiny models) share the GPU with the training;
#   timing jobs (the trained pair's servers, kernel benchmarks) wait for the training and run alone.
# Every job's output lands in $OUT/queue/JOB.log, and one line per job in $OUT/queue/status.txt
# ("JOB: exit N after S s" or "JOB: skipped ..."); a job that would start after $DEADLINE seconds of the
# queue is skipped and said so, so the last call can pack what finished; a job running past $JOB_TIMEOUT
# seconds (default 900: a first smoke of a sitting starts three cold servers, about 190 s for the first) is
# stopped (exit 124), and every SGLang server a job leaves running is stopped before the next job starts
# (they run in their own sessions, out of `timeout`'s reach; on 2026-12-01 one left by a timed-out smoke
# shared the GPU and the CPU with the next profile).
#
#   smoke           the pro6000 smoke (baseline, DFLASH, DDTREE) as served by default
#   smoke-graphs    the pro6000 smoke with the fast step switched on explicitly (step CUDA graphs + verify metadata
#                   kernel; the served default since 2026-12-01, so `smoke` runs it too)
#   stress-graphs   the stress with the same switches on (at TP 1 under overlap since patch 0037: its default there)
#   stress-v1       the stress with the v1 step (SGLANG_DFLASH_OVERLAP=0; the default at TP > 1) and the step graphs on
#   smoke-graphs-tp2  the smoke at TP 2 with the fast step and its TP capture on (a two-GPU machine)
#   smoke-splitkv   the pro6000 smoke (baseline, DFLASH, DDTREE) with the split-KV verify on explicitly (issue 26;
#                   the served default since 2026-12-02, patch 0017, so `smoke` runs it too)
#   stress-splitkv  the stress (retraction, aborts, stops, request options) with the split-KV verify on explicitly
#   options-stress  stress --options-only: the crafted options target, every request option changes plain decoding's
#                   output and DDTREE equals it token for token, chi-square at T 1 with every option (issue 28)
#   options-stress-dflash  the same against DFLASH
#   stress-overlap  the stress with SGLANG_DFLASH_OVERLAP=1 (overlap scheduling, the spec-v2 step: patches 0019-
#                   0022, issue 25) on $OVERLAP_ALGORITHM (DDTREE, or DFLASH)
#   stress-overlap-dflash  the same stress under the switch on DFLASH (whatever $OVERLAP_ALGORITHM says)
#   smoke-overlap   the pro6000 smoke (baseline, DFLASH, DDTREE; chi-square at T 1) with SGLANG_DFLASH_OVERLAP=1: with
#                   the stresses, what the switch needs before it is the served default at TP 1
#   options-stress-overlap  the options stress with the same switch: the v2 step's penalties token for token
#   stress-overlap-mla  the overlap stress on the tiny Kimi-shaped MLA target ($OVERLAP_ALGORITHM): what the switch
#                   needs before it can be the served default for Kimi
#   secrets         secrets_tiny.py: keys enforced, none shown anywhere (issue 29)
#   mla             the smoke on the tiny Kimi-shaped MLA target (issue 32)
#   smoke-mla-graphs  the MLA smoke with the fast step switched on explicitly (step CUDA graphs + verify metadata
#                   kernel, the served default since 2026-12-01)
#   stress-mla      the stress (retraction, aborts, stops, request options, strict leak check) on the MLA target
#   stress-mla-graphs  the MLA stress with the fast step on
#   smoke-sampling  the pro6000 smoke with the Triton sampling verify on explicitly (the default since 2026-12-02): its chi-square
#                   tests at temperature 1 with top-p/top-k/min-p served through the kernels (issue 27)
#   core-tests      tests/gpu/test_ddtree_core_gpu.py: the kernels vs torch, the Triton sampling kernels vs the reference,
#                   every warm-up variant compiles, no sync, graph replay, flashinfer's own counts, plain
#                   temperature sampled first: exact on given noise, chi-square vs exact outcomes (issue 27)
#   request-options tests/gpu/request_options_gpu.py: the penalties kernel CUDA vs CPU, no sync, graph = eager, its
#                   time against torch at bs 32 / budget 16 / vocabulary 163840, and the drafter's option pass
#                   (patch 0031) at bs 32 x 7 draft rows (issue 28: their cost against the DDTREE step)
#   steps           ddtree_step_checks.py: every host sync torch's sync debug mode sees inside DDTREE steps, and
#                   first vs second request latency per sampling kind (issue 25)
#   tree-graph      tests/gpu/test_tree_stage_graph_gpu.py: the tree stage's CUDA graphs replay the eager stage
#                   exactly, and its host time eager vs replayed (issue 25)
#   commit-graph    tests/gpu/test_overlap_commit_graph_gpu.py: DDTREE's v2 commit stage (SGLANG_DFLASH_OVERLAP=1,
#                   patch ddtree-overlap-commit-graph) replayed = eager, outputs and KV moves; host time (issue 25)
#   stacks          (timing) profile_step --stacks: host time per Python function, $STACKS_MODES (DDTREE-16),
#                   at $STACKS_CONTEXTS (256; 256,1024: what of the v2 step grows with context); STACKS_MODES=ddtree-16@overlap-tbt,ddtree-16@overlap: the v2 result path with
#                   patch 0030's finish fast path off and on (process_batch_result)
#   stacks-c32      (timing) the same with 32 requests at once: host time per Python function of a batched step
#                   (issue 25's concurrency-32 goal: a DDTREE-16 step there was 17.5 ms against none's 2.7)
#   profile         (timing) profile_step over $PROFILE_MODES x $PROFILE_CONTEXTS (issues 25, 26)
#   profile-c32     (timing) profile_step of ddtree-16 and none at context 256 with 32 requests at once
#   phases          (timing) profile_step --sync-sites over $PROFILE_MODES x $PROFILE_CONTEXTS, 8 profiled steps:
#                   the scheduler loop's phases without the profiler at 1 and 32 requests (patch
#                   scheduler-step-phases: launch, wait for the GPU, process) and the syncs made while launching
#   paired          (timing) paired_step: $PAIRED_MODES (A,B) from two servers up at once, $PAIRED_ROUNDS rounds
#                   A,B,B,A at $PAIRED_CONTEXTS; step ms, tok/s and the per-round ratio B/A (issue 25)
#   serve           (timing) serve_bench over $SERVE_MODES with $SERVE_ARGS (default: none, DFLASH and DDTREE-16
#                   under overlap at context 256, concurrency 1 and 32, greedy): issue 25's concurrency-32 goal
#                   (DDTREE-16 at least 0.8x none's aggregate tok/s) over the bench's rounds
#   options         (timing) options_acceptance: acceptance with request options on the pair (issue 28) over
#                   $OPTIONS_MODES: ddtree-16 (the drafter sees the request's penalties, patch 0031) beside
#                   ddtree-16@nodraftpen (SGLANG_DDTREE_DRAFT_PENALTIES=0, the drafter as before)
#   core-bench      (timing) benchmarks/ddtree_core_bench.py: the sampling kernels' goals table (issue 27;
#                   s_temp sampled first, s_coin the coin walk beside it)
#   verify-bench    (timing) device_ddtree.sh verify: the split-KV verify attention's GPU tests, its kernel table
#                   against context 256..32768 beside the decode kernel, and the verify metadata bench (issue 26)
#   profile-mla     (timing) profile_step --smoke-arch mla over $PROFILE_MLA_MODES x $PROFILE_CONTEXTS: the tiny
#                   MLA smoke models, served as the smoke serves them; DDTREE's own kernels' share of the step
#   (timing jobs wait for the training to end; core-bench, verify-bench and profile-mla need no trained pair)
# usage (device, repo root): OUT=/tmp/out PAIR=/tmp/pair RUNS=/tmp/runs bash tests/gpu/device_queue.sh JOB...
# Two lanes at once (correctness jobs only; timing jobs run alone): QUEUE_LANE=b OUT=/tmp/out-b ... in the second,
# so each lane stops only the servers its own jobs started.
set -u
export PYTHONPATH=$PWD/entrypoint:$PWD:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out} PAIR=${PAIR:-/tmp/pair} RUNS=${RUNS:-/tmp/runs}
QUEUE_LANE=${QUEUE_LANE:-main}
export GPU_QUEUE_LANE=$QUEUE_LANE
TRAIN_DONE=${TRAIN_DONE:-/tmp/train.done} DEADLINE=${DEADLINE:-1200}
PROFILE_MODES=${PROFILE_MODES:-ddtree-16,ddtree-16@eager,dflash,dflash@eager,none}
PROFILE_CONTEXTS=${PROFILE_CONTEXTS:-256,4096}
PAIRED_MODES=${PAIRED_MODES:-ddtree-16@eager,ddtree-16} PAIRED_CONTEXTS=${PAIRED_CONTEXTS:-256}
PAIRED_ROUNDS=${PAIRED_ROUNDS:-8}
PROFILE_MLA_MODES=${PROFILE_MLA_MODES:-ddtree-8,ddtree-8@eager,dflash,none}
OVERLAP_ALGORITHM=${OVERLAP_ALGORITHM:-DDTREE}
STACKS_MODES=${STACKS_MODES:-ddtree-16} STACKS_CONTEXTS=${STACKS_CONTEXTS:-256}
SERVE_MODES=${SERVE_MODES:-none,dflash@overlap,ddtree-16@overlap}
SERVE_ARGS=${SERVE_ARGS:---contexts 256 --concurrency 1,32 --temperatures 0}
OPTIONS_MODES=${OPTIONS_MODES:-none,ddtree-16,ddtree-16@nodraftpen}
TIMING_JOBS=" stacks stacks-c32 profile profile-c32 phases paired serve options core-bench verify-bench profile-mla "
PAIRLESS_JOBS=" core-bench verify-bench profile-mla "
GRAPHS_ENV=(SGLANG_DFLASH_STEP_GRAPHS=1 SGLANG_DDTREE_FAST_METADATA=1)
for job in "$@"; do
  case $job in
    smoke | smoke-graphs | stress-graphs | stress-v1 | smoke-graphs-tp2 | smoke-splitkv | stress-splitkv | options-stress | \
      options-stress-dflash | stress-overlap | stress-overlap-dflash | smoke-overlap | options-stress-overlap | stress-overlap-mla | secrets | mla | smoke-sampling | core-tests | request-options | \
      smoke-mla-graphs | stress-mla | stress-mla-graphs | steps | tree-graph | commit-graph | stacks | stacks-c32 | profile | \
      profile-c32 | phases | paired | serve | options | \
      core-bench | verify-bench | profile-mla) ;;
    *) echo "device_queue.sh: unknown job '$job' (smoke smoke-graphs stress-graphs stress-v1 smoke-graphs-tp2 smoke-splitkv stress-splitkv options-stress options-stress-dflash stress-overlap stress-overlap-dflash smoke-overlap options-stress-overlap stress-overlap-mla secrets mla smoke-sampling core-tests request-options smoke-mla-graphs stress-mla stress-mla-graphs steps tree-graph commit-graph stacks stacks-c32 profile profile-c32 phases paired serve options core-bench verify-bench profile-mla)" >&2
       exit 2 ;;
  esac
done
mkdir -p "$OUT/queue" "$RUNS"
status=$OUT/queue/status.txt
begin=$SECONDS

# run_job JOB: the job's command, stopped after $JOB_TIMEOUT seconds (a hung server must not hold the queue).
run_job() {
  local limit=${JOB_TIMEOUT:-900}
  case $1 in
    smoke) timeout "$limit" env OUT="$OUT/smoke" bash tests/gpu/device_ddtree.sh smoke ;;
    smoke-graphs) timeout "$limit" env "${GRAPHS_ENV[@]}" OUT="$OUT/smoke-graphs" bash tests/gpu/device_ddtree.sh smoke ;;
    stress-graphs) timeout "$limit" env "${GRAPHS_ENV[@]}" OUT="$OUT/stress-graphs" bash tests/gpu/device_ddtree.sh stress ;;
    stress-v1) timeout "$limit" env "${GRAPHS_ENV[@]}" SGLANG_DFLASH_OVERLAP=0 OUT="$OUT/stress-v1" \
                 bash tests/gpu/device_ddtree.sh stress ;;
    smoke-graphs-tp2) timeout "$limit" env "${GRAPHS_ENV[@]}" SMOKE_TP=2 SGLANG_DFLASH_STEP_GRAPHS_TP=1 \
                        OUT="$OUT/smoke-graphs-tp2" bash tests/gpu/device_ddtree.sh smoke ;;
    smoke-splitkv) timeout "$limit" env SGLANG_DDTREE_SPLITKV_VERIFY=1 OUT="$OUT/smoke-splitkv" \
                     bash tests/gpu/device_ddtree.sh smoke ;;
    stress-splitkv) timeout "$limit" env SGLANG_DDTREE_SPLITKV_VERIFY=1 OUT="$OUT/stress-splitkv" \
                      bash tests/gpu/device_ddtree.sh stress ;;
    options-stress) timeout "$limit" env STRESS_ARGS="--options-only" OUT="$OUT/options-stress" \
                      bash tests/gpu/device_ddtree.sh stress ;;
    options-stress-dflash) timeout "$limit" env STRESS_ARGS="--options-only --algorithm DFLASH" \
                             OUT="$OUT/options-stress-dflash" bash tests/gpu/device_ddtree.sh stress ;;
    stress-overlap) timeout "$limit" env SGLANG_DFLASH_OVERLAP=1 STRESS_ARGS="--algorithm $OVERLAP_ALGORITHM" \
                      OUT="$OUT/stress-overlap" bash tests/gpu/device_ddtree.sh stress ;;
    stress-overlap-dflash) timeout "$limit" env SGLANG_DFLASH_OVERLAP=1 STRESS_ARGS="--algorithm DFLASH" \
                             OUT="$OUT/stress-overlap-dflash" bash tests/gpu/device_ddtree.sh stress ;;
    smoke-overlap) timeout "$limit" env SGLANG_DFLASH_OVERLAP=1 OUT="$OUT/smoke-overlap" bash tests/gpu/device_ddtree.sh smoke ;;
    options-stress-overlap) timeout "$limit" env SGLANG_DFLASH_OVERLAP=1 \
                              STRESS_ARGS="--options-only --algorithm $OVERLAP_ALGORITHM" \
                              OUT="$OUT/options-stress-overlap" bash tests/gpu/device_ddtree.sh stress ;;
    stress-overlap-mla) timeout "$limit" env SGLANG_DFLASH_OVERLAP=1 \
                          STRESS_ARGS="--arch mla --algorithm $OVERLAP_ALGORITHM" \
                          OUT="$OUT/stress-overlap-mla" bash tests/gpu/device_ddtree.sh stress ;;
    smoke-sampling) timeout "$limit" env SGLANG_DDTREE_TRITON_SAMPLING=1 OUT="$OUT/smoke-sampling" \
                      bash tests/gpu/device_ddtree.sh smoke ;;
    core-tests) timeout "$limit" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_ddtree_core_gpu.py ;;
    request-options) timeout "$limit" env OUT="$OUT/request-options" bash tests/gpu/device_ddtree.sh options ;;
    secrets) timeout "$limit" env OUT="$OUT/secrets" bash tests/gpu/device_ddtree.sh secrets ;;
    mla) timeout "$limit" env DDTREE_SMOKE_ARCH=mla OUT="$OUT/mla" bash tests/gpu/device_ddtree.sh smoke ;;
    smoke-mla-graphs) timeout "$limit" env "${GRAPHS_ENV[@]}" DDTREE_SMOKE_ARCH=mla OUT="$OUT/smoke-mla-graphs" \
                        bash tests/gpu/device_ddtree.sh smoke ;;
    stress-mla) timeout "$limit" env STRESS_ARGS="--arch mla" OUT="$OUT/stress-mla" bash tests/gpu/device_ddtree.sh stress ;;
    stress-mla-graphs) timeout "$limit" env "${GRAPHS_ENV[@]}" STRESS_ARGS="--arch mla" OUT="$OUT/stress-mla-graphs" \
                         bash tests/gpu/device_ddtree.sh stress ;;
    steps) timeout "$limit" env OUT="$OUT/steps" bash tests/gpu/device_ddtree.sh steps ;;
    tree-graph) timeout "$limit" python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_tree_stage_graph_gpu.py ;;
    commit-graph) timeout "$limit" python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_overlap_commit_graph_gpu.py ;;
    stacks) timeout "$limit" python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/stacks" --stacks \
              --modes "$STACKS_MODES" --contexts "$STACKS_CONTEXTS" --steps 8 ;;
    stacks-c32) timeout "$limit" python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/stacks-c32" \
                  --stacks --modes ddtree-16 --contexts 256 --steps 6 --profile-concurrency 32 ;;
    profile-c32) timeout "$limit" python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/profile-c32" \
                   --modes ddtree-16,none --contexts 256 --profile-concurrency 32 ;;
    profile) timeout "$limit" python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/profile" \
               --modes "$PROFILE_MODES" --contexts "$PROFILE_CONTEXTS" ;;
    phases) timeout "$limit" python3 -m benchmarks.pair.profile_step --pair "$PAIR" --out "$RUNS/phases" \
              --modes "$PROFILE_MODES" --contexts "$PROFILE_CONTEXTS" --steps 8 --sync-sites ;;
    paired) timeout "$limit" python3 -m benchmarks.pair.paired_step --pair "$PAIR" --out "$RUNS/paired" \
              --paired "$PAIRED_MODES" --contexts "$PAIRED_CONTEXTS" --rounds "$PAIRED_ROUNDS" ;;
    # SERVE_ARGS is split into serve_bench's own flags on purpose
    serve) timeout "$limit" python3 -m benchmarks.pair.serve_bench --pair "$PAIR" --out "$RUNS/serve" \
             --modes "$SERVE_MODES" --deadline 480 $SERVE_ARGS ;;
    options) timeout "$limit" python3 -m benchmarks.pair.options_acceptance --pair "$PAIR" --out "$RUNS/options" \
               --modes "$OPTIONS_MODES" ;;
    core-bench) timeout "$limit" python3 benchmarks/ddtree_core_bench.py --json "$OUT/core_bench.json" ;;
    verify-bench) timeout "$limit" env OUT="$OUT/verify-bench" bash tests/gpu/device_ddtree.sh verify ;;
    profile-mla) timeout "$limit" python3 -m benchmarks.pair.profile_step --smoke-arch mla --out "$RUNS/profile-mla" \
                   --modes "$PROFILE_MLA_MODES" --contexts "$PROFILE_CONTEXTS" ;;
  esac
}

# lane_servers: the SGLang servers (and their scheduler/detokenizer processes) this queue's jobs started. Every job
# inherits GPU_QUEUE_LANE=$QUEUE_LANE, so two queues in lanes of their own (correctness jobs side by side on the
# GPU) each stop only their own servers.
lane_servers() {
  local pattern=${SERVER_PATTERN:-sglang[.]launch_server|sglang::} pid
  for pid in $(pgrep -f "$pattern"); do
    # a process that ended since pgrep: quiet (the redirection's own error comes before a 2> after it)
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2> /dev/null | grep -qx "GPU_QUEUE_LANE=$QUEUE_LANE" && echo "$pid"
  done
}

# reap_servers JOB: stop the servers JOB left behind.
reap_servers() {
  local pids
  pids=$(lane_servers)
  [[ -n $pids ]] || return 0
  kill -TERM $pids 2> /dev/null
  sleep "${REAP_GRACE:-5}"
  pids=$(lane_servers)
  [[ -n $pids ]] && kill -KILL $pids 2> /dev/null
  echo "$1: stopped the servers it left running" >> "$status"
}

for job in "$@"; do
  if [[ $TIMING_JOBS == *" $job "* ]]; then
    while [[ ! -f $TRAIN_DONE ]] && ((SECONDS - begin < DEADLINE)); do sleep 5; done
    # the pair's last file: a training that missed its committed figures (exit 1) still leaves a pair to serve
    if [[ $PAIRLESS_JOBS != *" $job "* ]] && [[ ! -f $PAIR/eval_prompts.json ]]; then
      echo "$job: skipped, no trained pair in $PAIR" >> "$status"
      continue
    fi
  fi
  if ((SECONDS - begin >= DEADLINE)); then
    echo "$job: skipped, past the queue's ${DEADLINE} s deadline" >> "$status"
    continue
  fi
  t=$SECONDS
  run_job "$job" > "$OUT/queue/$job.log" 2>&1
  echo "$job: exit $? after $((SECONDS - t)) s (queue at $((SECONDS - begin)) s)" >> "$status"
  reap_servers "$job"
done
echo "queue: done after $((SECONDS - begin)) s" >> "$status"
