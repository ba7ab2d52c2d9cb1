"""The cause an exception's own words carry, read as its mechanism (issue #25, round 11's first kind: the text
named the option, the package or the platform, and the finding repeated the exception without naming it).

Each reading keys on the words the upstream code prints and says the known mechanism behind them, quoting the
word of the paste that carries the cause (an option, a class, a platform) where the paste gives it:

* CPython's "cannot pickle 'T' object" (Objects/typeobject.c ``object_getstate_default``, CPython 3.11+; the
  same words in the older ``copyreg._reduce_ex``): a process pool pickles the mapped function with what it
  captures. HF datasets' ``Dataset.map(num_proc=N)`` does so for its N workers (it logs "Spawning N processes",
  arrow_dataset.py), and LLaMA-Factory passes ``preprocessing_num_workers`` as that ``num_proc``
  (data/loader.py at the snapshot). A tiktoken-based tokenizer holds tiktoken's Rust ``CoreBPE``, which
  pyo3 exposes under the module name ``builtins`` and which does not pickle (huggingface/datasets#5536,
  hiyouga/LlamaFactory#328);
* transformers' "Can't find a valid checkpoint at P": raised by ``Trainer._load_from_checkpoint`` when the
  folder holds none of the weight files, and by ``integrations/deepspeed.py`` ``deepspeed_load_checkpoint`` when
  it has no ``global_step*`` folder (DeepSpeed's engine states). ``save_only_model`` writes the model alone
  (TrainingArguments' documentation of ``save_only_model`` warns that such checkpoints cannot be resumed from),
  so a DeepSpeed checkpoint saved with it has no ``global_step*`` folder to resume from
  (hiyouga/LlamaFactory#5497);
* torch's TCPStore "use_libuv was requested but PyTorch was build without libuv support"
  (torch/csrc/distributed/c10d/TCPStore.cpp): torch 2.4 made the libuv store the default and the Windows builds
  of torch have no libuv; ``USE_LIBUV=0`` selects the older store (PyTorch's tutorial "Introduction to Libuv
  TCPStore Backend"), and distributed training is better supported under WSL/Linux (jingyaogong/minimind#115);
* bitsandbytes' "cublasLt ran into an error!" (bitsandbytes/functional.py ``igemmlt``, the LLM.int8 matmul of
  8-bit weights through cuBLASLt): the releases of that time had no int8 cuBLASLt path for Hopper (H100/H800),
  and the maintainers' answer was 4-bit (nf4/fp4) weights (bitsandbytes-foundation/bitsandbytes#538);
* LLaMA-Factory's "Got unknown args, potentially deprecated arguments: [...]" (hparams/parser.py
  ``_parse_args``, printed before it raises that its parser did not use them): the arguments named are not
  options of the installed release, most often renamed or removed ones (catalog/lf_keys.json ``retired``, read
  through readers/config/keyschema.py `load_schema`: the replacement per old key, and whether the value keeps its
  meaning, ``same_value``), even where the paste is cut before the exception line (hiyouga/LlamaFactory#2800);
* the shell's report of a program it did not find on its PATH (dash "/bin/sh: 1: X: not found", bash "X: command
  not found", zsh "command not found: X"): the environment that ran the command is not the one the program was
  installed into; LLaMA-Factory's web UI starts training as a ``llamafactory-cli train`` subprocess
  (webui/runner.py), so a UI started from another Python fails so (hiyouga/LlamaFactory#3693);
* torch's "Cannot copy out of meta tensor; no data!" (the copy kernel of the meta device, raised by ``.to()`` /
  ``copy_`` of a tensor that has a shape and no storage): transformers' low-memory load (``low_cpu_mem_usage=True``
  or a ``device_map``) builds the model on the meta device and fills in only what the checkpoint holds, so a
  parameter or buffer the checkpoint lacks stays without data until something moves it; LLaMA-Factory passes its
  ``low_cpu_mem_usage`` model argument (default true, catalog/lf_keys.json) to ``from_pretrained``, and the
  maintainer's answer to this error was ``--low_cpu_mem_usage False`` (hiyouga/LlamaFactory#2940, #2933);
* the CANN runtime's error block under torch_npu (Ascend): a line "EJ0001: <time> <what failed>. Reason: <cause>."
  with "Solution: <what to do>" below it (hiyouga/LlamaFactory#3839, EJ0001 "Failed to initialize the HCCP
  process. Reason: Maybe the last training process is running."): the runtime states the cause; it is quoted, with
  how to find a process left on the NPUs (``npu-smi info`` lists the processes each NPU holds) where the reason
  names one;
* the Windows console-script launcher's own failure: the ``.exe`` wrapper pip puts in the Scripts folder for each
  console script (``torchrun.exe``, ``llamafactory-cli.exe``, ``accelerate.exe``) prints "failed to create process." (or
  "Fatal error in launcher: Unable to create process using ...") when it cannot start the Python it was built for
  (a Python path with spaces, pypa/pip#2783; an environment moved or deleted since, pypa/pip#5618): a Windows-only
  message. LLaMA-Factory's CLI launches torchrun for several GPUs right after logging "Initializing distributed
  tasks at: ADDR:PORT" (cli.py), and the Windows builds of torch have no NCCL, the default backend of that launch
  (hiyouga/LlamaFactory#5719: one GPU trained; ddp_backend: gloo let several run);
* LLaMA-Factory's "Undefined dataset X in dataset_info.json." (data/parser.py ``get_dataset_list``: a name of
  ``dataset`` / ``eval_dataset`` that is no key of ``dataset_dir``/dataset_info.json; ``dataset_dir`` defaults to
  "data", read relative to the folder the command runs in): the name, or the folder the command ran from;
* keys transformers' HfArgumentParser did not use that the key catalogue lists as retired (catalog/lf_keys.json
  ``retired``): a config written for an older LLaMA-Factory, each key with what replaced it (`retired_keys`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

UNPICKLABLE = re.compile(r"cannot pickle '(?P<t>[\w.]+)' object")
# (the class as CPython prints it, its last dotted part) -> (what holds it, the package to name)
PICKLE_HOLDERS = {
    "CoreBPE": ("a tiktoken-based tokenizer (Qwen-7B's QWenTokenizer and the other remote-code tokenizers built on "
                "tiktoken) holds tiktoken's Rust CoreBPE, which cannot be pickled (huggingface/datasets#5536)"),
    "lock": "an object the function captures holds a thread lock (a logging handler, a client, a progress bar)",
    "RLock": "an object the function captures holds a thread lock (a logging handler, a client, a progress bar)",
}
POOL_WORDS = re.compile(r"num_proc\s*=\s*(?P<n>\d+)|Spawning (?P<s>\d+) processes|preprocessing_num_workers")
NO_CHECKPOINT = re.compile(r"Can't find a valid checkpoint at (?P<path>\S+)")
NO_LIBUV = re.compile(r"use_libuv was requested but PyTorch was buil[dt] without libuv support")
CUBLASLT = re.compile(r"cublasLt ran into an error")
UNKNOWN_ARGS = re.compile(r"Got unknown args, potentially deprecated arguments: \[(?P<args>[^\]]*)\]?")
ARGS_LEAD = "LLaMA-Factory's parser printed"
"""How the refused-arguments lead opens (cutcause.py `lead_kind` tells it by this)."""
WIN_LAUNCHER = re.compile(r"\bfailed to create process\.|Fatal error in launcher: Unable to create process using",
                          re.I)
LF_DISTRIBUTED = re.compile(r"Initializing distributed tasks at")
UNDEFINED_DATASET = re.compile(r"Undefined dataset (?P<name>\S+) in (?P<file>dataset_info\.json|\S+\.json)")
META_COPY = re.compile(r"Cannot copy out of meta tensor")
# a CANN error code line (two capitals, four digits: EJ0001, EI9999, EE1001) with the runtime's "Reason:" and the
# "Solution:" that may follow on the next line (torchrun's "[rankN]:" before it where the ranks' output is tagged)
CANN_REASON = re.compile(r"\b(?P<code>E[A-Z]\d{4}):[^\n]*?\s(?P<what>[A-Z][^\n]*?\.)\s*Reason:\s*(?P<why>[^\n]+?)\s*"
                         r"(?:\n(?:\[rank\d+\]:)?\s*Solution:\s*(?P<fix>[^\n]+))?$", re.M)
HOPPER = re.compile(r"\b(?:H100|H800|H200|H20|GH200|Hopper|sm_?90)\b", re.I)


def message_cause(cls: str, msg: str, text: str) -> str | None:
    """The mechanism the exception `cls`: `msg` states, in words, with `text` the whole short file it came
    from (the user's words and the lines around it) for the word that carries the cause; None when none of
    the readings above applies."""
    for fn in (_unpicklable, _no_checkpoint, _no_libuv, _cublaslt, _not_on_path, _meta_copy, _cann_reason,
               _windows_launcher, _undefined_dataset):
        said = fn(cls, msg, text)
        if said:
            return said
    return None


def _unpicklable(cls: str, msg: str, text: str) -> str | None:
    m = UNPICKLABLE.search(msg)
    if not m:
        return None
    t = m.group("t")
    holder = PICKLE_HOLDERS.get(t.rsplit(".", 1)[-1], f"an object the mapped function captures ({t}) cannot be pickled")
    pool = POOL_WORDS.search(text)
    n = (pool.group("n") or pool.group("s")) if pool else None
    where = (f"the dataset preprocessing ran in {n} worker processes (datasets' map with num_proc={n})" if n else
             "the dataset preprocessing ran in worker processes (datasets' map with num_proc)" if pool else
             "a process pool (datasets' map with num_proc, or DataLoader workers started by spawn) sends the "
             "function it runs to each worker by pickling it")
    return (f"{where}, and {holder}; preprocess in one process (preprocessing_num_workers: 1, or num_proc unset), "
            "or use a tokenizer that pickles (a converted fast tokenizer)")


def _no_checkpoint(cls: str, msg: str, text: str) -> str | None:
    m = NO_CHECKPOINT.search(msg)
    if not m:
        return None
    said = "save_only_model" in text
    head = ("the words name save_only_model: it saves the model alone, so a checkpoint saved with it cannot be "
            "resumed: under DeepSpeed the resume reads the engine's global_step* folder, which it does not write"
            if said else
            "the checkpoint folder lacks what the resume loads: the model's weight files, or under DeepSpeed the "
            "engine's global_step* folder, which a run saved with save_only_model: true never writes (or the path "
            "is not a checkpoint folder at all: check resume_from_checkpoint)")
    return (f"{head}; resume from a checkpoint saved without save_only_model, or start from "
            f"{m.group('path').rstrip('.')} as the model (model_name_or_path / adapter) without resume_from_checkpoint")


def _no_libuv(cls: str, msg: str, text: str) -> str | None:
    if not NO_LIBUV.search(msg):
        return None
    return ("the Windows builds of PyTorch have no libuv, and torch 2.4 made libuv's TCPStore the default of "
            "torchrun's rendezvous: set the environment variable USE_LIBUV=0 before torchrun (the older store), "
            "or run distributed training under WSL or Linux, where it is supported far better than on Windows")


def _cublaslt(cls: str, msg: str, text: str) -> str | None:
    if not CUBLASLT.search(msg):
        return None
    card = HOPPER.search(text)
    on = f"the words name {card.group(0)}, a Hopper GPU" if card else "a Hopper GPU (H100/H800) among them"
    return ("bitsandbytes' 8-bit matmul (LLM.int8: load_in_8bit, quantization_bit: 8) runs through cuBLASLt's int8 "
            f"kernels, which bitsandbytes releases of that time did not support on every GPU ({on}; "
            "bitsandbytes#538): load the weights in 4-bit (nf4/fp4, quantization_bit: 4) or in bf16, or use a "
            "bitsandbytes release whose 8-bit path supports the card")


# how an old key is named beside its replacement, by the catalog's ``same_value`` (False: the new key reads its value
# in other units, e.g. image_resolution, a side length in 0.9.0, against image_max_pixels, a pixel count)
RENAMED_WORDS = {
    True: "{arg} (renamed to {new})",
    False: "{arg} (replaced by {new}, whose value means something else: convert it, do not copy it)",
}


# the shell's words for a program not on its PATH (dash, bash, zsh; readers/runlogs/userwords_more.py NOT_ON_PATH)
NOT_ON_PATH = re.compile(r"(?:sh: (?:line )?\d*:? ?(?P<a>[\w.+-]+): (?:command )?not found|command not found: "
                         r"(?P<b>[\w.+-]+)|(?P<c>[\w.+-]+): command not found(?!:))", re.A)


# what to add when the missing program is LLaMA-Factory's own CLI
_LF_CLI = {True: "; `pip install -e .` in the LLaMA-Factory checkout (or `pip install llamafactory`) puts it on the "
                 "active environment's PATH, and the web UI launches training through it, so start the UI from that "
                 "environment",
           False: ""}


def _not_on_path(cls: str, msg: str, text: str) -> str | None:
    """The shell found no program of that name on its PATH: the environment that ran the command is not the one the
    program was installed into (LLaMA-Factory's web UI starts training as a `llamafactory-cli train` subprocess,
    webui/runner.py, so a UI started from another Python finds no CLI). None for another message.

    The paste's other lines (`text`) are read only for words with no exception class (`cls` ""): a harmless
    "/bin/sh: 1: nvcc: not found" above another exception is not that exception's cause."""
    m = NOT_ON_PATH.search(msg) or (NOT_ON_PATH.search(text) if not cls else None)
    if m is None:
        return None
    cmd = m.group("a") or m.group("b") or m.group("c")
    lf = _LF_CLI[cmd.startswith(("llamafactory", "llmtuner"))]
    return (f"the shell found no program `{cmd}` on its PATH: the environment that ran the command (a web UI, a "
            "script's shell, a job scheduler's) is not the one it was installed into, or it was never installed; "
            f"activate that environment, or call it by its full path (`which {cmd}` in the same shell says whether "
            f"it is found){lf}")


@lru_cache(maxsize=1)
def _renamed() -> dict[str, tuple[str, bool]]:
    """Old LLaMA-Factory key -> (its replacement, whether the value keeps its meaning), from the key schema's
    ``retired`` (catalog/lf_keys.json through readers/config/keyschema.py `load_schema`, the one reader of it).
    A missing ``same_value`` is read as True (the catalog marks only the keys whose meaning changed)."""
    from finetune_doctor.readers.config.keyschema import load_schema

    return {k: (str(v.get("replacement")), v.get("same_value") is not False)
            for k, v in (load_schema().get("retired") or {}).items() if isinstance(v, dict) and v.get("replacement")}


def _named(arg: str, ren: dict[str, tuple[str, bool]]) -> str:
    """`arg` as the message names it: with its replacement (`RENAMED_WORDS`) where the catalog has one."""
    key = arg.lstrip("-").split("=")[0]
    if key not in ren:
        return arg
    new, same = ren[key]
    return RENAMED_WORDS[same].format(arg=arg, new=new)


def args_lead(ev: Any, tb: Any) -> str | None:
    """For a traceback cut before its exception line (`tb`, a Notice), LLaMA-Factory's "Got unknown args" line
    printed above it in the same file (`UNKNOWN_ARGS`): the arguments its parser refused, each with its
    replacement where the key was renamed. None without that line."""
    if tb is None:
        return None
    text = next((str(f.text or "") for f in ev.files if f.read.path == tb.file), "")
    m = UNKNOWN_ARGS.search(text)
    if not m:
        return None
    args = [a.strip().strip("'\"") for a in m.group("args").split(",") if a.strip().strip("'\"")]
    if not args:
        return None
    ren = _renamed()
    named = ", ".join(_named(a, ren) for a in args)
    return (f"{ARGS_LEAD} \"Got unknown args, potentially deprecated arguments\" for {named}: "
            "the installed release has no such option (renamed or removed), and it stops with a ValueError "
            "after printing its help; use the release's own option name, or the release the command was written for")


def _meta_copy(cls: str, msg: str, text: str) -> str | None:
    """A tensor moved or copied while it was still on the meta device (`META_COPY`): the low-memory load left
    it without data. None for another message."""
    if not META_COPY.search(msg):
        return None
    return ("a parameter or buffer was still on the meta device (a shape with no data) when it was moved: "
            "transformers' low-memory load (low_cpu_mem_usage, or a device_map) builds the model there and fills in "
            "only what the checkpoint holds, so a weight the checkpoint lacks (a checkpoint of another revision, a "
            "remote-code model that creates a buffer at load) or a load the trainer moved before it finished stays "
            "empty; load without it (LLaMA-Factory: low_cpu_mem_usage: false, or --low_cpu_mem_usage False; "
            "transformers: low_cpu_mem_usage=False and no device_map) and check that the checkpoint holds every "
            "weight the model's code declares (hiyouga/LlamaFactory#2940)")


def _cann_reason(cls: str, msg: str, text: str) -> str | None:
    """The cause the CANN runtime states in its own error block (`CANN_REASON`, searched in the exception and the
    file around it): quoted, with the process check where the reason names a process still running. None
    without such a line."""
    from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes

    # the paste's lines as the reader reads them: a quote, colour codes, a launcher's or a service's tag removed
    clean = "\n".join(strip_prefixes(ln)[0] for ln in text.split("\n")) if text else ""
    m = CANN_REASON.search(msg) or CANN_REASON.search(clean)
    if m is None:
        return None
    why = m.group("why").rstrip(".")
    fix = f"; its solution: \"{m.group('fix').rstrip('.')}\"" if m.group("fix") else ""
    left = (" A training process left on the NPUs (a run that did not exit, a killed launcher's children) still "
            "holds them: `npu-smi info` lists each NPU's processes; end them and wait a few seconds before the "
            "next launch") if "process" in why.lower() else ""
    what = m.group("what").rstrip(".")
    return (f"the Ascend (CANN) runtime states the cause with its code {m.group('code')}: {what} "
            f"— reason: \"{why}\"{fix}.{left}")


def _windows_launcher(cls: str, msg: str, text: str) -> str | None:
    """The Windows console-script launcher could not start its Python (`WIN_LAUNCHER`): Windows, which launcher,
    and for a multi-GPU launch of LLaMA-Factory (`LF_DISTRIBUTED` in `text`) the backend Windows lacks. None for
    another message."""
    if not (WIN_LAUNCHER.search(msg) or WIN_LAUNCHER.search(text)):
        return None
    lf = ("; the line before it is LLaMA-Factory starting torchrun for several GPUs, and even started that way a "
          "multi-GPU run on Windows has no NCCL, torch's default backend there: train on one GPU "
          "(CUDA_VISIBLE_DEVICES=0), set ddp_backend: gloo, or run under WSL or Linux") if LF_DISTRIBUTED.search(
        text) else "; distributed training on Windows also lacks NCCL (use one GPU, ddp_backend: gloo, or WSL)"
    return ("this is Windows' console-script launcher (the .exe that pip installs in Scripts\\ for torchrun, "
            "llamafactory-cli or accelerate) failing to start the Python it was built for: a Python path with "
            "spaces, or an environment moved or deleted since the script was installed (pypa/pip#2783). The input "
            "that decides is that environment: reinstall the package in the active one, or call the module "
            "instead (`python -m torch.distributed.run` for torchrun)" + lf)


def _undefined_dataset(cls: str, msg: str, text: str) -> str | None:
    """LLaMA-Factory's refusal of a dataset name its dataset_info.json does not define (`UNDEFINED_DATASET`). None
    for another message."""
    m = UNDEFINED_DATASET.search(msg)
    if m is None:
        return None
    name = m.group("name")
    return (f"`dataset: {name}` (or eval_dataset) is no key of the dataset_info.json LLaMA-Factory read: it names "
            "datasets by their key in dataset_dir/dataset_info.json, not by file name, and dataset_dir (default "
            "`data`) is read relative to the folder the command runs in. The input that decides: the keys of that "
            f"file against `{name}`; register the file there (file_name, formatting, columns) or run from the "
            "LLaMA-Factory folder, or set dataset_dir to the folder that holds it")


def retired_keys(keys: list[str]) -> str | None:
    """What the key catalogue says of `keys` a parser did not use that it lists as retired (catalog/lf_keys.json
    through `_renamed` and readers/config/keyschema.py): each with its replacement, or its explanation where it
    has none; None when none of them is retired."""
    from finetune_doctor.readers.config.keyschema import load_schema

    retired = load_schema().get("retired") or {}
    ren = _renamed()
    old = [k for k in keys if k in retired]
    if not old:
        return None
    said = "; ".join(_named(k, ren) if k in ren else f"{k} ({str((retired[k] or {}).get('explanation') or 'removed')}"
                     f")".replace(".)", ")") for k in old)
    share = f"all {len(old)} keys are" if len(old) == len(keys) else f"{len(old)} of the keys are"
    return (f"{share} ones an older LLaMA-Factory took and the installed one no longer does: "
            f"{said}; the config was written for another release: update those keys, or install the release it "
            "was written for")
