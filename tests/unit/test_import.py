"""import: manifest first, then freeze/diffs/unit/results conversion; capture -> import round-trips.

Real parts: a reproduction package generated per session from the real pristine sglang 0.5.13.post1
wheel (tests/fixtures/make_repro_package.py; nothing of SGLang is committed), the patch engine
(`ddtree-build patches check` on the imported series), a real venv for the round trip. Output goes to
tmp folders: the checkout's env/ and patches/ are never written.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ddtree import weights_lock
from ddtree.errors import UserError
from ddtree.lockfile import read_pins
from ddtree.reference import load_reference
from ddtree.targets import load_target
from ddtree_build import capture, import_package
from ddtree_build.import_package import map_exec_start, read_unit, run_import
from ddtree_build.package_manifest import write_manifest

from tests.fixtures.make_repro_package import write_package
from tests.synthetic_weights import write_drafter, write_hf_cache, write_target
from tests.unit.test_capture import ADDED, EDITED, served_venv  # noqa: F401 (a pytest fixture)


@pytest.fixture(scope="session")
def repro_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made-style package, generated once from the cached pristine wheel; tests only read it."""
    return write_package(tmp_path_factory.mktemp("fixture") / "repro_package")


@pytest.fixture
def targets_dir(repo_root: Path) -> Path:
    return repo_root / "env" / "targets"


@pytest.fixture
def package(repro_package: Path, tmp_path: Path) -> Path:
    """A private copy of the fixture package, free to tamper with."""
    return Path(shutil.copytree(repro_package, tmp_path / "pkg"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddtree_build.cli", *args], capture_output=True, text=True)


def test_fixture_imports_into_a_new_folder(repro_package: Path, tmp_path: Path, repo_root: Path) -> None:
    out = tmp_path / "out"
    done = _cli("import", str(repro_package), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert (
        "kept verbatim (unknown to the profile schema): --served-model-name Kimi K2.6 DDTree" in done.stdout
    )

    pins = {p.name: p.version for p in read_pins(out / "env" / "freeze.txt")}
    assert pins == {p.name: p.version for p in read_pins(repo_root / "env" / "freeze.txt")}
    assert (
        "# source: imported from repro_package/env/pip-freeze.txt" in (out / "env" / "freeze.txt").read_text()
    )

    target = load_target(out / "env" / "targets" / "pro6000.yaml")
    assert target.server_args["model-path"] == "/models/target"
    assert target.server_args["speculative-draft-model-path"] == "/models/drafter"
    assert target.server_args["port"] == 30000 and target.server_args["mem-fraction-static"] == 0.88
    assert (
        target.server_args["speculative-ddtree-topk"] == 4 and target.server_args["trust-remote-code"] is True
    )
    assert target.extra_args == ("--served-model-name", "Kimi K2.6 DDTree")
    assert target.environment["NCCL_DEBUG"] == "WARN" and target.environment["NCCL_P2P_DISABLE"] == "1"
    assert target.origin["host_paths"]["model-path"] == "/data/models/Kimi-K2.6"
    assert target.server_argv()[-2:] == ["--served-model-name", "Kimi K2.6 DDTree"]

    ref = load_reference(out / "env" / "reference" / "imported-results.yaml")
    assert ref.results["baseline-cuda-graph"].figures["output_tokens_per_s"].contains(98)
    assert ref.results["ddtree-single"].figures["acceptance_length"].max == 4.1
    assert ref.results["ddtree-c64-ctx1024"].figures["aggregate_output_tokens_per_s"].min == 897
    system = yaml.safe_load((out / "env" / "system-captured.yaml").read_text())
    assert system["cuda"]["nvcc"] == "13.0.88" and system["driver"] == "580.95.05"
    assert system["gpus"] == {"model": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "count": 8,
                              "compute_capability": "12.0"}  # fmt: skip
    assert (out / "env" / "imported" / "drafter" / "config.json").is_file()

    # The series goes through the patch engine: strict apply to the pristine wheel + verify.
    check = _cli("patches", "check", "--series", str(out / "patches" / "series.yaml"))
    assert check.returncode == 0, check.stderr
    assert "3 patch(es)" in check.stdout
    series = yaml.safe_load((out / "patches" / "series.yaml").read_text())
    ids = ["cuda-graph-runner-ddtree-verify-tokens", "dflash-worker-ddtree-settings", "ddtree-utils"]
    assert [p["id"] for p in series["patches"]] == ids
    assert series["patches"][2]["files"][0]["signatures"] == ["build_ddtree", "ancestor_mask"]


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (
            lambda p: (p / "env" / "pip-freeze.txt").write_text("torch==2.10.0\n"),
            "mismatched: env/pip-freeze.txt",
        ),
        (lambda p: (p / "drafter" / "config.json").unlink(), "missing: drafter/config.json"),
        (lambda p: (p / "bench" / "notes.txt").write_text("x"), "extra: bench/notes.txt"),
        (lambda p: (p / "MANIFEST.sha256").unlink(), "MANIFEST.sha256: missing"),
    ],
)
def test_tampered_manifest_is_rejected_with_the_file_named(
    package: Path, tmp_path: Path, targets_dir: Path, tamper, message
) -> None:
    tamper(package)
    with pytest.raises(UserError, match=message):
        run_import(package, tmp_path / "out", False, None, targets_dir)
    assert not (tmp_path / "out").exists()


def test_output_folder_rules(repro_package: Path, tmp_path: Path, targets_dir: Path) -> None:
    with pytest.raises(UserError, match=r"give --out DIR .*or --force"):
        run_import(repro_package, None, False, None, targets_dir)
    busy = tmp_path / "busy"
    (busy / "patches").mkdir(parents=True)
    (busy / "patches" / "series.yaml").write_text("patches:\n  - {id: old, diff: 0009-old.diff}\n")
    (busy / "patches" / "0009-old.diff").write_text("old")
    with pytest.raises(UserError, match=r"busy: exists and is not empty"):
        run_import(repro_package, busy, False, None, targets_dir)
    report = run_import(repro_package, busy, True, None, targets_dir)
    assert not (busy / "patches" / "0009-old.diff").exists()
    assert "removed patches/0009-old.diff (not in the imported series)" in report.notes


def test_bad_freeze_line_is_named(package: Path, tmp_path: Path, targets_dir: Path) -> None:
    freeze = package / "env" / "pip-freeze.txt"
    freeze.write_text(freeze.read_text() + "-e git+https://example.org/sglang.git#egg=sglang\n")
    write_manifest(package)
    with pytest.raises(UserError, match=r"pkg/env/pip-freeze.txt:192: editable install"):
        run_import(package, tmp_path / "out", False, None, targets_dir)


def test_full_files_must_match_the_diffs(package: Path, tmp_path: Path, targets_dir: Path) -> None:
    full = package / "patches" / "full" / "sglang" / "srt" / "speculative" / "dflash_worker.py"
    full.write_text(full.read_text() + "# hand edit not in any diff\n")
    write_manifest(package)
    with pytest.raises(UserError, match=r"dflash_worker.py: differs from the pristine file \+ diffs"):
        run_import(package, tmp_path / "out", False, None, targets_dir)


def test_unit_parsing_rules() -> None:
    unit = (
        "[Unit]\nDescription=x\n[Service]\nEnvironment=A=1 'B=two words'\n"
        "ExecStart=-/usr/bin/python3 -m sglang.launch_server --tp-size 8 --model /m/t \\\n"
        "  --speculative-dflash-block-size=8 --enable-metrics --json-model-override-args '{\"a\": 1}'\n"
    )
    argv, env = read_unit(unit, "u.service")
    assert env == {"A": "1", "B": "two words"}
    launcher, args, extra, host = map_exec_start(argv, "u.service")
    assert launcher == ["/usr/bin/python3", "-m", "sglang.launch_server"]
    assert args == {"tp": 8, "model-path": "/models/target", "speculative-num-draft-tokens": 8}
    assert extra == ["--enable-metrics", "--json-model-override-args", '{"a": 1}']
    assert host == {"model-path": "/m/t"}
    with pytest.raises(UserError, match=r"u.service: ExecStart does not launch sglang"):
        map_exec_start(["/usr/bin/vllm", "serve", "--tp", "8"], "u.service")
    with pytest.raises(UserError, match=r"u.service: --tp 'eight' is not a int"):
        map_exec_start(["python", "-m", "sglang.launch_server", "--tp", "eight"], "u.service")
    with pytest.raises(UserError, match=r"u.service: no ExecStart= in \[Service\]"):
        read_unit("[Service]\nUser=x\n", "u.service")


def test_capture_then_import_round_trips(
    served_venv,  # noqa: F811
    repro_package: Path,
    tmp_path: Path,
    targets_dir: Path,
) -> None:
    python, site = served_venv
    pkg = tmp_path / "captured"
    # The served weights: the target in a Hugging Face cache, the drafter in a plain folder.
    source = tmp_path / "kimi"
    write_target(source, shards=2)
    cache = write_hf_cache(tmp_path / "hub", "moonshotai/Kimi-K2.6", {"c" * 40: source}, main="c" * 40)
    drafter = write_drafter(tmp_path / "drafter")
    capture.capture(
        pkg, python=str(python), services=[str(repro_package / "services" / "sglang-ddtree.service")],
        environ={"NCCL_P2P_DISABLE": "1"}, weights={"target": cache, "drafter": drafter},
    )  # fmt: skip
    out = tmp_path / "imported"
    report = run_import(pkg, out, False, "pro6000", targets_dir)
    lock = weights_lock.load_lock(out / "env" / "weights.yaml")
    assert lock.models["target"].revision == "c" * 40 and lock.models["drafter"].revision is None
    assert [f.path for f in lock.models["target"].files] == sorted(p.name for p in source.iterdir())
    for role, folder in (("target", cache), ("drafter", drafter)):
        assert weights_lock.compare(folder, lock.models[role], out / "env" / "weights.yaml", full=True).ok
    assert "env/freeze.txt" in report.written and "patches/series.yaml" in report.written
    captured_pins = {p.name: p.version for p in read_pins(out / "env" / "freeze.txt")}
    assert captured_pins["sglang"] == "0.5.13.post1"
    check = _cli("patches", "check", "--series", str(out / "patches" / "series.yaml"))
    assert check.returncode == 0, check.stderr
    # Pristine + imported series == the edited venv, file for file.
    series = yaml.safe_load((out / "patches" / "series.yaml").read_text())
    finals = {f["path"]: f["post"] for p in series["patches"] for f in p["files"]}
    from ddtree.fsutil import sha256_file

    assert finals == {EDITED: sha256_file(site / EDITED), ADDED: sha256_file(site / ADDED)}
    target = load_target(out / "env" / "targets" / "pro6000.yaml")
    assert target.server_args["speculative-algorithm"] == "DDTREE"
    assert target.origin["imported_from"] == "captured/services/sglang-ddtree.service"


def test_import_module_has_a_cli_entry() -> None:
    assert import_package.register is not None
    done = _cli("import", "--help")
    assert done.returncode == 0 and "--out" in done.stdout
