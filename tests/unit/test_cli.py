"""Both CLIs start and report their version; ddtree-build starts without its heavy dependencies."""

import os
import signal
import subprocess
import sys

import pytest


def test_ddtree_version() -> None:
    out = subprocess.run([sys.executable, "-m", "ddtree.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("ddtree "), out


def test_ddtree_build_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ddtree_build.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("ddtree-build "), out


def test_ddtree_build_start_leaves_heavy_modules_unloaded() -> None:
    """`--help`/`--version` import every command module; these stay out until a command needs them
    (together they were ~80 ms of a ~380 ms start). A module-level import of one of them fails here."""
    heavy = ("docker", "jinja2", "ssl", "urllib.request", "packaging.markers", "packaging.requirements",
             "ddtree.patchset", "ddtree_build.patching.check", "ddtree_build.patching.edit")  # fmt: skip
    probe = (
        "import sys\nimport ddtree_build.cli as cli\ncli.build_parser()\n"
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [], f"imported at start: {out.stdout.strip()}"


SLOW_IMPORT = '''\
"""Test stand-in (tests/unit/test_cli.py): make one command module's import slow, so that Ctrl-C lands
in the CLI's start-up (building the parser imports every command module) and not in the command."""
import sys, time


class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name == SLOW:
            print("SLOW-IMPORT", file=sys.stderr, flush=True)
            time.sleep(30)
        return None


SLOW = "%s"
sys.meta_path.insert(0, _Slow())
'''


@pytest.mark.parametrize(
    ("module", "prog", "slow", "argv"),
    [
        ("ddtree_build.cli", "ddtree-build", "ddtree_build.render", ["lock", "--check"]),
        ("ddtree.cli", "ddtree", "ddtree.bench.cmd", ["serve", "--dry-run"]),
    ],
)
def test_ctrl_c_during_start_up_is_one_line(tmp_path, module, prog, slow, argv) -> None:
    """A real SIGINT while the CLI is still importing its commands: `PROG: interrupted`, exit 130, no
    traceback (a stand-in sitecustomize holds one import for 30 s so the signal lands there)."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT % slow)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *argv],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # A runner started in the background (nohup, `&` without job control) ignores SIGINT, the child would
        # inherit that and Python would then install no handler: the CLI's own SIGINT path is what is tested.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "SLOW-IMPORT"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert err == f"{prog}: interrupted\n" and out == ""
