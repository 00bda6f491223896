"""Runs in a subprocess with the patched CPU SGLang on its path (tests/unit/test_properties_server_args.py):
SGLang's parser is built once (importing SGLang takes seconds), then each stdin line {"extra": [...]} is
planned twice, as `ddtree serve` plans it with SGLang's parser and with the token fallback, and one JSON
line per case says how each ended and what it read."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ddtree.errors import UserError
from ddtree.serve import launch as serve_launch
from ddtree.serve import server_flags
from ddtree.serve import values as serve_values

ENV_DIR = Path(__file__).resolve().parents[2] / "env"
READ = ("--tp-size", "--port", "--speculative-num-draft-tokens", "--mem-fraction-static", "--context-length")


def outcome(extra: list[str], fallback: bool) -> dict:
    real = server_flags.sglang_parser
    if fallback:
        server_flags.sglang_parser = lambda: None  # type: ignore[assignment]
    try:
        launch = serve_launch.plan({"DDTREE_TARGET": "pro6000"}, env_dir=str(ENV_DIR), extra=extra)
        values = {flag: launch.value(flag) for flag in READ}
        values["tp"] = serve_launch.tp_of(launch)
        return {"code": 0, "values": values}
    except UserError as exc:
        return {"code": exc.exit_code, "error": str(exc)}
    except Exception as exc:  # a traceback in serve: the test fails on it
        return {"code": -1, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        server_flags.sglang_parser = real  # type: ignore[assignment]


def main() -> None:
    for name in [n for n in os.environ if n.startswith("DDTREE_")]:
        del os.environ[name]
    ready = server_flags.available()
    print(json.dumps({"ready": ready}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("prefixes"):  # SGLang's options that are strict prefixes of what the fallback reads
            options = server_flags.sglang_parser()._option_string_actions
            found = sorted(
                {o for o in options for c in serve_values.FALLBACK_CHECKED if c.startswith(o) and o != c}
            )
            print(json.dumps({"prefixes": found}), flush=True)
            continue
        extra = request["extra"]
        print(json.dumps({"sglang": outcome(extra, False), "tokens": outcome(extra, True)}), flush=True)


if __name__ == "__main__":
    main()
