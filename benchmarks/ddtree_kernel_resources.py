"""Registers, spill stack and shared memory of each DDTree Triton kernel variant, compiled here without a GPU.

    python benchmarks/ddtree_kernel_resources.py [--arch 90] [--budget 8] [--filter sample|radix|residual]

Why: occupancy decides the sampling kernels' speed as much as bytes do (a kernel of 140+ registers at 8 warps
runs one block per SM; a register tile sized by the budget spilled 13 KiB a thread at budget 32), and both
show in the cubin before any device time is spent. The variants are the ones the launchers really specialise:
the compile test's recording run (tests/unit/test_ddtree_kernels.py COMPILE: Triton's own JIT binder, the
worker's dtypes and sampling variants) at the given budget, then Triton's compiler and its bundled cuobjdump.
Needs the CPU sglang environment the unit tests build (`.cache/sglang-cpu`, made by the first kernel test).
Prints one line per variant: name[constexprs] warps REG STACK SHARED (static) dynshared (bytes).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.sglang_sources import write_package
from tests.unit.test_ddtree_kernels import COMPILE, KERNELS

REPORT = r"""
import re
from triton.backends.nvidia import compiler as nvidia_compiler
cuobjdump = os.path.join(os.path.dirname(nvidia_compiler.__file__), "bin", "cuobjdump")
arch, wanted = int(sys.argv[1]), sys.argv[2]
for (name, *_), (fn, spec) in sorted(recorded.items(), key=lambda item: str(item[0])):
    if wanted not in name:
        continue
    constants = ",".join(f"{fn.arg_names[path[0]]}={value}" for path, value in spec["constants"].items())
    source = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constants"],
                       attrs=spec["configs"][0])
    options = {"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]}
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        dump = subprocess.run([cuobjdump, "--dump-resource-usage", cubin.name], capture_output=True,
                              text=True, check=True).stdout
    usage = re.search(r"REG:\d+ STACK:\d+ SHARED:\d+", dump)
    print(f"{name}[{constants}] warps={spec['num_warps']} {usage.group(0) if usage else '?'} "
          f"dynshared={compiled.metadata.shared}", flush=True)
"""


def report_script(budget: int) -> str:
    """COMPILE's recording part at `budget`, then the resource report instead of its compile loop."""
    head, separator, _ = COMPILE.partition('result = {"variants": {}, "failed": {}}')
    shape = "bs, budget, topk, depth, vocab = 2, 8, 4, 7, 163840"
    if not separator or shape not in head:
        raise SystemExit("error: tests/unit/test_ddtree_kernels.py COMPILE changed shape; update this script")
    head = head.replace(shape, f"bs, budget, topk, depth, vocab = 2, {budget}, 4, 7, 163840")
    return "import subprocess, tempfile\n" + head + REPORT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="sm_XY as XY (H200: 90)")
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--filter", default="", help="only kernels whose name contains this")
    args = parser.parse_args()
    cache = Path(__file__).resolve().parent.parent / ".cache" / "sglang-cpu"
    deps = sorted(cache.glob("deps-*"))
    patched = sorted(cache.glob("patched-*"), key=lambda path: path.stat().st_mtime)
    if not deps or not patched:
        print(
            f"error: no CPU sglang environment under {cache}; run a kernel unit test first", file=sys.stderr
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        package = write_package(Path(tmp) / "ddt", str(Path(KERNELS).parent))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(package.parent), str(patched[-1]), str(deps[-1])]),
        }
        env.pop("TRITON_INTERPRET", None)
        done = subprocess.run(
            [sys.executable, "-c", report_script(args.budget), str(args.arch), args.filter],
            env=env, cwd=package.parent, text=True, capture_output=True,
        )  # fmt: skip
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
