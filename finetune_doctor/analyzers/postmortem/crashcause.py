"""What an exception that ended a run establishes beyond its own line: ``ev.crash.cause``.

run-crashed used to repeat the exception. Where the text (the exception, the traceback's frames, the versions the
log or the flags give, the model's shape) establishes a cause, it is named here; where it does not, nothing is
said. Each kind cites the upstream line that prints the message it reads:

* a state_dict whose tensor sizes do not match (torch/nn/modules/module.py ``_load_from_state_dict``, torch 2.13.0
  wheel :2443-2444 "size mismatch for K: copying a param with shape S from checkpoint, the shape in current model
  is T."; ``load_state_dict`` :2639 puts them under "Error(s) in loading state_dict for C:"): the arithmetic of the
  two shapes says which of a flat (ZeRO-3 / FSDP flat-parameter) save, ZeRO-3's empty placeholder (DeepSpeed 0.19.8
  runtime/zero/partition_parameters.py:329, a partitioned parameter's data is ``torch.empty(0)``), a vocabulary
  change, a LoRA rank change, a 1/k shard or another architecture it is;
* LLaMA-Factory's "Processor was not found, please check and update your model file." (data/mm_plugin.py:178 at
  the snapshot) after ``load_tokenizer`` could not load a processor (model/loader.py:97-117: a failure is logged at
  INFO as "Failed to load processor: ...", a loaded object that is not a Processor is dropped);
* ImportError / ModuleNotFoundError naming a package, an undefined C++ symbol of a compiled extension, a name the
  installed release does not export;
* a model type transformers does not know: ``CONFIG_MAPPING[...]`` raising KeyError in
  models/auto/configuration_auto.py (old releases) or the ValueError "has model type `X` but Transformers does not
  recognize this architecture" (transformers 5.6.0 configuration_auto.py:407-413);
* autograd's "element 0 of tensors does not require grad and does not have a grad_fn" (torch/csrc/autograd/
  autograd.cpp ``run_backward``): the loss does not depend on any tensor that requires grad; reentrant
  gradient checkpointing drops the graph when the checkpointed block's inputs do not require grad
  (torch/utils/checkpoint.py:92 warns "None of the inputs have requires_grad=True"), which is why transformers has
  ``enable_input_require_grads`` (modeling_utils.py:2171) and LLaMA-Factory calls it
  (model/model_utils/checkpointing.py:151);
* an exception raised inside an installed library's own frames (not by a deliberate ``raise`` of a check):
  the library, its frame and its version, and that another release is the usual cure.
"""

from __future__ import annotations

import math
import re
from typing import Any

from finetune_doctor.analyzers.postmortem.apicause import keyword_owner
from finetune_doctor.analyzers.postmortem.attrpair import trainer_attr_pair
from finetune_doctor.analyzers.postmortem.cudnncause import cudnn_finalize
from finetune_doctor.analyzers.postmortem.devicecause import two_devices
from finetune_doctor.analyzers.postmortem.dsbatch import ds_batch
from finetune_doctor.analyzers.postmortem.kernelwords import checkpoint_mismatch
from finetune_doctor.analyzers.postmortem.launchcause import launch_cause, precision_cause
from finetune_doctor.analyzers.postmortem.mmcause import no_placeholder
from finetune_doctor.analyzers.postmortem.msgcause import message_cause, retired_keys
from finetune_doctor.analyzers.postmortem.newermodel import optimizer_groups, processor_missing, trainer_table_key
from finetune_doctor.analyzers.postmortem.quantcause import zero3_quantized
from finetune_doctor.analyzers.postmortem.remotecode import remote_code_clash
from finetune_doctor.analyzers.postmortem.samplecause import empty_dataset
from finetune_doctor.analyzers.postmortem.savecause import staged_save_error, words_beside
from finetune_doctor.analyzers.postmortem.stackcause import optimizer_train_pair, releases_judging
from finetune_doctor.evidence import Evidence, Notice

SIZE_MISMATCH = re.compile(r"size mismatch for (?P<key>[\w.]+): copying a param with shape torch\.Size\(\[(?P<ck>[\d, ]*)\]\)"
                           r" from checkpoint, the shape in current model is torch\.Size\(\[(?P<cur>[\d, ]*)\]\)")
NO_MODULE = re.compile(r"No module named '(?P<mod>[\w.]+)'")
UNDEFINED_SYMBOL = re.compile(r"(?P<so>[\w.+-]+\.so)\S*: undefined symbol: (?P<sym>\S+)")
NO_SHARED = re.compile(r"(?P<so>[\w.+-]+\.so[\w.]*): cannot open shared object file")
CANNOT_IMPORT = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<mod>[\w.]+)'")
# transformers models/auto/configuration_auto.py AutoConfig.from_pretrained (5.6.0 wheel :414-421): neither a
# model_type key nor a known model name in the path
NO_MODEL_TYPE = re.compile(r"Unrecognized model in (?P<path>.+?)\. Should have a .model_type. key")
UNKNOWN_TYPE = re.compile(r"has model type `(?P<t>[\w-]+)` but Transformers does not recognize")
KEY_ONLY = re.compile(r"^'(?P<t>[\w-]+)'$")
NOT_INSTALLED = re.compile(r"the package (?P<pkg>\w+) seems to be not installed")
PIP_COMMAND = re.compile(r"`(?P<cmd>pip install [^`]+)`")
OBJ_ATTR = re.compile(r"^'(?P<cls>[A-Z]\w*)' object has no attribute '(?P<attr>\w+)'")
BUILTIN_TYPES = frozenset({"NoneType"})
"""Objects of these types lack attributes because a value was missing, not because of a release."""
MODULE_ATTR = re.compile(r"module '(?P<mod>[\w.]+)' has no attribute '(?P<attr>\w+)'")
# (a space may be lost where the line was retyped by hand: "f()got an unexpected keyword argument'k'")
BAD_CALL = re.compile(r"(?P<fn>[\w.<>]+)\(\) ?(?:got an unexpected keyword argument ?'(?P<kw>\w+)'|"
                      r"missing \d+ required positional argument)")
UNKNOWN_TEMPLATE = re.compile(r"Template (?P<name>\S+) does not exist")
# transformers utils/import_utils.py _LazyModule._get_module wraps the import error of a model module as
# RuntimeError "Failed to import M because of the following error (look up to see its traceback):\n<error>"
LAZY_IMPORT = re.compile(r"Failed to import (?P<mod>[\w.]+) because of the following error")
SAFETENSORS_HEADER = re.compile(r"Error while deserializing header: (?P<err>\w+)")
REQUIRED_VERSION = re.compile(r"(?P<req>[A-Za-z][\w.-]*\s*(?:[<>=!~]=?|==)[^ ]*?),? is required for a normal functioning "
                              r"of this module(?:, but found (?P<found>[\w.-]+==[\w.+-]*[\w+]))?")
# a header the compiler could not open ("pyconfig.h:3:12: fatal error: x86_64-linux-gnu/python3.12/pyconfig.h: No
# such file or directory"): GCC's and Clang's wording for an #include not found
HEADER_MISSING = re.compile(r"fatal error: (?P<hdr>[\w./+-]+\.h(?:h|pp)?): No such file or directory")
PYTHON_HEADER = re.compile(r"(?:^|/)(?:Python\.h|pyconfig\.h)$|python3\.\d+")
BUILD_FAILED = re.compile(r"Error building extension '(?P<op>\w+)'")
TWO_DEVICES = re.compile(r"Expected all tensors to be on the same device, but found at least two devices, "
                         r"(?P<a>cuda:\d+|cpu) and (?P<b>cuda:\d+|cpu)")
UNUSED_KEYS = re.compile(r"Some keys are not used by the HfArgumentParser: \[(?P<keys>[^\]]*)(?P<end>\]?)")
ERRNO = re.compile(r"\[Errno (?P<n>\d+)\]")
ERRNO_CAUSES = {
    5: ("an input/output error (EIO): the storage failed the read or write (a failing disk, a network or FUSE "
        "mount that dropped, an overlay filesystem in trouble); check dmesg on that machine for I/O errors and "
        "move the data or output to a healthy local disk"),
    12: ("the host could not allocate memory (ENOMEM), most often while forking DataLoader workers or "
         "subprocesses from a process that already holds much host RAM; lower dataloader_num_workers / "
         "preprocessing_num_workers or free host memory"),
    24: ("too many open files (EMFILE): the per-process limit (ulimit -n) is below what the run opens "
         "(DataLoader workers sharing tensors through file descriptors, many shards); raise ulimit -n or use "
         "torch.multiprocessing.set_sharing_strategy('file_system')"),
    116: ("a stale file handle (ESTALE): a file on a network filesystem (NFS) was replaced or deleted by another "
          "machine while this one had it open; keep each node's cache and outputs apart or on local disk"),
}
"""errno(3) meanings of the errors a run's file operations raise (Python's OSError prints "[Errno N] strerror")."""
RENAME = re.compile(r"\[Errno (?P<n>2|17|39)\] [^:'\"]+: '(?P<src>[^']+)' -> '(?P<dst>[^']*)")
"""An OSError of a call with two paths (os.rename, os.replace, shutil.move): CPython's ``OSError.__str__``
(Objects/exceptions.c ``OSError_str``: "[Errno %S] %S: %R -> %R") with ENOENT (the source was gone), EEXIST or
ENOTEMPTY (the target was already there)."""
HUB_ERRORS = {
    "GatedRepoError": ("the Hugging Face hub refused a gated repository: accept its terms on the model's page with "
                       "the account whose token the run uses (HF_TOKEN, or `huggingface-cli login` on that machine), "
                       "or point model_name_or_path at a local copy"),
    "RepositoryNotFoundError": ("the hub knows no repository of that name for this token (a typo in the id, a "
                                "private or gated repository without a valid HF_TOKEN, or a local path that does "
                                "not exist and was read as a hub id)"),
    "RevisionNotFoundError": "the repository has no such revision (branch, tag or commit): check `revision`",
    "LocalEntryNotFoundError": ("the file is not in the local cache and the hub was not asked (offline: "
                                "HF_HUB_OFFLINE=1, or no network on that machine): download it where the hub can be "
                                "reached, or point at a local folder"),
    "OfflineModeIsEnabled": ("the hub was asked while HF_HUB_OFFLINE=1: download the model where the hub can be "
                             "reached, or point at a local folder"),
}
"""Exceptions of huggingface_hub (huggingface_hub/errors.py, 1.33.0 installed here: GatedRepoError a subclass of
RepositoryNotFoundError, LocalEntryNotFoundError of FileNotFoundError), named by their class: their messages run
over several lines, the first of which ("401 Client Error. (Request ID: ...)") says little."""
TOKENIZER_CLASS = re.compile(r"Tokenizer class (?P<c>\w+) does not exist or is not currently imported")

LIBRARIES = ("transformers", "peft", "trl", "accelerate", "deepspeed", "flash_attn", "bitsandbytes", "liger_kernel",
             "vllm", "xformers", "datasets", "unsloth", "megatron", "apex", "torchao", "auto_gptq", "awq")
"""Installed libraries whose frames make an exception a library's (torch is left out: an error raised in torch's
own functions is most often the caller's shapes or dtypes, not a torch bug)."""
PIP_NAMES = {"flash_attn": "flash-attn", "liger_kernel": "liger-kernel", "auto_gptq": "auto-gptq",
             "awq": "autoawq", "bitsandbytes": "bitsandbytes", "deepspeed": "deepspeed", "xformers": "xformers"}
COMPILED = {"flash_attn": "flash-attn", "flash_attn_2_cuda": "flash-attn", "flash_attn_cuda": "flash-attn",
            "cpu_adam": "DeepSpeed's cpu_adam op", "fused_adam": "DeepSpeed's fused_adam op",
            "libbitsandbytes": "bitsandbytes", "xformers": "xformers", "apex": "apex", "amp_C": "apex",
            "fused_layer_norm_cuda": "apex", "vllm": "vllm", "_C": "the package's compiled extension"}
BUGGY = ("RuntimeError", "AssertionError", "TypeError", "AttributeError", "IndexError", "KeyError", "NameError",
         "UnboundLocalError", "NotImplementedError")
"""Exception classes that a library raises from its own code when it is misused by another release or has a bug;
a ValueError or a deliberate ``raise`` is a check whose message states its own cause."""
EMBEDDING_KEYS = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out", "output.weight", "tok_embeddings")


def crash_cause(ev: Evidence, exc: Notice | None, tb: Notice | None, model: dict[str, Any],
                versions: dict[str, tuple[str, str]]) -> dict[str, Any] | None:
    """``ev.crash.cause``: {kind, text} for the exception `exc` (a Notice of kind "exception", its value holds
    cls, msg and, for a state_dict load, the "size mismatch" `details`) with `tb` the traceback read before it
    (its value's `pkgs`: (package, function, file) of the frames inside installed packages, innermost last).
    `model` holds what is known of the model (vocab_size, hidden_size, name); `versions` maps a package to
    (version, where it was read). None when the text establishes no cause beyond the exception itself."""
    if exc is None:
        return None
    v = exc.value or {}
    cls = str(v.get("cls") or "").rsplit(".", 1)[-1]
    msg = str(v.get("msg") or "")
    pkgs = tuple(((tb.value or {}).get("pkgs") or ()) if tb is not None and isinstance(tb.value, dict) else ())
    frames = tuple(((tb.value or {}).get("frames") or ()) if tb is not None and isinstance(tb.value, dict) else ())
    if pkgs and _innermost(frames) != f"{pkgs[-1][1]} ({pkgs[-1][2]})":
        pkgs = ()   # the innermost frame is not a package's (the user's own code, or a cut frame): no library blamed
    for kind, fn in (("child-failed-alone", lambda: _child_alone(ev, cls, msg)),
                     ("size-mismatch", lambda: _size_mismatch(v.get("details") or [msg], model)),
                     ("processor-missing", lambda: processor_missing(msg, model, ev)),
                     ("no-placeholder", lambda: no_placeholder(msg)),
                     ("remote-code", lambda: remote_code_clash(cls, msg, exc)),
                     ("import", lambda: _import(cls, msg, versions, pkgs)),
                     ("model-type-unknown", lambda: _model_type(cls, msg, pkgs, versions, bool(frames))),
                     ("no-grad", lambda: _no_grad(msg)),
                     ("checkpoint-mismatch", lambda: checkpoint_mismatch(msg)),
                     ("file-incomplete", lambda: _file_format(msg, versions)),
                     ("rename-race", lambda: _rename_race(msg, versions, "\n".join([exc.text or "", *map(str, frames)]))),
                     ("staged-save", lambda: staged_save_error(cls, msg, frames, versions, words_beside(ev, exc), exc.text)),
                     ("hub", lambda: HUB_ERRORS.get(cls)),
                     ("os-error", lambda: _os_error(msg)),
                     ("message", lambda: message_cause(cls, msg, _file_text(ev, exc))),
                     ("two-devices", lambda: two_devices(
                         msg, "\n".join((words_beside(ev, exc), exc.text or "", _file_text(ev, exc))))),
                     ("environment", lambda: _environment(msg)),
                     ("cudnn-finalize", lambda: cudnn_finalize(cls, msg)),
                     ("config-keys", lambda: _unused_keys(exc.text or msg)),
                     ("ds-batch", lambda: ds_batch(msg)),
                     ("launch", lambda: launch_cause(cls, msg, words_beside(ev, exc))),
                     ("fp16-grads", lambda: precision_cause(msg)),
                     ("cpu-adam-groups", lambda: _cpu_adam_groups(cls, msg)),
                     ("optimizer-groups", lambda: optimizer_groups(cls, msg)),
                     ("trainer-table", lambda: trainer_table_key(cls, msg, frames, ev, exc)),
                     ("data-key", lambda: _data_key(cls, msg, frames)),
                     ("no-samples", lambda: empty_dataset(cls, frames, pkgs, msg)),
                     ("version-pair", lambda: optimizer_train_pair(cls, msg) or trainer_attr_pair(cls, msg, pkgs)),
                     ("zero3-quantized", lambda: zero3_quantized(
                         cls, msg, "\n".join((words_beside(ev, exc), exc.text or "", _file_text(ev, exc))))),
                     ("version-mismatch", lambda: _mismatch(cls, msg, pkgs, versions)),
                     ("library-error", lambda: _library(cls, msg, pkgs, frames, versions))):
        text = fn()
        if text:
            return {"kind": kind, "text": text}
    return None


def _file_text(ev: Evidence, exc: Notice) -> str:
    """The whole text of the short file holding `exc` (readers/runlogs/logkept.py), "" for a long log."""
    return next((str(f.text or "") for f in ev.files if f.read.path == exc.file), "")


def _child_alone(ev: Evidence, cls: str, msg: str) -> str | None:
    """torchrun's ChildFailedError with nothing of its summary (torch/distributed/elastic/multiprocessing/errors/
    __init__.py ``ChildFailedError.format_msg``: the "Root Cause" entry with rank, exitcode and pid): the text
    establishes that a training process failed and nothing of why."""
    m = CALLED_STATUS.search(msg) if cls == "CalledProcessError" else None
    if m:   # CPython's CalledProcessError.__str__ for a child that exited with a code (Lib/subprocess.py)
        return (f"the launcher (accelerate launch, or a script starting the trainer) reports only that the process "
                f"it started exited with code {m.group('code')}: that process's own exception was printed above "
                "this traceback in the same output; give the whole output with --log")
    if cls != "ChildFailedError" or msg.strip() or any(k.kind.startswith("child-failed") for f in ev.files
                                                       for k in f.kills):
        return None
    return ("torchrun reported that a training process failed (ChildFailedError), but the log holds neither its "
            "failure summary (which rank, which exit code) nor the process's own error, which it printed above "
            "that line: give the whole output of the run with --log")


CALLED_STATUS = re.compile(r"returned non-zero exit status (?P<code>\d+)")

FUNC_FRAME = re.compile(r"^[\w<>]+ \([^()]+\)$")


def _innermost(frames: tuple) -> str | None:
    """The innermost "func (file.py)" entry of a traceback's frames (logcontext.frame_of names them so)."""
    return next((f for f in reversed(frames) if isinstance(f, str) and FUNC_FRAME.match(f)), None)


def _ver(versions: dict[str, tuple[str, str]], pkg: str) -> str:
    got = versions.get(pkg)
    return f" {got[0]} ({got[1]})" if got else ""


def _ask_version(versions: dict[str, tuple[str, str]], pkg: str) -> str:
    if pkg in versions:
        return ""
    flag = f"--{pkg} VERSION or " if pkg in ("transformers", "torch") else ""
    return f" (its version is not in the log: give {flag}--env with `llamafactory-cli env` or `pip list` output)"


# -- size mismatches ---------------------------------------------------------------------------------------------

def _shape(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.replace(" ", "").split(",") if x)


def _size_mismatch(lines: list[str], model: dict[str, Any]) -> str | None:
    """The first mismatch whose arithmetic says something, with how many others the load listed."""
    found = [m for ln in lines for m in [SIZE_MISMATCH.search(ln)] if m]
    if not found:
        return None
    words = None
    for m in found:
        words = _mismatch_words(m.group("key"), _shape(m.group("ck")), _shape(m.group("cur")), model)
        if words:
            break
    if not words:
        return None
    more = f" ({len(found) - 1} more size mismatch(es) listed)" if len(found) > 1 else ""
    return words + more


def _factors(shape: tuple[int, ...], model: dict[str, Any]) -> str:
    """"128256 × 4096", with what the numbers are when they are the model's vocab_size / hidden_size."""
    text = " × ".join(str(d) for d in shape)
    vocab, hidden = model.get("vocab_size"), model.get("hidden_size")
    if len(shape) == 2 and vocab and hidden and shape == (int(vocab), int(hidden)):
        text += f" (vocab_size × hidden_size of {model.get('name') or 'the model'})"
    elif len(shape) == 2 and hidden and shape[1] == int(hidden):
        text += " (rows × hidden_size)"
    return text


def _mismatch_words(key: str, ck: tuple[int, ...], cur: tuple[int, ...], model: dict[str, Any]) -> str | None:
    n_ck, n_cur = math.prod(ck) if ck else 0, math.prod(cur) if cur else 0
    head = f"the checkpoint's {key} has shape {list(ck)}, the model's {list(cur)}"
    if n_ck == 0:
        return (f"{head}: an empty tensor is the placeholder ZeRO-3 leaves in every parameter it partitions, so the "
                "checkpoint was saved from a ZeRO-3 model without gathering its weights; save with "
                "stage3_gather_16bit_weights_on_model_save: true in the DeepSpeed config, or rebuild the full "
                "weights with the zero_to_fp32.py script DeepSpeed writes beside the checkpoint")
    if len(ck) == 1 and len(cur) >= 2:
        if n_ck == n_cur:
            return (f"{head}: {n_ck} = {_factors(cur, model)}, the same values flattened into one vector, as ZeRO-3 "
                    "and FSDP's flat parameters hold them; the checkpoint was saved without gathering the weights "
                    "to their shapes (not a vocabulary change: the counts agree); save with "
                    "stage3_gather_16bit_weights_on_model_save: true (or FSDP's FULL_STATE_DICT), or rebuild the "
                    "weights with DeepSpeed's zero_to_fp32.py")
        if cur[-1] and n_ck % cur[-1] == 0:
            rows = n_ck // cur[-1]
            return (f"{head}: {n_ck} = {rows} × {cur[-1]}, a flattened tensor (saved without gathering, as ZeRO-3 "
                    f"and FSDP's flat parameters hold it) of {rows} rows where the model has {cur[0]} "
                    f"({_rows_delta(rows, cur[0])}): a flat save of a model with another vocabulary")
        return (f"{head}: a flat vector of {n_ck} values that is not a multiple of the model's row width "
                f"{cur[-1]}: a shard of a flat parameter or a checkpoint of another model")
    if len(ck) != len(cur):
        return None
    diff = [i for i, (a, b) in enumerate(zip(ck, cur)) if a != b]
    if "lora_A" in key or "lora_B" in key:
        r_ck, r_cur = (ck[0], cur[0]) if "lora_A" in key else (ck[-1], cur[-1])
        if r_ck != r_cur:
            return (f"{head}: the adapter was trained with LoRA rank {r_ck} and the model was built with rank "
                    f"{r_cur}; build it with the adapter's rank (lora_rank: {r_ck}, as its adapter_config.json says)")
    if diff == [0] and any(k in key for k in EMBEDDING_KEYS):
        a, b = ck[0], cur[0]
        shard = _shard(a, b)
        if shard:
            return shard.format(head=head)
        return (f"{head}: a vocabulary of {a} rows against {b} ({_rows_delta(a, b)}): the tokenizer gained or "
                "lost tokens between the save and this load (added special tokens with resize_vocab, or the "
                "checkpoint belongs to another model or tokenizer); load it with the tokenizer it was trained "
                "with (the one saved beside it) and the same resize_vocab")
    if len(diff) == 1:
        shard = _shard(ck[diff[0]], cur[diff[0]])
        if shard:
            return shard.format(head=head)
    if diff:
        return (f"{head}: dimension {', '.join(str(i) for i in diff)} differs ({' vs '.join(str(ck[i]) for i in diff)}"
                f" against {' vs '.join(str(cur[i]) for i in diff)}): the checkpoint is of another model size or "
                "architecture than the one being built")
    return None


def _rows_delta(a: int, b: int) -> str:
    d = b - a
    return f"{abs(d)} {'more' if d > 0 else 'fewer'} in the model"


def _shard(a: int, b: int) -> str | None:
    """A dimension that is an exact 1/k of the other (k 2-64): a tensor-parallel or partitioned shard."""
    small, big = min(a, b), max(a, b)
    if small and big % small == 0 and 2 <= big // small <= 64:
        k = big // small
        side = "the checkpoint's" if a < b else "the model's"
        return ("{head}: " + f"{side} is exactly 1/{k} of the other ({small} × {k} = {big}): one shard of a "
                f"tensor split {k} ways (tensor-parallel or partitioned ranks) saved or loaded without merging")
    return None


# -- processor, imports, model types, autograd -------------------------------------------------------------------

def _import(cls: str, msg: str, versions: dict[str, tuple[str, str]], pkgs: tuple = ()) -> str | None:
    """An import that failed: a compiled extension against another torch, a missing shared library, a name or
    module a release lacks (with the package whose frame imports it, the innermost of `pkgs`, when it is another
    one: the pair of releases that do not go together), a package not installed, a start-up version check."""
    if cls == "RuntimeError" and LAZY_IMPORT.search(msg):
        cls = "ImportError"   # the wrapped error is on the lines after (the reader joins the first one to msg)
    if cls not in ("ImportError", "ModuleNotFoundError") and not (cls == "OSError" and NO_SHARED.search(msg)):
        # (ctypes.CDLL raises OSError for a library it cannot load: torch/__init__.py's _load_global_deps)
        return None
    m = UNDEFINED_SYMBOL.search(msg)
    if m and m.group("sym").startswith("nccl"):
        # an NCCL entry point torch was linked against is missing from the libnccl the loader found: that libnccl
        # is older than torch's: a system or pip libnccl shadows torch's own
        return (f"the libnccl loaded lacks {m.group('sym')}, which {m.group('so')} was built against: an older NCCL "
                "(a system libnccl on LD_LIBRARY_PATH, or an nvidia-nccl-cu* wheel of another release) shadows the "
                "one this torch needs; `pip show nvidia-nccl-cu12` and LD_LIBRARY_PATH show which, and reinstalling "
                "the NCCL wheel torch pins (or unsetting the path) cures it")
    if m:
        stem = m.group("so").split(".")[0]
        what = COMPILED.get(stem) or next((v for k, v in COMPILED.items() if stem.startswith(k)), None) \
            or f"the extension {m.group('so')}"
        return (f"{what} is a compiled extension built against another torch (or CUDA) than the one installed: "
                f"an undefined symbol, the C++ symbol it needs from torch is missing{_ver(versions, 'torch')}; "
                f"reinstall {what} built "
                "for this torch (a wheel for this torch and CUDA, or a build from source with "
                "--no-build-isolation), or uninstall it if the run can do without it")
    m = NO_SHARED.search(msg)
    if m:
        return (f"a shared library ({m.group('so')}) that a compiled package loads is not on this machine's library "
                "path: a CUDA/cuDNN/NCCL runtime of another version than the package was built for, or "
                "LD_LIBRARY_PATH not set; install the runtime it names or the package build for the installed one")
    m = CANNOT_IMPORT.search(msg)
    if m and "(unknown location)" in msg:
        # CPython says "(unknown location)" for a module with no __file__: a namespace package, i.e. a folder of
        # that name without __init__.py (the working directory, a checkout beside the script) imported instead
        # of the installed package
        top = m.group("mod").split(".")[0]
        return (f"'{m.group('mod')}' was imported from a folder named {top} with no __init__.py (\"unknown "
                f"location\": a namespace package), which shadows the installed {top}: rename or move that folder "
                f"(`python -c \"import {top}; print({top}.__path__)\"` in the run's working directory shows where "
                "it is)")
    if m:
        top = m.group("mod").split(".")[0]
        by = pkgs[-1] if pkgs and pkgs[-1][0] != top else None
        code = (f"{by[0]}{_ver(versions, by[0])} (in {by[2]}) imports it, so {by[0]} and {top} come from releases "
                f"that do not go together: install the {top} version that {by[0]} release pins, or the {by[0]} "
                f"release written for this {top}") if by else (
            f"the code importing it was written for another {top} release (newer or older); install the {top} "
            "version that code pins")
        return (f"the installed {top}{_ver(versions, top)} has no '{m.group('name')}' in {m.group('mod')}: {code}"
                f"{_ask_version(versions, top)}")
    m = NO_MODULE.search(msg) or NOT_INSTALLED.search(msg)
    if m:
        mod = m.group("mod") if "mod" in m.groupdict() else m.group("pkg")
        top = mod.split(".")[0]
        if "." in mod:   # the package imports, one of its modules does not: another release than expected
            return (f"the installed {top}{_ver(versions, top)} has no module {mod}: it is an older (or newer) "
                    f"{top} than the code importing it expects; install the {top} version that code pins"
                    f"{_ask_version(versions, top)}")
        pip = PIP_NAMES.get(top)
        how = (f"pip install {pip}" + (" --no-build-isolation, built for the installed torch and CUDA"
                                        if top == "flash_attn" else "")) if pip else f"install the package that provides {top}"
        return (f"{top} is not installed in the Python environment that ran the training (check that the "
                f"launcher's python is the one you installed into); {how}")
    r = REQUIRED_VERSION.search(msg)
    if r:
        # transformers utils/versions.py require_version (LLaMA-Factory's extras/misc.py check_version calls it
        # with "To fix: run `pip install REQ` or set `DISABLE_VERSION_CHECK=1`")
        found = f" (found {r.group('found')})" if r.group("found") else ""
        # which LLaMA-Factory releases admit the version found (catalog/lf_stack_ranges.json): moving LF is the
        # other way out when another package needs that version (hiyouga/LlamaFactory#5751)
        pkg, _, got = (r.group("found") or "").partition("==")
        lf = releases_judging(pkg.lower(), got) if got else None
        return (f"a start-up version check: the installed package is outside {r.group('req').strip()}{found}; "
                "install a version in that range (LLaMA-Factory's optional checks can be skipped with "
                "DISABLE_VERSION_CHECK=1, at the risk of the failures the range avoids)"
                + (f"; {lf.replace(' (DISABLE_VERSION_CHECK=1 skips it)', '')}" if lf and "admits" in lf else ""))
    c = PIP_COMMAND.search(msg)
    if c and " requires " in msg:
        # transformers' quantizers check their packages before loading (quantizers/quantizer_bnb_4bit.py
        # validate_environment): the package is missing, older than the minimum, or not importable here
        return (f"a package the run needs is missing or unusable in the training environment (an import check "
                f"failed, not the training): {c.group('cmd')}")
    return None


def _model_type(cls: str, msg: str, pkgs: tuple, versions: dict[str, tuple[str, str]],
                has_frames: bool) -> str | None:
    """A model type the installed transformers lacks: the ValueError that says so, a KeyError raised in
    configuration_auto.py, or a KeyError line alone (no traceback: the paste is its title) whose key is a model
    type of the doctor's catalog (readers/model/catalog.py)."""
    m = UNKNOWN_TYPE.search(msg)
    t = m.group("t") if m else None
    if t is None and cls == "KeyError":
        k = KEY_ONLY.match(msg.strip())
        if k and any(p[0] == "transformers" and p[2] == "configuration_auto.py" for p in pkgs):
            t = k.group("t")
        elif k and not has_frames and k.group("t") in _catalog_model_types():
            t = k.group("t")
    if t is not None:
        return (f"transformers{_ver(versions, 'transformers')} does not know the model type '{t}' (its "
                "configuration_auto.py has no such entry): the model was added to transformers in a later release;"
                f" upgrade transformers to one that has '{t}' (or, where the model folder ships its own code, "
                f"trust_remote_code: true){_ask_version(versions, 'transformers')}")
    n = NO_MODEL_TYPE.search(msg)
    if n:
        return (f"the config.json transformers read from {n.group('path')} has no `model_type` key and the path "
                "names no model transformers knows: it is not a full transformers model folder — a LoRA adapter "
                "folder (adapter_config.json: give the base model as model_name_or_path and the folder as "
                "adapter_name_or_path), a checkpoint of another library, a wrong path, or a config.json written "
                "without the key")
    c = TOKENIZER_CLASS.search(msg)
    if c:
        return (f"transformers{_ver(versions, 'transformers')} has no tokenizer class {c.group('c')}: a transformers "
                "older than the model (upgrade it) or a remote-code tokenizer loaded without trust_remote_code: "
                "true")
    return None


def _catalog_model_types() -> frozenset[str]:
    from finetune_doctor.readers.model.catalog import catalog_entries

    return frozenset(str((e.get("config") or {}).get("model_type")) for e in catalog_entries()
                     if (e.get("config") or {}).get("model_type"))


def _no_grad(msg: str) -> str | None:
    if not re.search(r"element \d+ of tensors does not require grad|does not require grad and does not have a grad_fn", msg):
        return None
    return ("the loss does not depend on any tensor that requires grad: either nothing is trainable (every "
            "parameter frozen, an adapter not attached, or the forward run under torch.no_grad), or reentrant "
            "gradient checkpointing with frozen embeddings, which drops the graph of every checkpointed block "
            "whose inputs do not require grad (LoRA on a frozen model); call model.enable_input_require_grads() "
            "before training, or checkpoint with use_reentrant=False")


def _file_format(msg: str, versions: dict[str, tuple[str, str]]) -> str | None:
    """Checkpoint files that are not what their name says: safetensors' header errors (safetensors
    ``SafeTensorError``, printed "Error while deserializing header: NAME"), torch's zip reader
    (caffe2/serialize/inline_container.cc "PytorchStreamReader failed reading zip archive: failed finding central
    directory"), and torch >= 2.6's ``weights_only`` default (torch/serialization.py:77, "Weights only load
    failed")."""
    m = SAFETENSORS_HEADER.search(msg)
    if m and m.group("err") in ("MetadataIncompleteBuffer", "IoError"):
        return ("the .safetensors file is shorter than its own header says: a download or a save that did not "
                "finish (disk full, a killed process, an interrupted transfer); download or save it again and "
                "compare its size with the source's")
    if m and m.group("err") in ("HeaderTooLarge", "InvalidHeaderDeserialization", "InvalidHeader"):
        return ("the file named .safetensors is not a safetensors file: most often a Git LFS pointer (a clone "
                "without git-lfs, a few hundred bytes) or an HTML error page saved in its place; fetch the real "
                "file (git lfs pull, or huggingface-cli download)")
    if "failed finding central directory" in msg:
        return ("the checkpoint file (.bin/.pt/.pth, a zip archive since torch 1.6) is cut short: a download or a "
                "save that did not finish (disk full, a killed process); save or download it again")
    if "Weights only load failed" in msg:
        return (f"torch{_ver(versions, 'torch')} loads checkpoints with weights_only=True by default since 2.6, "
                "and this file holds objects that are not plain tensors (an optimizer, scheduler or RNG state of "
                "an older trainer release): upgrade the trainer/transformers to a release that loads them for "
                "torch 2.6+, or load with weights_only=False if you trust the file")
    return None


def _environment(msg: str) -> str | None:
    """Build, placement and precision causes the message itself establishes: a JIT-compiled op that failed to
    build (torch/utils/cpp_extension.py:2546 "Error building extension 'NAME'", DeepSpeed's op builders call it;
    deepspeed/ops/op_builder/builder.py:47 "CUDA_HOME does not exist, unable to compile CUDA op(s)"), one
    operation's tensors on two GPUs, flash-attention given fp32 tensors, bitsandbytes without its CUDA library."""
    b = BUILD_FAILED.search(msg)
    if b or "CUDA_HOME does not exist" in msg:
        op = f"the op '{b.group('op')}'" if b else "a CUDA op"
        return (f"{op} is compiled at first use (DeepSpeed's op builders, torch.utils.cpp_extension) and the build "
                "failed: the compiler output above the traceback says why, most often no CUDA toolkit (nvcc, "
                "CUDA_HOME) of the CUDA version torch was built with, or no ninja / g++; install that toolkit, or "
                "a DeepSpeed with the op prebuilt (DS_BUILD_OPS=1 or DS_BUILD_<OP>=1 pip install deepspeed)")
    h = HEADER_MISSING.search(msg)
    if h:
        hdr = h.group("hdr")
        where = ("the Python development headers of the interpreter that runs the job (the python3.X-dev package "
                 "of the system Python, or the include folder of the conda or venv Python; a header that includes "
                 "another under a multiarch folder, as pyconfig.h does, needs the dev package of that same Python)"
                 ) if PYTHON_HEADER.search(hdr) else f"the package that provides {hdr}"
        return (f"a C/C++ build stopped because the header {hdr} was not found: torch.compile (Inductor and Triton "
                "compile at the first step), a JIT-built extension or op (torch.utils.cpp_extension, DeepSpeed's op "
                f"builders) or a source install compiles here; install {where}, or run without the compiled "
                "path (no torch.compile, a prebuilt wheel)")
    d = TWO_DEVICES.search(msg)
    if d and d.group("a").startswith("cuda") and d.group("b").startswith("cuda") and d.group("a") != d.group("b"):
        return (f"one operation got tensors on {d.group('a')} and {d.group('b')}: the model is spread over several "
                "GPUs in one process (device_map: auto, or a single `python` process that sees several GPUs) and "
                "a module's input stayed on another card; launch one process per GPU (torchrun, or "
                "FORCE_TORCHRUN=1 llamafactory-cli train) or make one GPU visible (CUDA_VISIBLE_DEVICES)")
    if "FlashAttention only support fp16 and bf16" in msg:
        return ("flash-attention got fp32 tensors: the run computes in fp32 (neither bf16 nor fp16 set, or a module "
                "kept in fp32); set bf16: true (Ampere or newer) or fp16: true, or use sdpa attention")
    if "exited unexpectedly" in msg and "DataLoader worker (pid" in msg:
        # torch/utils/data/dataloader.py `_try_get_data` (2.13 wheel :1305): the main process found a worker gone
        # while it waited for a batch; the worker died of a signal, not of a Python error (that would be re-raised
        # as "Caught E in DataLoader worker process N")
        return ("a DataLoader worker process died without a Python error while the main process waited for its "
                "batch: a signal ended it (the OOM killer's SIGKILL for host RAM, a SIGSEGV/SIGBUS in a dataset or "
                "image library, a full /dev/shm); the lines above (\"killed by signal\", dmesg) say which, and "
                "dataloader_num_workers: 0 runs the loading in the main process, where the fault shows")
    # ... or its CUDA set-up refusing (bitsandbytes 0.39-0.41 cuda_setup/main.py: "CUDA Setup failed despite GPU being
    # available", when no libbitsandbytes_cudaXYZ.so matches the CUDA runtime it found)
    if ("'NoneType' object has no attribute 'c" in msg and ("cadam" in msg or "cquantize" in msg or "cdequantize" in msg)
            ) or "CUDA Setup failed despite GPU" in msg:
        return ("bitsandbytes loaded without its CUDA library (a CPU-only build, or none matching this machine's "
                "CUDA; its import warns about it): install a bitsandbytes build for this CUDA (pip install -U "
                "bitsandbytes)")
    return None


def _unused_keys(msg: str) -> str | None:
    """transformers' HfArgumentParser.parse_dict refusing keys no dataclass of the command declares
    (hf_argparser.py "Some keys are not used by the HfArgumentParser: [...]"), read against LLaMA-Factory's
    argument schema (catalog/lf_keys.json): keys of transformers' TrainingArguments only are a training config given
    to a subcommand without training arguments (LLaMA-Factory's chat, webchat, api and export parse model, data,
    finetuning and generating arguments only: hparams/parser.py get_infer_args / get_eval_args); keys no release
    declares are typos or another release's keys."""
    m = UNUSED_KEYS.search(msg)
    if not m:
        return None
    keys = [k.strip().strip("'\"") for k in m.group("keys").split(",") if k.strip().strip("'\"")]
    if not m.group("end"):
        keys = keys[:-1]    # the line was cut inside the list: its last key may be cut too
    if not keys:
        return None
    from finetune_doctor.readers.config.keyschema import load_schema

    schema = load_schema()["keys"]
    unknown = [k for k in keys if k not in schema]
    training = [k for k in keys if k in schema and schema[k].get("dataclass") in ("TrainingArguments",
                                                                                 "Seq2SeqTrainingArguments")]
    if len(training) >= 2 and not unknown and len(training) == len(keys):
        return (f"every key the line shows is a training argument ({', '.join(training[:4])}{', ...' if len(training) > 4 else ''}):"
                " a training config given to a subcommand that reads no training arguments (LLaMA-Factory's "
                "chat, webchat, api and export); launch it with `llamafactory-cli train`, or give that subcommand a "
                "config with the model, template and adapter keys only")
    old = retired_keys(unknown)
    if old:
        return old
    if unknown:
        return (f"{', '.join(unknown[:6])}{' are' if len(unknown) > 1 else ' is'} not an argument of any "
                "LLaMA-Factory release the doctor knows: a typo or a key of another tool; `doctor lint` on the "
                "config names each with the nearest key")
    return None


def _rename_race(msg: str, versions: dict[str, tuple[str, str]] | None = None, seen: str = "") -> str | None:
    """A rename whose source vanished or whose target already existed (`RENAME`): another process renamed the
    same folder first — each rank or node renaming what only one should, or a shared filesystem whose nodes see
    the change late. transformers' staged save (Trainer._save_checkpoint writes a tmp-checkpoint folder, then
    renames it to checkpoint-N) did so in three episodes (savecause.py); which one, and its fix, follows the
    release read (`versions`) or the build the lines `seen` show (savecause.py `rename_history`)."""
    m = RENAME.search(msg)
    if not m:
        return None
    src = m.group("src").replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    gone = m.group("n") == "2"
    what = ("the folder to rename was already gone" if gone else "the target folder already existed")
    base = (f"{what} ('{src}' -> '{m.group('dst').rstrip('/').rsplit('/', 1)[-1]}'): another process renamed the "
            "same folder first — several ranks or nodes doing a rename only one should do, or a shared filesystem "
            "whose nodes see each other's changes late")
    if src.startswith("tmp-checkpoint-"):
        from finetune_doctor.analyzers.postmortem.savecause import rename_history

        return (base + f"; {src} is transformers' staged checkpoint save: "
                + rename_history(versions or {}, f"{seen}\n{src}"))
    return base


def _os_error(msg: str) -> str | None:
    m = ERRNO.search(msg)
    return ERRNO_CAUSES.get(int(m.group("n"))) if m else None


def _mismatch(cls: str, msg: str, pkgs: tuple, versions: dict[str, tuple[str, str]]) -> str | None:
    """Two packages from releases that do not go together: a module without an attribute the code uses, or a
    call with a keyword (or positional argument) the called function does not have in the installed release."""
    o = OBJ_ATTR.search(msg) if cls == "AttributeError" and pkgs else None
    if o and o.group("cls") not in BUILTIN_TYPES and pkgs[-1][0] in LIBRARIES:
        inner = pkgs[-1]
        return (f"{inner[0]}{_ver(versions, inner[0])} (in {inner[1]} of {inner[2]}) uses {o.group('cls')}."
                f"{o.group('attr')}, which the installed {o.group('cls')} does not have: {inner[0]} and the package "
                f"that defines {o.group('cls')} come from releases that do not go together (or the object is "
                f"not the one {inner[0]} expects); install the releases {inner[0]} pins"
                f"{_ask_version(versions, inner[0])}")
    m = MODULE_ATTR.search(msg) if cls == "AttributeError" else None
    if m:
        top = m.group("mod").split(".")[0]
        return (f"the installed {top}{_ver(versions, top)} has no {m.group('mod')}.{m.group('attr')}: the code "
                f"using it was written for another {top} release (newer or older); install the {top} version "
                f"that code pins{_ask_version(versions, top)}")
    c = BAD_CALL.search(msg) if cls == "TypeError" else None
    if c and not pkgs and c.group("kw") and "." in c.group("fn"):
        # no traceback (a title or a one-line paste): the class is named, its package is not; a keyword a class's
        # constructor does not take is the usual sign of code written for a newer release of that package
        return keyword_owner(c.group("fn"), c.group("kw"), versions)
    t = UNKNOWN_TEMPLATE.search(msg) if cls == "ValueError" else None
    if t:
        # LLaMA-Factory data/template.py get_template_and_fix_tokenizer raises it for a name no register_template
        # call of the installed checkout made (snapshot :683)
        return (f"this LLaMA-Factory install registers no template '{t.group('name')}': the name is misspelled or "
                "the template was added in a later release than the one installed; update LLaMA-Factory (templates "
                "are registered in src/llamafactory/data/template.py) or choose one that file registers")
    if c and pkgs:
        caller = pkgs[-1]
        what = f"the keyword '{c.group('kw')}'" if c.group("kw") else "a different set of arguments"
        return (f"{caller[0]}{_ver(versions, caller[0])} (in {caller[1]} of {caller[2]}) calls {c.group('fn')}() "
                f"with {what}, which the installed {c.group('fn')} does not take: two packages from releases that "
                "do not go together (one written for a newer or older release of the other); install releases "
                "that go together (the range your trainer's requirements pin)"
                f"{_ask_version(versions, caller[0])}")
    return None


# -- a key a sample lacks ----------------------------------------------------------------------------------------

DATA_FRAMES = (
    ("a batch was built", ("_next_data", "fetch (fetch.py)", "collat", "__getitem__", "__iter__ (data_loader.py)",
                           "get_batch_samples")),
    ("the dataset was preprocessed", ("_get_preprocessed_dataset", "map (arrow_dataset.py)", "_map_single",
                                      "preprocess_dataset", "align_dataset", "convert_", "_encode_data_example",
                                      "apply_function_on_filtered_inputs")),
)
"""Frames of the data path (torch's DataLoader fetch and collate, accelerate's data_loader.py iterator, HF
datasets' map, LLaMA-Factory's data/ converters and processors): a KeyError raised there is a sample's or a
batch's missing field, not a library's bug."""


def _cpu_adam_groups(cls: str, msg: str) -> str | None:
    """KeyError 'bias_correction': DeepSpeed's Adam reads that key from every param group in step() (ZeRO-Offload's
    deepspeed/ops/adam/cpu_adam.py L142-171 at 0.19.8; fused_adam.py likewise); torch's AdamW has no such key. Its constructor puts bias_correction
    in its defaults, which torch's Optimizer.add_param_group fills into each group it is given (torch 2.13
    optim/optimizer.py L1157-1163), so the groups it stepped were not the ones it was built with: they were
    replaced afterwards by groups of another optimizer, which torch's Optimizer.load_state_dict does with a saved
    state (L1007-1016: the saved groups replace the current ones, only `params` kept) and ZeRO's param_groups
    setter does when assigned (runtime/zero/stage3.py L3345-3347). Under ZeRO offload with the trainer's own
    optimizer (`optim: adamw_torch`, no "optimizer" block in the DeepSpeed JSON) accelerate rebuilds that torch
    optimizer as a DeepSpeedCPUAdam from its param groups (accelerate 1.11 utils/deepspeed.py
    map_pytorch_optim_to_deepspeed; accelerator.py L2285). Which replacement happened is not in the message
    (trial 10 case 01, LlamaFactory#10286, open)."""
    if cls != "KeyError" or msg.strip().strip("'\"") != "bias_correction":
        return None
    return ("DeepSpeed's own Adam (DeepSpeedCPUAdam under ZeRO-Offload, FusedAdam otherwise) reads "
            "`bias_correction` from each of its param groups at the optimizer step, and sets that key in every group "
            "it is built with: the groups it stepped were replaced after it was built by groups of another optimizer "
            "(a torch AdamW's, from "
            "`optim: adamw_torch`, have no such key), as loading a saved torch-optimizer state does "
            "(resume_from_checkpoint). Leads: name the optimizer in the DeepSpeed JSON (\"optimizer\": {\"type\": "
            "\"AdamW\", ...}) so DeepSpeed builds its CPU Adam itself, or resume without the old optimizer state; "
            "or turn offload_optimizer off")


def _data_key(cls: str, msg: str, frames: tuple) -> str | None:
    """A KeyError raised while a batch was built or the dataset was preprocessed (`DATA_FRAMES`): a sample or
    a batch lacks the key the code reads. None elsewhere."""
    if cls != "KeyError" or not frames:
        return None
    for when, words in DATA_FRAMES:
        fr = next((f for f in reversed(frames) if isinstance(f, str) and FUNC_FRAME.match(f)
                   and any(w in f for w in words)), None)
        if fr:
            return (f"raised while {when} ({fr}): a sample or a batch lacks the key {msg.strip() or '(not printed)'} "
                    "that this code reads; compare the dataset's columns with what the template, collator or "
                    "trainer expects (LLaMA-Factory: the columns and tags of the dataset's dataset_info.json entry, "
                    "and a multimodal template needs its images/videos column)")
    return None


# -- an exception raised inside a library ------------------------------------------------------------------------

def _library(cls: str, msg: str, pkgs: tuple, frames: tuple, versions: dict[str, tuple[str, str]]) -> str | None:
    """An exception raised in an installed library's own code (not a ``raise`` of a check): the innermost
    library frame, the library that called into it when it is another one, their versions."""
    if cls not in BUGGY or not pkgs:
        return None
    inner = pkgs[-1]
    if inner[0] not in LIBRARIES:
        return None
    last = frames[-1] if frames else ""
    if cls != "AssertionError" and str(last).startswith("raise "):
        return None       # a deliberate check: its message says what it checked
    caller = next((p for p in reversed(pkgs[:-1]) if p[0] != inner[0] and p[0] in LIBRARIES), None)
    where = f"{inner[0]}{_ver(versions, inner[0])}, in {inner[1]} of {inner[2]}"
    called = (f", called from {caller[0]}{_ver(versions, caller[0])}, in {caller[1]} of {caller[2]}"
              if caller else "")
    blamed = caller[0] if caller else inner[0]
    if "must match the size of tensor" in msg:
        # a shape the library did not expect is as often the input as the release (absolute position tables,
        # masks built for another length)
        return (f"raised inside {where}{called}: two tensors of different lengths met in the library's code; "
                "either the input is longer than the model (or its mask or cache) was built for (compare the two "
                "sizes with cutoff_len and the model's max_position_embeddings), or the installed "
                f"{blamed} release has a bug or does not match its caller{_ask_version(versions, blamed)}")
    return (f"raised inside {where}{called}, not in your own code: an error in a library's own code is "
            f"most often a bug or an incompatibility of the installed {blamed} release, and the usual cure is "
            f"another {blamed} version (the one your trainer pins, or a newer one with the fix); search the {blamed} "
            f"issues for this message{_ask_version(versions, blamed)}")


# -- the last warning above a traceback cut before its exception -------------------------------------------------

WARNING_MEANINGS = (
    # torch/utils/checkpoint.py ``check_backward_validity`` (torch 2.13 wheel :89-93), called by the reentrant
    # ``CheckpointFunction.forward`` (:238): no input of a checkpointed segment requires grad; torch's DDP reducer
    # (reducer.cpp, in libtorch_cpu) names reentrant backward passes that reuse parameters as reason 2 of
    # "Expected to mark a variable ready only once"
    ("None of the inputs have requires_grad=True",
     "reentrant gradient checkpointing ran a segment whose inputs need no gradient (frozen embeddings under LoRA "
     "or freeze tuning): the parameters inside get no gradient from it, and under DDP reentrant backward passes "
     "are what torch's reducer refuses with \"Expected to mark a variable ready only once\" (its reason 2); "
     "non-reentrant checkpointing avoids both (LLaMA-Factory: use_reentrant_gc: false; transformers: "
     "gradient_checkpointing_kwargs: {use_reentrant: false})"),
)


def warning_lead(tb: Notice | None) -> str | None:
    """What the last Python warning above a traceback cut before its exception line says (the reader keeps it
    in the traceback notice's ``warned``: {file, line, cat, msg}): the warning itself, quoted with its source,
    and its meaning where `WARNING_MEANINGS` knows it. A lead, not the exception: None without a warning."""
    w = ((tb.value or {}) if tb is not None and isinstance(tb.value, dict) else {}).get("warned")
    if not w:
        return None
    where = f"{w['file'].replace(chr(92), '/').rsplit('/', 1)[-1]}:{w['line']}"
    meaning = next((m for k, m in WARNING_MEANINGS if k in w["msg"]), None)
    return (f"the last warning the log printed before this traceback is {w['cat']} \"{w['msg'].rstrip('.')}\" "
            f"({where})" + (f": {meaning}" if meaning else " (a lead, not the error)"))


# -- where an exception with no other reading was raised -----------------------------------------------------------

def raised_at(tb: Notice | None) -> str | None:
    """Where an exception that no reading above explains was raised, as far as its traceback shows (the reader's
    ``frames``, "func (file.py)" outermost first, and ``pkgs``, (package, func, file) of the frames under
    site-packages/<package>/ or LLaMA-Factory's src/llamafactory/): the innermost frame with its package, and the
    nearest caller in another package or outside the installed ones. None without a frame: nothing is guessed."""
    v = tb.value if tb is not None and isinstance(tb.value, dict) else {}
    funcs = [f for f in (v.get("frames") or ()) if isinstance(f, str) and FUNC_FRAME.match(f)]
    if not funcs:
        return None
    owner = {f"{p[1]} ({p[2]})": p[0] for p in (v.get("pkgs") or ())}

    def named(f: str) -> str:
        o = owner.get(f)
        return f"{f[:-1]}, {o})" if o else f"{f[:-1]}, not under site-packages)"

    inner = funcs[-1]
    caller = next((f for f in reversed(funcs[:-1]) if owner.get(f) != owner.get(inner)), None)
    return f"raised in {named(inner)}" + (f", called from {named(caller)}" if caller else "")

