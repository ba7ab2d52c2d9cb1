"""One process over several GPUs (torch DataParallel), read from HF Trainer's own start-of-training line (issue #25,
dev kind of LlamaFactory#4213; analyzers/postmortem/dpcause.py, rule launched-as-data-parallel).

Line formats: HF Trainer's banner through LLaMA-Factory's logger prefix "[INFO|trainer.py:L] date >> " (transformers
trainer.py ``_inner_training_loop``: "  Instantaneous batch size per device = b", "  Training with DataParallel so
batch size has been adjusted to: B", as LlamaFactory#4213's paste shows it at trainer.py:2081/2083), tqdm's bar, and
torch >= 2.1's CUDA OOM message (c10/cuda/CUDACachingAllocator.cpp) raised on GPU 0.
"""

from __future__ import annotations

from pmhelp import diagnose_dir

BANNER = """\
[INFO|trainer.py:641] 2024-06-12 09:30:11,402 >> Using auto half precision backend
[INFO|trainer.py:2078] 2024-06-12 09:30:11,689 >> ***** Running training *****
[INFO|trainer.py:2079] 2024-06-12 09:30:11,689 >>   Num examples = 3,120
[INFO|trainer.py:2080] 2024-06-12 09:30:11,689 >>   Num Epochs = 3
[INFO|trainer.py:2081] 2024-06-12 09:30:11,689 >>   Instantaneous batch size per device = {mb}
[INFO|trainer.py:2083] 2024-06-12 09:30:11,689 >>   Training with DataParallel so batch size has been adjusted to: {b}
[INFO|trainer.py:2084] 2024-06-12 09:30:11,689 >>   Total train batch size (w. parallel, distributed & accumulation) = {t}
[INFO|trainer.py:2085] 2024-06-12 09:30:11,689 >>   Gradient Accumulation steps = 8
"""
OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of "
       "23.69 GiB of which 402.06 MiB is free. Process 41872 has 23.28 GiB memory in use. Of the allocated memory "
       "21.94 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated. If reserved but "
       "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
       "fragmentation.  See documentation for Memory Management  "
       "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def run(tmp_path, text: str):
    (tmp_path / "train.log").write_text(text, encoding="utf-8")
    return diagnose_dir(str(tmp_path))


def test_a_banner_that_stops_before_the_first_step_names_the_launch(tmp_path):
    r = run(tmp_path, BANNER.format(mb=1, b=4, t=32))
    f = r.findings[0]
    assert f.name == "launched-as-data-parallel" and f.severity == "warning"
    assert f.message.startswith("The run was one process over 4 GPUs (torch DataParallel)")
    assert "train.log:6)" in f.message and f.location.line == 6
    assert "FORCE_TORCHRUN=1" in f.message


def test_an_oom_on_gpu0_under_data_parallel_keeps_the_oom_first_and_names_the_launch_next(tmp_path):
    bar = "".join(f"  {s * 100 // 147:2d}%|▏         | {s}/147 [00:{s * 9:02d}<21:00, 9.00s/it]\n" for s in (1, 2, 3))
    r = run(tmp_path, BANNER.format(mb=2, b=8, t=64) + bar + "Traceback (most recent call last):\n" + OOM + "\n")
    names = [f.name for f in r.findings]
    assert names[0] == "cuda-oom" and "launched-as-data-parallel" in names
    dp = next(f for f in r.findings if f.name == "launched-as-data-parallel")
    assert "one process over 4 GPUs" in dp.message and "GPU 0 runs out of memory first" in dp.message


def test_a_batch_that_does_not_divide_says_several_gpus(tmp_path):
    f = run(tmp_path, BANNER.format(mb=3, b=8, t=64)).findings[0]
    assert f.name == "launched-as-data-parallel" and "one process over several GPUs" in f.message


def test_one_process_per_gpu_is_not_flagged(tmp_path):
    text = "".join(x + "\n" for x in BANNER.format(mb=2, b=8, t=64).splitlines() if "DataParallel" not in x)
    assert "launched-as-data-parallel" not in [f.name for f in run(tmp_path, text).findings]
