"""Tracebacks cut inside a frame whose job names the likely kinds (issue #25: "cut tracebacks ending inside a frame:
what the last frames say"; analyzers/postmortem/framecause.py): a torch.distributed collective, flash-attention's
compiled kernel, safetensors' save_file. Pastes written for this test in the line shapes torch 2.1-2.13,
DeepSpeed, flash-attn 2.x and safetensors print (``[rankN]:`` prefixes as torchrun adds them); none is a case of
fixtures/postmortem/real_threads."""

from __future__ import annotations

import pytest
from pmhelp import first_of_text

IN_ALL_REDUCE = """\
[rank2]: Traceback (most recent call last):
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1128, in average_tensor
[rank2]:     dist.all_reduce(grad_bucket, group=process_group)
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper
[rank2]:     return func(*args, **kwargs)
[rank2]:   File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce
[rank2]:     work = group.allreduce([tensor], opts)"""

IN_FLASH_BWD = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/flash_attn/flash_attn_interface.py", line 901, in backward
    _flash_attn_varlen_backward(
  File "/usr/local/lib/python3.10/dist-packages/flash_attn/flash_attn_interface.py", line 157, in _flash_attn_varlen_backward
    dq, dk, dv, softmax_d, = flash_attn_cuda.varlen_bwd("""

IN_SAVE_FILE = """\
  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 3035, in _save_checkpoint
    self.save_model(output_dir, _internal_call=True)
  File "/usr/local/lib/python3.10/dist-packages/safetensors/torch.py", line 286, in save_file
    serialize_file(_flatten(tensors), filename, metadata=metadata)"""


@pytest.mark.parametrize("paste, said", [
    (IN_ALL_REDUCE, "the paste is cut inside a collective of torch.distributed"),
    (IN_FLASH_BWD, "the paste is cut inside flash-attention's compiled kernel"),
    (IN_SAVE_FILE, "the paste is cut inside a checkpoint write"),
])
def test_the_innermost_frame_s_job_leads(tmp_path, paste, said):
    f = first_of_text(tmp_path, paste)
    assert f.name == "run-crashed"
    assert said in f.message
    assert "whose exception line is not in the log" in f.message   # still no exception claimed


def test_a_collective_frame_outside_torch_distributed_is_not_a_lead(tmp_path):
    paste = ('  File "/w/myproj/metrics.py", line 12, in all_reduce\n'
             "    total = sum(values)")
    assert "collective of torch.distributed" not in first_of_text(tmp_path, paste).message
