"""Signatures are found in code, never in comments or docstrings; a file that does not compile fails."""

from __future__ import annotations

import pytest
from ddtree.patchset.signatures import check_file

SOURCE = b'''"""Module docstring mentions only_in_docstring."""
import torch.nn.functional
from sglang.srt.speculative import ddtree_utils as du

# only_in_comment = 1
FLAG = "--speculative-ddtree-budget"


class CudaGraphRunner:
    def capture(self, ddtree_budget):
        self.tree_mask = du.tree_attention_mask(ddtree_budget)
        return run(graph=self.tree_mask, verify_mode="greedy")

    def replay(self):
        return self.model_runner.graph_pool.replay_ddtree()
'''


@pytest.mark.parametrize(
    "signature",
    [
        "CudaGraphRunner",  # class
        "capture",  # method
        "ddtree_budget",  # argument
        "tree_mask",  # attribute store
        "tree_attention_mask",  # attribute load
        "du",  # import alias
        "ddtree_utils",  # imported name
        "graph",  # keyword argument
        "FLAG",  # global
        "CudaGraphRunner.capture",  # qualified definition
        "graph_pool.replay_ddtree",  # attribute chain tail
        "torch.nn.functional",  # imported module path
        "--speculative-ddtree-budget",  # string literal
    ],
)
def test_found(signature: str) -> None:
    assert check_file("sglang/x.py", SOURCE, [signature]) == []


@pytest.mark.parametrize(
    "signature",
    [
        "only_in_comment",
        "only_in_docstring",
        "CudaGraphRunner.nope",
        "runner.capture",
        "--not-there",
        "greedy_x",
    ],
)
def test_not_found(signature: str) -> None:
    problems = check_file("sglang/x.py", SOURCE, [signature])
    assert problems == [f"sglang/x.py: signature(s) not found in the code: {signature}"]


def test_syntax_error_names_the_line() -> None:
    assert check_file("sglang/x.py", b"x = 1\ndef f(:\n", []) == [
        "sglang/x.py does not parse: line 2: invalid syntax"
    ]


def test_text_files_match_whole_words_outside_comments() -> None:
    data = b"# ddtree_kernel in a comment\n__global__ void ddtree_kernel_v2() {}\n"
    data += b"// ddtree_mask\nint ddtree_mask2;\n"
    assert check_file("csrc/x.cu", data, ["ddtree_kernel_v2"]) == []
    assert check_file("csrc/x.cu", data, ["ddtree_kernel", "ddtree_mask"]) == [
        "csrc/x.cu: signature(s) not found in the code: ddtree_kernel, ddtree_mask"
    ]
