"""What HF and accelerate do to a DeepSpeed config dict before DeepSpeed sees it: fill "auto", insert, compare.

The steps (reference/deepspeed/hf_integration.md §1, checked against transformers 5.24
``integrations/deepspeed.py`` and accelerate 1.15 ``utils/dataclasses.py`` / ``accelerator.py``; the tests run the
installed transformers and accelerate on the same inputs and compare the dicts):

1. ``HfTrainerDeepSpeedConfig.trainer_config_process`` replaces ``"auto"`` in the keys HF owns (batch triple,
   ``gradient_clipping``, optimizer/scheduler params, ``fp16/bf16.enabled``); an explicit value that differs from
   the TrainingArguments value is collected as a mismatch.
2. ``trainer_config_finalize`` (at ``trainer.train()``, after the model is loaded) fills the hidden-size keys and
   the scheduler's step counts, then raises the mismatch ``ValueError``.
3. accelerate's ``DeepSpeedPlugin`` inserts ``gradient_accumulation_steps: 1`` when absent, overwrites
   ``steps_per_print``, and ``set_mixed_precision`` writes missing ``fp16``/``bf16`` sections.
4. ``Accelerator._prepare_deepspeed`` fills what is left from its own kwargs and raises ``ValueError: `KEY` not
   found in kwargs`` for any other ``"auto"``.

Everything is returned as data: the filled dict, the keys filled and left unresolved, the dtypes HF uses, and the
problems (readers/deepspeed/dsproblem.py). No import of torch, transformers or deepspeed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from finetune_doctor.readers.deepspeed import dsschema as S
from finetune_doctor.readers import limits
from finetune_doctor.readers.deepspeed.dsjson import copy_tree
from finetune_doctor.readers.deepspeed.dsproblem import SRC_ACCELERATE, SRC_CONFIG, SRC_HF, Problems

# HF TrainingArguments defaults for the keys HF compares (lf_args.json, transformers 4.57/5.x).
HF_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_grad_norm": 1.0,
               "learning_rate": 5e-05, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-08,
               "weight_decay": 0.0, "fp16": False, "bf16": False, "fp16_full_eval": False, "bf16_full_eval": False,
               "auto_find_batch_size": False, "save_on_each_node": False, "half_precision_backend": "auto",
               "max_steps": -1, "warmup_steps": 0, "warmup_ratio": 0.0}

UNKNOWN = object()
"""A TrainingArguments value we do not know (no YAML): the key stays unresolved and is not compared."""

_MISMATCH_HEAD = "Please correct the following DeepSpeed config values that mismatch TrainingArguments values:"
_MISMATCH_TAIL = "The easiest method is to set these DeepSpeed config values to 'auto'."


@dataclass
class Resolution:
    """The dict DeepSpeed receives and what happened on the way.

    `cfg` is the dict after HF and accelerate (an unfilled "auto" replaced by DeepSpeed's default, what zero.Init
    would see); `filled` maps dotted keys to the value HF/accelerate wrote; `unresolved` lists the "auto" keys whose
    value needs facts we lack (world size, hidden size, step count: None in `cfg`); `dtypes` is
    ``HfTrainerDeepSpeedConfig.dtype()`` under transformers 5.x and 4.x ('bfloat16' | 'float16' | 'float32', None
    without a YAML); `caveats` names version caveats (``no_yaml``, ``apex_fp16_4x``).
    """

    cfg: dict[str, Any]
    filled: dict[str, Any] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    dtypes: tuple[str | None, str | None] = (None, None)
    caveats: list[str] = field(default_factory=list)
    hf_lines: list[tuple[str, str, str, Any, Any]] = field(default_factory=list)


def resolve(raw: dict[str, Any], lf: Mapping[str, Any], world_size: int | None, hidden_size: int | None,
            dsv: tuple[int, ...] | None, tfv: tuple[int, ...] | None, out: Problems) -> Resolution:
    """Run steps 1-4 on a copy of `raw` with the YAML values `lf`; problems go to `out`.

    `lf` empty means no YAML (``doctor lint ds.json``): nothing is filled from it or compared with it.
    """
    r = Resolution(copy_tree(raw))
    arg = _Args(lf)
    if not arg.have_yaml:
        r.caveats.append("no_yaml")
    _trainer_process(r, arg, world_size)
    _trainer_finalize(r, arg, hidden_size, dsv, tfv, out)
    _accelerate(r, raw, arg, out)
    _report(r, raw, arg, dsv, out)
    return r


class _Args:
    """TrainingArguments as LLaMA-Factory hands them to HF: the YAML value, else HF's default (UNKNOWN without a
    YAML)."""

    def __init__(self, lf: Mapping[str, Any]):
        self.lf, self.have_yaml = lf, bool(lf)

    def __call__(self, k: str) -> Any:
        if not self.have_yaml:
            return UNKNOWN
        v = self.lf.get(k)
        return HF_DEFAULTS.get(k) if v is None else v

    def flag(self, *names: str) -> Any:
        """HF's ``a or b`` over TrainingArguments flags, UNKNOWN without a YAML."""
        vals = [self(n) for n in names]
        if any(v is UNKNOWN for v in vals):
            return UNKNOWN
        return bool(any(vals))


def _count(v: Any) -> int | None:
    """`v` as a count HF can multiply (an int in the int64 range, bools excluded), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and abs(v) <= limits.INT64_MAX else None


def _fill_match(r: Resolution, key: str, hf_val: Any, hf_key: str, group: str, must_match: bool = True) -> None:
    """HF's fill_match: "auto" becomes the TrainingArguments value; another value that differs is a mismatch."""
    node, leaf = find_node(r.cfg, key)
    if node is None:
        return
    cur = node.get(leaf)
    if cur == "auto":
        if hf_val is UNKNOWN:
            node[leaf] = None
            r.unresolved.append(key)
        else:
            node[leaf] = hf_val
            r.filled[key] = hf_val
        return
    if must_match and cur is not None and hf_val is not UNKNOWN and cur != hf_val:
        r.hf_lines.append((key, hf_key, group, cur, hf_val))


def _trainer_process(r: Resolution, a: _Args, world_size: int | None) -> None:
    """``trainer_config_process``: batch triple, clipping, optimizer/scheduler params, precision flags, dtype."""
    afbs = a("auto_find_batch_size") is True
    mbs, gas = a("per_device_train_batch_size"), a("gradient_accumulation_steps")
    tbs: Any = UNKNOWN
    if world_size is not None and _count(mbs) is not None and _count(gas) is not None:
        tbs = world_size * mbs * gas
    _fill_match(r, "train_micro_batch_size_per_gpu", mbs, "per_device_train_batch_size", "batch", not afbs)
    _fill_match(r, "gradient_accumulation_steps", gas, "gradient_accumulation_steps", "batch")
    _fill_match(r, "train_batch_size", tbs, "train_batch_size (calculated)", "batch", not afbs)
    _fill_match(r, "gradient_clipping", a("max_grad_norm"), "max_grad_norm", "clipping")
    lr = a("learning_rate")
    _fill_match(r, "optimizer.params.lr", lr, "learning_rate", "optimizer")
    betas = [a("adam_beta1"), a("adam_beta2")]
    _fill_match(r, "optimizer.params.betas", UNKNOWN if UNKNOWN in betas else betas, "adam_beta1+adam_beta2",
                "optimizer")
    _fill_match(r, "optimizer.params.eps", a("adam_epsilon"), "adam_epsilon", "optimizer")
    _fill_match(r, "optimizer.params.weight_decay", a("weight_decay"), "weight_decay", "optimizer")
    _fill_match(r, "scheduler.params.warmup_min_lr", 0, "warmup_min_lr", "scheduler", must_match=False)  # not an arg
    _fill_match(r, "scheduler.params.warmup_max_lr", lr, "learning_rate", "scheduler")
    if a("save_on_each_node") is True:
        ck = r.cfg.setdefault("checkpoint", {})
        if isinstance(ck, dict):
            ck["use_node_local_storage"] = True
            r.filled["checkpoint.use_node_local_storage"] = True
    _fill_match(r, "fp16.enabled", a.flag("fp16", "fp16_full_eval"), "fp16|fp16_full_eval", "precision")
    _fill_match(r, "bf16.enabled", a.flag("bf16", "bf16_full_eval"), "bf16|bf16_full_eval", "precision")
    # HfTrainerDeepSpeedConfig.dtype(), fixed here, before accelerate inserts missing fp16/bf16 sections:
    # 5.x bf16 if is_true(bf16.enabled), fp16 if is_true(fp16.enabled), else fp32; 4.x fp32 only if
    # is_false(fp16.enabled), else fp16
    if a.have_yaml:
        b_true = is_true(r.cfg, "bf16.enabled")
        r.dtypes = ("bfloat16" if b_true else "float16" if is_true(r.cfg, "fp16.enabled") else "float32",
                    "bfloat16" if b_true else "float32" if is_false(r.cfg, "fp16.enabled") else "float16")
    if a.flag("fp16", "fp16_full_eval") is True and str(a("half_precision_backend")) == "apex":
        r.caveats.append("apex_fp16_4x")


HIDDEN_SIZE_KEYS = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
"""The ``zero_optimization`` keys whose "auto" transformers fills from the model's hidden size."""


def hf_auto_values(hidden_size: int, float_prefetch: bool = False) -> dict[str, int | float]:
    """The values transformers writes for the hidden-size "auto" keys of ``zero_optimization`` (elements).

    ``reduce_bucket_size = h²``, ``stage3_prefetch_bucket_size = int(0.9·h²)``, ``stage3_param_persistence_threshold
    = 10·h`` (transformers 5.6.0 ``integrations/deepspeed.py:230-240``, ``trainer_config_finalize``; accelerate's
    ``_prepare_deepspeed`` writes the same three outside ZeRO-3). `float_prefetch`: transformers <= 4.44 wrote the
    prefetch size as the float ``0.9·h²`` under ZeRO-3 (DeepSpeed's pydantic v2 config then refuses a fractional
    one). The one home of these numbers: the reader here, the ZeRO-3 memory terms and the allocator replay
    (probes/zerotrace.py) all read them from this function (tests/test_one_home.py). Raises ValueError/TypeError
    when `hidden_size` is not a number.
    """
    h = int(hidden_size)
    return {"reduce_bucket_size": h * h, "stage3_prefetch_bucket_size": 0.9 * h * h if float_prefetch
            else int(0.9 * h * h), "stage3_param_persistence_threshold": 10 * h}


def _trainer_finalize(r: Resolution, a: _Args, hidden_size: int | None, dsv: tuple[int, ...] | None,
                      tfv: tuple[int, ...] | None, out: Problems) -> None:
    """``trainer_config_finalize``: the hidden-size keys and the scheduler's step counts."""
    zo = r.cfg.get("zero_optimization")
    stage3 = isinstance(zo, dict) and zo.get("stage") == 3     # HfDeepSpeedConfig._stage compares the raw value
    if isinstance(zo, dict):
        h = _count(hidden_size)
        pre_445 = tfv is not None and tfv < (4, 45)
        vals: dict[str, Any] = hf_auto_values(h, float_prefetch=pre_445 and stage3) if h else \
            dict.fromkeys(HIDDEN_SIZE_KEYS, UNKNOWN)
        # HF fills the stage-3 keys only for ZeRO-3; accelerate's _prepare_deepspeed fills all three otherwise.
        for k, v in vals.items():
            _fill_match(r, f"zero_optimization.{k}", v, "hidden_size", "zero", must_match=False)
        pf = zo.get("stage3_prefetch_bucket_size")
        key = "zero_optimization.stage3_prefetch_bucket_size"
        if stage3 and isinstance(pf, float) and not pf.is_integer() and key in r.filled \
                and S.at_least(dsv, S.PYDANTIC_V2_SINCE):
            out.add(key, "type", "prefetch_float", actual=pf, expected=int(pf), error="int_from_float",
                    error_msg="Input should be a valid integer, got a number with a fractional part",
                    source=SRC_HF + ".trainer_config_finalize", fix="set", fix_key=key, fix_value=int(pf),
                    detail="DeepSpeedZeroConfig: stage3_prefetch_bucket_size Input should be a valid integer, got a "
                           "number with a fractional part [type=int_from_float]")
    n_steps: Any = _count(a("max_steps"))
    n_steps = n_steps if n_steps is not None and n_steps > 0 else UNKNOWN
    _fill_match(r, "scheduler.params.total_num_steps", n_steps, "num_training_steps (calculated)", "scheduler")
    warm: Any = UNKNOWN
    if n_steps is not UNKNOWN:
        ws, wr = _count(a("warmup_steps")), S.lax_float(a("warmup_ratio") or 0.0)
        if ws is not None and ws > 0:
            warm = max(1, ws)
        elif wr is not None and math.isfinite(wr):
            warm = max(1, math.ceil(n_steps * wr))
    _fill_match(r, "scheduler.params.warmup_num_steps", warm, "warmup_steps", "scheduler")


def _accelerate(r: Resolution, raw: Mapping[str, Any], a: _Args, out: Problems) -> None:
    """accelerate's ``DeepSpeedPlugin.__post_init__``, ``set_mixed_precision`` and ``_prepare_deepspeed``."""
    cfg = r.cfg
    # the plugin overwrites steps_per_print (even an explicit one) "to stop deepspeed from logging @ stdout",
    # which is why DeepSpeed's own step lines never appear in LLaMA-Factory logs
    cfg["steps_per_print"] = math.inf
    r.filled["steps_per_print"] = math.inf
    gas = a("gradient_accumulation_steps")
    if "gradient_accumulation_steps" not in cfg:
        cfg["gradient_accumulation_steps"] = 1
        r.filled["gradient_accumulation_steps"] = 1
        if _count(gas) is not None and gas != 1:
            crash = "train_batch_size" in raw
            out.add("gradient_accumulation_steps", "mismatch", "gas_absent", group="batch", expected=gas,
                    actual=None, silent=not crash, source=SRC_ACCELERATE,
                    detail=("AssertionError: Check batch related parameters. train_batch_size is not equal to "
                            "micro_batch_per_gpu * gradient_acc_step * world_size") if crash else
                    (f"Gradient accumulation steps mismatch: GradientAccumulationPlugin has {gas}, DeepSpeed config "
                     "has 1. Using DeepSpeed's value."),
                    fix="set", fix_key="gradient_accumulation_steps", fix_value="auto")
    mixed = None if not a.have_yaml else ("fp16" if a("fp16") else ("bf16" if a("bf16") else "no"))
    for name, on in (("fp16", mixed == "fp16"), ("bf16", mixed == "bf16")):
        if name not in cfg and mixed is not None:
            cfg[name] = {"enabled": on, "auto_cast": True} if (on and name == "fp16") else {"enabled": on}
            r.filled[f"{name}.enabled"] = on
    if "optimizer" not in cfg:
        # HF builds the torch optimizer itself; accelerate then allows it (_prepare_deepspeed)
        cfg["zero_allow_untested_optimizer"] = True
    node, leaf = find_node(cfg, "zero_optimization.stage3_gather_16bit_weights_on_model_save")
    if node is not None and node.get(leaf) == "auto":
        node[leaf] = False
        r.filled["zero_optimization.stage3_gather_16bit_weights_on_model_save"] = False
    if cfg.get("gradient_clipping") == "auto":   # only reachable when HF did not run (never under the Trainer)
        cfg["gradient_clipping"] = 1.0


def _report(r: Resolution, raw: Mapping[str, Any], a: _Args, dsv: tuple[int, ...] | None, out: Problems) -> None:
    """The problems of the resolution: HF's mismatches, the precision traps, every "auto" nobody fills."""
    for key, hf_key, group, ds_val, hf_val in r.hf_lines:   # in HF's order, each with the line HF prints
        line = f"- ds {key}={ds_val} vs hf {hf_key}={hf_val}"
        out.add(key, "mismatch", "mismatch", group=group, hf_key=hf_key, expected=hf_val, actual=ds_val,
                source=SRC_HF + ".trainer_config_finalize", fix="auto",
                detail=f"ValueError: {_MISMATCH_HEAD}\n{line}\n{_MISMATCH_TAIL}")
    cfg = r.cfg
    for name, flag in (("fp16", a.flag("fp16", "fp16_full_eval")), ("bf16", a.flag("bf16", "bf16_full_eval"))):
        sec = raw.get(name)
        if isinstance(sec, dict) and "enabled" not in sec and flag is True:
            out.add(f"{name}.enabled", "mismatch", "precision_no_enabled", group="precision", expected=True,
                    actual=None, silent=True, source=SRC_HF + ".trainer_config_process", fix="set",
                    fix_key=f"{name}.enabled", fix_value="auto")
    f16 = S.lax_bool(cfg["fp16"].get("enabled")) if isinstance(cfg.get("fp16"), dict) else None
    b16 = S.lax_bool(cfg["bf16"].get("enabled")) if isinstance(cfg.get("bf16"), dict) else None
    precision_mismatch = any(g == "precision" for _, _, g, _, _ in r.hf_lines)
    if f16 and b16 and not precision_mismatch and ("fp16.enabled" not in r.filled or "bf16.enabled" not in r.filled):
        out.add("bf16.enabled" if "bf16.enabled" not in r.filled else "fp16.enabled", "mismatch", "both_halves",
                group="precision", actual=True, expected=None, fix="auto", source=SRC_CONFIG,
                detail="AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled")
    # every "auto" left is one accelerate cannot fill: ValueError at prepare(); zero.Init would see the DS default
    reported = out.keys("unknown", "removed", "deprecated")
    for key, val in list(leaf_items(cfg)):
        if val != "auto" or key in r.unresolved or key in reported:
            continue
        default = S.ds_default(key, dsv)
        node, leaf = find_node(cfg, key)
        if node is not None:
            node[leaf] = default
        out.add(key, "invalid", "unfilled_auto", actual="auto", expected=default, source=SRC_ACCELERATE,
                detail=(f"ValueError: `{key}` not found in kwargs. Please specify `{key}` without `auto` (set to "
                        "correct value) in the DeepSpeed config file or pass it in kwargs."),
                fix="set" if default is not None else None, fix_key=key, fix_value=default)


def find_node(cfg: Any, dotted: str) -> tuple[dict[str, Any] | None, str]:
    """HF's find_config_node: the dict holding the last part of `dotted`, or None if a parent is missing (or is
    not an object)."""
    parts = dotted.split(".")
    node: Any = cfg
    for p in parts[:-1]:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return None, parts[-1]
    return (node, parts[-1]) if isinstance(node, dict) else (None, parts[-1])


def leaf_items(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf; an empty mapping is a leaf. Iterative: any nesting depth."""
    stack: list[tuple[Mapping[str, Any], str, Iterator[Any]]] = [(d, prefix, iter(d.items()))]
    while stack:
        node, pre, it = stack[-1]
        for k, v in it:
            path = f"{pre}.{k}" if pre else str(k)
            if isinstance(v, dict) and v:
                stack.append((v, path, iter(v.items())))
                break
            yield path, v
        else:
            stack.pop()


def is_true(cfg: Mapping[str, Any], key: str) -> bool:
    """HF's is_true: the key is present and truthy."""
    node, leaf = find_node(cfg, key)
    v = node.get(leaf) if node is not None else None
    return False if v is None else bool(v)


def is_false(cfg: Mapping[str, Any], key: str) -> bool:
    """HF's is_false: the key is present and falsy."""
    node, leaf = find_node(cfg, key)
    v = node.get(leaf) if node is not None else None
    return False if v is None else not bool(v)
