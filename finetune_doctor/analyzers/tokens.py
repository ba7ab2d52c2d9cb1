"""Token lengths of LLaMA-Factory training samples, computed the way LF's preprocessing computes them.

For each row this module does what LF does between ``load_dataset`` and the trainer (LF_FACTS.md §4), keeping
only lengths:

1. **convert** the row to prompt/response messages (``data/converter.py``: alpaca, sharegpt, openai), with LF's
   validity checks (role order, message count, unsupervised rows);
2. **format** it with the configured template (analyzers/templates.py) and **count tokens** of every slot with
   the model's fast tokenizer (``tokenizers``; one ``encode_batch`` per chunk), after the tokenizer fixes LF
   applies (``patch_tokenizer`` add_tokens / add_special_tokens, ``Template.fix_special_tokens``);
3. **truncate** with ``infer_seqlen`` (``data/processor/processor_utils.py``) turn by turn as the supervised
   processor does (``processor/supervised.py`` ``_encode_data_example``), or once per pair (``pairwise.py``),
   or by blocks (``pretrain.py``); count labels, truncated samples, lost end-of-turn tokens, empty targets;
4. **aggregate**: exact percentiles from length counters, a histogram, the longest samples with file and line,
   LF's greedy-knapsack packing per ``preprocessing_batch_size`` rows, and the worst micro-batch.

Work is split in chunks of rows across worker processes (fork, one tokenizer per process), results are merged
in row order. Memory stays bounded: rows are dropped after their chunk, and lengths are kept as counters.

Without a tokenizer an `ApproxCounter` estimates lengths from characters and the result says ``approximate``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from finetune_doctor.analyzers import templates as T
from finetune_doctor.readers.datasets import Chunk, DatasetSpec, RowError, hub_snapshot, hf_hub_cache, \
    iter_chunks, parse_json_lines, total_bytes

_SEQ = itertools.count()  # tie-break for heap items (never compares the dicts)
MAX_EXAMPLES = 5          # locations kept per problem kind / per flag
TOP_K = 5                 # longest samples kept per dataset

# --- settings ---------------------------------------------------------------------------------------------------------


def _as_bool(v: Any, default: bool = False) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def _as_list(v: Any) -> list[str] | None:
    """LF's ``split_arg`` for comma strings (data_args.py __post_init__)."""
    if v is None:
        return None
    if isinstance(v, str):
        return [s.strip() for s in v.split(",")]
    if isinstance(v, (list, tuple)):
        return [str(s).strip() for s in v]
    return [str(v)]


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
        stage = str(cfg.get("stage") or "sft")
        neat = _as_bool(cfg.get("neat_packing"))
        explicit = cfg.get("packing")
        packing_explicit = _as_bool(explicit) or neat
        packing = packing_explicit if (explicit is not None or neat) else stage == "pt"
        cut = cutoff_len if cutoff_len is not None else cfg.get("cutoff_len")
        mb = micro_batch if micro_batch is not None else cfg.get("per_device_train_batch_size")
        if cut is not None and (isinstance(cut, bool) or not isinstance(cut, int) or cut < 1):
            raise ValueError(f"cutoff_len must be a positive integer, not {cut!r}")
        return cls(
            stage=stage,
            cutoff_len=int(cut) if cut is not None else 2048,
            packing=packing,
            packing_explicit=packing_explicit,
            neat_packing=neat,
            train_on_prompt=_as_bool(cfg.get("train_on_prompt")),
            mask_history=_as_bool(cfg.get("mask_history")),
            template=cfg.get("template"),
            tool_format=cfg.get("tool_format"),
            default_system=cfg.get("default_system"),
            enable_thinking=None if cfg.get("enable_thinking", True) is None
            else _as_bool(cfg.get("enable_thinking", True)),
            preserve_thinking=_as_bool(cfg.get("preserve_thinking")),
            preprocessing_batch_size=int(cfg.get("preprocessing_batch_size") or 1000),
            micro_batch=int(mb) if isinstance(mb, (int, float)) and not isinstance(mb, bool) else 8,
            max_samples=int(cfg["max_samples"]) if cfg.get("max_samples") is not None else None,
            val_size=float(cfg.get("val_size") or 0.0),
            mix_strategy=str(cfg.get("mix_strategy") or "concat"),
            streaming=_as_bool(cfg.get("streaming")),
        )


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


# --- tokenizers -------------------------------------------------------------------------------------------------------


def _token_text(v: Any) -> str | None:
    if isinstance(v, dict):
        return v.get("content")
    return v if isinstance(v, str) else None


def find_tokenizer(model: str | None, *, base_dirs: Sequence[str] = (), cache_dir: str | None = None,
                   env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """Where the model's fast tokenizer (``tokenizer.json``) is on this machine: (folder or None, how/why).

    `model` is ``model_name_or_path``: a folder (absolute, or relative to the working directory or one of
    `base_dirs`), else a hub id looked up in the HF hub cache (`cache_dir`, HF_HUB_CACHE, HF_HOME/hub) and,
    with USE_MODELSCOPE_HUB, the ModelScope cache. Never downloads.
    """
    env = dict(os.environ if env is None else env)
    if not model:
        return None, "no model_name_or_path in the config"
    cands = [Path(model).expanduser()]
    if not os.path.isabs(model):
        cands += [Path(b) / model for b in base_dirs]
    for c in cands:
        if c.is_dir():
            if (c / "tokenizer.json").is_file():
                return str(c), f"local folder {c}"
            if (c / "tokenizer.model").is_file():
                return None, f"{c} has only a slow sentencepiece tokenizer (tokenizer.model), no tokenizer.json"
            return None, f"{c} has no tokenizer.json"
    if model.count("/") == 1 and not model.startswith((".", "/")):
        for cache in ([Path(cache_dir).expanduser()] if cache_dir else []) + [hf_hub_cache(env)]:
            snap = hub_snapshot(model, "model", cache)
            if snap is not None and (snap / "tokenizer.json").is_file():
                return str(snap), f"HF cache {snap}"
        ms_root = Path(env.get("MODELSCOPE_CACHE") or os.path.expanduser("~/.cache/modelscope/hub"))
        for c in (ms_root / "models" / model, ms_root / model):
            if (c / "tokenizer.json").is_file():
                return str(c), f"ModelScope cache {c}"
        return None, f"{model} is not in the local HF cache (no download is attempted)"
    return None, f"model path {model} not found"


def read_tokenizer_config(folder: str) -> dict[str, Any]:
    """tokenizer_config.json merged over special_tokens_map.json, plus a chat template from
    ``chat_template.jinja`` / ``chat_template.json`` when the config has none."""
    out: dict[str, Any] = {}
    p = Path(folder)
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        f = p / name
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(data, dict):
                out.update(data)
    if not out.get("chat_template"):
        if (p / "chat_template.jinja").is_file():
            out["chat_template"] = (p / "chat_template.jinja").read_text(encoding="utf-8")
        elif (p / "chat_template.json").is_file():
            try:
                out["chat_template"] = json.loads((p / "chat_template.json").read_text())["chat_template"]
            except (OSError, json.JSONDecodeError, KeyError, TypeError):
                pass
    return out


class ExactCounter:
    """Token counts from the model's fast tokenizer, after the tokenizer changes LF makes before encoding.

    ``patch_tokenizer`` (LF ``model/patcher.py``): ``add_tokens`` as normal added tokens, ``add_special_tokens``
    as special ones. ``Template.fix_special_tokens`` (template.py:186-215): with ``replace_eos`` the first stop
    word becomes EOS; a tokenizer without EOS gets ``<|endoftext|>``; remaining stop words are added as special
    tokens (so text containing them splits there). ``split_special_tokens`` makes special tokens in text be
    tokenized as plain text (transformers ``split_special_tokens``; ``Tokenizer.encode_special_tokens``).
    ``fast_count`` counts through `piececount.PieceCounter` where that is exact (same numbers, about 2.6× less CPU).
    """

    approximate = False

    def __init__(self, folder: str, template: T.Template, *, add_tokens: Iterable[str] | None = None,
                 add_special_tokens: Iterable[str] | None = None, split_special_tokens: bool = False,
                 fast_count: bool = True):
        from tokenizers import AddedToken, Tokenizer

        self.folder = folder
        self.tk = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        # a tokenizer.json may carry truncation or padding settings; transformers' fast tokenizer turns them off
        # unless a call asks for them (set_truncation_and_padding), and LF's encode calls do not
        self.tk.no_truncation()
        self.tk.no_padding()
        cfg = read_tokenizer_config(folder)
        self.chat_template = cfg.get("chat_template") if isinstance(cfg.get("chat_template"), str) else None
        self.add_bos_token = bool(cfg.get("add_bos_token", False))
        self.bos = _token_text(cfg.get("bos_token"))
        self.eos = _token_text(cfg.get("eos_token"))
        self.pad = _token_text(cfg.get("pad_token"))
        if add_tokens:
            self.tk.add_tokens([AddedToken(t, special=False, normalized=True) for t in add_tokens])
        if add_special_tokens:
            self.tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in add_special_tokens])
        stop = list(template.stop_words)
        if template.replace_eos and stop:
            self.eos = stop.pop(0)
            self._special(self.eos)
        if self.eos is None or self.tk.token_to_id(self.eos) is None:
            if self.eos is None:
                self.eos = "<|endoftext|>"
            self._special(self.eos)
        if self.pad is None:
            self.pad = self.eos
        for w in stop:
            self._special(w)
        if self.bos is not None and self.tk.token_to_id(self.bos) is None:
            self.bos = None  # transformers reports bos_token_id None for an unknown token
        if split_special_tokens:
            self.tk.encode_special_tokens = True
        self._batch = getattr(self.tk, "encode_batch_fast", None) or self.tk.encode_batch
        from finetune_doctor.analyzers.piececount import PieceCounter

        # built last: it mirrors the tokenizer with every token added above
        self._pieces = PieceCounter.build(self.tk) if fast_count else None

    def _special(self, text: str) -> None:
        from tokenizers import AddedToken

        self.tk.add_special_tokens([AddedToken(text, special=True, normalized=False)])

    @property
    def has_bos(self) -> bool:
        return self.bos is not None

    @property
    def has_eos(self) -> bool:
        return self.eos is not None

    def lengths(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        if self._pieces is not None:
            return self._pieces.lengths(texts, self._encode_lengths)
        return self._encode_lengths(texts)

    def _encode_lengths(self, texts: list[str]) -> list[int]:
        return [len(e) for e in self._batch(texts, add_special_tokens=False)]

    def separate_suffix(self, suffix: str) -> bool:
        """True when ``len(encode(x + suffix)) == len(encode(x)) + len(encode(suffix))`` for every text `x`,
        so that a constant template tail need not be encoded with every sample.

        `tokenizers` cuts the input at special (non-normalized) added tokens before normalizing and
        pre-tokenizing, and encodes the pieces between them independently (``AddedVocabulary::
        extract_and_normalize``). A suffix that opens with such a token is therefore its own piece, unless the
        token strips the whitespace before it (``lstrip``), must stand as a single word (``single_word``),
        special tokens are encoded as text (``split_special_tokens``), or another added token could match across
        the boundary (one whose tail is a prefix of the suffix). Pieces keep their position-dependent treatment
        (Metaspace ``prepend_scheme: first``): the suffix's pieces are never first in either encoding.
        """
        if not suffix or self.tk.encode_special_tokens:
            return False
        added = list(self.tk.get_added_tokens_decoder().values())
        lead = max((a for a in added if suffix.startswith(a.content)), key=lambda a: len(a.content), default=None)
        if lead is None or lead.normalized or lead.lstrip or lead.single_word:
            return False
        for a in added:
            w = a.content
            if any(suffix.startswith(w[k:]) for k in range(1, len(w))):
                return False
        return True

    def length(self, text: str) -> int:
        return len(self.tk.encode(text, add_special_tokens=False)) if text else 0

    def describe(self) -> dict[str, Any]:
        return {"source": self.folder, "kind": "tokenizer.json", "vocab_size": self.tk.get_vocab_size(True),
                "bos": self.bos, "eos": self.eos,
                "counting": "pieces (regex split, cached per-piece counts)" if self._pieces else "encode"}


_SPECIAL_RE = re.compile(r"<\|[^<>|\s]{1,40}\|>|<｜[^｜]{1,30}｜>|<(?:start|end)_of_turn>|<reserved_\d+>|"
                         r"\[/?INST\]|<</?SYS>>|\[gMASK\]|<sop>|<s>|</s>")
_CJK_RE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\u3040-\u30ff]")


class ApproxCounter:
    """Estimated token counts when the model's tokenizer is not on this machine (``approximate: true``).

    Heuristic, not a tokenizer: special markers (``<|im_start|>``, ``[INST]``, ...) count 1; CJK characters
    count 1 each; the remaining text counts ceil(UTF-8 bytes / 4) — the usual ~4 characters per token of
    English BPE vocabularies. Expect errors of tens of percent; the report says the numbers are estimates.
    """

    approximate = True
    has_bos = True
    has_eos = True
    add_bos_token = False
    chat_template = None

    def __init__(self, template: T.Template):
        self.eos = template.stop_words[0] if template.replace_eos and template.stop_words else "</s>"
        self.bos = "<s>"
        self.folder = None

    def length(self, text: str) -> int:
        if not text:
            return 0
        n = 0
        pieces = _SPECIAL_RE.split(text)
        n += len(pieces) - 1
        for p in pieces:
            if not p:
                continue
            cjk = len(_CJK_RE.findall(p))
            rest = len(p.encode("utf-8")) - 3 * cjk
            n += cjk + (rest + 3) // 4
        return max(n, 1)

    def lengths(self, texts: list[str]) -> list[int]:
        return [self.length(t) for t in texts]

    def describe(self) -> dict[str, Any]:
        return {"source": None, "kind": "approximate", "vocab_size": None, "bos": None, "eos": self.eos}


def render_chat_template(chat_template: str, special: dict[str, Any]) -> Callable[[list, bool], str]:
    """A renderer for a tokenizer's Jinja chat template, set up as transformers sets it up
    (``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with loop controls, ``tojson``,
    ``raise_exception`` and ``strftime_now``). Needs jinja2; raises ImportError without it."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg: str) -> None:
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    from datetime import datetime

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    compiled = env.from_string(chat_template)
    tokens = {k: v for k, v in special.items() if isinstance(v, str)}
    return lambda messages, gen: compiled.render(messages=messages, add_generation_prompt=gen, tools=None,
                                                 documents=None, **tokens)


def resolve_template(settings: DataSettings, tokenizer_folder: str | None) -> tuple[T.Template, dict[str, Any]]:
    """The template LF would use, with the config's overrides, and facts about how it was chosen.

    ``template`` unset: LF parses the tokenizer's chat template when it has one (warning), else uses ``empty``
    (template.py:637-650). A name LF registers but this module does not model is counted with ``empty`` (content
    tokens only) and said so; a name LF 0.9.5 does not register at all is what LF rejects.
    """
    name = settings.template
    info: dict[str, Any] = {"requested": name, "modelled": True, "lf_registered": None, "note": None}
    kw = dict(tool_format=settings.tool_format, default_system=settings.default_system,
              enable_thinking=settings.enable_thinking, preserve_thinking=settings.preserve_thinking)
    if name is None:
        cfg = read_tokenizer_config(tokenizer_folder) if tokenizer_folder else {}
        chat = cfg.get("chat_template")
        if isinstance(chat, str) and tokenizer_folder:
            try:
                from tokenizers import Tokenizer

                raw = Tokenizer.from_file(str(Path(tokenizer_folder) / "tokenizer.json"))
                prefix = raw.decode(raw.encode("", add_special_tokens=True).ids, skip_special_tokens=False)
                special = {k: _token_text(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
                t = T.parse_chat_template(render_chat_template(chat, special), prefix)
                info["note"] = ("template is not set: LLaMA-Factory parses the tokenizer's chat_template "
                                "(so did the doctor)")
                return T.customize(t, **kw), info
            except Exception as err:  # any Jinja or parsing failure: fall back like a template-less tokenizer
                info["note"] = f"template is not set and the tokenizer's chat_template could not be parsed ({err})"
        else:
            info["note"] = "template is not set and the tokenizer has no chat_template: LLaMA-Factory uses 'empty'"
        return T.get_template("empty", **kw), info
    info["lf_registered"] = name in T.LF_TEMPLATE_NAMES
    if name in T.TEMPLATES:
        t = T.get_template(name, **kw)
        if t.removed_upstream:
            info["note"] = f"template {name!r} is no longer registered in LLaMA-Factory 0.9.5"
        elif t.multimodal:
            info["note"] = f"{name!r} is a multimodal template: image/video/audio tokens are not counted"
        return t, info
    info["modelled"] = False
    info["note"] = (f"template {name!r} is not modelled by the doctor: counted with 'empty' (contents only, no role "
                    "markers)" if info["lf_registered"] else
                    f"template {name!r} is not registered in LLaMA-Factory 0.9.5: LLaMA-Factory raises "
                    f"'Template {name} does not exist.' unless your version added it")
    return T.get_template("empty", **kw), info


# --- conversion (LF data/converter.py) --------------------------------------------------------------------------------


class RowProblem(Exception):
    """A row LF cannot use. `kind`: missing_column | wrong_role_order | odd_message_count | no_response |
    bad_tools | bad_function | bad_value | empty_prompt. `fatal` rows make LF itself fail."""

    def __init__(self, kind: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.fatal = fatal


@dataclass(frozen=True)
class ConvSpec:
    """What conversion needs from a DatasetSpec (small enough to send with every chunk)."""

    formatting: str
    ranking: bool
    columns: dict[str, str | None]
    tags: dict[str, str | None]

    @classmethod
    def of(cls, spec: DatasetSpec) -> "ConvSpec":
        return cls(spec.formatting, bool(spec.ranking), dict(spec.columns), dict(spec.tags))


def _get(row: dict[str, Any], col: str | None) -> Any:
    return row.get(col) if col else None


def _as_text(v: Any, what: str) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    raise RowProblem("bad_value", f"{what} is {type(v).__name__}, not a string", fatal=True)


def convert_row(row: dict[str, Any], cs: ConvSpec) -> tuple[list[dict], list[dict], str, str, bool]:
    """(prompt messages, response messages, system, tools JSON text, has media) as LF's converters build them.

    A sharegpt/openai row with a wrong role order or message count converts to empty prompt and response,
    exactly like LF (which then drops it); the reason is raised as `RowProblem` only by `validate_row`.
    """
    if cs.formatting == "alpaca":
        return _convert_alpaca(row, cs)
    if cs.formatting in ("sharegpt", "openai"):
        return _convert_sharegpt(row, cs)
    raise RowProblem("bad_value", f"unknown formatting {cs.formatting!r}", fatal=True)


def _media(row: dict[str, Any], cs: ConvSpec) -> bool:
    return any(bool(_get(row, cs.columns.get(k))) for k in ("images", "videos", "audios"))


_ALPACA_ROLES = ("history", "prompt", "query", "kto_tag", "chosen", "rejected", "response", "system", "tools",
                 "images", "videos", "audios")


def _convert_alpaca(row: dict[str, Any], cs: ConvSpec) -> tuple[list[dict], list[dict], str, str, bool]:
    # column names looked up once per ConvSpec (an unset or empty mapping reads as None, as `_get` treats it)
    cols = cs.__dict__.get("_alpaca")
    if cols is None:
        cols = tuple(cs.columns.get(k) or None for k in _ALPACA_ROLES)
        object.__setattr__(cs, "_alpaca", cols)  # frozen dataclass: a private cache, not a field
    hcol, pcol, qcol, kcol, chcol, rjcol, rcol, scol, tcol, icol, vcol, acol = cols
    get = row.get
    prompt: list[dict] = []
    if hcol:
        hist = get(hcol)
        if isinstance(hist, list):
            for pair in hist:
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise RowProblem("bad_value", "history entries must be [prompt, response] pairs", fatal=True)
                prompt.append({"role": "user", "content": _as_text(pair[0], "history prompt")})
                prompt.append({"role": "assistant", "content": _as_text(pair[1], "history response")})
    query = []
    for col in (pcol, qcol):
        if col:
            v = get(col)
            if v:
                query.append(v if isinstance(v, str) else _as_text(v, f"column {col!r}"))
    prompt.append({"role": "user", "content": "\n".join(query)})
    kto = get(kcol) if kcol else None
    if kcol and isinstance(kto, bool):
        resp = [{"role": "assistant", "content": _as_text(get(rcol) if rcol else None, "response")}]
        empty = {"role": "assistant", "content": ""}
        response = resp + [empty] if kto else [empty] + resp
    elif cs.ranking and chcol and rjcol and isinstance(get(chcol), str) and isinstance(get(rjcol), str):
        response = [{"role": "assistant", "content": row[chcol]},
                    {"role": "assistant", "content": row[rjcol]}]
    elif rcol and isinstance(get(rcol), str):
        response = [{"role": "assistant", "content": row[rcol]}]
    else:
        response = []
    system = _as_text(get(scol), "system") if scol else ""
    tools = get(tcol) if tcol else ""
    if tools is not None and not isinstance(tools, str):
        tools = json.dumps(tools, ensure_ascii=False)
    media = bool((icol and get(icol)) or (vcol and get(vcol)) or (acol and get(acol)))
    return prompt, response, system, tools or "", media


def _convert_sharegpt(row: dict[str, Any], cs: ConvSpec) -> tuple[list[dict], list[dict], str, str, bool]:
    c, t = cs.columns, cs.tags
    role_tag, content_tag = t.get("role_tag"), t.get("content_tag")
    messages = _get(row, c.get("messages"))
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise RowProblem("bad_value", f"column {c.get('messages')!r} is {type(messages).__name__}, not a list",
                         fatal=True)
    for m in messages:
        if not isinstance(m, dict) or role_tag not in m or content_tag not in m:
            raise RowProblem("bad_value", f"a message lacks {role_tag!r}/{content_tag!r} (LF: KeyError)",
                             fatal=True)
    openai = cs.formatting == "openai"
    if t.get("system_tag") and messages and messages[0][role_tag] == t["system_tag"]:
        system = _as_text(messages[0][content_tag], "system message")
        messages = messages[1:]
    else:
        system = _as_text(_get(row, c.get("system")), "system") if c.get("system") else ""
    mapping = {t.get("user_tag"): "user", t.get("assistant_tag"): "assistant", t.get("observation_tag"):
               "observation", t.get("function_tag"): "function", t.get("system_tag"): "system"}
    aligned: list[dict] = []
    broken: str | None = None
    if openai:
        tool_responses: list[str] = []
        for m in messages:
            role, content = m[role_tag], m[content_tag]
            if role in (t.get("assistant_tag"), t.get("function_tag")) and m.get("tool_calls"):
                content = json.dumps([tc["function"] for tc in m["tool_calls"]], ensure_ascii=False)
                role = t.get("function_tag")
            if role == t.get("observation_tag"):
                tool_responses.append(content)
                continue
            if tool_responses:
                aligned.append({"role": "observation",
                                "content": "\n</tool_response>\n<tool_response>\n".join(tool_responses)})
                tool_responses = []
            if role not in mapping:
                broken = broken or f"unknown role {role!r}"
                break
            aligned.append({"role": mapping[role], "content": content})
        odd, even = ("user", "observation"), ("assistant", "function")
        for i, m in enumerate(aligned):
            if broken is None and m["role"] not in (odd, even)[i % 2]:
                broken = f"message {i + 1} has role {m['role']!r} where {' or '.join((odd, even)[i % 2])} is expected"
    else:
        odd_t, even_t = (t.get("user_tag"), t.get("observation_tag")), (t.get("assistant_tag"), t.get("function_tag"))
        for i, m in enumerate(messages):
            if m[role_tag] not in (odd_t, even_t)[i % 2]:
                want = " or ".join(repr(x) for x in (odd_t, even_t)[i % 2] if x)
                broken = f"message {i + 1} has role {m[role_tag]!r} where {want} is expected"
                break
            aligned.append({"role": mapping[m[role_tag]], "content": m[content_tag]})
    if broken is None and ((not cs.ranking and len(aligned) % 2 != 0) or (cs.ranking and len(aligned) % 2 == 0)):
        broken = f"{len(aligned)} messages: LLaMA-Factory needs " + \
                 ("an odd count (prompt turns before chosen/rejected)" if cs.ranking else "user/assistant pairs")
    kto = _get(row, c.get("kto_tag"))
    if broken is not None:
        prompt, response = [], []
    elif c.get("kto_tag") and isinstance(kto, bool):
        prompt, response = aligned[:-1], aligned[-1:]
        empty = {"role": "assistant", "content": ""}
        response = response + [empty] if kto else [empty] + response
    elif cs.ranking and isinstance(_get(row, c.get("chosen")), dict) and isinstance(_get(row, c.get("rejected")), dict):
        ch, rj = row[c["chosen"]], row[c["rejected"]]
        ok = (t.get("assistant_tag"), t.get("function_tag"))
        if ch.get(role_tag) not in ok or rj.get(role_tag) not in ok:
            broken = "chosen/rejected role is not the assistant tag"
        prompt = aligned
        response = [{"role": mapping.get(ch.get(role_tag), "assistant"), "content": ch.get(content_tag, "")},
                    {"role": mapping.get(rj.get(role_tag), "assistant"), "content": rj.get(content_tag, "")}]
    else:
        prompt, response = aligned[:-1], aligned[-1:]
    tools = _get(row, c.get("tools")) if c.get("tools") else ""
    if tools is not None and not isinstance(tools, str):
        tools = json.dumps(tools, ensure_ascii=False)
    tools = tools or ""
    if openai:
        short = "detailed thinking off"  # OpenAIDatasetConverter appends this (converter.py)
        if not system:
            system = short if not tools else system
        elif not tools:
            if "detailed thinking on" not in system and short not in system:
                system += "\n" + short
        else:
            system += "\n"
    if broken:
        raise _Broken(broken, (prompt, response, system, tools, _media(row, cs)))
    return prompt, response, system, tools, _media(row, cs)


class _Broken(Exception):
    """A sharegpt row LF converts to an empty sample (then drops): carries the reason and the empty result."""

    def __init__(self, reason: str, result: tuple):
        super().__init__(reason)
        self.reason = reason
        self.result = result


# --- per-sample lengths -----------------------------------------------------------------------------------------------

# flags of a sample record
TRUNCATED, EOS_LOST, EMPTY_TARGET, TURNS_DROPPED, HAS_MEDIA = 1, 2, 4, 8, 16
# status of a sample record
OK, DROPPED, ERROR, UNREADABLE = 0, 1, 2, 3


@dataclass
class SampleRecord:
    """Lengths of one row (tokens). ``*_full`` before truncation, the others after it.

    Pairwise rows: `target*` is max(chosen, rejected), `total` = prompt + that, and `pair` = (chosen total,
    rejected total, chosen labels, rejected labels) after truncation. Pretraining rows: `total_full` is the document with its EOS.
    """

    index: int
    line: int | None
    status: int
    source_full: int = 0
    target_full: int = 0
    total_full: int = 0
    source: int = 0
    target: int = 0
    total: int = 0
    labels: int = 0
    flags: int = 0
    pair: tuple[int, int, int, int] | None = None

    def as_tuple(self) -> tuple:
        return (self.index, self.line, self.status, self.source_full, self.target_full, self.total_full,
                self.source, self.target, self.total, self.labels, self.flags, self.pair)


_CACHE_CHARS = 4096       # slot texts up to this length are remembered with their token count
_CACHE_MAX = 20_000       # entries before the cache starts over (~3 MB: keys are hashes, not the texts)


class _Texts:
    """Slot texts of one chunk: each distinct text once (`unique`), and one reference per slot (`refs`)."""

    __slots__ = ("unique", "refs", "_index")

    def __init__(self) -> None:
        self.unique: list[str] = []
        self.refs: list[int] = []
        self._index: dict[str, int] = {}

    def add(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.unique)
            self.unique.append(s)
        self.refs.append(i)
        return len(self.refs) - 1


class Encoder:
    """Turns rows into `SampleRecord` lengths for one template, tokenizer and set of data arguments."""

    def __init__(self, counter: Any, template: T.Template, settings: DataSettings):
        self.counter = counter
        self.t = template
        self.s = settings
        self.cutoff = settings.effective_cutoff
        self.processor = settings.processor
        self.bos_n = 1 if counter.has_bos else 0
        self.eos_n = 1 if counter.has_eos else 0
        self.const: dict[str, int] = {}
        for slots in (template.user, template.assistant_slots, template.system_slots, template.observation_slots,
                      template.function_slots, template.prefix):
            for s in slots:
                if isinstance(s, str) and T.CONTENT not in s and "{{idx}}" not in s:
                    self.const[s] = counter.length(s)
        self.thought_n = counter.length(T.empty_thought(template)) if template.kind == "reasoning" else 0
        # token counts of strings seen before: template constants, and (bounded) any slot text, because system
        # prompts, tool lists and instructions repeat across samples and LF would encode them every time. Keyed
        # by (hash, length) so that the texts themselves are not kept alive.
        self.cache: dict[tuple[int, int], int] = {}
        self._seed_cache()
        tail = T.eos_tail_slots(template, counter.eos)
        self.eos_tail = None if tail is None else sum(self._slot_fixed(s) for s in tail)
        self.no_eos = tail is None and not template.efficient_eos
        self._roles = self._role_forms(template)

    def _role_forms(self, t: T.Template) -> dict[str, tuple[int, tuple[tuple[str, str], ...]]] | None:
        """Per role (prefix, system, user, assistant): the token count of its constant slots and the
        (text before, text after) of each slot that takes the content — what ``message_slots`` builds for a
        ``plain`` template, precomputed so that a row costs one concatenation per content slot.

        A tail after the content that the tokenizer provably encodes apart (`ExactCounter.separate_suffix`,
        e.g. ChatML's ``<|im_end|>\n``) joins the constant count: only ``before + content`` is encoded per sample.
        None (every row takes the general `T.plan_multiturn` path) for llama2/reasoning templates and for
        templates with ``{{idx}}`` slots or content in the prefix.
        """
        if t.kind != "plain":
            return None
        out: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = {}
        for role, slots in (("prefix", t.prefix), ("system", t.system_slots), ("user", t.user),
                            ("assistant", t.assistant_slots)):
            fixed, parts = 0, []
            for s in slots:
                if isinstance(s, str):
                    if "{{idx}}" in s:
                        return None
                    if T.CONTENT in s:
                        if role == "prefix":
                            return None
                        a, b = s.split(T.CONTENT, 1)
                        if b and T.CONTENT not in b and getattr(self.counter, "separate_suffix", None) and \
                                self.counter.separate_suffix(b):
                            # the tail after the content (e.g. "<|im_end|>\n") is counted once, not per sample
                            fixed += self.counter.length(b)
                            b = ""
                        parts.append((a, b))
                        continue
                fixed += self._slot_fixed(s)
            out[role] = (fixed, tuple(parts))
        return out

    def _seed_cache(self) -> None:
        self.cache.clear()
        self.cache.update({(hash(k), len(k)): v for k, v in self.const.items()})

    def _slot_fixed(self, s: Any) -> int:
        if isinstance(s, str):
            return self.const.get(s) if s in self.const else self.counter.length(s)
        if s == T.BOS:
            return self.bos_n
        if s == T.EOS:
            return self.eos_n
        if isinstance(s, tuple) and s and s[0] == "token":
            return 1
        return 0  # a set naming neither bos_token nor eos_token

    # -- chunk processing ------------------------------------------------------------------------------------------

    def process(self, rows: Sequence[dict[str, Any] | None], first_index: int, lines: Sequence[int | None],
                cs: ConvSpec) -> tuple[list[tuple], list[tuple]]:
        """Records (as tuples) and problems ``(kind, index, line, message, fatal)`` for one chunk of rows."""
        records: list[SampleRecord] = []
        problems: list[tuple] = []
        jobs: list[tuple[SampleRecord, Any]] = []  # (record, plan) waiting for token counts
        texts = _Texts()
        for i, row in enumerate(rows):
            rec = SampleRecord(first_index + i, lines[i] if i < len(lines) else None, OK)
            records.append(rec)
            if row is None:
                rec.status = UNREADABLE
                continue
            try:
                plan = self._plan(row, cs, rec)
            except RowProblem as p:
                rec.status = ERROR if p.fatal else DROPPED
                problems.append((p.kind, rec.index, rec.line, p.message, p.fatal))
                continue
            except _Broken as b:
                rec.status = DROPPED
                kind = "wrong_role_order" if "role" in b.reason else "odd_message_count"
                problems.append((kind, rec.index, rec.line, b.reason, False))
                continue
            except (ValueError, KeyError, TypeError) as err:
                rec.status = ERROR
                problems.append(("bad_value", rec.index, rec.line, str(err), True))
                continue
            if plan is None:
                continue
            jobs.append((rec, self._collect(plan, texts)))
        ulens = self.counter.lengths(texts.unique)
        cache = self.cache
        if len(cache) > _CACHE_MAX:
            self._seed_cache()
        for text, n in zip(texts.unique, ulens):
            if len(text) <= _CACHE_CHARS:
                cache[(hash(text), len(text))] = n
        lens = [ulens[i] for i in texts.refs]
        for rec, items in jobs:
            self._finish(rec, items, lens)
        return [r.as_tuple() for r in records], problems

    def _plan(self, row: dict[str, Any], cs: ConvSpec, rec: SampleRecord) -> Any:
        prompt, response, system, tools, media = convert_row(row, cs)
        if media:
            rec.flags |= HAS_MEDIA
        p = self.processor
        if p.startswith("pretrain"):
            if not prompt:
                raise RowProblem("empty_prompt", "no text: LLaMA-Factory's pretraining processor fails on it",
                                 fatal=True)
            # pretrain.py: llama3 appends "<|end_of_text|>" (its base-model EOS), others the tokenizer's EOS text
            eos = "<|end_of_text|>" if self.s.template == "llama3" else (self.counter.eos or "")
            return ("pt", prompt[0]["content"] + eos)
        if p in ("supervised", "packed_supervised"):
            if len(prompt) % 2 != 1 or len(response) != 1:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=1))
            if self._roles is not None and not tools:
                return ("sft_plain", prompt + response, system)
            disc = self.s.mask_history and not self.t.preserve_thinking
            return ("sft", T.plan_multiturn(self.t, prompt + response, system, tools, disc))
        if p == "pairwise":
            if len(prompt) % 2 != 1 or len(response) < 2:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=2))
            return ("pair", T.plan_oneturn(self.t, prompt + [response[0]], system, tools),
                    T.plan_oneturn(self.t, prompt + [response[1]], system, tools))
        if p == "feedback":
            if len(prompt) % 2 != 1 or len(response) < 2:
                raise RowProblem(*_why_invalid(prompt, response, cs, want=2))
            msg = response[0] if response[0]["content"] else response[1]
            return ("one", T.plan_oneturn(self.t, prompt + [msg], system, tools))
        if len(prompt) % 2 != 1:
            raise RowProblem(*_why_invalid(prompt, response, cs, want=0))
        msgs = prompt + response if len(response) == 1 else prompt + [{"role": "assistant", "content": ""}]
        return ("one", T.plan_oneturn(self.t, msgs, system, tools))

    def _collect(self, plan: Any, texts: "_Texts") -> Any:
        """Replace each message's slots with (fixed token count, first ref, end ref) into `texts`."""
        if plan[0] == "pt":
            return ("pt", (0, texts.add(plan[1]), len(texts.refs)))
        cache = self.cache
        if plan[0] == "sft_plain":
            out = self._collect_plain(plan[1], plan[2], texts)
            if out is not None:
                return out
            disc = self.s.mask_history and not self.t.preserve_thinking
            plan = ("sft", T.plan_multiturn(self.t, plan[1], plan[2], "", disc))

        def msgs(p: T.EncodePlan, only_last: bool = False) -> list[tuple[int, int, int]]:
            out = []
            seq = p.messages[-1:] if only_last else p.messages
            for slots in seq:
                fixed, start = 0, len(texts.refs)
                for s in slots:
                    if isinstance(s, str):
                        if not s:
                            continue
                        n = cache.get((hash(s), len(s)))
                        if n is None:
                            texts.add(s)
                        else:
                            fixed += n
                    else:
                        fixed += self._slot_fixed(s)
                out.append((fixed, start, len(texts.refs)))
            return out

        if plan[0] == "sft":
            return ("sft", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response)
        if plan[0] == "pair":
            return ("pair", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response,
                    msgs(plan[2], only_last=True), plan[2].extra_response)
        return ("one", msgs(plan[1]), plan[1].extra_prompt, plan[1].extra_response)

    def _collect_plain(self, messages: list[dict[str, str]], system: str, texts: "_Texts") -> Any:
        """`_collect` of ``plan_multiturn`` for a ``plain`` template and a row without tools, from the slot
        forms of `_role_forms`: the same texts per message (order within a message does not matter to a sum), without
        building slot lists. None when a message needs the general path (observation/function roles)."""
        roles = self._roles
        cache = self.cache
        refs = texts.refs
        out = []
        system = system or self.t.default_system
        for m in messages:
            role = m["role"]
            if (role != "user" and role != "assistant") or (role == "user" and "{{idx}}" in m["content"]):
                return None  # LF's StringFormatter also substitutes an {{idx}} that the content brings
        for i, m in enumerate(messages):
            role, content = m["role"], m["content"]
            fixed, start = 0, len(refs)
            pieces = [(roles[role], content)]
            if i == 0:
                pieces.append((roles["prefix"], ""))
                if system:
                    pieces.append((roles["system"], system))
            for (fx, parts), c in pieces:
                fixed += fx
                for a, b in parts:
                    s = a + c + b
                    if not s:
                        continue
                    n = cache.get((hash(s), len(s)))
                    if n is None:
                        texts.add(s)
                    else:
                        fixed += n
            out.append((fixed, start, len(refs)))
        return ("sft", out, {}, {})

    def _finish(self, rec: SampleRecord, items: Any, lens: list[int]) -> None:
        def L(m: tuple[int, int, int]) -> int:
            fixed, a, b = m
            return fixed + (sum(lens[a:b]) if b > a else 0)

        kind = items[0]
        if kind == "pt":
            self._finish_pt(rec, L(items[1]))
        elif kind == "sft":
            ml = [L(m) for m in items[1]]
            pairs = []
            for k in range(0, len(ml), 2):
                s, t = ml[k], ml[k + 1]
                s += self.thought_n * items[2].get(k // 2, 0)
                t += self.thought_n * items[3].get(k // 2, 0)
                pairs.append((s, t))
            self._finish_sft(rec, pairs)
        elif kind == "pair":
            ml = [L(m) for m in items[1]]
            prompt = sum(ml[:-1]) + self.thought_n * items[2].get(0, 0)
            chosen = ml[-1] + self.thought_n * items[3].get(0, 0)
            rejected = L(items[4][0]) + self.thought_n * items[5].get(0, 0)
            self._finish_pair(rec, prompt, chosen, rejected)
        else:
            ml = [L(m) for m in items[1]]
            prompt = sum(ml[:-1]) + self.thought_n * items[2].get(0, 0)
            resp = ml[-1] + self.thought_n * items[3].get(0, 0)
            self._finish_one(rec, prompt, resp)

    def _lost_eos(self, full: int, kept: int) -> bool:
        return self.eos_tail is not None and full - kept > self.eos_tail

    def _finish_sft(self, rec: SampleRecord, pairs: list[tuple[int, int]]) -> None:
        """``SupervisedDatasetProcessor._encode_data_example`` on lengths (supervised.py:50-104)."""
        s, t = self.s, self.t
        eff = t.efficient_eos
        total = 1 if eff else 0
        order = pairs[::-1] if s.mask_history else pairs
        src = tgt = labels = 0
        kept = 0
        for turn, (sl, tl) in enumerate(order):
            if total >= self.cutoff:
                break
            ns, nt = infer_seqlen(sl, tl, self.cutoff - total)
            total += ns + nt
            src += ns
            tgt += nt
            kept += 1
            if s.train_on_prompt:
                labels += ns
            elif eff and turn != 0:
                labels += 1  # [eos] + [IGNORE] * (ns - 1): one label even when ns == 0
            if not (s.mask_history and turn != 0):
                labels += nt
            if ns < sl or nt < tl:
                rec.flags |= TRUNCATED
                if nt < tl and not eff and self._lost_eos(tl, nt):
                    rec.flags |= EOS_LOST
        if eff:
            labels += 1
        if kept < len(pairs):
            rec.flags |= TRUNCATED | TURNS_DROPPED
        rec.source_full = sum(p[0] for p in pairs)
        rec.target_full = sum(p[1] for p in pairs)
        rec.total_full = rec.source_full + rec.target_full + (1 if eff else 0)
        rec.source, rec.target, rec.total, rec.labels = src, tgt, total, labels
        if labels == 0:
            rec.flags |= EMPTY_TARGET

    def _finish_pair(self, rec: SampleRecord, prompt: int, chosen: int, rejected: int) -> None:
        """``PairwiseDatasetProcessor._encode_data_example`` (pairwise.py:30-70): EOS joins each response
        before truncation (efficient_eos), the prompt is cut against max(chosen, rejected)."""
        if self.t.efficient_eos:
            chosen += 1
            rejected += 1
        longest = max(chosen, rejected)
        ns, nt = infer_seqlen(prompt, longest, self.cutoff)
        kc, kr = min(chosen, nt), min(rejected, nt)
        rec.source_full, rec.target_full, rec.total_full = prompt, longest, prompt + longest
        rec.source, rec.target, rec.total = ns, max(kc, kr), ns + max(kc, kr)
        rec.pair = (ns + kc, ns + kr, kc, kr)
        rec.labels = min(kc, kr)
        if ns < prompt or nt < longest:
            rec.flags |= TRUNCATED
            tail = 0 if self.t.efficient_eos else self.eos_tail
            if tail is not None and (chosen - kc > tail or rejected - kr > tail):
                rec.flags |= EOS_LOST
        if kc == 0 or kr == 0:
            rec.flags |= EMPTY_TARGET

    def _finish_one(self, rec: SampleRecord, prompt: int, resp: int) -> None:
        """Unsupervised (ppo) and feedback (kto) processors: one infer_seqlen over prompt and response."""
        if self.t.efficient_eos:
            resp += 1
        ns, nt = infer_seqlen(prompt, resp, self.cutoff)
        rec.source_full, rec.target_full, rec.total_full = prompt, resp, prompt + resp
        rec.source, rec.target, rec.total, rec.labels = ns, nt, ns + nt, nt
        if ns < prompt or nt < resp:
            rec.flags |= TRUNCATED
        if nt == 0 and self.processor == "feedback":
            rec.flags |= EMPTY_TARGET

    def _finish_pt(self, rec: SampleRecord, n: int) -> None:
        """``PretrainDatasetProcessor`` (pretrain.py): text + EOS; without packing BOS text is prepended when the
        tokenizer adds BOS and the result is truncated at cutoff_len; with packing documents are concatenated
        (blocks are cut in `Aggregate`)."""
        if self.processor == "pretrain" and self.counter.add_bos_token and self.counter.has_bos:
            n += 1
        rec.source_full = rec.source = 0
        rec.target_full = rec.total_full = n
        if self.processor == "pretrain":
            rec.total = rec.target = rec.labels = min(n, self.cutoff)
            if n > self.cutoff:
                rec.flags |= TRUNCATED | EOS_LOST
        else:
            rec.total = rec.target = rec.labels = n


def _why_invalid(prompt: list, response: list, cs: ConvSpec, want: int) -> tuple[str, str]:
    if not prompt and not response:
        return "odd_message_count", "empty conversation"
    if want == 1 and len(response) == 0:
        col = cs.columns.get("response")
        if cs.formatting == "alpaca" and not col:
            return "no_response", ("no response: columns.response is not mapped (a `columns` block in "
                                   "dataset_info.json replaces every default mapping)")
        return "no_response", "no response text (LLaMA-Factory treats the row as unsupervised and drops it for SFT)"
    if want == 1 and len(response) > 1:
        return "no_response", "pairwise row (chosen/rejected) in a supervised stage"
    if want == 2 and len(response) < 2:
        return "no_response", "no chosen/rejected pair"
    return "odd_message_count", f"{len(prompt)} prompt messages (LLaMA-Factory needs an odd count)"


# --- aggregation ------------------------------------------------------------------------------------------------------


def percentile(counter: Counter, p: float) -> int | None:
    """Nearest-rank percentile of a value → count mapping: the smallest v with at least p% of values ≤ v."""
    n = sum(counter.values())
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100.0 * n))
    acc = 0
    for v in sorted(counter):
        acc += counter[v]
        if acc >= rank:
            return v
    return max(counter)


def _summary(counter: Counter) -> dict[str, Any]:
    n = sum(counter.values())
    if n == 0:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    return {"p50": percentile(counter, 50), "p90": percentile(counter, 90), "p99": percentile(counter, 99),
            "max": max(counter), "mean": round(sum(v * c for v, c in counter.items()) / n, 1)}


def _nice_width(span: int, bins: int) -> int:
    """The smallest 1/2/2.5/5 × 10^k bin width that covers `span` in at most `bins` bins."""
    raw = max(1.0, span / bins)
    mag = 10 ** int(math.floor(math.log10(raw)))
    for m in (1, 2, 2.5, 5, 10):
        w = m * mag
        if w >= raw and float(w).is_integer():
            return int(w)
    return int(10 * mag)


def histogram(counter: Counter, cutoff: int, bins: int = 16) -> dict[str, Any]:
    """Equal-width bins (a round width) from 0 past max(longest sample, cutoff_len); `cutoff_bin` is the bin
    holding cutoff_len (samples above it are truncated)."""
    if not counter:
        return {"edges": [], "counts": [], "cutoff_bin": None}
    top = max(max(counter), cutoff) + 1
    width = _nice_width(top, bins)
    n = max(1, math.ceil(top / width))
    edges = [i * width for i in range(n + 1)]
    counts = [0] * n
    for v, c in counter.items():
        counts[min(n - 1, v // width)] += c
    return {"edges": edges, "counts": counts, "cutoff_bin": min(n - 1, cutoff // width)}


def greedy_knapsack(lengths: list[int], capacity: int) -> list[list[int]]:
    """LF's packing (``processor_utils.py`` ``greedy_knapsack``): sort ascending; fill each pack by repeatedly
    taking the largest length that still fits."""
    import bisect

    nums = sorted(lengths)
    packs = []
    while nums:
        pack, room = [], capacity
        while True:
            i = bisect.bisect(nums, room)
            if i == 0:
                break
            room -= nums[i - 1]
            pack.append(nums.pop(i - 1))
        if not pack:  # longer than capacity: LF drops such examples before packing
            nums.pop()
            continue
        packs.append(pack)
    return packs


class DatasetAggregate:
    """Streaming statistics of one dataset (or of all of them)."""

    def __init__(self, name: str):
        self.name = name
        self.counts = {"source": Counter(), "target": Counter(), "total": Counter(), "trained": Counter()}
        self.n_rows = 0
        self.n_ok = 0
        self.status = Counter()
        self.flags = Counter()
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.longest: list[tuple] = []
        self.pair_longest = 0
        self.tokens_trained = 0
        self.media = 0

    def add(self, rec: tuple, file: str) -> None:
        index, line, status, sf, tf, tof, s, t, to, labels, flags, pair = rec
        self.n_rows += 1
        self.status[status] += 1
        if status != OK:
            return
        self.n_ok += 1
        c = self.counts
        c["source"][sf] += 1
        c["target"][tf] += 1
        c["total"][tof] += 1
        c["trained"][to] += 1
        self.tokens_trained += to
        if pair is not None:
            self.pair_longest = max(self.pair_longest, pair[0], pair[1])
        if flags:
            for bit, key in ((TRUNCATED, "truncated"), (EOS_LOST, "eos_lost"), (EMPTY_TARGET, "empty_target"),
                             (TURNS_DROPPED, "turns_dropped"), (HAS_MEDIA, "media")):
                if flags & bit:
                    self.flags[key] += 1
                    ex = self.examples.setdefault(key, [])
                    if len(ex) < MAX_EXAMPLES:
                        ex.append({"file": file, "line": line, "index": index, "total": tof, "kept": to})
        item = (tof, -index, next(_SEQ), {"file": file, "line": line, "index": index, "source": sf, "target": tf,
                                          "total": tof, "kept": to})
        if len(self.longest) < TOP_K:
            heapq.heappush(self.longest, item)
        elif item[:3] > self.longest[0][:3]:
            heapq.heapreplace(self.longest, item)

    def merge(self, other: "DatasetAggregate") -> None:
        for k in self.counts:
            self.counts[k].update(other.counts[k])
        self.n_rows += other.n_rows
        self.n_ok += other.n_ok
        self.status.update(other.status)
        self.flags.update(other.flags)
        self.tokens_trained += other.tokens_trained
        self.pair_longest = max(self.pair_longest, other.pair_longest)
        for k, v in other.examples.items():
            mine = self.examples.setdefault(k, [])
            mine.extend(v[: max(0, MAX_EXAMPLES - len(mine))])
        for it in other.longest:
            if len(self.longest) < TOP_K:
                heapq.heappush(self.longest, it)
            elif it[:3] > self.longest[0][:3]:
                heapq.heapreplace(self.longest, it)

    def facts(self, cutoff: int) -> dict[str, Any]:
        n = self.n_ok
        return {
            "rows": self.n_rows,
            "samples": n,
            "dropped": self.status[DROPPED],
            "errors": self.status[ERROR],
            "unreadable": self.status[UNREADABLE],
            "truncated": self.flags["truncated"],
            "truncated_frac": round(self.flags["truncated"] / n, 4) if n else 0.0,
            "eos_lost": self.flags["eos_lost"],
            "empty_targets": self.flags["empty_target"],
            "turns_dropped": self.flags["turns_dropped"],
            "with_media": self.flags["media"],
            "tokens_trained": self.tokens_trained,
            "source": _summary(self.counts["source"]),
            "target": _summary(self.counts["target"]),
            "total": _summary(self.counts["total"]),
            "after_cutoff": _summary(self.counts["trained"]),
            "histogram": histogram(self.counts["total"], cutoff),
            "longest": [it[3] for it in sorted(self.longest, key=lambda x: (-x[0], -x[1], x[2]))],
            "examples": {k: v for k, v in self.examples.items()},
        }


class Packer:
    """LF's packing/blocking per map batch of ``preprocessing_batch_size`` rows of the merged dataset."""

    def __init__(self, settings: DataSettings):
        self.s = settings
        self.batch: list[int] = []
        self.rows_in_batch = 0
        self.packs = 0
        self.tokens = 0
        self.max_pack = 0
        self.blocks = 0
        self.dropped_tokens = 0

    def add(self, status: int, kept_total: int) -> None:
        self.rows_in_batch += 1
        if status == OK:
            self.batch.append(kept_total)
        if self.rows_in_batch >= self.s.preprocessing_batch_size:
            self.flush()

    def flush(self) -> None:
        if self.s.processor == "pretrain_packed":
            tot = sum(self.batch)
            self.blocks += tot // self.s.cutoff_len
            self.dropped_tokens += tot % self.s.cutoff_len
            self.tokens += tot - tot % self.s.cutoff_len
        elif self.batch:
            for pack in greedy_knapsack(self.batch, self.s.effective_cutoff):
                self.packs += 1
                self.tokens += sum(pack)
                self.max_pack = max(self.max_pack, sum(pack))
        self.batch, self.rows_in_batch = [], 0

    def facts(self) -> dict[str, Any]:
        if self.s.processor == "pretrain_packed":
            return {"blocks": self.blocks, "block_len": self.s.cutoff_len, "dropped_tokens": self.dropped_tokens}
        row_len = self.s.effective_cutoff + 1  # LF pads each pack to cutoff_len + 1 = the configured cutoff_len
        cap = self.packs * row_len
        return {"rows": self.packs, "row_len": row_len,
                "pad_frac": round(1 - self.tokens / cap, 4) if cap else None, "tokens": self.tokens}


def pad8(n: int) -> int:
    """LF's collators pad batches to a multiple of 8 (``train/sft/workflow.py:65``, dpo/rm/kto workflows)."""
    return (n + 7) // 8 * 8


def worst_micro_batch(agg: DatasetAggregate, settings: DataSettings) -> dict[str, Any] | None:
    """The largest padded micro-batch the data can form (tokens = rows × padded length).

    Without packing a batch is padded to its longest sample (rounded up to a multiple of 8), so the worst case
    puts the longest sample with `micro_batch − 1` others: `micro_batch × pad8(longest)`. Pairwise batches hold
    chosen and rejected rows: twice as many rows. Packed rows are always cutoff_len long. `real_tokens` sums the
    `micro_batch` longest samples (unpadded).
    """
    c = agg.counts["trained"]
    if not c:
        return None
    mb = max(1, settings.micro_batch)
    longest = max(c)
    p = settings.processor
    rows = 2 * mb if p == "pairwise" else mb
    seq = pad8(agg.pair_longest if p == "pairwise" else longest)
    packed_len = settings.cutoff_len
    top = []
    for v in sorted(c, reverse=True):
        top.extend([v] * min(c[v], mb - len(top)))
        if len(top) >= mb:
            break
    mode = "packed" if settings.packing else ("pairwise" if p == "pairwise" else "padded")
    tokens = rows * (packed_len if settings.packing else seq)
    return {
        "mode": mode,
        "micro_batch": mb,
        "rows": rows,
        "seq_len": packed_len if settings.packing else seq,
        "tokens": tokens,
        "unpacked_seq_len": seq,
        "unpacked_tokens": rows * seq,
        "packed_tokens": rows * packed_len,
        "cutoff_tokens": rows * settings.cutoff_len,
        "real_tokens": sum(top) * (2 if p == "pairwise" else 1),
    }


# --- worker processes -------------------------------------------------------------------------------------------------

_W: dict[str, Any] = {}


def _worker_init(env: dict[str, str] | None = None) -> None:
    # Each worker encodes on one core; the parent's rayon pool must not be shared across fork.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if env:
        os.environ.update(env)


def _work(task: tuple) -> tuple:
    file, first_index, rows, raw, lines, cs = task
    enc: Encoder = _W["encoder"]
    errors: list[RowError] = []
    keys: set[str] = set()
    if raw is not None:
        rows, errors, keys = parse_json_lines(file, raw, lines, first_index)
    recs, problems = enc.process(rows, first_index, lines, cs)
    return recs, problems, [(e.kind, e.file, e.line, e.message, e.index, e.fatal) for e in errors], keys


@dataclass
class ScanResult:
    """Everything one dataset scan produced (before it becomes facts)."""

    agg: DatasetAggregate
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)

    def problem(self, kind: str, message: str, file: str | None, line: int | None, index: int | None,
                fatal: bool) -> None:
        p = self.problems.setdefault(kind, {"kind": kind, "count": 0, "fatal": False, "examples": []})
        p["count"] += 1
        p["fatal"] = p["fatal"] or fatal
        if len(p["examples"]) < MAX_EXAMPLES:
            p["examples"].append({"file": file, "line": line, "index": index, "message": message})


class Scanner:
    """Runs `Encoder` over datasets, in-process or in a pool of forked workers, preserving row order."""

    def __init__(self, encoder: Encoder, settings: DataSettings, workers: int = 1,
                 progress: Callable[[str, int, int], None] | None = None):
        self.enc = encoder
        self.s = settings
        self.workers = max(1, workers)
        self.progress = progress
        self.pool = None
        self.packer = Packer(settings)
        if self.workers > 1:
            import multiprocessing as mp

            _W["encoder"] = encoder
            try:
                ctx = mp.get_context("fork")
            except ValueError:  # no fork on this platform: run in-process
                self.workers = 1
            else:
                self.pool = ctx.Pool(self.workers, initializer=_worker_init)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> "Scanner":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def scan(self, spec: DatasetSpec, max_rows: int | None = None, chunk_rows: int = 1000) -> ScanResult:
        res = ScanResult(DatasetAggregate(spec.name))
        cs = ConvSpec.of(spec)
        size = total_bytes(spec) or 1
        done_files = 0
        file_sizes = {f: (os.path.getsize(f) if os.path.exists(f) else 0) for f in spec.files}
        last_file = None

        def tasks() -> Iterator[tuple]:
            for ch in iter_chunks(spec, chunk_rows=chunk_rows, max_rows=max_rows, raw_jsonl=self.pool is not None):
                yield ch

        def handle(ch: Chunk, out: tuple) -> None:
            nonlocal done_files, last_file
            recs, problems, errors, keys = out
            if ch.file != last_file:
                if last_file is not None:
                    done_files += file_sizes.get(last_file, 0)
                last_file = ch.file
                res.files.append(ch.file)
            res.keys |= ch.keys | set(keys)
            for e in ch.errors:
                res.problem(e.kind, e.message, e.file, e.line, e.index, True)
            for kind, file, line, msg, index, fatal in errors:
                res.problem(kind, msg, file, line, index, True)
            for kind, index, line, msg, fatal in problems:
                res.problem(kind, msg, ch.file, line, index, fatal)
            add = res.agg.add
            for r in recs:
                add(r, ch.file)
            if self.s.packing:  # packing_stats are reported only with packing: skip the knapsack otherwise
                for r in recs:
                    self.packer.add(r[2], r[8])
            if self.progress:
                self.progress(spec.name, min(size, done_files + ch.bytes_done), size)

        if self.pool is None:
            for ch in tasks():
                if ch.raw is not None:  # pragma: no cover - raw only with a pool
                    rows, errs, keys = parse_json_lines(ch.file, ch.raw, ch.lines, ch.first_index)
                    ch.rows, ch.errors, ch.keys = rows, ch.errors + errs, ch.keys | keys
                recs, problems = self.enc.process(ch.rows or [], ch.first_index, ch.lines, cs)
                handle(ch, (recs, problems, [], set()))
        else:
            pending: list[tuple[Chunk, Any]] = []
            window = self.workers * 3  # chunks in flight: bounds memory while keeping workers busy
            for ch in tasks():
                task = (ch.file, ch.first_index, ch.rows, ch.raw, ch.lines, cs)
                pending.append((ch, self.pool.apply_async(_work, (task,))))
                ch.rows = ch.raw = None
                while len(pending) >= window:
                    c0, fut = pending.pop(0)
                    handle(c0, fut.get())
            for c0, fut in pending:
                handle(c0, fut.get())
        return res


# --- whole-run analysis -----------------------------------------------------------------------------------------------

PROBLEM_TEXT = {
    "malformed_json": "rows that are not valid JSON; LLaMA-Factory's loader (datasets) fails on the whole file",
    "bad_row": "rows that are not JSON objects; LLaMA-Factory's loader fails on them",
    "unreadable": "a file that cannot be read",
    "missing_column": "a mapped column that no row has; LLaMA-Factory's converter raises KeyError",
    "wrong_role_order": "conversations with roles out of order; LLaMA-Factory skips them ('Invalid role tag')",
    "odd_message_count": "conversations with a message count LLaMA-Factory cannot pair; skipped",
    "no_response": "rows without a usable response; LLaMA-Factory drops them ('Dropped invalid example')",
    "empty_prompt": "rows without text; LLaMA-Factory's pretraining processor fails on them",
    "bad_value": "values of the wrong type or malformed tool/function JSON; LLaMA-Factory fails on them",
    "stage_mismatch": "ranking data in a non-preference stage (or the reverse); LLaMA-Factory raises "
                      "'The dataset is not applicable in the current training stage.'",
}
FATAL_KINDS = {"malformed_json", "bad_row", "unreadable", "missing_column", "bad_value", "empty_prompt",
               "stage_mismatch"}


def accessed_columns(spec: DatasetSpec, processor: str) -> dict[str, str]:
    """Columns LF's converter reads with ``example[col]`` for this dataset: {role: column name}.

    A column read that way must exist in the file's schema (some row has it), else ``KeyError`` (converter.py).
    The openai converter reads system/tools with ``.get`` and is forgiving there.
    """
    c = spec.columns
    out: dict[str, str] = {}
    if spec.formatting == "alpaca":
        roles = ["history", "prompt", "query", "system", "tools", "images", "videos", "audios", "kto_tag"]
        if spec.ranking:
            roles += ["chosen", "rejected"]
        elif not c.get("kto_tag"):
            roles.append("response")
    else:
        roles = ["messages", "images", "videos", "audios", "kto_tag"]
        if spec.formatting == "sharegpt":
            roles += ["tools"]
        if spec.ranking:
            roles += ["chosen", "rejected"]
    for r in roles:
        if c.get(r):
            out[r] = c[r]
    return out


def dataset_facts(spec: DatasetSpec, res: ScanResult | None, settings: DataSettings) -> dict[str, Any]:
    """One entry of ``data.datasets`` (see pipeline/data.py `collect` for the shape)."""
    base = {"name": spec.name, "source": spec.source, "load_from": spec.load_from, "formatting": spec.formatting,
            "ranking": bool(spec.ranking), "files": list(spec.files), "file_type": spec.file_type,
            "location": spec.location(), "num_samples": spec.num_samples, "cached_from": spec.cached_from}
    if res is None:
        base.update(status="unavailable", reason=spec.unavailable, samples=0, rows=0, problems=[])
        return base
    base.update(res.agg.facts(settings.effective_cutoff))
    probs = []
    for key, p in res.problems.items():
        kind = p.get("kind", key)
        first = p["examples"][0] if p["examples"] else {}
        probs.append({"dataset": spec.name, "kind": kind, "count": p["count"],
                      "fatal": p["fatal"] or kind in FATAL_KINDS, "what": PROBLEM_TEXT.get(kind, kind),
                      "message": first.get("message", ""),
                      "location": {"file": first.get("file"), "line": first.get("line"), "column": None,
                                   "key": None},
                      "examples": p["examples"]})
    probs.sort(key=lambda p: (not p["fatal"], -p["count"]))
    base["problems"] = probs
    partial = any(p["kind"] in ("malformed_json", "bad_row", "unreadable") for p in probs)
    base["status"] = "partial" if partial else ("empty" if base["samples"] == 0 else "ok")
    base["reason"] = None
    return base


def check_columns(spec: DatasetSpec, res: ScanResult, processor: str) -> None:
    """Record a ``missing_column`` problem for each column LF reads that no row of the files has."""
    if not res.agg.n_rows:
        return
    for role, col in accessed_columns(spec, processor).items():
        if col not in res.keys:
            have = ", ".join(sorted(res.keys)[:8]) or "none"
            msg = (f"columns.{role} = {col!r}, but no row has a {col!r} field (fields: {have})" if
                   spec.info_path else f"no row has a {col!r} field")
            res.problems["missing_column:" + role] = {
                "kind": "missing_column", "count": 1, "fatal": True,
                "examples": [{"file": spec.info_path or (spec.files[0] if spec.files else None),
                              "line": spec.info_line, "index": None, "message": msg}]}


def analyze_datasets(specs: list[DatasetSpec], settings: DataSettings, counter: Any, template: T.Template, *,
                     workers: int = 1, progress: Callable[[str, int, int], None] | None = None,
                     chunk_rows: int = 1000, parallel_min_bytes: int = 4 << 20) -> dict[str, Any]:
    """Scan `specs` in order and return the ``data`` facts (shape documented in pipeline/data.py `collect`).

    Worker processes are used when the files hold at least `parallel_min_bytes` (starting them costs more than
    scanning a few MB in-process, where ``encode_batch`` still uses every core).
    """
    enc = Encoder(counter, template, settings)
    overall = DatasetAggregate("overall")
    entries: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    partial_reasons: list[str] = []
    small = sum(total_bytes(s) for s in specs if not s.unavailable) < parallel_min_bytes
    n_workers = 1 if small else max(1, workers)
    with Scanner(enc, settings, workers=n_workers, progress=progress) as scanner:
        for spec in specs:
            if spec.unavailable:
                entries.append(dataset_facts(spec, None, settings))
                partial_reasons.append(f"{spec.name}: {spec.unavailable}")
                continue
            res = scanner.scan(spec, max_rows=settings.max_samples, chunk_rows=chunk_rows)
            ranking_stage = settings.lf_stage == "rm"
            if bool(spec.ranking) != ranking_stage and settings.lf_stage in ("rm", "sft", "pt", "ppo", "kto"):
                res.problems["stage_mismatch"] = {"kind": "stage_mismatch", "count": 1, "fatal": True, "examples": [{
                    "file": spec.info_path, "line": spec.info_line, "index": None,
                    "message": (f"dataset is {'ranked (pairwise)' if spec.ranking else 'not ranked'} but stage "
                                f"{settings.stage!r} {'needs' if ranking_stage else 'does not take'} pairwise data")}]}
            check_columns(spec, res, settings.processor)
            entry = dataset_facts(spec, res, settings)
            entries.append(entry)
            problems.extend(entry["problems"])
            if entry["status"] == "partial":
                partial_reasons.append(f"{spec.name}: unreadable rows skipped")
            overall.merge(res.agg)
        scanner.packer.flush()
        scanner.close()
        packer = scanner.packer
    scanned = sum(1 for e in entries if e["status"] != "unavailable")
    ov = overall.facts(settings.effective_cutoff) if scanned else None
    if ov is not None:
        ov["truncated_in"] = [f"{e['name']} ({e['truncated']})" for e in entries if e.get("truncated")]
        ov["empty_targets_in"] = [f"{e['name']} ({e['empty_targets']})" for e in entries if e.get("empty_targets")]
    wmb = worst_micro_batch(overall, settings)
    p99 = ov["total"]["p99"] if ov else None
    mx = ov["total"]["max"] if ov else None
    facts: dict[str, Any] = {
        "approximate": bool(counter.approximate),
        "template": {"name": template.name, "requested": settings.template, "efficient_eos": template.efficient_eos,
                     "eos_tail_tokens": enc.eos_tail, "adds_eos": not enc.no_eos,
                     "removed_upstream": template.removed_upstream},
        "stage": settings.stage,
        "processor": settings.processor,
        "cutoff_len": settings.cutoff_len,
        "effective_cutoff": settings.effective_cutoff,
        "packing": settings.packing,
        "neat_packing": settings.neat_packing,
        "micro_batch": settings.micro_batch,
        "max_samples": settings.max_samples,
        "val_size": settings.val_size,
        "mix_strategy": settings.mix_strategy,
        "datasets": entries,
        "scanned": scanned,
        "overall": ov,
        "packing_stats": packer.facts() if settings.packing else None,
        "worst_micro_batch": wmb,
        "problems": problems,
        "partial": bool(partial_reasons),
        "partial_reasons": partial_reasons,
        "cutoff_for_max": round_up(mx),
        "cutoff_for_p99": round_up(p99),
        "cutoff_over_p99": round(settings.cutoff_len / p99, 2) if p99 else None,
    }
    return facts


def round_up(n: int | None, step: int = 128) -> int | None:
    """`n` tokens rounded up to a multiple of `step` (a cutoff_len that holds a sample of that length)."""
    if not n:
        return None
    return int(math.ceil(n / step) * step)
