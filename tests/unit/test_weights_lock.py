"""The weights lock (env/weights.yaml): schema, capture of a Hugging Face cache and of a plain folder,
comparison (fast and full), and how serve and the self-check use it.

Real parts: synthetic weight folders and a Hugging Face cache laid out as huggingface_hub does (blobs,
snapshots of relative links, refs/main), the real CLI (`ddtree weights lock`), serve's preflight and the
selfcheck framework. The 600 GB model is not here; the folders are tiny.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ddtree import cli
from ddtree.errors import UserError
from ddtree.selfcheck import checks as framework
from ddtree.selfcheck import image as selfcheck_image
from ddtree.selfcheck import weights as selfcheck_weights
from ddtree.serve import launch as serve_launch
from ddtree.serve import preflight as serve_preflight
from ddtree.weights import lock as weights_lock
from ddtree.weights.layout import resolve_checkout

from tests.synthetic_weights import write_drafter, write_hf_cache, write_target

REPO = Path(__file__).resolve().parents[2]
REV_A = "a" * 40
REV_B = "b" * 40


def _error(func, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        func(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- schema


def test_the_checkouts_lock_validates_and_says_what_is_unknown() -> None:
    lock = weights_lock.load_lock(REPO / "env" / "weights.yaml")
    assert lock.models["target"].repo == "moonshotai/Kimi-K2.6"
    assert lock.models["drafter"].repo == "z-lab/Kimi-K2.6-DFlash" and lock.models["drafter"].gated
    assert lock.models["target"].unknowns() == ["revision", "files"]
    assert lock.identity == weights_lock.lock_identity(REPO / "env" / "weights.yaml")
    assert lock.identity.startswith("sha256:") and len(lock.identity) == 7 + 64


def _doc() -> dict:
    return yaml.safe_load((REPO / "env" / "weights.yaml").read_text())


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.update(schema=2), "schema: must be 1, got 2"),
        (lambda d: d["models"].pop("drafter"), "models.drafter: is required"),
        (lambda d: d["models"].update(extra={}), "models.extra: unknown role"),
        (lambda d: d["models"]["target"].update(revision="main"),
         "models.target.revision: must be a commit hash"),
        (lambda d: d["models"]["target"].update(repo="Kimi"),
         "models.target.repo: must be a Hugging Face id"),
        (lambda d: d["models"]["target"].update(gated="no"), "models.target.gated: must be true or false"),
        (lambda d: d["models"]["target"].update(files=[{"path": "../x", "size": 1, "sha256": "unknown"}]),
         "models.target.files[0].path: must be a relative path"),
        (lambda d: d["models"]["target"].update(files=[{"path": "x", "size": -1, "sha256": "unknown"}]),
         "models.target.files[0].size: must be a byte count"),
        (lambda d: d["models"]["target"].update(files=[{"path": "x", "size": 1, "sha256": "abc"}]),
         "models.target.files[0].sha256: must be 64 lower-case hex digits"),
        (lambda d: d["models"]["target"].update(
            files=[{"path": "x", "size": 1, "sha256": "unknown"}] * 2),
         "models.target.files[1].path: 'x' is listed twice"),
        (lambda d: d["models"]["target"].update(colour="red"), "models.target.colour: unknown key"),
    ],
)  # fmt: skip
def test_schema_errors_are_one_line_naming_file_and_key(edit, expected: str, tmp_path: Path) -> None:
    doc = _doc()
    edit(doc)
    path = tmp_path / "weights.yaml"
    path.write_text(yaml.safe_dump(doc))
    message = _error(weights_lock.load_lock, path)
    assert message.startswith(f"{path}: ") and expected in message


# ---------------------------------------------------------------- capture round trip


@pytest.fixture
def served(tmp_path: Path) -> dict[str, Path]:
    """A target in a Hugging Face cache (two revisions, refs/main at B, the lock's A kept) and a drafter
    in a plain folder: what an original host may serve."""
    a, b = tmp_path / "src-a", tmp_path / "src-b"
    write_target(a, shards=2)
    write_target(b, shards=2, layers=62)
    cache = write_hf_cache(tmp_path / "hub", "moonshotai/Kimi-K2.6", {REV_A: a, REV_B: b}, main=REV_A)
    drafter = write_drafter(tmp_path / "drafter")
    return {"cache": cache, "target_src": a, "drafter": drafter}


def _lock_cli(served: dict[str, Path], out: Path, *extra: str) -> int:
    return cli.main(
        ["weights", "lock", "--target", str(served["cache"]), "--drafter", str(served["drafter"]),
         "--drafter-revision", REV_B, "--out", str(out), *extra]
    )  # fmt: skip


def test_capture_hf_cache_and_plain_folder_round_trip(served, tmp_path: Path, capsys) -> None:
    out = tmp_path / "env" / "weights.yaml"
    assert _lock_cli(served, out) == 0
    assert f"locked target moonshotai/Kimi-K2.6@{REV_A[:12]}: 4 files" in capsys.readouterr().out
    lock = weights_lock.load_lock(out)
    target, drafter = lock.models["target"], lock.models["drafter"]
    assert target.revision == REV_A  # from refs/main's snapshot, not given on the command line
    assert drafter.revision == REV_B and drafter.gated and drafter.repo == "z-lab/Kimi-K2.6-DFlash"
    names = [f.path for f in target.files]
    assert names == sorted(p.name for p in served["target_src"].iterdir())
    for entry in target.files:
        data = (served["target_src"] / entry.path).read_bytes()
        import hashlib

        assert entry.size == len(data) and entry.sha256 == hashlib.sha256(data).hexdigest()
    # The lock written reads back and both folders compare clean with it, fast and full.
    for role, folder in (("target", served["cache"]), ("drafter", served["drafter"])):
        for full in (False, True):
            assert weights_lock.compare(folder, lock.models[role], out, full=full).ok
    # The plain copy of revision A compares clean too (no revision to read from a plain folder).
    assert weights_lock.compare(served["target_src"], target, out, full=True).ok


def test_capture_refuses_a_missing_folder_before_hashing(served, tmp_path: Path, capsys) -> None:
    out = tmp_path / "weights.yaml"
    code = cli.main(["weights", "lock", "--target", str(served["cache"]), "--drafter", str(tmp_path / "no"),
                     "--out", str(out)])  # fmt: skip
    assert code == 1 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"ddtree: error: drafter weights folder {tmp_path / 'no'} is not a folder: give the model folder"
    ]


# ---------------------------------------------------------------- comparison


@pytest.fixture
def locked(served, tmp_path: Path) -> tuple[Path, weights_lock.WeightsLock, Path]:
    """(lock path, lock, a plain copy of the locked target to tamper with)."""
    out = tmp_path / "weights.yaml"
    assert _lock_cli(served, out) == 0
    copy = Path(shutil.copytree(served["target_src"], tmp_path / "copy"))
    return out, weights_lock.load_lock(out), copy


def _problems(locked, **kwargs) -> list[str]:
    path, lock, copy = locked
    return weights_lock.compare(copy, lock.models["target"], path, **kwargs).problems


def test_compare_finds_each_kind_of_difference(locked, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards are hashed by the fast check only when small: here "small" is cut to 200 bytes, so the
    ~300-byte synthetic shards stand for the real multi-GB ones and the config for the small files."""
    monkeypatch.setattr(weights_lock, "SMALL_FILE_BYTES", 200)
    path, _, copy = locked
    assert (
        (copy / "model-00001-of-00002.safetensors").stat().st_size
        > 200
        > (copy / "config.json").stat().st_size
    )
    where = f"the lock {path} (moonshotai/Kimi-K2.6@{REV_A[:12]})"
    shard = copy / "model-00001-of-00002.safetensors"
    # Same size, other bytes: only the full hash sees a shard's content...
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert _problems(locked) == []
    (full,) = _problems(locked, full=True)
    assert full.startswith(f"target file {shard} has sha256 ") and where in full
    # ...but a small file (config: it decides behaviour) is hashed by the fast check.
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("kimi_k25", "kimi_k26"))
    assert any(p.startswith(f"target file {copy / 'config.json'} has sha256") for p in _problems(locked))
    with open(shard, "ab") as handle:
        handle.write(b"x")
    assert (
        f"target file {shard} is {shard.stat().st_size} bytes, {where} says {shard.stat().st_size - 1}"
        in (_problems(locked))
    )
    (copy / "model-00002-of-00002.safetensors").unlink()
    (copy / "extra.safetensors").write_bytes(b"x")
    (copy / ".cache").mkdir()
    (copy / ".cache" / "partial").write_bytes(b"ignored")
    problems = _problems(locked)
    assert f"target file {copy / 'model-00002-of-00002.safetensors'} is missing; {where} lists it" in problems
    assert f"target file {copy / 'extra.safetensors'} is not in {where}" in problems
    assert not any(".cache" in p for p in problems)


def test_compare_names_another_revision_in_a_cache(served, locked, tmp_path: Path) -> None:
    path, lock, _ = locked
    cache = served["cache"]
    shutil.rmtree(cache / "snapshots" / REV_A)
    (cache / "refs" / "main").write_text(REV_B)
    problems = weights_lock.compare(cache, lock.models["target"], path).problems
    assert problems[0] == (
        f"target weights {cache / 'snapshots' / REV_B} are revision {REV_B}, the lock {path} "
        f"(moonshotai/Kimi-K2.6@{REV_A[:12]}) pins {REV_A}"
    )


def test_enforce_fails_one_line_or_runs_anyway_when_allowed(locked) -> None:
    path, _, copy = locked
    (copy / "config.json").write_text("{}")
    message = _error(weights_lock.enforce, "target", copy, {}, log=lambda _: None, lock_path=path)
    assert message.startswith(f"target file {copy / 'config.json'} is 2 bytes")
    assert message.endswith(
        "says 147: fetch the locked revision (ddtree weights fetch), "
        "or set DDTREE_ALLOW_UNLOCKED_WEIGHTS=1 to run unlocked weights anyway"
    )
    lines: list[str] = []
    comparison = weights_lock.enforce(
        "target", copy, {"DDTREE_ALLOW_UNLOCKED_WEIGHTS": "1"}, log=lines.append, lock_path=path
    )
    assert comparison is not None and not comparison.ok
    assert lines == [
        f"warn lock     {comparison.problems[0]}; running anyway (DDTREE_ALLOW_UNLOCKED_WEIGHTS=1)"
    ]


def test_enforce_says_what_an_unknown_lock_cannot_compare(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    write_target(folder)
    lines: list[str] = []
    assert weights_lock.enforce(
        "target", folder, {}, log=lines.append, lock_path=REPO / "env" / "weights.yaml"
    )
    assert lines == [
        "warn lock     target moonshotai/Kimi-K2.6: revision, files unknown in "
        f"{REPO / 'env' / 'weights.yaml'} "
        "(filled by a capture of the original host); compared 0 files only as far as it pins"
    ]
    lines.clear()
    weights_lock.enforce("target", folder, {}, log=lines.append, lock_path=tmp_path / "none.yaml")
    assert lines == [
        f"warn lock     no weights lock at {tmp_path / 'none.yaml'}: target weights not compared"
    ]


# ---------------------------------------------------------------- serve and selfcheck


def _serve_env(lock: Path, target: Path, drafter: Path, **extra: str) -> dict[str, str]:
    return {
        "DDTREE_TARGET": "pro6000",
        "DDTREE_ENV_DIR": str(REPO / "env"),
        "DDTREE_WEIGHTS_LOCK": str(lock),
        "DDTREE_MODEL_DIR": str(target),
        "DDTREE_DRAFTER_DIR": str(drafter),
        "DDTREE_SKIP_CHECKS": "gpu,shm,port",
        "DDTREE_MODEL_TYPE": "kimi_k25",
        **extra,
    }


def test_serve_loads_the_locked_snapshot_of_a_cache_mount(served, locked) -> None:
    """A cache repository mounted as the model folder: checked and launched at the locked snapshot."""
    path, _, _ = locked
    (served["cache"] / "refs" / "main").write_text(REV_B)  # main moved on; the lock still says A
    environ = _serve_env(path, served["cache"], served["drafter"])
    launch = serve_launch.plan(environ)
    lines: list[str] = []
    serve_preflight.preflight(launch, environ, log=lines.append)
    snapshot = served["cache"] / "snapshots" / REV_A
    assert lines[0].startswith(f"ok   weights  {snapshot}: kimi_k25, 2 shards")
    assert (
        lines[1] == f"ok   lock     target matches moonshotai/Kimi-K2.6@{REV_A[:12]} "
        "(4 files: file list, sizes, sha256 of the small files)"
    )
    assert any(line.startswith("warn mount    ") and "read-write" in line for line in lines)
    command = launch.command
    assert command[command.index("--model-path") + 1] == str(snapshot)


def test_serve_command_has_the_locked_snapshot_and_the_in_memory_config(served, locked) -> None:
    """Both at once: the cache mount replaced by its locked snapshot, the API key only in --config."""
    path, _, _ = locked
    environ = _serve_env(path, served["cache"], served["drafter"], DDTREE_API_KEY="sk-merge-test-key")
    launch = serve_launch.plan(environ)
    command = launch.server_command("/tmp/ddtree-serve-x/server-config.yaml")
    assert command[command.index("--model-path") + 1] == str(served["cache"] / "snapshots" / REV_A)
    assert command[-2:] == ["--config", "/tmp/ddtree-serve-x/server-config.yaml"]
    assert not any("sk-merge-test-key" in arg for arg in command)
    assert "sk-merge-test-key" in launch.secrets.values()


def test_serve_refuses_unlocked_weights_unless_allowed(served, locked) -> None:
    path, _, copy = locked
    config = copy / "config.json"
    config.write_text(config.read_text().replace('"kimi_k2"', '"kimi_k3"'))  # same size, other text
    environ = _serve_env(path, copy, served["drafter"])
    launch = serve_launch.plan(environ)
    message = _error(serve_preflight.preflight, launch, environ, log=lambda _: None)
    assert message.startswith(f"target file {config} has sha256 ")
    assert f"the lock {path} (moonshotai/Kimi-K2.6@{REV_A[:12]}) says " in message
    lines: list[str] = []
    allowed = {**environ, "DDTREE_ALLOW_UNLOCKED_WEIGHTS": "1"}
    serve_preflight.preflight(launch, allowed, log=lines.append)
    assert f"warn lock     target file {config} has sha256 " in lines[1]
    assert lines[1].endswith("; running anyway (DDTREE_ALLOW_UNLOCKED_WEIGHTS=1)")


def test_selfcheck_weights_lock(served, locked, tmp_path: Path) -> None:
    path, _, copy = locked
    selfcheck_image._plan_cached.cache_clear()
    environ = _serve_env(path, served["cache"], served["drafter"], PATH="/nonexistent")
    assert selfcheck_weights.weights_lock_check is not None  # importing it registers the check
    checks = [c for c in framework.REGISTRY if c.name == "weights-lock"]
    ctx = framework.Context(offline=True, environ=environ, options={"full_hash": True})
    (outcome,) = framework.run_checks(checks, ctx)
    assert outcome.result.status == "pass", outcome.result.detail
    assert "target matches" in outcome.result.detail and "sha256 of every file" in outcome.result.detail
    assert outcome.result.data["identity"] == weights_lock.lock_identity(path)
    selfcheck_image._plan_cached.cache_clear()
    (copy / "tokenizer_config.json").write_text("{}")
    environ = _serve_env(path, copy, served["drafter"], PATH="/nonexistent")
    (outcome,) = framework.run_checks(checks, framework.Context(offline=True, environ=environ))
    assert outcome.result.status == "fail"
    assert outcome.result.detail.startswith(
        f"target file {copy / 'tokenizer_config.json'} is not in the lock"
    )


def test_hf_snapshot_resolution(served) -> None:
    cache = served["cache"]
    assert resolve_checkout(cache).path == cache / "snapshots" / REV_A  # refs/main
    assert resolve_checkout(cache, REV_B).path == cache / "snapshots" / REV_B  # the locked one wins
    (cache / "refs" / "main").unlink()
    message = _error(resolve_checkout, cache)
    assert message.startswith(f"Hugging Face cache {cache} has 2 snapshots (aaaaaaaaaaaa, bbbbbbbbbbbb)")
    # A snapshot folder used directly on the host: its links into ../../blobs resolve.
    snapshot = cache / "snapshots" / REV_A
    assert resolve_checkout(snapshot).revision == REV_A
