"""What users and tools put before the lines of a pasted log is taken off before it is read, wherever the reader
looks (the exception line, the frames below a traceback's header, the lines around them): a Markdown quote
("> ", a paste quoted in a reply), terminal colour codes with or without their escape byte, Ray's worker prefix
(verl, OpenRLHF, LLaMA-Factory under USE_RAY=1). Issue #25: a quoted or coloured paste of a traceback cut before
its exception lost what its frames say (15 of the 120 right real-thread pastes turned wrong when quoted, 5 when indented; a start-up hang was missed
behind a closing fence or a blank line pdsh labels)."""

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
])
def test_quote_colour_and_ray_prefixes_are_taken_off(line, text, host):
    got, pre = strip_prefixes(line)
    assert got == text
    assert pre.host == host


@pytest.mark.parametrize("line", [
    "loss went from 0.8 -> 1.2 (pid=4410) at step 3",     # a pid inside the text is no prefix
    "(base) user@host:~$ llamafactory-cli train x.yaml",   # a conda prompt is no Ray prefix
    "[5m] elapsed, loss 0.31",                             # a bracket with "m" and no reset code stays
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
    # pdsh's host label (DeepSpeed's multi-node runner), a blank line of the remote process labelled too
    "pdsh": lambda s: "\n".join("gpu-node-2: " + ln for ln in s.split("\n")),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_right_paste_stays_right_in_another_form(form):
    rt, plain = _right_pastes()
    assert len(plain) >= 100
    turned = [(c["id"], j["first"]) for c in plain
              if not (j := rt.judge_case({**c, "log": FORMS[form](c["log"])}))["right"]]
    assert turned == []
