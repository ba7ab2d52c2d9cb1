r"""Blocks of a bug report that are neither the user's words nor a log: environment dumps, configs, data samples.

A report is often a title or a sentence followed by a long block that the issue template asks for: what
``llamafactory-cli env`` prints (LLaMA-Factory src/llamafactory/extras/env.py ``print_env``: ``- `llamafactory`
version: 0.9.1``), ``transformers env`` (``- `transformers` version: 4.46.1``), ``pip list`` / ``pip freeze`` /
``conda list`` rows, ``nvidia-smi``'s table (``|   0  NVIDIA A100 ...  On  |``, ``+-----+``), ``python -m
torch.utils.collect_env`` (torch/utils/collect_env.py ``env_info_fmt``: ``PyTorch version: 2.1.0``, ``Is debug
build: False``, ``[pip3] torch==2.1.0``), the training YAML (``model_name_or_path: ...``), a DeepSpeed JSON or a
dataset sample (``{"instruction": ...}``). None of these is a description of the failure, and their length made
the words of the title count as a log (userwords.MAX_LINES); so did a pasted launch command (``python -m x \``
continued over many ``--flag value`` lines). `blank_blocks` finds them by their line shapes only
(never by what a case says) and blanks them, so the words around them are read as words; the environment lines
are returned apart for their versions (readers/config/stack.py `pasted_versions`, the reader of ``--env``).

A line shaped like program output (userwords._LOG_LINE: a traceback frame, a logger prefix, a progress bar, a
metric dict) is never part of a block: a block holds no evidence of the run.
"""

from __future__ import annotations

import re

MIN_LINES = 3
"""A block is at least three such lines in a row (blank lines inside it allowed): one `key: value` line in a
sentence is words; a run of them is a paste. A chosen bound."""

# environment dumps
_ENV = re.compile(
    # print_env / transformers env bullets: their labels are versions, the platform and the devices (a user's own
    # "- Model: ..." / "- 现象: ..." bullets are words)
    r"^\s*(?:[-*]\s*`?[A-Za-z][\w .()/'`?-]{0,60}(?:version|Version|VERSION)[\w .()/'`?-]{0,20}\s*:\s*\S"
    r"|[-*]\s*(?:Platform|GPU type|GPU number|GPU memory|NPU type|CANN version|Git commit|Accelerate config|"
    r"Default data collator|Using (?:distributed|GPU)[^:]{0,60})\s*:\s*\S"
    r"|(?:\[(?:pip3?|conda)\]\s+)?[A-Za-z0-9_.\-]+\s*==\s*[0-9]"  # pip freeze, collect_env's [pip3] rows
    # pip list / conda list rows: a dotted version ("step 100 loss 0.0" typed by a user is no row)
    r"|(?:\[conda\]\s+)?[A-Za-z][A-Za-z0-9_.\-]*\s+[0-9]+\.[0-9A-Za-z.+\-]*(?:\s+\S+){0,2}\s*$"
    # lscpu's padded "Label:   value" lines, which collect_env prints under "CPU:"
    r"|[A-Za-z][\w .()/,-]{0,50}:\s{2,}\S"
    r"|Package\s+Version\b|-{3,}(?:\s+-{3,})+\s*$|#\s*(?:packages in environment|Name\s+Version)"
    r"|[|+](?:[-=+| ]|.*\|\s*$)"                               # nvidia-smi's table
    r"|(?:PyTorch version|Is debug build|CUDA used to build PyTorch|ROCM used to build PyTorch|OS|GCC version|"
    r"Clang version|CMake version|Libc version|Python version|Python platform|Is CUDA available|CUDA runtime version|"
    r"CUDA_MODULE_LOADING set to|GPU models and configuration|Nvidia driver version|cuDNN version|HIP runtime version|"
    r"MIOpen runtime version|Is XNNPACK available|Versions of relevant libraries|GPU \d+|CPU)\s*:"
    r"|Collecting environment information"
    r"|NVIDIA-SMI \d)")
# a YAML config (LLaMA-Factory's keys are lower-case snake case) and its comments and list items
_YAML = re.compile(r"^\s*(?:[a-z_][a-z0-9_.]*\s*:(?:\s+\S.*)?\s*$|#[^#].*$|#\s*$|#{2,3}\s*[a-z][a-z0-9_ ]{0,20}$|"
                   r"-\s+[\w./:-]+\s*$)")
# keys only a training config has: a run of `key: value` lines holding one of them is a config, not metrics said
_CONFIG_KEY = re.compile(r"^\s*(?:model_name_or_path|stage|finetuning_type|template|dataset|dataset_dir|cutoff_len|"
                         r"output_dir|per_device_train_batch_size|gradient_accumulation_steps|num_train_epochs|"
                         r"lora_target|lora_rank|deepspeed|do_train|lr_scheduler_type|preprocessing_num_workers|"
                         r"trust_remote_code|overwrite_output_dir|logging_steps|save_steps|report_to|max_samples|"
                         r"warmup_ratio|quantization_bit|flash_attn)\s*:")
# JSON: a DeepSpeed config or a dataset sample (double-quoted keys; HF's metric dicts are single-quoted)
_JSON = re.compile(r'^\s*(?:[\[{]\s*$|\{\s*"|\[\s*\{|"[^"]*"\s*:|[}\]]+,?\s*$)')
_FENCE = re.compile(r"^\s*(?:```|~~~)")
# lines of an issue template that are never the user's words: its section headings (LLaMA-Factory's and
# transformers' bug-report forms) and its checkboxes ("- [X] I have read the above rules ..."), and code fences
_TEMPLATE = re.compile(r"^\s*(?:(?:```|~~~)[\w-]*\s*$|-\s*\[[ xX]\]\s|#{2,6}\s*(?:Reminder|System Info|Reproduction|"
                       r"Expected behaviou?r|Others|Information|Tasks|Who can help\??|Environment|Your current environment|"
                       r"Describe the bug|To Reproduce|Steps to reproduce|Additional context|Logs?)\s*$)", re.I)
# a pasted shell command (ytrainer11's kind: "报OOM，参数如下：" above a `python -m ... \` launch): a line continued
# with a trailing backslash, or an indented `--flag value` line of such a command
_CMD = re.compile(r"\s\\\s*$|^\s+--[A-Za-z][\w.-]*(?:[= ]\S.*)?\s*$")
# an exception line or a log line is never part of a block
_NOT = re.compile(r"(?:Error|Exception|Warning|Traceback)\b|^\s*File \"|^\s*\[rank\d+\]|^\s*\{'")


def _kind(line: str) -> str | None:
    if _NOT.search(line):
        return None
    if _CMD.search(line):
        return "cmd"
    if _ENV.match(line):
        return "env"
    if _JSON.match(line):
        return "json"
    if _YAML.match(line):
        return "yaml"
    return None


def blank_blocks(text: str) -> tuple[str, str]:
    """(`text` with every block blanked, the environment blocks' lines) — the first keeps the line count, so a
    line number in it is one of `text`; the second keeps each environment line at its own line number (the
    other lines empty), for readers/config/stack.py `pasted_versions`. A run of at least `MIN_LINES` lines of
    these shapes is a block; a run of YAML-shaped lines only when one of them is a training config's key
    (`_CONFIG_KEY`), so "loss: 0 / grad_norm: 0 / learning_rate: 0" said in a report stays words. Markdown
    code fences, an issue template's section headings and checkboxes (`_TEMPLATE`) are blanked wherever they are."""
    lines = text.split("\n")
    kinds = [_kind(ln) for ln in lines]
    out = list(lines)
    env = [""] * len(lines)
    i = 0
    while i < len(lines):
        if kinds[i] is None:
            i += 1
            continue
        j = i
        while j + 1 < len(lines) and (kinds[j + 1] is not None or (not lines[j + 1].strip() and j + 2 < len(lines)
                                                                      and kinds[j + 2] is not None)):
            j += 1
        run = [k for k in range(i, j + 1) if kinds[k] is not None]
        yaml_only = all(kinds[k] == "yaml" for k in run)
        if len(run) >= MIN_LINES and (not yaml_only or any(_CONFIG_KEY.match(lines[k]) for k in run)):
            for k in range(i, j + 1):
                if kinds[k] == "env":
                    env[k] = lines[k]
                out[k] = ""
            for k in (i - 1, j + 1):   # the fence lines around it
                if 0 <= k < len(lines) and _FENCE.match(lines[k]):
                    out[k] = ""
        i = j + 1
    out = ["" if _TEMPLATE.match(ln) else ln for ln in out]
    return "\n".join(out), "\n".join(env)
