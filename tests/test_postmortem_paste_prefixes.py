"""A paste is read the same whatever form it reached the doctor in: what users and tools put before its lines is taken
off wherever the reader looks (the exception line, the frames below a traceback's header, the lines around them): a
Markdown quote ("> ", a paste quoted in a reply), terminal colour codes with or without their escape byte, Ray's
worker prefix (verl, OpenRLHF, LLaMA-Factory under USE_RAY=1), pdsh's host label, Docker Compose's service label,
Open MPI's output tag; a paste shifted right as a whole (an indented code block) is read at CPython's columns; a
closing Markdown fence is no output of the run; lines a terminal broke at its width are joined back. Issue #25: of
the 120 right dev pastes of the real threads, 15 turned wrong when quoted, coloured, Ray-, Compose- or MPI-prefixed,
5 when indented, 1 (a start-up hang) when fenced or pdsh-labelled, 16 when wrapped at 120 columns and 39 at 80."""

from __future__ import annotations

import functools
import importlib.util
import os
import re

import pytest

from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes
from pmhelp import diagnose

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("line, text, host", [
    ("> [rank0]: RuntimeError: CUDA error: out of memory", "RuntimeError: CUDA error: out of memory", None),
    ("> > Traceback (most recent call last):", "Traceback (most recent call last):", None),
    (">  File \"/opt/x.py\", line 3, in f", " File \"/opt/x.py\", line 3, in f", None),
    ("\x1b[36m(WorkerDict pid=26103)\x1b[0m Qwen3ForCausalLM contains 4.02B parameters",
     "Qwen3ForCausalLM contains 4.02B parameters", None),
    ("[36m(TaskRunner pid=980072)[0m step:3 - actor/pg_loss:-0.012", "step:3 - actor/pg_loss:-0.012", None),
    ("(RayTrainWorker pid=1790, ip=10.0.3.17) [rank2]: ValueError: x", "ValueError: x", "10.0.3.17"),
    ("(pid=4410) Loading checkpoint shards: 100%", "Loading checkpoint shards: 100%", None),
    ("\x1b[32m2024-11-23 00:52:57.664\x1b[0m | \x1b[1mINFO\x1b[0m | train", "| INFO | train", None),
    ("gpu-node-2: ", "", "gpu-node-2"),
    ("trainer-1  | Traceback (most recent call last):", "Traceback (most recent call last):", None),
    ("trainer_1        |   File \"/app/train.py\", line 9", "  File \"/app/train.py\", line 9", None),
    ("trainer-1  |", "", None),
    ("[1,3]<stderr>:RuntimeError: NCCL error", "RuntimeError: NCCL error", None),
])
def test_quote_colour_and_ray_prefixes_are_taken_off(line, text, host):
    got, pre = strip_prefixes(line)
    assert got == text
    assert pre.host == host


def test_the_mpi_tag_names_the_rank():
    assert strip_prefixes("[1,3]<stderr>:  File \"x.py\", line 1, in f")[1].rank == 3


@pytest.mark.parametrize("line", [
    "loss went from 0.8 -> 1.2 (pid=4410) at step 3",     # a pid inside the text is no prefix
    "(base) user@host:~$ llamafactory-cli train x.yaml",   # a conda prompt is no Ray prefix
    "[5m] elapsed, loss 0.31",                             # a bracket with "m" and no reset code stays
    "| step | loss |",                                      # a Markdown table row is no Compose label
    "  0%|          | 0/1891 [00:00<?, ?it/s]",             # nor a progress bar
])
def test_text_that_only_looks_like_a_prefix_stays(line):
    assert strip_prefixes(line)[0] == line


def test_a_ray_worker_traceback_in_lost_colour_codes_names_the_frames(tmp_path):
    f = diagnose(tmp_path, "paste_shapes/ray_colour_cut_traceback.log")[0]
    assert f.name == "run-crashed"
    assert "ended in the model load" in f.message
    assert "from_pretrained (tokenization_auto.py, transformers)" in f.message


@functools.lru_cache(maxsize=1)
def _right_pastes():
    spec = importlib.util.spec_from_file_location("real_threads", os.path.join(ROOT, "benchmarks", "real_threads.py"))
    assert spec and spec.loader
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    # the pastes of a run's output among the dev cases: a traceback, a frame, a clock or a progress bar
    cases = [c for c in rt.load_cases() if c["split"] == "dev" and c["log"].count("\n") >= 3 and (
        "Traceback" in c["log"] or 'File "' in c["log"] or "it/s" in c["log"]
        or re.search(r"\d\d:\d\d:\d\d", c["log"]))]
    return rt, [c for c in cases if rt.judge_case(c)["right"]]


FORMS = {
    "quoted": lambda s: "\n".join("> " + ln for ln in s.split("\n")),
    "ray-colour": lambda s: "\n".join("[36m(WorkerDict pid=2642052)[0m " + ln for ln in s.split("\n")),
    "ansi": lambda s: "\n".join("\x1b[31m" + ln + "\x1b[0m" for ln in s.split("\n")),
    # a Markdown indented code block (or a paste inside a list item): every line shifted by four blanks
    "indented": lambda s: "\n".join("    " + ln for ln in s.split("\n")),
    # copied with its Markdown fences: the log's last line is the closing fence, not the run's output
    "fenced": lambda s: "```text\n" + s + "\n```\n",
    # inside a collapsed block of a GitHub issue
    "details": lambda s: "<details>\n<summary>Error log</summary>\n\n" + s + "\n</details>\n",
    # pdsh's host label (DeepSpeed's multi-node runner), a blank line of the remote process labelled too
    "pdsh": lambda s: "\n".join("gpu-node-2: " + ln for ln in s.split("\n")),
    # `docker compose up`'s service label; `mpirun --tag-output`'s job and rank tag
    "compose": lambda s: "\n".join("trainer-1  | " + ln for ln in s.split("\n")),
    "mpi": lambda s: "\n".join("[1,0]<stderr>:" + ln for ln in s.split("\n")),
}


@pytest.mark.slow   # every right dev paste, re-read in each form
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_right_paste_stays_right_in_another_form(form):
    rt, plain = _right_pastes()
    assert len(plain) >= 100
    turned = [(c["id"], j["first"]) for c in plain
              if not (j := rt.judge_case({**c, "log": FORMS[form](c["log"])}))["right"]]
    assert turned == []


def test_a_paste_a_terminal_wrapped_keeps_the_figures_of_its_oom_line(tmp_path):
    f = diagnose(tmp_path, "paste_shapes/terminal_wrapped_oom.log")[0]
    assert f.name == "cuda-oom"
    assert "tried to allocate 1.95 GiB on GPU 1 (1.02 GiB free of 39.38 GiB, 35.61 GiB allocated by PyTorch)" \
        in f.message
    # the finding points at the line the user sees the OOM start on: the joined-in lines were left empty
    with open(os.path.join(ROOT, "fixtures", "postmortem", "paste_shapes", "terminal_wrapped_oom.log")) as fh:
        first = next(k for k, ln in enumerate(fh, 1) if "torch.OutOfMemoryError" in ln)
    assert f.location.line == first == 47


def _wrapped(s: str, width: int) -> str:
    out = []
    for ln in s.split("\n"):
        while len(ln) > width:
            out, ln = out + [ln[:width]], ln[width:]
        out.append(ln)
    return "\n".join(out)


def test_unwrap_joins_only_what_a_terminal_broke():
    from finetune_doctor.readers.runlogs.unwrap import unwrap

    long = "RuntimeError: CUDA error: an illegal memory access was encountered while running the kernel named x" * 3
    text = "step 1\n" + _wrapped(long, 80) + "\nstep 2\n"
    got = unwrap(text.encode())
    assert got is not None
    lines = got.decode().split("\n")
    assert len(lines) == len(text.split("\n"))            # the line count is kept
    assert lines[1] == long and lines[2:4] == ["", ""]   # joined into its first line, the rest left empty
    # no break inside a word at the longest length: lines a program ended itself
    plain = "\n".join(["x" * 79 + " ", "next line", "y" * 79 + " ", "another"])
    assert unwrap(plain.encode()) is None
    # the same warning from several ranks, each line as long as the longest
    warn = "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly"
    same = "\n".join([warn] * 4)
    assert unwrap(same.encode()) is None
    assert unwrap(b"short\nlines\n") is None
    # two metric lines of one fixed format, equally long, the second starting with its date: each a line of its own
    metric = ("2024/03/11 10:02:{s} - mmengine - INFO - Epoch(train)  [2][{i}/7330]  lr: 2.0000e-02  time: 0.5271"
              "  loss: 1.2043")
    assert unwrap("\n".join([metric.format(s=13, i=" 50"), metric.format(s=40, i=100), "end"]).encode()) is None


# the right dev pastes a terminal's wrap still turns wrong: each has a single line longer than the width, too little
# for unwrap to tell a wrap from a line a program ended (a bar glued to a traceback's header, one long exception)
WRAP_LEFT = {80: {"alpaca202", "simpletuner2353", "onlinerlhf11", "lf2460", "accel2761", "nemo13643", "lf4962"},
             120: {"qwen434", "lf360", "autotrain456", "trl4782", "lf7920", "llava291"}}


@pytest.mark.slow
@pytest.mark.parametrize("width", sorted(WRAP_LEFT))
def test_a_right_paste_stays_right_when_a_terminal_wrapped_it(width):
    rt, plain = _right_pastes()
    turned = {c["id"] for c in plain if not rt.judge_case({**c, "log": _wrapped(c["log"], width)})["right"]}
    assert turned <= WRAP_LEFT[width]


def test_fixed_width_lines_a_program_ended_are_not_joined(tmp_path):
    # darknet's step lines are all 103 characters and end in a word, the next lines start with a capital
    # ("Loaded: ...", "CUDA Error: ..."): joined, the CUDA error took the step line's "1997: " for a Slurm task id
    # (rank 1997, world size 1998) and the line above for its own
    from finetune_doctor.readers.runlogs.unwrap import unwrap

    with open(os.path.join(ROOT, "fixtures", "postmortem", "other_stacks", "cuda_darknet.log"), "rb") as fh:
        assert unwrap(fh.read()) is None
    f = diagnose(tmp_path, "other_stacks/cuda_darknet.log")[0]
    assert f.name == "cuda-error" and f.location.line == 5 and "rank" not in f.message
