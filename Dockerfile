# Kimi K2.6 on SGLang 0.5.13.post1 with DFlash + DDTree: image for target pro6000 on the nvidia base.
# Rendered from build/ddtree_build/templates/Dockerfile.j2 by
#   ddtree-build render --target pro6000 --base nvidia
# Do not edit by hand: change the template or env/, then `make render` (`make render-check` fails when stale).
# Build with BuildKit (RUN --mount): `make image`, or DOCKER_BUILDKIT=1 docker build --secret id=ca,src=CA_FILE .
# No `# syntax=` line on purpose: it makes BuildKit pull its frontend from Docker Hub; the built-in one suffices.

# ---------------------------------------------------------------------------------------------------------------
# Build arguments (each one line; `ddtree-build image` passes the per-commit ones)
# ---------------------------------------------------------------------------------------------------------------
# Base image repository and tag (env/system.yaml): NVIDIA's CUDA devel image, with nvcc for flashinfer's JIT.
ARG BASE_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04
# Content digest of the base; env/system.yaml has none yet, so this build follows the tag (set it to pin).
ARG BASE_DIGEST=
# Hash-locked requirements for this base's Python 3.12 (written only by `ddtree-build lock`).
ARG LOCK_FILE=env/requirements-py312.lock
# 1 runs `pip check` after the install (the full lock must be complete); a subset lock (CI) passes 0.
ARG PIP_CHECK=1
# 1 installs the router (env/router.lock) for the compose `router` profile and deploy/k8s; a subset lock (CI) passes 0.
ARG INSTALL_ROUTER=1
# Commit time in seconds since the epoch; the created label is derived from it, never from the clock.
ARG SOURCE_DATE_EPOCH=0
# RFC 3339 form of SOURCE_DATE_EPOCH for the org.opencontainers.image.created label.
ARG IMAGE_CREATED=1970-01-01T00:00:00Z
# Git commit the image was built from (with -dirty when the work tree had changes).
ARG VCS_REF=unknown
# Version of the ddtree tooling (git describe).
ARG IMAGE_VERSION=0.1.0
# sha256 of env/freeze.txt, the captured environment this image reproduces.
ARG FREEZE_SHA256=unknown
# Digest of the patch series (patches/series.yaml and its diffs) as the patch engine computes it.
ARG PATCHES_SHA256=unknown
# Whole-tree digest of the patches stage (`ddtree-build image` reads it from a first build of that stage);
# unknown = take it from /opt/ddtree/tree-identity.json, which the build writes either way.
ARG TREE_SHA256=unknown

# ===============================================================================================================
# Stage 1/4: base - CUDA 13.0.88 devel user space and Python 3.12 with a C/C++ toolchain
# ===============================================================================================================
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Python headers, gcc and g++ are needed at run time: Triton and flashinfer compile on the GPU host.
# DL3008 (pin apt versions) is ignored: the base is pinned (digest or one debootstrap tree) and the archives drop
# superseded versions, so exact pins would break every build within weeks; the Python stack is hash-locked.
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
         ca-certificates \
         g++ \
         gcc \
         libc6-dev \
         libgomp1 \
         libnuma1 \
         python3 \
         python3-dev \
         python3-venv

# ===============================================================================================================
# Stage 2/4: deps - the hash-locked Python stack in /opt/venv; this layer changes only when the lock changes
# ===============================================================================================================
FROM base AS deps
ARG LOCK_FILE
ARG PIP_CHECK
# Only the lock is copied before the install, so edits anywhere else keep this (large) layer cached.
COPY ${LOCK_FILE} /opt/ddtree/requirements.lock
# Build secrets, mounted for this step only and never written to a layer: the host CA bundle (id=ca, for pip
# behind a TLS-inspecting proxy; without it pip uses its own bundle) and an optional HF token (id=hf_token,
# reserved for gated downloads; nothing reads it today). A test greps every layer and the history for both.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=hf_token \
    set -- ; \
    if [ -s /run/secrets/ca ]; then set -- --cert /run/secrets/ca; fi; \
    python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --disable-pip-version-check --no-input "$@" \
         --require-hashes --no-deps -r /opt/ddtree/requirements.lock \
    && if [ "${PIP_CHECK}" = 1 ]; then /opt/venv/bin/pip check --disable-pip-version-check; fi
# The router (sglang-router): one distribution more than the original host had, so it has its own small lock;
# its dependencies there are the freeze's versions, already installed above, so --no-deps adds only the router.
ARG INSTALL_ROUTER
COPY env/router.lock /opt/ddtree/router.lock
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=ca \
    set -- ; \
    if [ -s /run/secrets/ca ]; then set -- --cert /run/secrets/ca; fi; \
    if [ "${INSTALL_ROUTER}" = 1 ]; then \
      /opt/venv/bin/pip install --disable-pip-version-check --no-input "$@" \
        --require-hashes --no-deps -r /opt/ddtree/router.lock \
      && if [ "${PIP_CHECK}" = 1 ]; then /opt/venv/bin/pip check --disable-pip-version-check; fi; \
    fi
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv

# ===============================================================================================================
# Stage 3/4: patches - the ddtree runtime package, then the patch series applied and verified by its engine
# ===============================================================================================================
FROM deps AS patches
# The runtime package first: it carries the patch engine, and changes less often than the patches do.
COPY entrypoint/ddtree/ /opt/ddtree/lib/ddtree/
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && echo /opt/ddtree/lib > "${site}/ddtree.pth" \
    && printf '#!%s/bin/python\nimport sys\nfrom ddtree.cli import main\nsys.exit(main())\n' /opt/venv \
         > /opt/venv/bin/ddtree \
    && chmod 0755 /opt/venv/bin/ddtree \
    && python -c 'import ddtree.cli, ddtree.patchset'
COPY patches/ /opt/ddtree/patches/
# Apply strictly, then verify (parse, signatures, post-image hashes); any failure fails the build. The engine
# writes MANIFEST.sha256 and manifest.json to <site-packages>/.ddtree-patchset, where `ddtree selfcheck` looks.
# Neither step imports sglang or sgl_kernel (which needs a GPU driver), so this runs on a host without a GPU.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && python -m ddtree.patchset apply --root "${site}" --series /opt/ddtree/patches/series.yaml \
    && python -m ddtree.patchset verify --root "${site}" --series /opt/ddtree/patches/series.yaml \
    && ln -s "${site}/.ddtree-patchset" /opt/ddtree/patch-manifest
# Whole-tree identity: every installed file against its wheel's RECORD (patched ones against the manifest),
# and one digest over site-packages and the ddtree package; `ddtree selfcheck --offline --full` recomputes it.
RUN python -m ddtree.receipts.tree_identity write --out /opt/ddtree/tree-identity.json

# ===============================================================================================================
# Stage 4/4: runtime - the pro6000 profile, the entrypoint, labels last
# ===============================================================================================================
FROM patches AS runtime
COPY env/ /opt/ddtree/env/
# DDTREE_JIT_CACHE_DIR: `ddtree serve` keeps the JIT caches there, per image identity (compose mounts a volume).
ENV DDTREE_ENV_DIR=/opt/ddtree/env \
    DDTREE_IMAGE_TARGET=pro6000 \
    DDTREE_JIT_CACHE_DIR=/var/cache/ddtree-jit \
    DDTREE_TARGET=pro6000
# The pro6000 target's environment (env/targets/pro6000.yaml), sorted; `ddtree serve` applies the same.
ENV CUDA_DEVICE_ORDER=PCI_BUS_ID \
    NCCL_P2P_DISABLE=1 \
    SGLANG_ENABLE_JIT_DEEPGEMM=0 \
    TORCH_CUDA_ARCH_LIST=12.0
# The server runs as an unprivileged user: it needs no privilege, and a root process that is broken into owns
# the container. The NVIDIA runtime makes the GPU device nodes usable by any user, /dev/shm is world-writable,
# and the weights are mounted read-only and must be world-readable (Hugging Face downloads are: 0644 files,
# 0755 folders). HOME holds what SGLang, Triton and flashinfer's JIT cache; bench output lands in WORKDIR.
# Weights readable by root alone: fix their modes on the host, or run with `--user 0` (compose: user: "0").
# The JIT cache folder belongs to the user too: a fresh named volume mounted there takes its owner and mode.
RUN groupadd --gid 10001 ddtree \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/ddtree --shell /usr/sbin/nologin ddtree \
    && install -d -o 10001 -g 10001 -m 0755 /var/cache/ddtree-jit
ENV HOME=/home/ddtree
# CycloneDX SBOM (ddtree-build image writes it from the lock, the base, the patch series and env/weights.yaml;
# it names the image version, so this small layer changes per commit); `ddtree selfcheck --offline` summarises it.
COPY build-inputs/sbom.cdx.json /opt/ddtree/sbom.cdx.json
WORKDIR /home/ddtree
EXPOSE 30000
ENTRYPOINT ["ddtree", "serve"]

ARG SOURCE_DATE_EPOCH
ARG IMAGE_CREATED
ARG VCS_REF
ARG IMAGE_VERSION
ARG FREEZE_SHA256
ARG PATCHES_SHA256
ARG TREE_SHA256
ARG BASE_IMAGE
ARG BASE_DIGEST
# The same labels as JSON inside the image, for `ddtree selfcheck` (a container cannot read its own labels).
# This tiny layer, the SBOM copy and the LABEL below are the only ones that change from commit to commit. The
# tree digest is the one the patches stage wrote; a TREE_SHA256 given that differs from it fails the build.
RUN python -c 'import json, sys; a = sys.argv[1:]; d = dict(zip(a[::2], a[1::2])); k = "io.ddtree.tree.sha256"; \
        t = json.load(open("/opt/ddtree/tree-identity.json"))["digest"]; \
        sys.exit(f"TREE_SHA256 {d[k]} is not this tree ({t})") if d[k] not in ("unknown", t) else None; \
        d[k] = t; print(json.dumps(d, indent=2))' \
        "org.opencontainers.image.title" "ddtree-pro6000" \
        "org.opencontainers.image.description" "Kimi K2.6 on SGLang 0.5.13.post1 with DFlash + DDTree, target pro6000" \
        "org.opencontainers.image.created" "${IMAGE_CREATED}" \
        "org.opencontainers.image.revision" "${VCS_REF}" \
        "org.opencontainers.image.version" "${IMAGE_VERSION}" \
        "org.opencontainers.image.licenses" "Apache-2.0" \
        "org.opencontainers.image.base.name" "${BASE_IMAGE}" \
        "org.opencontainers.image.base.digest" "${BASE_DIGEST}" \
        "io.ddtree.source-date-epoch" "${SOURCE_DATE_EPOCH}" \
        "io.ddtree.freeze.sha256" "${FREEZE_SHA256}" \
        "io.ddtree.patches.sha256" "${PATCHES_SHA256}" \
        "io.ddtree.tree.sha256" "${TREE_SHA256}" \
        "io.ddtree.sglang.version" "0.5.13.post1" \
        "io.ddtree.python.version" "3.12" \
        "io.ddtree.cuda.version" "13.0.88" \
        "io.ddtree.base" "nvidia" \
        "io.ddtree.target" "pro6000" \
        > /opt/ddtree/image-labels.json
# From here on the unprivileged user `ddtree` (created above; numeric, so the host and Kubernetes see non-root).
USER 10001:10001
# Labels last: the per-commit values above invalidate nothing but this metadata.
LABEL org.opencontainers.image.title="ddtree-pro6000" \
      org.opencontainers.image.description="Kimi K2.6 on SGLang 0.5.13.post1 with DFlash + DDTree, target pro6000" \
      org.opencontainers.image.created="${IMAGE_CREATED}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.version="${IMAGE_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      io.ddtree.source-date-epoch="${SOURCE_DATE_EPOCH}" \
      io.ddtree.freeze.sha256="${FREEZE_SHA256}" \
      io.ddtree.patches.sha256="${PATCHES_SHA256}" \
      io.ddtree.tree.sha256="${TREE_SHA256}" \
      io.ddtree.sglang.version="0.5.13.post1" \
      io.ddtree.python.version="3.12" \
      io.ddtree.cuda.version="13.0.88" \
      io.ddtree.base="nvidia" \
      io.ddtree.target="pro6000"
