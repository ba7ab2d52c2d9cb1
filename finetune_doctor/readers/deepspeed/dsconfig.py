"""Read the DeepSpeed JSON that a LLaMA-Factory YAML names with ``deepspeed:``, resolved as HF resolves it.

What happens to that file at run time (reference/deepspeed/hf_integration.md §1): HF reads it with ``json.load``
(readers/deepspeed/dsjson.py reads it the same way, with key positions and limits), HF and accelerate fill its ``"auto"``
values and insert what they insert (readers/deepspeed/dsauto.py), and ``deepspeed.initialize`` validates it against
DeepSpeed's pydantic sections and ``runtime/config.py`` (readers/deepspeed/dscheck.py over the vendored schema of
readers/deepspeed/dsschema.py). This module ties the three together into a `DSConfig`, without importing torch,
transformers or deepspeed; `validate_with_deepspeed` adds the installed DeepSpeed's own verdict when it is
importable (the lint path never calls it).

Readers read and type; they do not judge. The `DSProblem` list (readers/deepspeed/dsproblem.py) records, as data, what the
runtime itself would reject or silently change; the rules in ``rules/deepspeed-*.yaml`` word and report it, and
facts/ds.py derives the facts rules read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from finetune_doctor.errors import InputError
from finetune_doctor.readers.deepspeed import dsauto, dscheck, dsjson
from finetune_doctor.readers.deepspeed import dsschema as S
from finetune_doctor.readers.deepspeed.dsproblem import DSProblem, Problems, locate

__all__ = ["DSConfig", "DSProblem", "build_ds_config", "load_ds_config", "parse_ds_text", "read_ds_json",
           "resolve_ds_path", "validate_with_deepspeed"]

_INSTALLED = object()


@dataclass(frozen=True)
class DSConfig:
    """A DeepSpeed config as the training run will use it.

    * `path`: the resolved file (str), or None for an inline dict given as ``deepspeed:`` value.
    * `raw`: the JSON as written. `received`: the dict DeepSpeed receives, `raw` after HF and accelerate filled
      every ``"auto"`` they fill and inserted what they insert (``gradient_accumulation_steps: 1``, missing
      ``fp16``/``bf16`` sections, ``zero_allow_untested_optimizer``); a value that needs information we lack
      (world size, hidden size, number of training steps) is None and its key is listed in `unresolved`; an
      ``"auto"`` nobody fills is replaced by the DeepSpeed default (what ``zero.Init`` would see) and reported.
    * `resolved`: `received` with every value DeepSpeed's schema rejects replaced by what the run model uses
      instead (DeepSpeed's default; a section of the wrong type dropped; the legacy boolean ``zero_optimization``
      as the stage DeepSpeed reads it), so that every value has the schema's type. This is what the memory model
      (run.py) and the ``ds`` facts read; it equals `received` for a config DeepSpeed accepts.
    * `defaults`: DeepSpeed defaults of ``zero_optimization`` keys that matter for memory and are absent from the
      JSON, keyed relative to ``zero_optimization`` (``reduce_bucket_size``, ``offload_optimizer.pin_memory``);
      values from schema.md §2 with the version-dependent ones resolved for `ds_version`.
    * `positions`: dotted key → (line, column), 1-based.
    * `filled`: dotted key → the value HF/accelerate wrote there. `explicit`: dotted leaf keys written with a value
      other than ``"auto"``.
    * `ds_version` / `transformers_version`: the versions the resolution assumed (None: newest known behaviour,
      DeepSpeed 0.19.8 / transformers 5.x). `caveats`: version caveats as names (``version_unknown``,
      ``clipping_absent``, ``no_yaml``, ``apex_fp16_4x``; facts/ds.py words them).
    * `hf_dtype` / `hf_dtype_4x`: ``HfTrainerDeepSpeedConfig.dtype()`` after HF's fill and before accelerate
      inserts missing sections — the dtype transformers 5.x / 4.x use for ``zero.Init`` and loading
      (hf_integration.md §2): 'bfloat16' | 'float16' | 'float32'; None when the YAML is unknown.
    """

    path: str | None
    raw: dict[str, Any]
    resolved: dict[str, Any]
    defaults: dict[str, Any]
    positions: dict[str, tuple[int, int]]
    problems: tuple[DSProblem, ...] = ()
    filled: dict[str, Any] = field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    explicit: tuple[str, ...] = ()
    ds_version: str | None = None
    transformers_version: str | None = None
    world_size: int | None = None
    hidden_size: int | None = None
    caveats: tuple[str, ...] = ()
    hf_dtype: str | None = None
    hf_dtype_4x: str | None = None
    received: dict[str, Any] = field(default_factory=dict)

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage DeepSpeed runs (0 when absent or not 0–3)."""
        return S.stage_of(self.resolved)

    def get(self, dotted: str, default: Any = None) -> Any:
        """A resolved value by dotted path, falling back to `defaults` for zero_optimization keys.

        ZeRO keys are found under either of the names DeepSpeed accepts (``stage3_prefetch_bucket_size`` or its
        pydantic field name ``prefetch_bucket_size``).
        """
        parts = dotted.split(".")
        node: Any = self.resolved
        for i, part in enumerate(parts):
            if isinstance(node, dict) and part not in node and i == 1 and parts[0] == "zero_optimization":
                spec = S.ZERO_FIELDS.get(part)
                alt = spec.other_name if spec else S.ZERO_BY_OTHER_NAME.get(part)
                part = alt if alt and alt in node else part
            if not isinstance(node, dict) or part not in node:
                if parts[0] == "zero_optimization" and len(parts) > 1:
                    rel = ".".join(parts[1:])
                    return self.defaults.get(rel, self.defaults.get(S.ZERO_BY_OTHER_NAME.get(rel, ""), default))
                return default
            node = node[part]
        return node


# ---------------------------------------------------------------------------------------------------------------
# Path resolution and reading
# ---------------------------------------------------------------------------------------------------------------

def resolve_ds_path(value: Any, yaml_path: str | os.PathLike[str], yaml_line: int | None = None,
                    cwd: str | os.PathLike[str] | None = None) -> Path:
    """Find the DeepSpeed JSON named by a YAML's ``deepspeed:`` value.

    HF opens the value as a path relative to the process cwd (``llamafactory-cli train`` is normally run from the
    LLaMA-Factory root, so LF's YAMLs say ``examples/deepspeed/ds_z3_config.json``). We try, in order: `cwd`
    (default: the current directory), the YAML's directory, then each parent of the YAML's directory — so a YAML
    under ``examples/train_lora/`` finds ``examples/deepspeed/...`` from the checkout root. An absolute path is
    used as is. Returns the first existing file.

    Raises InputError naming the YAML file and the line of its ``deepspeed:`` key: with every path tried when none
    exists ("not found"), or when the first that exists is a directory, a FIFO or a device, or the OS refuses the
    path (too long, a symlink loop).
    """
    text = str(value).strip()

    def err(msg: str) -> InputError:
        return InputError(msg, file=str(yaml_path), line=yaml_line)

    if not text:
        raise err("deepspeed: is empty; give the path of a DeepSpeed JSON")
    try:
        tried = _candidates(Path(text), yaml_path, cwd)
    except OSError as oserr:         # a name too long for the OS, a deleted working directory
        raise err(f"deepspeed: {text[:200]!r} cannot be opened: {oserr.strerror or oserr}") from None
    for cand in tried:
        try:
            if cand.is_file():
                return cand
            if cand.is_dir():
                raise err(f"deepspeed: {text!r} is a directory, expected a JSON file")
            if cand.exists():
                raise err(f"deepspeed: {text!r} is not a regular file (a FIFO, socket or device), expected a JSON "
                          "file")
            if os.path.lexists(cand):
                os.stat(cand)        # a symlink loop raises ELOOP here; a dangling link is "not found"
        except FileNotFoundError:
            continue
        except OSError as oserr:
            raise err(f"deepspeed: {text[:200]!r} cannot be opened: {oserr.strerror or oserr}") from None
    shown = ", ".join(str(t) for t in tried[:6]) + (f" (+{len(tried) - 6} parents)" if len(tried) > 6 else "")
    raise err(f"DeepSpeed config {text!r} not found (tried: {shown})")


def _candidates(p: Path, yaml_path: str | os.PathLike[str], cwd: str | os.PathLike[str] | None) -> list[Path]:
    if p.is_absolute():
        return [p]
    bases = [Path(cwd) if cwd is not None else Path.cwd()]
    ydir = Path(yaml_path).resolve().parent
    bases.append(ydir)
    bases.extend(ydir.parents)
    seen: set[Path] = set()
    tried = []
    for b in bases:
        cand = b / p
        key = cand.resolve() if cand.exists() else cand.absolute()
        if key not in seen:
            seen.add(key)
            tried.append(cand)
    return tried


def read_ds_json(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, tuple[int, int]], list[str]]:
    """Read a DeepSpeed JSON as HF does (``json.load``, readers/deepspeed/dsjson.py); returns (dict, positions, duplicated
    dotted keys). Raises InputError (file, line) for a file that is not a regular file, unreadable, over the
    limits of readers/limits.py, not UTF-8, empty, malformed or not a JSON object."""
    doc = dsjson.read_json(str(path))
    return doc.values, doc.positions, list(doc.duplicates)


def parse_ds_text(text: str, path: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]], list[str]]:
    """`read_ds_json` on text already read."""
    doc = dsjson.parse(text, path)
    return doc.values, doc.positions, list(doc.duplicates)


# ---------------------------------------------------------------------------------------------------------------
# Loading and resolution
# ---------------------------------------------------------------------------------------------------------------

def load_ds_config(value: Any, yaml_path: str | os.PathLike[str], yaml_line: int | None, lf: Mapping[str, Any],
                   world_size: int | None, hidden_size: int | None, *, ds_version: str | None | object = _INSTALLED,
                   transformers_version: str | None | object = _INSTALLED,
                   cwd: str | os.PathLike[str] | None = None) -> DSConfig:
    """Read, resolve and check the DeepSpeed config named by ``deepspeed:`` in a LLaMA-Factory YAML.

    `value` is the YAML value (a path, or a dict for an inline config); `yaml_path`/`yaml_line` locate the
    ``deepspeed:`` key for error messages; `lf` holds the merged, typed YAML keys (HF defaults fill what is
    absent: per_device_train_batch_size 8, gradient_accumulation_steps 1, max_grad_norm 1.0, ...);
    `world_size` is the number of training processes (GPUs × nodes; None if unknown: train_batch_size then stays
    unresolved); `hidden_size` is the model's ``hidden_size`` (None if unknown: the hidden-size "auto" keys stay
    unresolved). `ds_version`/`transformers_version` default to the installed versions read from package metadata
    (no import); pass None for "newest known behaviour".

    Raises InputError for a missing, unreadable, oversized or malformed file (readers/deepspeed/dsjson.py).
    """
    if ds_version is _INSTALLED:
        ds_version = S.installed_version("deepspeed")
    if transformers_version is _INSTALLED:
        transformers_version = S.installed_version("transformers")
    if isinstance(value, Mapping):
        raw = dsjson.plain_copy(dict(value), str(yaml_path), yaml_line)
        path, positions, dup_paths = None, {}, []
    else:
        p = resolve_ds_path(value, yaml_path, yaml_line, cwd=cwd)
        raw, positions, dup_paths = read_ds_json(p)
        path = str(p)
    return build_ds_config(raw, path, positions, lf, world_size, hidden_size, ds_version=ds_version,  # type: ignore[arg-type]
                           transformers_version=transformers_version, dup_paths=dup_paths)  # type: ignore[arg-type]


def build_ds_config(raw: dict[str, Any], path: str | None, positions: Mapping[str, tuple[int, int]],
                    lf: Mapping[str, Any], world_size: int | None, hidden_size: int | None, *,
                    ds_version: str | None = None, transformers_version: str | None = None,
                    dup_paths: list[str] | tuple[str, ...] = ()) -> DSConfig:
    """`load_ds_config` on an already parsed dict (used by tests and by inline ``deepspeed:`` dicts)."""
    dsv = S.parse_version(ds_version)
    tfv = S.parse_version(transformers_version)
    pos = dict(positions)
    out = Problems(pos)
    for d in dup_paths:
        out.add(d, "duplicate", "duplicate", source="deepspeed/runtime/config.py dict_raise_error_on_duplicate_keys",
                detail="ValueError: Duplicate keys in DeepSpeed config")
    fallbacks = dscheck.check_schema(raw, dsv, out)
    res = dsauto.resolve(raw, lf, world_size, hidden_size, dsv, tfv, out)
    resolved = _apply_fallbacks(res.cfg, fallbacks)
    caveats = list(res.caveats)
    if ds_version is None:
        caveats.append("version_unknown")
    if "gradient_clipping" not in raw:
        caveats.append("clipping_absent")
    return DSConfig(path=path, raw=raw, resolved=resolved, defaults=_defaults(raw, resolved, dsv), positions=pos,
                    problems=tuple(out.items), filled=res.filled, unresolved=tuple(res.unresolved),
                    explicit=tuple(k for k, v in dsauto.leaf_items(raw) if v != "auto"), ds_version=ds_version,
                    transformers_version=transformers_version, world_size=world_size, hidden_size=hidden_size,
                    caveats=tuple(caveats), hf_dtype=res.dtypes[0], hf_dtype_4x=res.dtypes[1], received=res.cfg)


def _apply_fallbacks(received: dict[str, Any], fallbacks: Mapping[str, Any]) -> dict[str, Any]:
    """`received` with the fallbacks of readers/deepspeed/dscheck.py applied (a copy only when there are any)."""
    if not fallbacks:
        return received
    out = dsjson.copy_tree(received)
    for key in sorted(fallbacks, key=lambda k: k.count(".")):
        node, leaf = dsauto.find_node(out, key)
        if node is None or leaf not in node:
            continue
        if fallbacks[key] is dscheck.DROP:
            del node[leaf]
        else:
            node[leaf] = fallbacks[key]
    return out


def _defaults(raw: Mapping[str, Any], resolved: Mapping[str, Any], dsv: tuple[int, ...] | None) -> dict[str, Any]:
    zo_raw = raw.get("zero_optimization") if isinstance(raw.get("zero_optimization"), dict) else {}
    zo_res = resolved.get("zero_optimization") if isinstance(resolved.get("zero_optimization"), dict) else {}
    present = set(zo_raw) | {S.ZERO_FIELDS[n].other_name for n in zo_raw
                             if n in S.ZERO_FIELDS and S.ZERO_FIELDS[n].other_name}
    present |= {S.ZERO_BY_OTHER_NAME[n] for n in zo_raw if n in S.ZERO_BY_OTHER_NAME}
    out: dict[str, Any] = {}
    for k in S.MEMORY_ZERO_KEYS:
        if k in present:
            continue
        if k == "overlap_comm":   # validator overlap_comm_valid: None → True for stage 3, else False
            out[k] = S.stage_of(resolved) == 3
        else:
            out[k] = S.ZERO_FIELDS[k].default
    for sec, table in S.OFFLOAD_TABLES.items():
        o = zo_res.get(sec)
        if isinstance(o, dict):
            for k, spec in table.items():
                if k not in o and k != "nvme_path":
                    out[f"{sec}.{k}"] = S.pin_memory_default(dsv) if k == "pin_memory" else spec.default
    return out


# ---------------------------------------------------------------------------------------------------------------
# The installed DeepSpeed's own verdict (check command only; imports torch + deepspeed, ~2.5 s)
# ---------------------------------------------------------------------------------------------------------------

def validate_with_deepspeed(cfg: DSConfig) -> list[DSProblem] | None:
    """Validate with the installed DeepSpeed's config models; None when deepspeed is not importable.

    Two passes (schema.md §3): the pydantic section models (``DeepSpeedZeroConfig``, ``DeepSpeedFP16Config``,
    ``DeepSpeedBF16Config``) on the JSON as written — they report every field error at once — then
    ``DeepSpeedConfig`` on the received dict with ``deepspeed.comm.get_world_size/get_rank`` patched to the run's
    world size, which adds the batch identity, removed keys and the other config.py assertions (it stops at the
    first). Returns only problems that the vendored checks in `load_ds_config` did not already report for the same
    key, each of kind and check ``deepspeed`` with the DeepSpeed message in `detail` and its version in `version`.
    """
    import contextlib
    import io

    # DeepSpeed's logger writes to stdout (utils/logging.py StreamHandler(sys.stdout)), e.g. "Setting accelerator to
    # CPU" on a GPU-less box; stdout carries the report (--format json), so everything it prints here is swallowed.
    # A logger first created inside this block stays bound to the buffer for the rest of the process.
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        return _validate_with_deepspeed(cfg)


def _validate_with_deepspeed(cfg: DSConfig) -> list[DSProblem] | None:
    try:
        import logging

        import deepspeed  # noqa: F401  (heavy: torch + deepspeed)
        from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except Exception:  # ImportError, or a broken install raising anything at import
        return None
    from pydantic import ValidationError

    version = getattr(deepspeed, "__version__", None)
    known = {p.key for p in cfg.problems if p.kind in ("unknown", "removed", "type", "invalid", "deprecated")}
    static_errors = any(p.kind in ("unknown", "removed", "type", "invalid") or (p.kind == "mismatch" and not p.silent)
                        for p in cfg.problems)
    out: list[DSProblem] = []

    def add(key: str | None, detail: str) -> None:
        if key in known:
            return
        line, col = locate(cfg.positions, key)
        out.append(DSProblem(key, "deepspeed", "deepspeed", line, col, version=version, detail=detail,
                             source=f"the installed DeepSpeed {version}"))

    ds_logger = logging.getLogger("DeepSpeed")
    old_level = ds_logger.level
    ds_logger.setLevel(logging.ERROR)   # deprecation warnings would land in the report's stdout
    try:
        for name, model in (("zero_optimization", DeepSpeedZeroConfig), ("fp16", DeepSpeedFP16Config),
                            ("bf16", DeepSpeedBF16Config)):
            sec = cfg.raw.get(name)
            if not isinstance(sec, dict):
                continue
            try:
                model(**sec)
            except ValidationError as err:
                for e in err.errors():
                    loc = ".".join(str(x) for x in e.get("loc", ()))
                    add(f"{name}.{loc}" if loc else name, f"{e.get('msg')} [type={e.get('type')}]")
            except Exception as err:  # DeepSpeed asserts inside validators (deprecated + new together)
                add(name, f"{type(err).__name__}: {err}")
        if not out and not static_errors:   # DeepSpeed's verdict on a config the vendored checks accept
            err = _full_config_error(cfg)
            if err is not None:
                add(None, err)
    finally:
        ds_logger.setLevel(old_level)
    return out


def _full_config_error(cfg: DSConfig) -> str | None:
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    d = dsjson.copy_tree(cfg.received or cfg.resolved)
    for key in cfg.unresolved:           # let DeepSpeed derive what we could not fill
        node, leaf = dsauto.find_node(d, key)
        if node is not None:
            node.pop(leaf, None)
    world = cfg.world_size or 1
    saved = (dist.get_world_size, dist.get_rank)
    dist.get_world_size = lambda *a, **k: world  # type: ignore[assignment]
    dist.get_rank = lambda *a, **k: 0  # type: ignore[assignment]
    try:
        DeepSpeedConfig(d)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    finally:
        dist.get_world_size, dist.get_rank = saved  # type: ignore[assignment]
    return None
