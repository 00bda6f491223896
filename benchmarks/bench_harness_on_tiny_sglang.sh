#!/bin/bash
# Check `ddtree bench` against a REAL SGLang 0.5.13.post1 server on the GPU device: a tiny Qwen3 target
# (dummy weights, 16k positions) with a byte-level BPE tokenizer trained here on the stdlib, served with
# DFLASH (tiny drafter) and without. Exercises: the native /generate stream (meta_info acceptance),
# OpenAI completions and chat streams, /v1/tokenize, /metrics, exact prompt lengths with the HF tokenizer,
# interrupt + resume, humaneval (chat, return_meta_info), compare against env/reference, the plots.
# Prerequisite: the pinned wheels installed into /tmp/site (tests/gpu/README.md, steps 1-3).
# usage (device, repo root): OUT=/some/dir bash benchmarks/bench_harness_on_tiny_sglang.sh [HumanEval.jsonl.gz]
set -u
export PYTHONPATH=$PWD/entrypoint:/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
W=/tmp/benchwork
PROBLEMS=${1:-}
rm -rf "$W" && mkdir -p "$W" "$OUT"
python3 - <<'PY'
import importlib, inspect, json, os
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

os.makedirs("/tmp/tiny-target", exist_ok=True)
os.makedirs("/tmp/tiny-drafter", exist_ok=True)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
mods = ["argparse", "difflib", "textwrap", "heapq", "statistics", "calendar", "csv", "dataclasses",
        "functools", "ipaddress", "shlex", "string", "pprint", "tokenize", "json.decoder", "fractions"]
tok.train_from_iterator([inspect.getsource(importlib.import_module(m)) for m in mods], trainer)
# model_max_length set: without it SGLang 0.5.13.post1's /v1/tokenize fails (orjson, 1e30 > 64 bits)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                               model_max_length=16384)
fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}")
fast.save_pretrained("/tmp/tiny-target")
tgt = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 512,
       "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
       "head_dim": 64, "vocab_size": 4096, "max_position_embeddings": 16384, "rms_norm_eps": 1e-6,
       "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
       "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu"}
json.dump(tgt, open("/tmp/tiny-target/config.json", "w"), indent=1)
dr = dict(tgt)
dr.update({"architectures": ["DFlashDraftModel"], "num_hidden_layers": 2, "block_size": 8,
           "num_target_layers": 6, "dflash_config": {"block_size": 8, "target_layer_ids": [1, 4],
                                                     "mask_token_id": 4095, "num_target_layers": 6}})
json.dump(dr, open("/tmp/tiny-drafter/config.json", "w"), indent=1)
print("tiny target + tokenizer written")
PY

start_server() {
  local name=$1; shift
  python3 -m sglang.launch_server --model-path /tmp/tiny-target --load-format dummy --attention-backend triton \
    --mem-fraction-static 0.3 --port 30000 --enable-metrics --cuda-graph-max-bs 64 "$@" > "$W/server-$name.log" 2>&1 &
  SERVER=$!
  for i in $(seq 1 240); do
    curl -s -m 2 -o /dev/null -w '%{http_code}' localhost:30000/health 2>/dev/null | grep -q 200 && break
    kill -0 $SERVER 2>/dev/null || { echo "server $name exited"; tail -30 "$W/server-$name.log"; return 1; }
    sleep 1
  done
  echo "server $name ready after ${i}s"
}
stop_server() { kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; sleep 2; }
bench() {
  local t=$SECONDS
  echo "+ ddtree bench $*"
  python3 -m ddtree.cli bench "$@"
  echo "  exit $? after $((SECONDS - t)) s"
}
URL=http://127.0.0.1:30000

start_server ddtree --speculative-algorithm DFLASH --speculative-draft-model-path /tmp/tiny-drafter \
  --speculative-num-draft-tokens 8 || exit 1
curl -s -m 10 $URL/generate -H 'content-type: application/json' \
  -d '{"input_ids":[5,17,99,300],"sampling_params":{"max_new_tokens":24,"temperature":0}}' | head -c 600; echo
bench --url $URL --contexts 60,1024,4096,8192 --concurrency 1,8,32,64 --max-tokens 64 --repeats 1 \
  --out $W/ddtree --quiet
bench --url $URL --api completions --contexts 60,1024 --concurrency 1,8 --max-tokens 48 --repeats 1 \
  --out $W/ddtree-completions --no-plots --quiet
bench --url $URL --api chat --contexts 200 --concurrency 1,4 --max-tokens 48 --repeats 1 \
  --out $W/ddtree-chat --no-plots --quiet
bench --url $URL --tokenizer server --contexts 777 --concurrency 2 --max-tokens 16 --repeats 1 \
  --out $W/ddtree-servertok --no-plots --quiet
# kill it after the first cell (a crash), then resume
python3 -m ddtree.cli bench --url $URL --contexts 60,2048 --concurrency 1,16 --max-tokens 256 --repeats 2 \
  --out $W/resume --no-plots --quiet > $W/resume-first.log 2>&1 &
BENCH=$!
for i in $(seq 1 120); do ls $W/resume/cells/*.json >/dev/null 2>&1 && break; sleep 0.5; done
kill -TERM $BENCH; wait $BENCH; echo "killed: exit $? with $(ls $W/resume/cells | wc -l) cell(s) kept"
bench --url $URL --contexts 60,2048 --concurrency 1,16 --max-tokens 256 --repeats 2 --out $W/resume --no-plots
if [ -n "$PROBLEMS" ]; then
  bench humaneval --url $URL --problems "$PROBLEMS" --limit 4 --max-tokens 64 --out $W/he-ddtree --quiet
fi
curl -s $URL/metrics | grep -E "^sglang:spec_accept_length" | head -3
stop_server

start_server baseline || exit 1
bench --url $URL --contexts 60,1024 --concurrency 1,8,64 --max-tokens 64 --repeats 1 --out $W/baseline --quiet
stop_server

bench compare $W/baseline/results.json $W/ddtree/results.json --out $W/compare.json
bench compare $W/baseline/results.json $W/ddtree/results.json --relative
grep -hE "Traceback|Error" $W/server-*.log | sort | uniq -c | head -10
tar czf "$OUT/bench-results.tgz" -C "$W" .
echo "results in $OUT/bench-results.tgz"
