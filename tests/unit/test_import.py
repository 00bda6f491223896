"""import: manifest first, then freeze/diffs/unit/results conversion; capture -> import round-trips.

Real parts: a reproduction package generated per session in the original team's own style (absolute-path
`diff -u` against /root backups, some holding earlier edits, one diff disagreeing with the file that ran,
patches/full/ flat) from the real pristine sglang 0.5.13.post1 wheel (tests/fixtures/make_repro_package.py;
nothing of SGLang is committed), the patch engine (`ddtree-build patches check` on the imported series), a
real venv for the round trip. Output goes to tmp folders: the checkout's env/ and patches/ are never written.
Interrupts are KeyboardInterrupt raised at a chosen step: what Python's SIGINT handler raises.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ddtree.errors import UserError
from ddtree.fsutil import sha256_file
from ddtree.lockfile import read_pins
from ddtree.receipts.reference import load_reference
from ddtree.targets import load_target
from ddtree.weights import lock as weights_lock
from ddtree_build.reproduction import capture
from ddtree_build.reproduction import import_cmd as import_package
from ddtree_build.reproduction.import_cmd import run_import
from ddtree_build.reproduction.manifest import write_manifest
from ddtree_build.reproduction.unit import map_exec_start, read_unit

from tests.fixtures.make_repro_package import DDTREE, RUNNER, WORKER, write_package
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
    # patches/full/ is the truth: each file's series result is the file that ran, byte for byte.
    full = repro_package / "patches" / "full"
    posts = {f["path"]: f["post"] for p in series["patches"] for f in p["files"]}
    assert posts == {RUNNER: sha256_file(full / "cuda_graph_runner.py"),
                     WORKER: sha256_file(full / "dflash_worker.py"),
                     DDTREE: sha256_file(full / "ddtree_utils.py")}  # fmt: skip
    # The diff that disagrees with the file that ran is reported, not trusted; the backup story is told.
    assert done.stdout.startswith(
        "warning: patches/diffs/0002-dflash-worker-ddtree-settings.diff: hunk 1 of "
    )
    assert "which patches/full/dflash_worker.py does not have: this diff disagrees" in done.stdout
    assert "0002-dflash-worker-ddtree-settings.diff does not apply to the pristine file" in done.stdout
    assert "0004-cuda-graph-runner-verify-comment.diff: its files are in an earlier patch" in done.stdout
    assert done.stdout.count("warning:") == 1


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


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root, for 'nothing changed' checks."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _series_posts(out: Path) -> dict[str, str]:
    series = yaml.safe_load((out / "patches" / "series.yaml").read_text())
    return {f["path"]: f["post"] for p in series["patches"] for f in p["files"]}


@pytest.mark.parametrize(
    "layout",
    ["usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor", "sglang/srt/model_executor"],
    ids=["host-absolute", "site-packages-tree"],
)
def test_full_file_layouts(package: Path, tmp_path: Path, targets_dir: Path, layout: str) -> None:
    """A full file under the host's absolute path or the site-packages tree maps like a flat one."""
    flat = package / "patches" / "full" / "cuda_graph_runner.py"
    moved = package / "patches" / "full" / layout / "cuda_graph_runner.py"
    moved.parent.mkdir(parents=True)
    flat.rename(moved)
    write_manifest(package)
    run_import(package, tmp_path / "out", False, None, targets_dir)
    assert _series_posts(tmp_path / "out")[RUNNER] == sha256_file(moved)


def test_without_a_full_copy_the_diffs_must_apply(package: Path, tmp_path: Path, targets_dir: Path) -> None:
    """No full copy of the runner: 0001 then 0004 (made against a backup holding 0001) chain onto the
    pristine file. No full copy of the worker: its diff was made against an edited backup and does not
    apply, which is one line naming the diff, and nothing is written."""
    runner = package / "patches" / "full" / "cuda_graph_runner.py"
    expected = sha256_file(runner)
    runner.unlink()
    write_manifest(package)
    report = run_import(package, tmp_path / "out", False, None, targets_dir)
    assert _series_posts(tmp_path / "out")[RUNNER] == expected
    assert any("no copy in patches/full/; its diffs applied" in note for note in report.notes)
    (package / "patches" / "full" / "dflash_worker.py").unlink()
    write_manifest(package)
    with pytest.raises(UserError) as info:
        run_import(package, tmp_path / "out2", False, None, targets_dir)
    assert (
        "0002-dflash-worker-ddtree-settings.diff: hunk 1 of sglang/srt/speculative/dflash_worker.py"
        in str(info.value)
    )
    assert "\n" not in str(info.value) and not (tmp_path / "out2").exists()


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("+++ /opt/elsewhere/cuda_graph_runner.py", "where '/opt/elsewhere/cuda_graph_runner.py' is"),
        ("+++ /dev/null", "deletes /root/cuda_graph_runner.py.bak; the series has no deletions"),
    ],
)  # fmt: skip
def test_unplaceable_diff_header_is_one_line(
    package: Path, tmp_path: Path, targets_dir: Path, header, message
):
    diff = package / "patches" / "diffs" / "0001-cuda-graph-runner-ddtree-verify-tokens.diff"
    lines = diff.read_text().splitlines(keepends=True)
    lines[1] = header + "\n"
    diff.write_text("".join(lines))
    write_manifest(package)
    with pytest.raises(UserError, match=re.escape(message)):
        run_import(package, tmp_path / "out", False, None, targets_dir)
    assert not (tmp_path / "out").exists()


def _link_outside(package: Path, tmp_path: Path) -> None:
    """The freeze becomes a link to an identical file outside: the manifest's hash still matches."""
    outside = tmp_path / "outside-freeze.txt"
    freeze = package / "env" / "pip-freeze.txt"
    outside.write_bytes(freeze.read_bytes())
    freeze.unlink()
    freeze.symlink_to(outside)


def _diffs_folder_outside(package: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-diffs"
    shutil.move(package / "patches" / "diffs", outside)
    (package / "patches" / "diffs").symlink_to(outside)


def _broken_link(package: Path, tmp_path: Path) -> None:
    (package / "bench" / "latest.json").symlink_to(package / "bench" / "gone.json")


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_link_outside, "env/pip-freeze.txt: a link to {tmp}/outside-freeze.txt, outside the package"),
        (_diffs_folder_outside, "patches/diffs: a link to {tmp}/outside-diffs, outside the package"),
        (_broken_link, "bench/latest.json: a link to {pkg}/bench/gone.json, which does not exist"),
    ],
    ids=["linked-freeze", "linked-diffs-folder", "broken-link"],
)
def test_links_leaving_the_package_are_refused(
    package: Path, tmp_path: Path, targets_dir: Path, tamper, message
):
    tamper(package, tmp_path)
    out = tmp_path / "out"
    done = _cli("import", str(package), "--out", str(out))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("ddtree-build: error: ")
    assert message.format(tmp=tmp_path, pkg=package) in done.stderr
    assert not out.exists()


def test_only_listed_files_are_read(package: Path, tmp_path: Path, targets_dir: Path, monkeypatch) -> None:
    """The import reads a snapshot of exactly the listed files: a file added after the manifest check (as
    if by a race) is never seen, and a listed file that changes during the copy is refused."""
    from ddtree_build.reproduction import manifest as package_manifest

    real_check = package_manifest.check_manifest

    def check_then_add(root: Path):
        report = real_check(root)
        (root / "patches" / "diffs" / "0009-sneaked-in.diff").write_text("--- a/x\n+++ b/x\n")
        return report

    monkeypatch.setattr(import_package, "check_manifest", check_then_add)
    report = run_import(package, tmp_path / "out", False, None, targets_dir)
    assert not any("sneaked" in rel for rel in report.written)
    monkeypatch.setattr(import_package, "check_manifest", real_check)
    (package / "patches" / "diffs" / "0009-sneaked-in.diff").unlink()
    real_copy = shutil.copyfile

    def copy_then_change(src, dst, *args, **kwargs):
        result = real_copy(src, dst, *args, **kwargs)
        if str(src).endswith("pip-freeze.txt"):
            Path(dst).write_text("torch==2.10.0\n")
        return result

    monkeypatch.setattr(package_manifest.shutil, "copyfile", copy_then_change)
    with pytest.raises(UserError, match=r"pip-freeze.txt: changed while it was imported"):
        run_import(package, tmp_path / "out2", False, None, targets_dir)
    assert not (tmp_path / "out2").exists()


@pytest.fixture
def checkout(tmp_path: Path, repo_root: Path) -> Path:
    """A stand-in for the checkout that `import --force` overwrites: copies of env/ and patches/."""
    folder = tmp_path / "checkout"
    shutil.copytree(repo_root / "env", folder / "env")
    shutil.copytree(repo_root / "patches", folder / "patches")
    return folder


@pytest.mark.parametrize("interrupt_after", [1, 7, 15])
def test_force_import_interrupted_while_staging_leaves_the_old(
    repro_package: Path, checkout: Path, targets_dir: Path, monkeypatch, interrupt_after: int
) -> None:
    before = _tree(checkout)
    real_copy = shutil.copyfile
    calls = []

    def copy(src, dst, *args, **kwargs):
        if "/.env.new-" in str(dst) or "/.patches.new-" in str(dst):  # building the new env/ or patches/
            calls.append(dst)
            if len(calls) == interrupt_after:
                raise KeyboardInterrupt
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(import_package.shutil, "copyfile", copy)
    with pytest.raises(KeyboardInterrupt):
        run_import(repro_package, checkout, True, None, targets_dir)
    assert _tree(checkout) == before
    assert sorted(p.name for p in checkout.iterdir()) == ["env", "patches"]  # no staging left behind


def test_force_import_failing_mid_swap_puts_the_old_back(
    repro_package: Path, checkout: Path, targets_dir: Path, monkeypatch
) -> None:
    """The second folder's rename fails: the first, already swapped, goes back; SIGINT is held meanwhile."""
    before = _tree(checkout)
    real_rename = os.rename
    renames = []

    def rename(src, dst):
        renames.append((src, dst))
        if len(renames) == 4:  # env aside, env in, patches aside, patches in <- this one
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(import_package.os, "rename", rename)
    with pytest.raises(OSError):
        run_import(repro_package, checkout, True, None, targets_dir)
    assert _tree(checkout) == before
    assert sorted(p.name for p in checkout.iterdir()) == ["env", "patches"]


def test_force_import_swaps_in_the_whole_import(
    repro_package: Path, checkout: Path, targets_dir: Path
) -> None:
    before = _tree(checkout)
    report = run_import(repro_package, checkout, True, None, targets_dir)
    after = _tree(checkout)
    assert after["env/freeze.txt"] != before["env/freeze.txt"]
    assert after["env/system.yaml"] == before["env/system.yaml"]  # files the import does not make stay
    assert "patches/0001-ddtree-core.diff" not in after  # the old series' diffs go with the old series
    assert "removed patches/0001-ddtree-core.diff (not in the imported series)" in report.notes
    assert sorted(p.name for p in checkout.iterdir()) == ["env", "patches"]
    assert oct(os.stat(checkout / "env").st_mode & 0o777) == "0o755"


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
    assert finals == {EDITED: sha256_file(site / EDITED), ADDED: sha256_file(site / ADDED)}
    target = load_target(out / "env" / "targets" / "pro6000.yaml")
    assert target.server_args["speculative-algorithm"] == "DDTREE"
    assert target.origin["imported_from"] == "captured/services/sglang-ddtree.service"


def test_import_module_has_a_cli_entry() -> None:
    assert import_package.register is not None
    done = _cli("import", "--help")
    assert done.returncode == 0 and "--out" in done.stdout
