"""The pre-launch checks, in the order a person would fix them: weights, drafter, GPUs, /dev/shm, the port,
and the tree digest the server reports. Each fails within seconds, before 600 GB start loading."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ddtree import gpu, numbers
from ddtree.errors import UserError
from ddtree.serve.argv import (
    EXIT_CANNOT_RUN,
)
from ddtree.serve.launch import Launch, launch_block_size, tp_of
from ddtree.serve.values import CHECKED_NUMBERS, SHM_GIB
from ddtree.weights import folders as weights
from ddtree.weights import lock as weights_lock
from ddtree.weights.layout import is_read_only

CHECK_NAMES = ("weights", "drafter", "gpu", "shm", "port", "tree")


def skipped_checks(environ: Mapping[str, str]) -> set[str]:
    names = {n.strip() for n in environ.get("DDTREE_SKIP_CHECKS", "").split(",") if n.strip()}
    unknown = names - set(CHECK_NAMES)
    if unknown:
        raise UserError(
            f"DDTREE_SKIP_CHECKS names unknown check {sorted(unknown)[0]!r}: use {', '.join(CHECK_NAMES)}",
            exit_code=EXIT_CANNOT_RUN,
        )
    return names


def preflight(
    launch: Launch,
    environ: Mapping[str, str],
    runner: gpu.Runner = gpu.run_nvidia_smi,
    log: Callable[[str], None] = print,
) -> None:
    """Every pre-launch check, in the order a person would fix them; raises at the first failure."""
    skip = skipped_checks(environ)
    summary: weights.ModelSummary | None = None
    shm_floor(environ)  # a bad DDTREE_MIN_SHM_GIB is refused before the slower checks
    if "weights" not in skip:
        summary = check_weights(launch)
        check_tp_divides_heads(launch)
        log(
            f"ok   weights  {summary.path}: {summary.model_type}, {len(summary.shards)} shards, "
            f"{summary.total_bytes / 1e9:.1f} GB"
        )
        weights_lock.enforce("target", launch.model_dir(), environ, log)
        warn_read_write(launch.mounted_dir("target"), log)
    if "drafter" not in skip:
        drafter = check_drafter(launch, summary)
        log(f"ok   drafter  {drafter.path}: block size {drafter.block_size}")
        weights_lock.enforce("drafter", launch.drafter_dir(), environ, log)
        warn_read_write(launch.mounted_dir("drafter"), log)
    if "gpu" not in skip:
        found = check_gpu(launch, environ, runner)
        log(f"ok   gpu      {gpu.describe(found, tp_of(launch))}")
    if "shm" not in skip:
        size = gpu.check_shm(shm_floor(environ))
        log(f"ok   shm      /dev/shm {size / 2**30:.1f} GiB")
    if "port" not in skip:
        port, host = check_port(launch)
        log(f"ok   port     {host}:{port} is free")
    if "tree" not in skip:
        launch.environment.update(measured_tree(log))


def measured_tree(log: Callable[[str], None]) -> dict[str, str]:
    """In the image: the whole-tree digest measured now (a few seconds on the cores), exported to the server
    as DDTREE_SERVED_TREE_SHA256 for its /server_info (patch ddtree-served-identity): a receipt then names
    the files that served, also in an image built FROM this one. Outside an image (no baked identity): {}."""
    from ddtree import image_identity
    from ddtree.receipts import tree_identity

    if not tree_identity.IDENTITY_FILE.is_file():
        return {}
    site, extra = tree_identity.image_roots()
    report = tree_identity.scan(site, extra)
    baked = (tree_identity.read_identity(tree_identity.IDENTITY_FILE) or {}).get("digest")
    same = "the build's" if report.digest == baked else f"NOT the build's {str(baked)[:16]}"
    log(f"ok   tree     {report.digest[:16]} ({same}; {report.files} files, {report.seconds:.1f} s)")
    return {image_identity.SERVED_TREE_ENV: report.digest}


def check_weights(launch: Launch) -> weights.ModelSummary:
    return weights.check_target(
        launch.model_dir(), launch.model_type, env_var="MODEL_DIR or DDTREE_MODEL_DIR"
    )


def target_config(launch: Launch) -> weights.ModelSummary:
    """The target's config facts only (no shard headers): enough to check the drafter against."""
    return weights.read_target_config(
        launch.model_dir(), launch.model_type, env_var="MODEL_DIR or DDTREE_MODEL_DIR"
    )


def check_drafter(launch: Launch, target: weights.ModelSummary | None) -> weights.DrafterSummary:
    """The drafter against the profile's block size and, when the target was checked, its shape facts."""
    return weights.check_drafter(
        launch.drafter_dir(),
        launch_block_size(launch),
        target.num_hidden_layers if target else None,
        env_var="DRAFTER_DIR or DDTREE_DRAFTER_DIR",
        target=target,
        tp=tp_of(launch),
    )


def warn_read_write(folder: Path, log: Callable[[str], None]) -> None:
    """Weights are inputs: a read-write mount lets anything in the container change what was measured."""
    if is_read_only(folder) is False:
        log(
            f"warn mount    {folder} is mounted read-write: mount it read-only (docker run -v HOST:PATH:ro; "
            "the compose file does) so nothing in the container can change the weights"
        )


def attention_heads(folder: Path) -> int | None:
    """num_attention_heads of the target's config.json (top level or text_config, as Kimi K2.6 nests it)."""
    config = weights.read_json(folder / "config.json", "target config")
    for holder in (config, config.get("text_config")):
        heads = holder.get("num_attention_heads") if isinstance(holder, dict) else None
        if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0:
            return heads
    return None


def check_tp_divides_heads(launch: Launch) -> None:
    """SGLang splits the attention heads over the TP ranks: TP must divide them (else found after loading)."""
    tp = tp_of(launch)
    heads = attention_heads(launch.model_dir())
    if heads is not None and heads % tp:
        fits = [n for n in range(1, heads + 1) if heads % n == 0 and n <= 64]
        raise UserError(
            f"tensor parallel size {tp} does not divide the model's {heads} attention heads "
            f"({launch.model_dir() / 'config.json'}): set DDTREE_TP to one of {', '.join(map(str, fits))}"
        )


def check_gpu(
    launch: Launch, environ: Mapping[str, str], runner: gpu.Runner = gpu.run_nvidia_smi
) -> list[gpu.Gpu]:
    allow = environ.get(gpu.ARCH_OVERRIDE_ENV) == "1"
    return gpu.check_gpus(tp_of(launch), launch.target.compute_capability, runner, allow)


def shm_floor(environ: Mapping[str, str]) -> int:
    text = environ.get("DDTREE_MIN_SHM_GIB")
    if not text:
        return gpu.DEFAULT_MIN_SHM_BYTES
    gib = numbers.parse(text, "DDTREE_MIN_SHM_GIB", SHM_GIB, "the /dev/shm floor in GiB (default 1)")
    return int(gib * (1 << 30))


def check_port(launch: Launch) -> tuple[int, str]:
    bounds, fix = CHECKED_NUMBERS["--port"]
    port = int(numbers.parse(launch.value("--port") or "30000", "--port", bounds, fix))
    host = launch.value("--host") or "0.0.0.0"
    gpu.check_port(port, host)
    return port, host
