"""LLaMA-Factory's data arguments for one run, and its truncation rule.

`DataSettings` holds what the preprocessing depends on (stage, cutoff_len, packing, template options, batch sizes)
with LLaMA-Factory's defaults (``hparams/data_args.py``, ``hparams/parser.py``); `infer_seqlen` is LF's rule for
cutting a prompt/response pair to cutoff_len (``data/processor/processor_utils.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from finetune_doctor.run.values import DEFAULT_CUTOFF_LEN, DEFAULT_MICRO_BATCH, as_bool, packing_of


@dataclass(frozen=True)
class DataSettings:
    """The data arguments of one run, with LF defaults (``hparams/data_args.py``, ``parser.py``).

    `cutoff_len` is the configured value; `effective_cutoff` what the processors truncate to: LF subtracts 1
    in ``DataArguments.__post_init__`` when ``packing``/``neat_packing`` is set in the config
    (data_args.py:189), but not when packing is only switched on later for ``stage: pt`` (parser.py:520).
    """

    stage: str = "sft"
    cutoff_len: int = 2048
    packing: bool = False
    packing_explicit: bool = False
    neat_packing: bool = False
    train_on_prompt: bool = False
    mask_history: bool = False
    template: str | None = None
    tool_format: str | None = None
    default_system: str | None = None
    enable_thinking: bool | None = True
    preserve_thinking: bool = False
    preprocessing_batch_size: int = 1000
    micro_batch: int = 8
    max_samples: int | None = None
    val_size: float = 0.0
    mix_strategy: str = "concat"
    streaming: bool = False
    # the media arguments LF's plugins read (hparams/model_args.py: image_max_pixels 768·768, image_min_pixels
    # 32·32, video_max_pixels 256·256, video_min_pixels 16·16, video_maxlen 128; data_args.py: media_dir
    # defaults to dataset_dir)
    image_max_pixels: int = 768 * 768
    image_min_pixels: int = 32 * 32
    video_max_pixels: int = 256 * 256
    video_min_pixels: int = 16 * 16
    video_maxlen: int = 128
    video_fps: float = 2.0
    media_dir: str | None = None

    @property
    def effective_cutoff(self) -> int:
        return self.cutoff_len - 1 if self.packing_explicit else self.cutoff_len

    @property
    def lf_stage(self) -> str:
        """The stage name ``get_dataset`` receives: dpo/orpo/simpo train on pairwise data as ``rm``."""
        return {"dpo": "rm", "orpo": "rm", "simpo": "rm"}.get(self.stage, self.stage)

    @property
    def processor(self) -> str:
        s = self.lf_stage
        if s == "pt":
            return "pretrain_packed" if self.packing else "pretrain"
        if s == "sft":
            return "packed_supervised" if self.packing else "supervised"
        if s == "rm":
            return "pairwise"
        if s == "kto":
            return "feedback"
        return "unsupervised"

    @classmethod
    def from_config(cls, cfg: dict[str, Any], *, cutoff_len: int | None = None,
                    micro_batch: int | None = None) -> "DataSettings":
        """The settings of the config values `cfg` (`cutoff_len` / `micro_batch` override the config's).

        Raises ValueError naming the key for a value LF's HfArgumentParser types differently (a list where a
        string is expected, a float or an infinity where an integer is), or out of range.
        """
        stage = str(cfg.get("stage") or "sft")
        packing, packing_explicit, neat = packing_of(cfg, stage)   # the run's own rule (run/values.py)
        cut = cutoff_len if cutoff_len is not None else _int(cfg, "cutoff_len", 1)
        mb = micro_batch if micro_batch is not None else _int(cfg, "per_device_train_batch_size", 1)
        val = cfg.get("val_size")
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float)) or not 0 <= val < 2**63):
            raise ValueError(f"val_size must be a number from 0 (a share below 1, or a row count), not {val!r}")
        return cls(
            stage=stage,
            cutoff_len=cut if cut is not None else DEFAULT_CUTOFF_LEN,
            packing=packing,
            packing_explicit=packing_explicit,
            neat_packing=neat,
            train_on_prompt=as_bool(cfg.get("train_on_prompt")),
            mask_history=as_bool(cfg.get("mask_history")),
            template=_str(cfg, "template"),
            tool_format=_str(cfg, "tool_format"),
            default_system=_str(cfg, "default_system"),
            enable_thinking=None if cfg.get("enable_thinking", True) is None
            else as_bool(cfg.get("enable_thinking", True)),
            preserve_thinking=as_bool(cfg.get("preserve_thinking")),
            preprocessing_batch_size=_int(cfg, "preprocessing_batch_size", 1) or 1000,
            micro_batch=mb if mb is not None else DEFAULT_MICRO_BATCH,
            max_samples=_int(cfg, "max_samples", 1),
            val_size=float(val or 0.0),
            mix_strategy=_str(cfg, "mix_strategy") or "concat",
            streaming=as_bool(cfg.get("streaming")),
            **{k: _int_or(cfg, k, lo, d) for k, lo, d in (
                ("image_max_pixels", 1, 768 * 768), ("image_min_pixels", 0, 32 * 32),
                ("video_max_pixels", 1, 256 * 256), ("video_min_pixels", 0, 16 * 16), ("video_maxlen", 1, 128))},
            video_fps=_fps(cfg.get("video_fps")),
            media_dir=_str(cfg, "media_dir"),
        )


def _int(cfg: dict[str, Any], key: str, minimum: int) -> int | None:
    """An integer key of the config (None when unset); ValueError for another type or a value below `minimum`."""
    v = cfg.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v < 2**63:
        raise ValueError(f"{key} must be an integer from {minimum} to 2^63 - 1, not {v!r}")
    return v


def _int_or(cfg: dict[str, Any], key: str, minimum: int, default: int) -> int:
    """A media limit as LF's plugin would use it: HfArgumentParser does not type-check ``parse_dict``, so a float
    or an integer-valued string works there as well; LF's default for an unset, non-numeric or infinite value
    (the key-schema rules report a wrong type), never below `minimum` and never above 2^63 - 1, so the products the
    token count takes stay Python ints and nothing overflows a float."""
    v = cfg.get(key)
    if isinstance(v, bool) or v is None:
        return default
    try:
        f = float(v)
        n = int(f) if math.isfinite(f) else default
    except (TypeError, ValueError, OverflowError):
        return default
    return min(max(n, minimum), 2**63 - 1)


def _fps(v: Any) -> float:
    """``video_fps`` as LF uses it (model_args.py default 2.0): a positive finite number, else the default."""
    try:
        f = float(v) if v is not None and not isinstance(v, bool) else 2.0
    except (TypeError, ValueError, OverflowError):
        return 2.0
    return f if math.isfinite(f) and 0 < f < 1e6 else 2.0


def _str(cfg: dict[str, Any], key: str) -> str | None:
    v = cfg.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{key} must be a string, not {type(v).__name__}")
    return v


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """LF's truncation rule (``processor_utils.py:76-88``): keep short targets whole, else cut proportionally.

    Returns (new_source_len, new_target_len); both sides keep their prefix.
    """
    if target_len * 2 < cutoff_len:
        max_target_len = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target_len = cutoff_len - source_len
    else:
        max_target_len = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target_len = min(max_target_len, target_len)
    new_source_len = min(max(cutoff_len - new_target_len, 0), source_len)
    return new_source_len, new_target_len
