"""The model's tokenizer and chat template as LLaMA-Factory would load them, and the token counters built on them.

`find_tokenizer` finds a local ``tokenizer.json`` (a folder, the HF hub cache or the ModelScope cache; never a
download); `read_tokenizer_config` reads the settings transformers reads beside it; `ExactCounter` counts tokens
with the fast tokenizer after the changes LF makes to it; `ApproxCounter` estimates counts from characters when no
tokenizer is on this machine; `resolve_template` picks the template LF would use (``data/template.py``
``get_template_and_fix_tokenizer``), parsing the tokenizer's Jinja chat template when the config names none.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from finetune_doctor.analyzers.data import templates as T
from finetune_doctor.analyzers.data.media import FAMILIES as MEDIA_FAMILIES
from finetune_doctor.analyzers.data.dataargs import DataSettings
from finetune_doctor.readers.model.caches import cached_model_files


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
        # the one cache locator (readers/model/caches.py): ModelScope/openMind when LF would download from them
        for f, where in cached_model_files(model, "tokenizer.json", cache_dir, env):
            return str(f.parent), f"{where} {f.parent}"
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
            except (OSError, ValueError, RecursionError):   # unreadable, not UTF-8, not JSON: as if absent
                continue
            if isinstance(data, dict):
                out.update(data)
    if not out.get("chat_template"):
        try:
            if (p / "chat_template.jinja").is_file():
                out["chat_template"] = (p / "chat_template.jinja").read_text(encoding="utf-8")
            elif (p / "chat_template.json").is_file():
                text = (p / "chat_template.json").read_text(encoding="utf-8")
                out["chat_template"] = json.loads(text)["chat_template"]
        except (OSError, ValueError, RecursionError, KeyError, TypeError):
            pass   # transformers would fail to load this chat template too; the doctor goes on without it
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
        from finetune_doctor.analyzers.data.piececount import PieceCounter

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
        elif t.multimodal and name not in MEDIA_FAMILIES:
            info["note"] = (f"{name!r} is a multimodal template whose media tokens the doctor does not model: "
                            "image/video/audio tokens are not counted")
        return t, info
    info["modelled"] = False
    info["note"] = (f"template {name!r} is not modelled by the doctor: counted with 'empty' (contents only, no role "
                    "markers)" if info["lf_registered"] else
                    f"template {name!r} is not registered in LLaMA-Factory 0.9.5: LLaMA-Factory raises "
                    f"'Template {name} does not exist.' unless your version added it")
    return T.get_template("empty", **kw), info
