"""Compare `doctor lint` with LLaMA-Factory's verdict (oracle.py) on each config of the parity corpus.

Each config gets one outcome:

* ``caught``: LF rejects it and the doctor reports an error at a right place: a key LF's message names or the
  corpus entry touched, on that key's line (or the key absent from the file: a finding at the file for a key the
  file lacks); for DeepSpeed rejections a finding in the DeepSpeed JSON counts too.
* ``misplaced``: LF rejects it and the doctor reports errors, none at a right place.
* ``missed``: LF rejects it and the doctor reports no error.
* ``clean``: LF accepts it and the doctor reports no error.
* ``later``: LF accepts it and the doctor's errors all describe failures that come after argument parsing, at
  places the parser does not check (LATER_FAILURES: a value parse_dict passes without looking at it, a file or
  name looked up later). They are errors for the user, and the documented exception of the parity rule.
* ``false-error``: LF accepts it and the doctor reports an error that is not such a later failure.
* ``dropped``: LF failed only because an optional package is missing on this machine, or the config needs a
  launcher mode this machine cannot run (Megatron-Core / Megatron-Bridge, whose packages are not installable
  here): no verdict about the config.

Both sides see the same stack: the doctor is told ``--transformers 5.6.0`` (the test extra's pin), and runs from
the folder LF is launched from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finetune_doctor.readers.config.keyschema import load_schema

WORLD_SIZE = 8   # parity/oracle.py answers as `torchrun --nproc-per-node 8`

# rule codes whose errors name a failure after argument parsing (the parity rule's documented exception), and why
LATER_FAILURES = {
    "FD003": "a value parse_dict passes unchecked (wrong type, a Literal choice, out of range): it fails where the "
             "value is first used (model load, data loading, the first step)",
    "FD005": "flash_attn is checked only at model load (\"Unknown attention type\")",
    "FD201": "DeepSpeed validates its config in deepspeed.initialize (after parsing, before the first step)",
    "FD202": "HF compares the DeepSpeed batch values with the YAML in trainer_config_finalize, at deepspeed_init",
    "FD203": "HF compares the DeepSpeed precision with the YAML in trainer_config_finalize, at deepspeed_init",
    "FD702": "a learning rate this far above the usual diverges as warm-up ends (NaN loss)",
    "FD703": "the GaLore/APOLLO optimizer builder rejects the optim at trainer creation (NotImplementedError)",
    "FD052": "transformers refuses a model_type its release does not register when the model's config is loaded "
             "(AutoConfig, at model load), after the arguments parsed",
    "FD055": "export_model refuses a merge into a quantized model after the model has loaded (train/tuner.py)",
    "FD056": "a remote-code InternVL checkpoint loads no processor: the run stops while preparing the dataset",
    "FD662": "DeepSpeed asserts the ZeRO stage under AutoTP in deepspeed.initialize, after parsing",
    "FD026": "with none of do_train/do_eval/do_predict set the parser accepts the run and LF's workflow then skips "
             "every stage (sft/workflow.py's do_train/do_eval/do_predict branches): it ends having trained nothing",
    "FD633": "LLaMA-Factory's LongLoRA patch checks the transformers version at model load (require_version), after "
             "the arguments parsed",
}
REJECTED = ("caught", "misplaced", "missed")
ACCEPTED = ("clean", "later", "false-error")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Outcome:
    id: str
    source: str
    outcome: str
    lf_phase: str
    lf_error: str | None
    errors: tuple[tuple[str, str | None, int | None, str], ...]   # (code, key, line, message)
    right_keys: tuple[str, ...] = ()
    note: str | None = None


# words of LF/transformers/accelerate messages that stand for keys without naming them
_PHRASES = {
    "layer-wise GaLore": ("galore_layerwise", "use_galore"), "layer-wise APOLLO": ("apollo_layerwise", "use_apollo"),
    "BAdam": ("use_badam", "badam_mode"), "Template ": ("template",), "Undefined dataset": ("dataset", "eval_dataset"),
    "dataset_info.json": ("dataset_dir", "dataset"), "DeepSpeed": ("deepspeed",), "deepspeed": ("deepspeed",),
    "Quantization is only compatible": ("quantization_bit", "finetuning_type"), "quantized model": ("quantization_bit",),
    "saving steps": ("save_steps", "eval_steps"), "save and eval strategy": ("save_strategy", "eval_strategy"),
    "SchedulerType": ("lr_scheduler_type",), "IntervalStrategy": ("eval_strategy", "logging_strategy"),
    "SaveStrategy": ("save_strategy",), "OptimizerNames": ("optim",), "eval_dataset be provided":
    ("do_eval", "do_predict", "predict_with_generate", "eval_strategy"), "PPO": ("stage",),
    "Invalid fine-tuning method": ("finetuning_type",), "requires an eval strategy": ("eval_strategy",),
    # LF data_args.py: "Streaming mode should have an integer val size." names the pair in words
    "Streaming mode should have an integer val size": ("val_size", "streaming"),
}


def keys_named(message: str, known: set[str], values: dict[str, Any] | None = None) -> set[str]:
    """Config keys that LF's message names: `x`, --x, 'x' in a key list, the bare word, a phrase of _PHRASES
    that stands for keys, and for a TypeError on None the keys the config leaves empty."""
    message = message or ""
    out = {w for w in _NAME.findall(message) if w in known and len(w) > 2}
    for phrase, keys in _PHRASES.items():
        if phrase in message:
            out.update(keys)
    if "NoneType" in message and values:
        out.update(k for k, v in values.items() if v is None)
    return out


def _line_of(text: str, key: str) -> int | None:
    m = re.search(rf"^{re.escape(key)}\s*:", text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else None


def doctor_errors(config: Path, cwd: Path, lf_version: str | None = None, transformers: str = "5.6.0"
                  ) -> list[tuple[str, str | None, int | None, str, str | None]]:
    """`doctor lint` on `config` from `cwd` (for LF `lf_version`, default: the installed release): its error
    findings as (code, key, line, message, file)."""
    from finetune_doctor.errors import InputError
    from finetune_doctor.pipeline import lint
    from finetune_doctor.settings import Options

    saved = os.getcwd()
    os.chdir(cwd)
    # the oracle answers as a torchrun launch of WORLD_SIZE ranks: the doctor reads the same launch from the
    # environment (facts/kinds.py launch_facts), as it would on the training machine
    saved_ws = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(WORLD_SIZE)
    try:
        # the oracle parses on this machine, where a dataset_info.json or DeepSpeed file that is missing is missing:
        # the doctor is told so with --strict (without it such a path is not-checked-here, info: issue 21)
        opts = Options.from_cli(command="lint", paths=[str(config)], transformers_version=transformers,
                                lf_version=lf_version, strict=True)
        report = lint.run([str(config)], opts)
    except InputError as err:  # exit 2: `file:line: message`, the strongest "this will not start"
        key = "deepspeed" if err.file and str(err.file).endswith(".json") else None
        return [("exit-2", key, err.line, err.message, str(err.file) if err.file else None)]
    finally:
        os.chdir(saved)
        if saved_ws is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = saved_ws
    # FD641 is --strict's gate on an assumption that moves the memory verdict: a statement about what the doctor
    # could not see, not about the config, so it is no answer to "does LF accept this config"
    return [(f.code, f.location.key, f.location.line, f.message, f.location.file) for f in report.findings
            if f.severity == "error" and f.code != "FD641"]


def needs_launcher(text: str) -> str | None:
    """The launcher mode a config is written for, when this machine cannot run it (dropped from the count)."""
    keys = {m.group(1) for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:", text, re.M)}
    schema = load_schema()["keys"]
    if any((schema.get(k) or {}).get("group") == "megatron_bridge" for k in keys):
        return "Megatron-Bridge keys (USE_MEGATRON_BRIDGE=1 and megatron-bridge, not installable here)"
    if {"expert_model_parallel_size", "tensor_model_parallel_size", "moe_grouped_gemm"} & keys:
        return "Megatron-Core keys (USE_MCA=1 and mcore_adapter, not installable here)"
    return None


def judge_entry(entry: dict[str, Any], verdict: Any = None, lf_version: str | None = None,
                transformers: str = "5.6.0") -> Outcome:
    """Run both sides on one index entry of scripts/gen_parity_corpus.py and classify the result. `verdict` is
    LF's answer when another process gave it (tests/test_parity_releases.py: another release's parser), else the
    installed LF is asked here; `lf_version` and `transformers` are what the doctor is told (`--llamafactory`,
    `--transformers`: the stack the oracle ran on)."""
    config, cwd = Path(entry["config"]), Path(entry["cwd"])
    text = config.read_text(encoding="utf-8")
    launcher = needs_launcher(text)
    if launcher:
        return Outcome(entry["id"], entry["source"], "dropped", "-", None, (), note=launcher)
    if verdict is None:
        from parity.oracle import lf_verdict

        verdict = lf_verdict(config, cwd=cwd)
    if verdict.missing_package:
        return Outcome(entry["id"], entry["source"], "dropped", verdict.phase, verdict.error, (),
                       note=f"needs the package {verdict.missing_package}")
    errs = doctor_errors(config, cwd, lf_version, transformers)
    shown = tuple((c, k, ln, m) for c, k, ln, m, _f in errs)
    if verdict.accepted:
        if not errs:
            return Outcome(entry["id"], entry["source"], "clean", verdict.phase, None, ())
        later = all(c in LATER_FAILURES for c, *_ in errs)
        return Outcome(entry["id"], entry["source"], "later" if later else "false-error", verdict.phase, None, shown)
    from parity.oracle import read_like_lf

    values = read_like_lf(config)
    known = set(load_schema()["keys"]) | set(entry.get("keys") or ()) | set(values if isinstance(values, dict) else ())
    right = set(entry.get("keys") or ()) | keys_named(verdict.error or "", known,
                                                      values if isinstance(values, dict) else None)
    if not errs:
        return Outcome(entry["id"], entry["source"], "missed", verdict.phase, verdict.error, (), tuple(sorted(right)))
    ds_reject = "deepspeed" in right
    for _code, key, line, _msg, file in errs:
        if file and file.endswith(".json") and ds_reject:
            return Outcome(entry["id"], entry["source"], "caught", verdict.phase, verdict.error, shown,
                           tuple(sorted(right)))
        if key in right and (line == _line_of(text, key) or _line_of(text, key) is None):
            return Outcome(entry["id"], entry["source"], "caught", verdict.phase, verdict.error, shown,
                           tuple(sorted(right)))
    return Outcome(entry["id"], entry["source"], "misplaced", verdict.phase, verdict.error, shown,
                   tuple(sorted(right)))


def matrix(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts by outcome, recall of LF's rejections and the false errors, overall and by source."""
    from collections import Counter

    by = Counter(o.outcome for o in outcomes)
    rejected = sum(by[k] for k in REJECTED)
    accepted = sum(by[k] for k in ACCEPTED)
    per_source: dict[str, Counter] = {}
    for o in outcomes:
        per_source.setdefault(o.source, Counter())[o.outcome] += 1
    return {"total": len(outcomes), "by_outcome": dict(by), "rejected": rejected, "accepted": accepted,
            "recall": by["caught"] / rejected if rejected else 1.0, "false_errors": by["false-error"],
            "per_source": {k: dict(v) for k, v in sorted(per_source.items())}}
