"""Probe for tests/unit/test_warm_penalties.py, run in the CPU SGLang environment (patched sglang
0.5.13.post1): patch 0015's warm_up_penalties_or_warn on CPU (nothing to compile: False, no warning) and
with a warm-up that fails (a warning naming the failure, False: never fatal). Prints WARM-PENALTIES-PROBE
{json}."""

from __future__ import annotations

import json
import logging


def main() -> dict:
    from sglang.srt.speculative import dflash_worker

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    dflash_worker.logger.addHandler(Keep())
    on_cpu = dflash_worker.warm_up_penalties_or_warn("cpu", 64, 9)
    quiet = list(records)

    def broken(device, vocab, rows):
        raise RuntimeError("PassManager::run failed")

    real = dflash_worker.warm_up_running_penalties
    dflash_worker.warm_up_running_penalties = broken
    try:
        failed = dflash_worker.warm_up_penalties_or_warn("cuda:0", 64, 9)
    finally:
        dflash_worker.warm_up_running_penalties = real
    return {"on_cpu": on_cpu, "quiet": quiet, "failed": failed, "warnings": records[len(quiet) :]}


if __name__ == "__main__":
    try:
        result = main()
    except Exception as exc:  # reported, so the test shows why
        result = {"probe_error": f"{type(exc).__name__}: {exc}"}
    print("WARM-PENALTIES-PROBE " + json.dumps(result), flush=True)
