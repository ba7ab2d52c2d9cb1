"""An OOM message cut inside its first words (issue #25: "an OOM message cut mid-word"): torch's allocator class
(torch.OutOfMemoryError, torch.cuda.OutOfMemoryError before torch 2.5; c10/cuda/CUDACachingAllocator.cpp) with
"CUDA out of mem" still names a CUDA OOM (readers/runlogs/logfailures.py `_CUT_CLASS`). Pastes written for this
test in torch 2.1-2.13's line shapes; none is a case of fixtures/postmortem/real_threads."""

from __future__ import annotations

import pytest
from pmhelp import first_of_text

CUT_OLD = """\
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/functional.py", line 2233, in embedding
    return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
torch.cuda.OutOfMemoryError: CUDA out of mem"""

CUT_RANK = """\
[rank5]:   File "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py", line 1101, in unpack_hook
[rank5]:     frame.recompute_fn(*args)
[rank5]: torch.OutOfMemoryError: CUDA"""


@pytest.mark.parametrize("paste", [CUT_OLD, CUT_RANK])
def test_the_allocator_class_with_a_cut_message_is_a_cuda_oom(tmp_path, paste):
    f = first_of_text(tmp_path, paste)
    assert f.name == "cuda-oom"
    assert f.message.startswith("CUDA out of memory")


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: XPU out of",   # Intel's allocator: another device's words
    "torch.OutOfMemoryError: CUDAGraph capture failed",   # not a prefix of the OOM message
])
def test_other_messages_of_the_class_are_not_read_as_a_cut_cuda_oom(tmp_path, line):
    assert first_of_text(tmp_path, line).name != "cuda-oom"
