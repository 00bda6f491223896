"""`ddtree selfcheck --live URL`: does the running server reproduce the measured DDTree result?

Steps, each a named check: /health answers 200; the server's info (/server_info, or the deprecated
/get_server_info, both in SGLang 0.5.13.post1's http_server.py) shows speculative_algorithm DDTREE with the
measured settings (env/reference settings: num-draft-tokens, DDTree budget and top-k, drafter window);
one warm-up and one short greedy generation through /generate (streamed: its meta_info carries
spec_accept_length and spec_verify_ct per request, which SGLang's OpenAI routes do not stream); decode
tok/s measured here between the first and the last token, acceptance length as the server reports it.

Verdict against the reference's single-request DDTree result, with a relative tolerance:
    REPRODUCED  DDTree active with the measured settings, tok/s and acceptance length at or above the
                reference minimum (less the tolerance)
    DEGRADED    DDTree active with the right settings, but tok/s or acceptance length below that
    FAILED      unhealthy, not DDTree, different settings, generation failed, or no speculative metadata
An unreachable server is "could not run" (exit 2): there is nothing to judge.

Behind SGLang's router (ddtree.bench.replicas: GET /workers lists the replicas) every replica is checked
directly, each with its own verdict, then the router: its server info comes from a replica (the router
has none of its own), the generation goes through it, and a `replicas` step fails when a replica FAILED
or could not be checked (warns when one is DEGRADED), so the router's verdict covers the whole set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddtree.bench.client import Client, GenerationRequest
from ddtree.bench.replicas import list_replicas
from ddtree.bench.serverinfo import server_info_answer, server_settings
from ddtree.bench.stats import describe
from ddtree.bench.stream import RequestResult
from ddtree.errors import UserError
from ddtree.receipts import receipt
from ddtree.receipts import reference as reference_mod
from ddtree.selfcheck.checks import CheckResult, Context, Outcome, format_table, report_dict
from ddtree.serve.argv import BLOCK_SIZE_FLAGS

REPRODUCED = "REPRODUCED"
DEGRADED = "DEGRADED"
FAILED = "FAILED"
COULD_NOT_RUN = "COULD NOT RUN"
EXIT_CODES = {REPRODUCED: 0, DEGRADED: 1, FAILED: 1, COULD_NOT_RUN: 2}

REFERENCE_ID = "ddtree-single"
DEFAULT_TOLERANCE = 0.10
DEFAULT_MAX_TOKENS = 256
# The fixed greedy prompt (a coding task, where DFlash drafts are accepted most); receipts hash its output.
PROMPT = receipt.PROMPT
DEFAULT_RUNS = 3


@dataclass
class LiveCheck:
    """One step of the live check: pass, warn (degraded), fail, or skip (not reached)."""

    name: str
    status: str
    detail: str
    value: Any = None


@dataclass
class LiveReport:
    url: str
    verdict: str
    checks: list[LiveCheck] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    greedy: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "checks": [vars(c) for c in self.checks],
            "figures": self.figures,
            "expected": self.expected,
        }


@dataclass(frozen=True)
class Expectation:
    """What the reference says a healthy DDTree server shows and measures."""

    settings: dict[str, Any]
    min_tok_s: float
    max_tok_s: float
    min_accept: float | None
    max_accept: float | None
    source: str


def load_expectation(path: Path | None = None, result_id: str = REFERENCE_ID) -> Expectation:
    path = path or reference_mod.default_reference_path()
    ref = reference_mod.load_reference(path)
    result = ref.results.get(result_id)
    if result is None or "output_tokens_per_s" not in result.figures:
        raise UserError(
            f"{path}: no result {result_id!r} with output_tokens_per_s; the live verdict needs the "
            "single-request DDTree figure",
            exit_code=2,
        )
    tok = result.figures["output_tokens_per_s"]
    accept = result.figures.get("acceptance_length")
    settings = {"speculative-algorithm": result.algorithm, **ref.settings}
    return Expectation(
        settings=settings,
        min_tok_s=tok.min,
        max_tok_s=tok.max,
        min_accept=accept.min if accept else None,
        max_accept=accept.max if accept else None,
        source=str(path),
    )


def _info_key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str) or isinstance(actual, str):
        return str(expected).upper() == str(actual).upper()
    try:
        return float(expected) == float(actual)
    except (TypeError, ValueError):
        return expected == actual


# The block size may live in its own field: the profile passes B as --speculative-num-draft-tokens, and a
# DDTree integration may keep B apart and set num_draft_tokens to the verify width (budget + 1).
BLOCK_SIZE_KEYS = tuple(_info_key(flag) for flag in BLOCK_SIZE_FLAGS)


def _setting(info: dict[str, Any], key: str, want: Any) -> tuple[bool, Any, str]:
    """(found and equal, the value seen, the key it was read from) for one measured setting."""
    keys = BLOCK_SIZE_KEYS if key == "speculative_num_draft_tokens" else (key,)
    present = [(k, info[k]) for k in keys if info.get(k) is not None]
    for k, value in present:
        if _same(want, value):
            return True, value, k
    if present:
        return False, present[-1][1], present[-1][0]
    return False, None, key


def check_settings(info: dict[str, Any], expected: dict[str, Any]) -> LiveCheck:
    """Every measured setting is what the server runs with (its server_args are in the info dump)."""
    wrong = []
    shown: dict[str, Any] = {}
    for flag, want in expected.items():
        ok, value, key = _setting(info, _info_key(flag), want)
        shown[key] = value
        if ok:
            continue
        if value is None:
            wrong.append(f"{key} absent (is the DDTree patch set applied?)")
        else:
            wrong.append(f"{key}={value!r}, expected {want!r}")
    if wrong:
        return LiveCheck(
            "settings", "fail", "; ".join(wrong) + ": start the server with the target profile", shown
        )
    return LiveCheck("settings", "pass", ", ".join(f"{k}={v}" for k, v in shown.items()), shown)


def _against_reference(
    name: str, value: float, shown: str, low: float, high: float | None, tolerance: float, advice: str
) -> LiveCheck:
    """pass when `value` reaches the reference's low end less the tolerance; warn (degraded) below it."""
    want = f"reference {low:g}-{high:g}, tolerance {tolerance:.0%}"
    if value >= low * (1.0 - tolerance):
        return LiveCheck(name, "pass", f"{shown} ({want})", value)
    return LiveCheck(name, "warn", f"{shown} is below {want}: {advice}", value)


def run_live(
    url: str,
    expectation: Expectation,
    tolerance: float = DEFAULT_TOLERANCE,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout: float = 600.0,
    api_key: str | None = None,
    replicas: list[LiveReport] | None = None,
    n_runs: int = DEFAULT_RUNS,
) -> LiveReport:
    """Run every step; stop at the first failure (later steps are reported as skipped). The greedy generation
    runs `n_runs` times: figures are the median run's, with the spread over all of them.

    `replicas`: the reports of the replicas behind `url` when it is a router; the router's server info
    is then read from a replica that gave its own, and a `replicas` step judges them all."""
    client = Client(url, api="generate", timeout=timeout, api_key=api_key)
    report = LiveReport(
        url=url,
        verdict=FAILED,
        expected={
            "settings": expectation.settings,
            "output_tokens_per_s": [expectation.min_tok_s, expectation.max_tok_s],
            "acceptance_length": [expectation.min_accept, expectation.max_accept],
            "tolerance": tolerance,
            "source": expectation.source,
        },
    )
    names = list(receipt.REQUIRED_CHECKS["live"])  # a live receipt must carry every step, each passed
    if replicas is not None:
        names.insert(1, "replicas")

    def finish(verdict: str) -> LiveReport:
        done = {c.name for c in report.checks}
        report.checks += [LiveCheck(n, "skip", "not reached") for n in names if n not in done]
        report.verdict = verdict
        return report

    status, body = client.get_text("/health", timeout=min(30.0, timeout))
    if status == 0:
        report.checks.append(
            LiveCheck(
                "health", "fail", f"{url} does not answer ({body}): is the server up and the port right?"
            )
        )
        return finish(COULD_NOT_RUN)
    if status != 200:
        report.checks.append(
            LiveCheck(
                "health", "fail", f"GET /health -> HTTP {status}: still loading, or unhealthy (see logs)"
            )
        )
        return finish(FAILED)
    report.checks.append(LiveCheck("health", "pass", "GET /health -> 200"))

    info_client = client
    if replicas is not None:
        step = check_replicas(replicas)
        report.checks.append(step)
        if not replicas:
            return finish(FAILED)
        # A replica whose settings passed speaks for the router (the router's list order is not fixed).
        informed = [r.url for r in replicas if _passed(r, "settings")]
        informed += [r.url for r in replicas if _passed(r, "server_info") and r.url not in informed]
        if informed:
            info_client = client.at(informed[0])
    info, answer = server_info_answer(info_client)
    if not isinstance(info, dict):
        report.checks.append(
            LiveCheck(
                "server_info",
                "fail",
                f"neither /server_info nor /get_server_info answers a JSON object ({answer}): not SGLang?",
            )
        )
        return finish(FAILED)
    report.figures["sglang_version"] = info.get("version")
    report.server = server_settings(info)
    report.checks.append(
        LiveCheck("server_info", "pass", f"SGLang {info.get('version')}", info.get("version"))
    )
    settings = check_settings(info, expectation.settings)
    report.checks.append(settings)
    if settings.status != "pass":
        return finish(FAILED)

    warm = client.stream(GenerationRequest(prompt_text=PROMPT, max_tokens=16, temperature=0.0))
    runs: list[RequestResult] = [warm]
    if warm.ok:
        request = GenerationRequest(prompt_text=PROMPT, max_tokens=max_tokens, temperature=0.0)
        runs = [client.stream(request) for _ in range(max(1, n_runs))]
    broken = next((r for r in runs if not r.ok), None)
    if broken is not None:
        report.checks.append(LiveCheck("generation", "fail", f"POST /generate failed: {broken.error}"))
        return finish(FAILED)
    result = _median_run(runs)
    report.figures.update(
        runs=len(runs),
        output_tokens=result.output_tokens,
        ttft_s=result.ttft_s,
        decode_tok_s=result.decode_tok_s,
        accept_length=result.accept_length,
        verify_ct=result.verify_ct,
        spread={
            "decode_tok_s": describe(r.decode_tok_s for r in runs),
            "ttft_s": describe(r.ttft_s for r in runs),
            "accept_length": describe(r.accept_length for r in runs),
        },
    )
    report.greedy, greedy_row = receipt.greedy_record(
        [r.text for r in runs], max_tokens, result.output_tokens
    )
    if not result.verify_ct or result.accept_length is None:
        report.checks.append(
            LiveCheck(
                "generation",
                "fail",
                f"{result.output_tokens} tokens but no spec_verify_ct/spec_accept_length in meta_info: "
                "speculative decoding did not run",
            )
        )
        return finish(FAILED)
    report.checks.append(
        LiveCheck(
            "generation",
            "pass",
            f"{result.output_tokens} tokens in {result.verify_ct} verify steps (median run of {len(runs)})",
        )
    )

    tok_s = result.decode_tok_s
    if tok_s is None:
        report.checks.append(LiveCheck("decode_tok_s", "fail", "too few tokens to time the decode"))
        return finish(FAILED)
    speed = _against_reference(
        "decode_tok_s", tok_s, f"{tok_s:.1f} tok/s", expectation.min_tok_s, expectation.max_tok_s,
        tolerance, "check GPU clocks, P2P settings and other load",
    )  # fmt: skip
    accept = result.accept_length
    if expectation.min_accept is None:
        acceptance = LiveCheck("accept_length", "pass", f"{accept:.2f} (no reference figure)", accept)
    else:
        acceptance = _against_reference(
            "accept_length", accept, f"{accept:.2f}", expectation.min_accept, expectation.max_accept,
            tolerance, "wrong drafter, or a DDTree setting differs",
        )  # fmt: skip
    greedy = LiveCheck(
        "greedy_output", greedy_row["status"], greedy_row["detail"], report.greedy["output_sha256"]
    )
    report.checks += [speed, acceptance, greedy]
    statuses = {c.status for c in report.checks}
    if "fail" in statuses:  # the replicas step and greedy_output fail without stopping the run
        return finish(FAILED)
    return finish(DEGRADED if "warn" in statuses else REPRODUCED)


def _passed(report: LiveReport, step: str) -> bool:
    return any(c.name == step and c.status == "pass" for c in report.checks)


def check_replicas(replicas: list[LiveReport]) -> LiveCheck:
    """The replicas' verdicts as one step of the router's check."""
    verdicts = {r.url: r.verdict for r in replicas}
    shown = ", ".join(f"{url} {verdict}" for url, verdict in verdicts.items())
    if not replicas:
        return LiveCheck(
            "replicas", "fail", "the router lists no replica: check its worker URLs and the replicas' /health"
        )
    bad = [url for url, verdict in verdicts.items() if verdict in (FAILED, COULD_NOT_RUN)]
    if bad:
        return LiveCheck(
            "replicas", "fail", f"{len(bad)} of {len(replicas)} not serving DDTree: {shown}", verdicts
        )
    images = {r.url: str((r.server.get("ddtree_image") or {}).get("key"))[:12] for r in replicas}
    if len(set(images.values())) > 1:  # the receipt records one replica's identity: all must share it
        mixed = ", ".join(f"{url} {key}" for url, key in images.items())
        return LiveCheck("replicas", "fail", f"the replicas run different images: {mixed}", verdicts)
    if any(verdict == DEGRADED for verdict in verdicts.values()):
        return LiveCheck("replicas", "warn", f"{shown}: see each replica's rows", verdicts)
    return LiveCheck("replicas", "pass", f"{len(replicas)} replicas: {shown}", verdicts)


def _median_run(runs: list[RequestResult]) -> RequestResult:
    """The run with the median decode rate (the figures judged are one real run's, not a blend)."""
    timed = sorted((r for r in runs if r.decode_tok_s is not None), key=lambda r: r.decode_tok_s or 0.0)
    return timed[(len(timed) - 1) // 2] if timed else runs[0]


def render_table(report: LiveReport) -> str:
    """A table for people: one row per step, then the verdict."""
    marks = {"pass": "ok", "warn": "WARN", "fail": "FAIL", "skip": "-"}
    width = max(len(c.name) for c in report.checks)
    lines = [f"live self-check of {report.url}"]
    lines += [f"  {marks[c.status]:<4}  {c.name:<{width}}  {c.detail}" for c in report.checks]
    lines.append(f"verdict: {report.verdict}")
    return "\n".join(lines)


# Live step status -> selfcheck status: a degraded figure fails the run; an unreachable server is "error".
_STATUS = {"pass": "pass", "warn": "fail", "fail": "fail", "skip": "skip"}
_VERDICT_STATUS = {REPRODUCED: "pass", DEGRADED: "fail", FAILED: "fail", COULD_NOT_RUN: "error"}


def outcomes(report: LiveReport) -> list[Outcome]:
    """The live steps as selfcheck outcomes (one row each), the verdict last."""
    rows = []
    for step in report.checks:
        status = _STATUS[step.status]
        if report.verdict == COULD_NOT_RUN and step.status == "fail":
            status = "error"
        detail = f"DEGRADED: {step.detail}" if step.status == "warn" else step.detail
        if isinstance(step.value, dict):
            data = dict(step.value)
        else:
            data = {} if step.value is None else {"value": step.value}
        rows.append(Outcome(f"live:{step.name}", CheckResult(status, detail, data), 0.0))
    rows.append(
        Outcome(
            "live:verdict",
            CheckResult(_VERDICT_STATUS[report.verdict], report.verdict, {**report.figures}),
            0.0,
        )
    )
    return rows


def selfcheck_live(args: Any) -> int:
    """`ddtree selfcheck --live URL [--json]`: the live steps as selfcheck rows, plus the verdict."""
    import json
    import os
    import sys

    from ddtree.serve.secret_args import api_key_from

    expectation = load_expectation(Path(args.reference) if args.reference else None)
    settings = {
        "tolerance": args.tolerance,
        "max_tokens": args.max_tokens,
        "api_key": api_key_from(os.environ),
        "n_runs": args.runs,
        "timeout": args.timeout,
    }
    routed = list_replicas(Client(args.live, timeout=min(30.0, args.timeout), api_key=settings["api_key"]))
    replicas = None if routed is None else [run_live(r.url, expectation, **settings) for r in routed]
    report = run_live(args.live, expectation, replicas=replicas, **settings)
    written = None
    if args.receipt and report.verdict != COULD_NOT_RUN:
        written = receipt.write(Path(args.receipt), receipt.from_live(report))
    rows = outcomes(report)
    for replica in replicas or []:
        rows.insert(-1, replica_outcome(replica))
    document = report_dict(rows, Context(offline=False))
    document.update(verdict=report.verdict, url=report.url, figures=report.figures, expected=report.expected)
    if replicas is not None:
        document["replicas"] = [r.to_json() for r in replicas]
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for replica in replicas or []:
            print(render_table(replica), end="\n\n")
        print(format_table(document))
        print(f"verdict: {report.verdict}")
    if written:
        print(f"receipt: {written} (check it with `ddtree receipt verify {written}`)", file=sys.stderr)
    return int(document["exit_code"])


def replica_outcome(report: LiveReport) -> Outcome:
    """One selfcheck row for a replica behind the router: its verdict and the first step that was not ok."""
    first = next((c for c in report.checks if c.status in ("fail", "warn")), None)
    detail = report.verdict + (f": {first.name}: {first.detail}" if first else "")
    return Outcome(
        f"live:replica {report.url}",
        CheckResult(_VERDICT_STATUS[report.verdict], detail, {"verdict": report.verdict, **report.figures}),
        0.0,
    )
