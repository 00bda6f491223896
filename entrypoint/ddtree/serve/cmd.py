"""`ddtree serve`: the image's entrypoint. Check everything cheap, then become the SGLang server.

Order: pick the target profile baked into the image (DDTREE_TARGET), apply the environment overrides,
check the weights, the drafter, the GPUs, /dev/shm and the port, print the command one option per line
(secrets masked), then `os.execvp` the server. Any failure stops here, within seconds, with one line
naming the path or value and the fix; nothing has loaded 600 GB yet.

Environment overrides (all optional; the profile gives the defaults):
    DDTREE_TARGET          pro6000 | b300 | auto: which profile under env/targets/ (the image bakes its own;
                           auto picks the one that fits the GPUs, see ddtree.serve.profiles)
    DDTREE_JIT_CACHE_DIR   a persistent folder for the JIT caches, keyed by the image (see jit_cache.py)
    DDTREE_ENV_DIR         where env/ lives (image: /opt/ddtree/env; a checkout: the repo's env/)
    DDTREE_MODEL_DIR       --model-path (default /models/target)
    DDTREE_DRAFTER_DIR     --speculative-draft-model-path (default /models/drafter)
    DDTREE_HOST            --host
    DDTREE_PORT            --port
    DDTREE_TP              --tp (testing on fewer GPUs; the measured setup is TP 8)
    DDTREE_API_KEY         the server's API key (never on a command line: see "Secrets" below)
    DDTREE_API_KEY_FILE    a file holding it (a compose/Docker secret: then not in `docker inspect` either)
    DDTREE_EXTRA_ARGS      more server arguments, shell-quoted, appended before the ones after `--`
    DDTREE_SKIP_CHECKS     comma list of checks to skip: weights, drafter, gpu, shm, port, tree (the
                           whole-tree digest measured for /server_info in the image; see preflight.py)
    DDTREE_MIN_SHM_GIB     the /dev/shm floor (default 1)
    DDTREE_MODEL_TYPE      the config.json model_type the weights must have (default kimi_k25)
    DDTREE_ALLOW_ARCH_MISMATCH=1   run on a GPU architecture other than the target's
    DDTREE_ALLOW_UNLOCKED_WEIGHTS=1   run weights that differ from env/weights.yaml (said in the log)
    DDTREE_WEIGHTS_LOCK    another weights lock than $DDTREE_ENV_DIR/weights.yaml

A weights folder may be a plain folder or a Hugging Face cache repository (models--ORG--NAME, holding
refs/, snapshots/, blobs/): the server gets the snapshot of the locked revision (else refs/main).

Numbers are range-checked before anything starts: every value the checks read from the final command line
(port, TP, block size, ...), wherever it came from (profile, DDTREE_*, DDTREE_EXTRA_ARGS, after `--`, a
--config file), and DDTREE_MIN_SHM_GIB; TP must also divide the visible GPUs and the model's heads.

Secrets. A process's argv is public on the host (/proc/PID/cmdline, `ps`, `docker top`), so --api-key,
--admin-api-key and --ssl-keyfile-password never reach the server's command line, wherever they were given:
they are moved into a YAML that SGLang 0.5.13.post1 reads with `--config FILE` (server_args_config_parser;
config values come before the command line's, and no secret is left on it to override them). The YAML lives
only in memory: a memfd this process passes across exec, reached through a `server-config.yaml` link in a
private temporary folder (SGLang wants a .yaml name). DDTREE_API_KEY(_FILE) are removed from the server's
environment, and so are HF_TOKEN, HUGGING_FACE_HUB_TOKEN (the server loads local folders) and
DDTREE_EXTRA_ARGS (read into the command line, secrets into the config, so no copy stays behind). SGLang's
argparse takes abbreviations (`--api-ke`): an abbreviation of a secret option or of --config is refused,
and `--config=PATH` becomes `--config PATH` (SGLang merges the file only then). The patch
`secret-args-repr` keeps the secrets out of ServerArgs' repr (logged at start-up), /server_info,
the schedulers' internal states and the request dumps.

Arguments after `--` are appended last; SGLang's parser keeps the last value of a repeated option, so
they override the profile. The checks read the final command line, so an override is also what is checked.

PID 1 and signals. The image's ENTRYPOINT is the exec form (["ddtree", "serve"]), so no shell sits in
between, and this process replaces itself with the server (`os.execvp`): the server keeps our PID, and
`docker stop`'s SIGTERM reaches it directly. SGLang's tokenizer manager installs its own SIGTERM handler
(drain, then exit), which matters because a PID 1 without a handler ignores SIGTERM. What exec cannot
give is zombie reaping: SGLang spawns scheduler and detokenizer processes, and flashinfer's JIT spawns
compilers; an orphan re-parented to PID 1 is never waited for by SGLang. So the compose services should
set `init: true` (Docker's tini as PID 1: it forwards SIGTERM to us and reaps orphans); exec keeps the
signal path direct with or without it, and tini is the engine's, so the image needs no extra package.
"""

from __future__ import annotations

import argparse
import os
import sys

from ddtree import image_identity
from ddtree.serve import jit_cache
from ddtree.serve.launch import plan
from ddtree.serve.preflight import preflight
from ddtree.serve.secret_args import (
    SECRET_ENV,
    render_command,
    write_server_config,
)

EXIT_FAIL = 1


# Read into the command line above, so the server needs it no more than the key variables.
EXTRA_ARGS_ENV = "DDTREE_EXTRA_ARGS"


def run(args: argparse.Namespace) -> int:
    extra = list(args.server_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    launch = plan(os.environ, args.target, args.env_dir, extra)
    if args.dry_run:
        print(f"# ddtree serve --dry-run: target {launch.target.name} ({launch.target.path})")
        print(render_command(launch.command, launch.environment))
        return 0
    preflight(launch, os.environ)
    cache = jit_cache.prepare(os.environ)
    print(f"ddtree serve: target {launch.target.name}: launching")
    if cache is not None:
        print(f"# JIT caches in {cache} (this image's; kept across restarts)")
    if launch.unset:
        print(f"# unset (the image's own target's settings): {' '.join(launch.unset)}")
    print(render_command(launch.command, launch.environment))
    sys.stdout.flush()
    sys.stderr.flush()
    for name in launch.unset:
        os.environ.pop(name, None)
    command = launch.server_command(write_server_config(launch.user_config, launch.secrets))
    # Only the tree this process measured reaches the server's /server_info: an inherited value (an image
    # built FROM this one, with the tree check skipped) would name files that were not measured.
    os.environ.pop(image_identity.SERVED_TREE_ENV, None)
    os.environ.update(launch.environment)
    for name in (*SECRET_ENV, EXTRA_ARGS_ENV):  # consumed: the server and its workers do not inherit them
        os.environ.pop(name, None)  # (DDTREE_EXTRA_ARGS may hold a secret option, now in the config)
    os.execvp(command[0], command)
    return EXIT_FAIL  # not reached: exec replaces this process


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="check weights, GPUs, shm and port, then exec the SGLang server (the image's entrypoint)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--target", help="target profile (default: $DDTREE_TARGET)")
    parser.add_argument(
        "--env-dir", help="env/ folder (default: $DDTREE_ENV_DIR, /opt/ddtree/env, the checkout)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit 0; no checks")
    parser.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then extra SGLang arguments")
    parser.set_defaults(func=run)
