"""LLaMA-Factory's dataset converters (``data/converter.py``: alpaca, sharegpt, openai), keeping only what lengths need.

`convert_row` turns one row into prompt and response messages, a system prompt, tools text and whether it carries
media, as LF's converter does, with LF's validity checks (role order, message count). A row LF cannot use raises
`RowProblem` (fatal when LF itself fails on it); a sharegpt row LF converts to an empty sample (and then drops)
raises `_Broken` with the reason. `_why_invalid` names why a converted sample does not fit the stage's processor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from finetune_doctor.readers.data.datasets import DatasetSpec


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
