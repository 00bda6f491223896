"""tests/gpu/ddtree_step_checks.py reading torch's sync-debug warnings from a server log (no GPU)."""

from __future__ import annotations

from tests.gpu.ddtree_step_checks import sync_sites

LOG = """\
[2026-12-01 07:00:01] Decode batch, #running-req: 1
/tmp/site/sglang/srt/speculative/ddtree_info.py:160: UserWarning: called a synchronizing CUDA operation \
(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:178.)
  packed = torch.cat([emitted, accept_len.view(bs, 1).to(emitted.dtype)], dim=1).cpu()
/tmp/site/sglang/srt/speculative/dflash_worker.py:601: UserWarning: called a synchronizing CUDA operation \
(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:178.)
  seq_lens_cpu.copy_(draft_prefix_lens.to(device="cpu", dtype=torch.int32))
/tmp/site/sglang/srt/other.py:3: UserWarning: something else
  x = 1
"""


def test_each_synchronising_site_is_listed_once_with_its_source_line() -> None:
    sites = sync_sites(LOG + LOG)
    assert sorted(sites) == [
        "/tmp/site/sglang/srt/speculative/ddtree_info.py:160",
        "/tmp/site/sglang/srt/speculative/dflash_worker.py:601",
    ]
    assert sites["/tmp/site/sglang/srt/speculative/ddtree_info.py:160"].endswith(
        "[packed = torch.cat([emitted, accept_len.view(bs, 1).to(emitted.dtype)], dim=1).cpu()]"
    )


def test_a_log_without_warnings_has_no_sites() -> None:
    assert sync_sites("[2026-12-01] Decode batch\n") == {}
