"""Host-tool inputs as classes (issue 30): nvidia-smi captures in every common form, profile values with
control characters, `import --out` inside the package, and text files that are not UTF-8.

Real parts: the real profile loader and Dockerfile renderer helpers, the real import of the fixture
reproduction package (tests/fixtures/make_repro_package.py), real files on disk. The nvidia-smi texts are
written here in nvidia-smi 580's layouts (no GPU on this machine).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ddtree import cli, targets
from ddtree.errors import UserError
from ddtree.weights import fetch as weights_fetch
from ddtree_build import render
from ddtree_build.reproduction import smi as smi_capture
from ddtree_build.reproduction.import_cmd import GPU_TARGETS
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.bad_input import assert_clean_outcome, run_cli
from tests.unit.test_import import repro_package  # noqa: F401 - the session fixture

REPO = Path(__file__).resolve().parents[2]
NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
CSV_ROWS = [f"{i}, {NAME}, 00000000:{0x18 + i * 0x10:02X}:00.0, 580.95.05, 97887 MiB, 12.0" for i in range(8)]
TABLE = "\n".join(
    [
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "|=========================================+========================+======================|",
    ]
    + [
        f"|   {i}  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:{0x18 + i * 0x10:02X}:00.0 Off |"
        "                  Off |"
        for i in range(8)
    ]
    + [
        "| Processes:                                                                              |",
        "|    0   N/A  N/A            1234      C   python3                                 1000MiB |",
    ]
)
FORMS = {
    "capture (query: + noheader)": "query: index,name,pci.bus_id,driver_version,memory.total,compute_cap\n"
    + "\n".join(CSV_ROWS),
    "csv with header": "index, name, pci.bus_id, driver_version, memory.total [MiB], compute_cap\n"
    + "\n".join(CSV_ROWS),
    "csv with header, no index": "name, driver_version, compute_cap\n"
    + "\n".join(f"{NAME}, 580.95.05, 12.0" for _ in range(8)),
    "csv noheader with index": "\n".join(CSV_ROWS),
    "csv noheader without index": "\n".join(f"{NAME}, 12.0, 580.95.05" for _ in range(8)),
    "default table": TABLE,
    "-L": "\n".join(f"GPU {i}: {NAME} (UUID: GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd)" for i in range(8)),
    "-q": "==============NVSMI LOG==============\n\nDriver Version                            : 580.95.05\n"
    "CUDA Version                              : 13.0\n\nAttached GPUs                             : 8\n"
    + "\n".join(
        f"GPU 00000000:{0x18 + i * 0x10:02X}:00.0\n    Product Name                          : {NAME}"
        for i in range(8)
    ),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_nvidia_smi_forms(form: str) -> None:
    facts = smi_capture.parse(FORMS[form])
    assert facts.count == 8, facts
    assert facts.model and "RTX PRO 6000" in facts.model, facts
    guessed = next((name for marker, name in GPU_TARGETS if marker in facts.model), None)
    assert guessed == "pro6000"
    if form not in ("-L",):
        assert facts.driver == "580.95.05", facts
    if "csv" in form or "capture" in form:
        assert facts.compute_capability == "12.0", facts


@given(text=st.text(max_size=300) | st.sampled_from(sorted(FORMS.values())).map(lambda t: t[: len(t) // 2]))
def test_any_capture_text_parses_without_raising(text: str) -> None:
    facts = smi_capture.parse(text)
    assert facts.count >= 0


# ---------------------------------------------------------------- profile values


def _profile() -> dict:
    return yaml.safe_load((REPO / "env" / "targets" / "pro6000.yaml").read_text())


CONTROL_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@given(where=st.sampled_from(["environment", "server_args", "extra_args", "gpu.model", "description"]),
       value=CONTROL_TEXT)  # fmt: skip
def test_profile_values_either_refused_or_render_one_line_each(where: str, value: str) -> None:
    data = copy.deepcopy(_profile())
    if where == "environment":
        data["environment"]["NCCL_DEBUG"] = value
    elif where == "server_args":
        data["server_args"]["served-model-name"] = value
    elif where == "extra_args":
        data["extra_args"] = [value]
    elif where == "gpu.model":
        data["gpu"]["model"] = value or "x"
    else:
        data["description"] = value
    try:
        profile = targets.validate_target(data, "pro6000.yaml")
    except UserError as exc:
        assert "\n" not in str(exc)
        assert any(ord(c) < 32 or ord(c) == 127 for c in value) or not value.strip(), str(exc)
        return
    body = render.env_pairs(tuple(sorted(profile.environment.items())))
    # one logical ENV instruction: every physical line but the last ends in the continuation backslash
    lines = body.split("\n")
    assert all(line.endswith("\\") for line in lines[:-1]), body
    assert all(line.startswith("    ") for line in lines[1:]), body


def test_a_newline_in_a_profile_value_is_named(tmp_path: Path, capsys) -> None:
    data = _profile()
    data["environment"]["NCCL_DEBUG"] = "WARN\nRUN rm -rf /"
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "pro6000.yaml").write_text(yaml.safe_dump(data))
    os.environ.pop("DDTREE_TARGET", None)
    code, _, err = run_cli(cli.main, capsys, ["serve", "--env-dir", str(tmp_path), "--target", "pro6000",
                                              "--dry-run"])  # fmt: skip
    assert_clean_outcome(code, err)
    assert code == 2 and "environment.NCCL_DEBUG: holds a control character" in err[0], err


# ---------------------------------------------------------------- import --out


def _import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddtree_build.cli", "import", *args], capture_output=True,
                          text=True)  # fmt: skip


@pytest.mark.parametrize("inside", ["out", ".", "env/x"])
def test_import_out_inside_the_package_is_refused(repro_package: Path, tmp_path: Path, inside: str) -> None:  # noqa: F811
    package = Path(shutil.copytree(repro_package, tmp_path / "pkg"))
    before = sorted(p.relative_to(package) for p in package.rglob("*"))
    done = _import(str(package), "--out", str(package / inside), "--force")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "is inside the package" in done.stderr, done.stderr
    assert sorted(p.relative_to(package) for p in package.rglob("*")) == before  # nothing written


# ---------------------------------------------------------------- files that are not UTF-8


def test_files_that_are_not_utf8_are_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9 " + b"0" * 64 + b"  model.safetensors\n")
    with pytest.raises(UserError, match=re.escape(f"{bad}: not UTF-8 text (byte 3)")):
        weights_fetch.read_token(str(bad), {})
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    code, _, err = run_cli(cli.main, capsys, ["weights", "hash", str(folder), "--manifest", str(bad)])
    assert_clean_outcome(code, err)
    assert code == 1 and f"{bad}: not UTF-8 text (byte 3)" in err[0], err
    index = tmp_path / "target"
    index.mkdir()
    (index / "config.json").write_bytes(b'{"model_type": "kimi_k25", "x": "\xff"}')
    code, _, err = run_cli(cli.main, capsys, ["weights", "check", str(index)])
    assert_clean_outcome(code, err)
    assert code == 1 and "target config" in err[0] and "not UTF-8" in err[0], err
    labels = tmp_path / "labels.json"
    labels.write_bytes(json.dumps({"a": "b"}).encode() + b"\xfe")
    code, _, err = run_cli(cli.main, capsys, ["receipt", "verify", str(bad), "--labels", str(labels)])
    assert_clean_outcome(code, err)


ALIAS_BOMB = "a: &a [1, 2]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("schema: " + "[" * 100_000 + "]" * 100_000, "YAML nested deeper than 64 levels"),
        (ALIAS_BOMB.replace("i: &i", "description: &i"), "unknown key"),
        ("schema: 1\nname: pro6000\ndescription: &x [" + "*x, " * 3 + "]", "interconnect: must be one of"),
    ],
)
def test_hostile_yaml_profiles_are_one_line_and_fast(
    tmp_path: Path, capsys, text: str, expected: str
) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "pro6000.yaml").write_text(text)
    code, _, err = run_cli(cli.main, capsys, ["serve", "--env-dir", str(tmp_path), "--target", "pro6000",
                                              "--dry-run"])  # fmt: skip
    assert_clean_outcome(code, err)
    assert code == 2 and expected in err[0], err


# ---------------------------------------------------------------- generated packages

PACKAGE_FILES = ["env/pip-freeze.txt", "env/nvidia-smi.txt", "env/os-release.txt", "env/cuda.txt",
                 "drafter/config.json", "bench/results/ddtree_sweep.json",
                 "services/sglang-ddtree.service"]  # fmt: skip
PACKAGE_CONTENT = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=60).map(str.encode),
    st.sampled_from(
        [b"[" * 50_000 + b"]" * 50_000, b'{"runs": [1, "a", {"output_tokens_per_s": "x"}]}', b"{}"]
    ),
)


@settings(max_examples=max(5, settings.default.max_examples // 4))
@given(changes=st.dictionaries(st.sampled_from(PACKAGE_FILES), PACKAGE_CONTENT, min_size=1, max_size=2))
def test_generated_packages_import_or_fail_in_one_line(
    repro_package: Path,  # noqa: F811
    changes: dict[str, bytes],
    capsys,
) -> None:
    """The fixture package with files replaced by generated content (manifest rewritten, so the content is
    what is judged): `ddtree-build import` ends in exit 0 or one line, and a failed import writes nothing."""
    from ddtree_build.cli import main as build_main
    from ddtree_build.reproduction.manifest import write_manifest

    with tempfile.TemporaryDirectory() as folder:
        package = Path(shutil.copytree(repro_package, Path(folder) / "pkg"))
        for rel, content in changes.items():
            if (package / rel).exists():
                (package / rel).write_bytes(content)
        write_manifest(package)
        out = Path(folder) / "out"
        code, _, err = run_cli(build_main, capsys, ["import", str(package), "--out", str(out)])
        event(f"exit {code}")
        assert_clean_outcome(code, err)
        if code:
            assert not out.exists(), sorted(out.rglob("*"))
        else:
            assert (out / "env" / "freeze.txt").is_file()


@given(
    text=st.text(max_size=200) | st.lists(st.text(max_size=20), max_size=4).map(", ".join),
    tp=st.integers(1, 8),
)
def test_any_nvidia_smi_answer_in_the_image_is_a_gpu_list_or_one_line(text: str, tp: int) -> None:
    """`ddtree serve`'s GPU check reads nvidia-smi through an injectable runner: any answer ends in GPUs
    or one UserError line (a name with commas included)."""
    from ddtree import gpu

    try:
        gpu.check_gpus(tp, "12.0", lambda argv: text, allow_arch_mismatch=False)
    except UserError as exc:  # any other exception fails the test
        assert str(exc).strip()
