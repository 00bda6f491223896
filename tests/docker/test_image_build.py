"""The image, built for real: the same template on the registry-free base with the small CI lock.

Nothing is mocked: the real engine builds with BuildKit (`ddtree-build image`'s own code path), the patch
engine applies and verifies the real series inside, and the self-check runs in the container. The CI lock
keeps this within minutes; the full stack is the slow tier (tests/slow/test_full_image.py).

Secrets: the build gets a CA bundle and an HF token that carry fixed canary strings; the test streams
`docker save` (every layer tar, the config with its history) and `docker history` looking for them.
The canaries are constant, so even a cached layer was made by a build that had them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ddtree_build import docker_build, image, render
from ddtree_build.paths import ENV_DIR, REPO_ROOT

TEST_NAME = "ddtree-test"
TARGET = "pro6000"
HF_CANARY = "hf_ddtreeCanaryToken7f3a9c0d2b"
CA_CANARY = "ddtree-ca-canary-5e1b77c4a9"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _ci_lock(folder: Path) -> Path:
    """env/requirements-ci.lock, plus sglang's entry (with its hashes) from the py311 lock when it lacks one.

    The patch series targets sglang's files, so the image must hold the sglang wheel (installed --no-deps,
    a few MB) for apply/verify to have something to patch. The entry is copied byte for byte from the lock
    that `ddtree-build lock` wrote; nothing is re-resolved.
    """
    ci = ENV_DIR / "requirements-ci.lock"
    text = ci.read_text()
    if re.search(r"^sglang==", text, re.M):
        return ci
    full = (ENV_DIR / "requirements-py311.lock").read_text()
    match = re.search(r"^sglang==.*?(?=^\S|\Z)", full, re.M | re.S)
    assert match, "env/requirements-py311.lock has no sglang entry"
    out = folder / "requirements-ci-sglang.lock"
    out.write_text(text.rstrip("\n") + "\n" + match.group(0).rstrip("\n") + "\n")
    return out


def build_with_ca(folder: Path, tag: str, dockerfile: Path, args: dict[str, str], log: Path) -> None:
    """A BuildKit build of a staged context with the host CA bundle as its secret; on failure the log's
    tail is printed (pytest shows it with the error)."""
    try:
        docker_build.build_image(
            folder,
            tag,
            dockerfile=dockerfile,
            build_args=args,
            secrets={"ca": docker_build.HOST_CA_BUNDLE},
            log=log,
        )
    except Exception:
        print(log.read_text()[-5000:])
        raise


def build_ci_image(folder: Path, **options: Any) -> image.ImageResult:
    """The tier's CI-lock image through `ddtree-build image`'s code path, with the HF canary as token.

    The build log is folder/build.log; a failed build prints its tail, so the pytest report shows why.
    `options` go to image.build (a CA bundle, say=...).
    """
    log = folder / "build.log"
    options.setdefault("say", lambda msg: None)
    try:
        return image.build(
            TARGET, "bootstrap", TEST_NAME, lock=_ci_lock(folder), hf_token=HF_CANARY, log=log, **options
        )
    except Exception:
        print(log.read_text()[-6000:] if log.exists() else "(no build log)")
        raise


@pytest.fixture(scope="module")
def ci_image(docker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[image.ImageResult]:
    folder = tmp_path_factory.mktemp("ci-image")
    ca = folder / "ca.pem"
    ca.write_text(docker_build.HOST_CA_BUNDLE.read_text() + f"\n# {CA_CANARY}\n")
    result = build_ci_image(folder, ca_bundle=ca)
    yield result
    # Per-commit tags would pile up run after run; the build cache, not the tags, makes reruns fast.
    for tag in result.tags[1:]:
        _run(docker, "image", "rm", tag)


def _run(docker: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([docker, *args], capture_output=True, text=True, timeout=timeout)


def docker_run(docker: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker run --rm --network=none ARGS`: the images run offline, as on the build hosts."""
    return _run(docker, "run", "--rm", "--network=none", *args, timeout=timeout)


def test_tags_labels_and_entrypoint(docker: str, ci_image: image.ImageResult) -> None:
    """Labels carry what the build was given; those facts are checked against git and env/ here."""
    args = ci_image.build_args
    revision = args["VCS_REF"]
    sha = revision.removesuffix("-dirty")
    suffix = "-dirty" if revision.endswith("-dirty") else ""
    assert ci_image.tags[:2] == [f"{TEST_NAME}:{TARGET}", f"{TEST_NAME}:{TARGET}-{sha[:12]}{suffix}"]
    for tag in ci_image.tags:
        assert image.inspect_image(tag)["Id"] == ci_image.image_id
    commit_time = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%ct", sha], capture_output=True, text=True
    )
    assert commit_time.returncode == 0, f"VCS_REF {sha} is not a commit here"
    epoch = int(commit_time.stdout)
    labels = ci_image.labels
    from ddtree.fsutil import sha256_file

    assert labels["io.ddtree.target"] == TARGET
    assert labels["io.ddtree.base"] == "bootstrap"
    assert labels["io.ddtree.freeze.sha256"] == sha256_file(ENV_DIR / "freeze.txt")
    assert labels["io.ddtree.patches.sha256"] == args["PATCHES_SHA256"]
    assert labels["io.ddtree.sglang.version"] == render.sglang_version_of(ENV_DIR / "freeze.txt")
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.created"] == image.rfc3339(epoch)
    assert labels["io.ddtree.source-date-epoch"] == str(epoch)
    baked = _run(
        docker, "run", "--rm", "--entrypoint", "cat", ci_image.tags[0], "/opt/ddtree/image-labels.json"
    )
    ours = {k: v for k, v in labels.items() if k.startswith(image.LABEL_PREFIXES)}  # not the base's own
    assert json.loads(baked.stdout) == ours, "the JSON copy for selfcheck differs from the image labels"
    config = image.inspect_image(ci_image.tags[0])["Config"]
    assert config["Entrypoint"] == ["ddtree", "serve"]
    assert f"DDTREE_TARGET={TARGET}" in config["Env"]
    assert "NCCL_P2P_DISABLE=1" in config["Env"]


def test_patch_manifest_is_baked_and_verify_passes_inside(docker: str, ci_image: image.ImageResult) -> None:
    tag = ci_image.tags[0]
    out = docker_run(docker, "--entrypoint", "python", tag, "-m", "ddtree.patchset", "verify", "--root", SITE)
    assert out.returncode == 0, out.stdout + out.stderr
    folder = "/opt/ddtree/patch-manifest"
    manifest = docker_run(
        docker, "--entrypoint", "cat", tag, f"{folder}/manifest.json", f"{folder}/MANIFEST.sha256"
    )
    assert manifest.returncode == 0, manifest.stderr
    data = json.loads(manifest.stdout[: manifest.stdout.rindex("}") + 1])
    assert data["series_digest"] == ci_image.labels["io.ddtree.patches.sha256"]


def test_verify_inside_catches_a_tampered_tree(docker: str, ci_image: image.ImageResult) -> None:
    """The in-image verification can fail: alter a patched file (or, with an empty series, the manifest)."""
    tag = ci_image.tags[0]
    raw = docker_run(docker, "--entrypoint", "cat", tag, "/opt/ddtree/patch-manifest/manifest.json")
    files = sorted(json.loads(raw.stdout)["files"])
    tamper = (
        f"echo '# tampered' >> {SITE}/{files[0]}" if files else f"rm {SITE}/.ddtree-patchset/manifest.json"
    )
    script = f"{tamper} && python -m ddtree.patchset verify --root {SITE}"
    # As root: the image's own user (uid 10001) cannot write site-packages, which is the point of it.
    out = docker_run(docker, "--user", "0", "--entrypoint", "bash", tag, "-c", script)
    assert out.returncode != 0 and "Permission denied" not in out.stderr
    assert (files[0] if files else "manifest") in out.stdout + out.stderr


def test_selfcheck_offline_passes_inside(docker: str, ci_image: image.ImageResult) -> None:
    out = docker_run(docker, "--entrypoint", "ddtree", ci_image.tags[0], "selfcheck", "--offline", "--json")
    report = json.loads(out.stdout)
    failing = [c for c in report["checks"] if c["status"] in ("fail", "error")]
    assert out.returncode == 0 and not failing, json.dumps(failing or report, indent=1)[-3000:]


def test_sbom_is_baked_and_summarised(docker: str, ci_image: image.ImageResult) -> None:
    """The CycloneDX SBOM ddtree-build image wrote beside the image is the one inside it, and the
    offline self-check summarises it (every CI-lock distribution hashed, the weights lock named)."""
    assert ci_image.sbom is not None and ci_image.sbom.is_file()
    out = docker_run(docker, "--entrypoint", "cat", ci_image.tags[0], "/opt/ddtree/sbom.cdx.json")
    assert out.returncode == 0 and out.stdout == ci_image.sbom.read_text()
    out = docker_run(
        docker,
        "--entrypoint",
        "ddtree",
        ci_image.tags[0],
        "selfcheck",
        "--offline",
        "--json",
        "--only",
        "sbom",
    )
    (entry,) = json.loads(out.stdout)["checks"]
    assert entry["status"] == "pass", entry
    assert entry["data"]["unhashed"] == [] and entry["data"]["distributions"] >= 4
    assert "moonshotai/Kimi-K2.6@unknown" in entry["data"]["models"]


def test_tree_identity_is_labelled_and_selfcheck_full_catches_an_edit(
    docker: str, ci_image: image.ImageResult
) -> None:
    """The build's tree digest is the label's and the baked file's; `selfcheck --offline --full` recomputes
    it, passes on the image as built, and fails after an edit to a wheel's file and a stray file."""
    tag = ci_image.image_id  # by id: another checkout's test run may move the shared tag meanwhile
    digest = ci_image.labels["io.ddtree.tree.sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest) and ci_image.build_args["TREE_SHA256"] == digest
    baked = json.loads(
        docker_run(docker, "--entrypoint", "cat", tag, "/opt/ddtree/tree-identity.json").stdout
    )
    assert baked["digest"] == digest and baked["files"] > 1000 and not baked["extra"]
    full = ["selfcheck", "--offline", "--full", "--only", "tree", "--json"]
    out = docker_run(docker, "--entrypoint", "ddtree", tag, *full)
    assert out.stdout.startswith("{"), out.stdout + out.stderr
    check = json.loads(out.stdout)["checks"][0]
    assert out.returncode == 0 and check["status"] == "pass", check["detail"]
    assert check["data"]["digest"] == digest
    script = f"echo '# edited' >> {SITE}/yaml/__init__.py && touch {SITE}/stray.py && ddtree {' '.join(full)}"
    out = docker_run(docker, "--user", "0", "--entrypoint", "bash", tag, "-c", script)  # the user cannot edit
    check = json.loads(out.stdout)["checks"][0]
    assert out.returncode == 1 and check["status"] == "fail"
    [changed] = check["data"]["changed"]
    assert re.fullmatch(r"yaml/__init__\.py \((?i:pyyaml)-6\.0\.3\.dist-info\)", changed), changed
    assert check["data"]["extra"] == ["stray.py"] and "differs from the build's" in check["detail"]


def test_rebuild_reuses_the_dependency_layer(
    docker: str, ci_image: image.ImageResult, tmp_path: Path
) -> None:
    """The same lock again: the install step comes from the cache. When nothing else changed either (no
    commit or edit in between; others may be working in this tree), every step is cached, same image."""
    again = build_ci_image(tmp_path, say=print)
    log = tmp_path / "build.log"
    for tag in set(again.tags[1:]) - set(ci_image.tags):  # a commit landed meanwhile: a new sha tag
        _run(docker, "image", "rm", tag)
    text = log.read_text()
    install_step = re.search(r"^#(\d+) \[deps \d/\d\] RUN .*--require-hashes", text, re.M)
    assert install_step, "no install step in the log:\n" + "\n".join(re.findall(r"^#\d+ \[.*", text, re.M))
    assert f"#{install_step.group(1)} CACHED" in text, text[-3000:]
    steps = set(re.findall(r"^#(\d+) \[", text, re.M))
    cached = set(re.findall(r"^#(\d+) CACHED", text, re.M))
    if steps == cached and again.build_args == ci_image.build_args:
        assert again.image_id == ci_image.image_id


def test_committed_dockerfile_builds_with_a_stand_in_base(
    docker: str, ci_image: image.ImageResult, tmp_path: Path
) -> None:
    """The committed Dockerfile (nvidia render: Python and g++ from apt with cache mounts) builds here.

    No registry is reachable, so the registry-free Debian base stands in for nvidia/cuda through the
    BASE_IMAGE argument (Debian's package names match Ubuntu's), with the CI lock. On a connected host
    the real base is used; its digest pinning is covered by the render tests.
    """
    from ddtree_build import base_image

    ctx = render.build_context(TARGET, "nvidia")
    if ctx.base_digest:
        pytest.skip("the committed Dockerfile pins a digest; a stand-in base cannot match it")
    folder = tmp_path / "context"
    dockerfile = image.stage_context(folder, (REPO_ROOT / "Dockerfile").read_text(), _ci_lock(tmp_path))
    args = image.build_args_for(ctx, image.OVERRIDE_LOCK, pip_check=False)
    args["BASE_IMAGE"] = base_image.base_tag()
    tag = "ddtree-test:nvidia-stand-in"
    image.write_image_sbom(folder, image.OVERRIDE_LOCK, ctx, args, tag, tmp_path / "sbom.cdx.json")
    log = tmp_path / "build.log"
    build_with_ca(folder, tag, dockerfile, args, log)
    assert "apt-get install" in log.read_text()
    script = f"ddtree --version && python -m ddtree.patchset verify --root {SITE}"
    out = docker_run(docker, "--entrypoint", "bash", tag, "-c", script)
    assert out.returncode == 0 and out.stdout.startswith("ddtree "), out.stdout + out.stderr
    # Reproducibility: an independent build of the same series on the same wheel writes the same manifest.
    files = ("/opt/ddtree/patch-manifest/manifest.json", "/opt/ddtree/patch-manifest/MANIFEST.sha256")
    manifests = [
        docker_run(docker, "--entrypoint", "cat", name, *files).stdout for name in (tag, ci_image.image_id)
    ]
    _run(docker, "image", "rm", tag)
    assert manifests[0] and manifests[0] == manifests[1]


# ---------------------------------------------------------------- secrets


def _stream_contains(chunks: Iterable[bytes], needles: list[bytes]) -> set[bytes]:
    """Which needles occur in a byte stream, across chunk boundaries."""
    found: set[bytes] = set()
    keep = max(len(n) for n in needles)
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        found.update(n for n in needles if n in window)
        tail = window[-keep:]
    return found


def secrets_in_image(docker: str, tag: str, needles: list[str]) -> dict[str, list[str]]:
    """Where each needle shows up: the `docker save` stream (layer tars, config, history) and history."""
    raw = [n.encode() for n in needles]
    where: dict[str, list[str]] = {}
    proc = subprocess.Popen([docker, "save", tag], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    found = _stream_contains(iter(lambda: proc.stdout.read(1 << 20), b""), raw)
    assert proc.wait() == 0, f"docker save {tag} failed"
    for needle in found:
        where.setdefault(needle.decode(), []).append("docker save (layers/config)")
    history = _run(docker, "history", "--no-trunc", "--format", "{{.CreatedBy}}", tag).stdout
    inspect = json.dumps(image.inspect_image(tag))
    for needle in needles:
        if needle in history:
            where.setdefault(needle, []).append("docker history")
        if needle in inspect:
            where.setdefault(needle, []).append("docker inspect")
    return where


def test_secrets_are_absent_from_layers_and_history(docker: str, ci_image: image.ImageResult) -> None:
    where = secrets_in_image(docker, ci_image.tags[0], [HF_CANARY, CA_CANARY])
    assert where == {}, f"build secrets leaked into the image: {where}"


def test_secret_scan_finds_a_leak(docker: str, ci_image: image.ImageResult, tmp_path: Path) -> None:
    """The scan can fail: a Dockerfile that writes a canary into a layer and its history is caught."""
    (tmp_path / "Dockerfile").write_text(
        f"FROM {ci_image.labels['org.opencontainers.image.base.name']}\n"
        "ARG LEAK\n"
        'RUN echo "$LEAK" > /leaked\n'
    )
    leak = "ddtree-leak-canary-2f9d"
    docker_build.build_image(tmp_path, "ddtree-test:leaky", build_args={"LEAK": leak}, log=tmp_path / "log")
    try:
        where = secrets_in_image(docker, "ddtree-test:leaky", [leak, HF_CANARY])
    finally:
        _run(docker, "image", "rm", "ddtree-test:leaky")
    assert set(where) == {leak}
    assert "docker save (layers/config)" in where[leak] and "docker history" in where[leak]


# ---------------------------------------------------------------- compose


@pytest.mark.parametrize("profile", render.TARGETS)
def test_compose_config_validates(docker: str, profile: str, tmp_path: Path) -> None:
    compose = shutil.which("docker") or docker
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
           "MODEL_DIR": str(tmp_path / "target"), "DRAFTER_DIR": str(tmp_path / "drafter")}  # fmt: skip
    cmd = [compose, "compose", "-f", str(REPO_ROOT / "docker-compose.yml"), "--profile", profile, "config"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    assert list(config["services"]) == [f"ddtree-{profile}"]
    service = config["services"][f"ddtree-{profile}"]
    assert service["ipc"] == "host" and service["init"] is True
    assert {v["target"]: v.get("read_only") for v in service["volumes"]} == {
        "/models/target": True,
        "/models/drafter": True,
        "/var/cache/ddtree-jit": None,  # the JIT caches' named volume, writable
    }
    cache = next(v for v in service["volumes"] if v["target"] == "/var/cache/ddtree-jit")
    assert cache["type"] == "volume" and cache["source"] in config["volumes"]
    assert service["environment"]["DDTREE_TARGET"] == profile
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == -1  # "all"


def test_compose_without_model_dir_says_what_to_set(docker: str, tmp_path: Path) -> None:
    compose = shutil.which("docker") or docker
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()), "DRAFTER_DIR": str(tmp_path)}
    cmd = [compose, "compose", "-f", str(REPO_ROOT / "docker-compose.yml"), "--profile", TARGET, "config"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0
    assert "set MODEL_DIR to the Kimi K2.6 weights folder" in out.stderr
