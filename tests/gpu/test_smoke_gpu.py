"""`ddtree selfcheck --smoke` on a real GPU (the device): baseline, DFLASH and DDTREE on tiny models.

Needs CUDA and the patched SGLang stack on the path (tests/gpu/device_ddtree.sh sets that up on the device);
skipped otherwise by the gpu tier's conftest, and here when SGLang does not import.
"""

from __future__ import annotations

import pytest
from ddtree.smoke import check as smoke


def test_smoke_passes_on_this_gpu(tmp_path) -> None:
    pytest.importorskip("sglang")
    pytest.importorskip("safetensors")
    problem = smoke.gpu_problem()
    if problem:
        pytest.skip(problem)
    assert smoke.run_smoke(smoke.settings_from_profile("pro6000"), keep=tmp_path) == smoke.EXIT_PASS
