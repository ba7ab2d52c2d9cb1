"""The rule catalogue (``doctor rules``) and one rule's documentation (``doctor explain``).

``render_explain`` writes a rule's documentation in ruff's section layout (ruff ``generate_docs.rs`` /
``scripts/add_rule.py``: ``# name (CODE)``, *What it does*, *Why is this bad?*, *Example* with a
*Use instead:* block, *Fix safety* when the rule has a fix, *References*), generated from the rule file's
``docs`` fields. The SARIF reporter reuses it as each rule's ``help.markdown`` so that ``doctor explain`` and
GitHub code scanning say the same thing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable

from finetune_doctor.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from finetune_doctor.engine.loader import Rule

CATALOG_FORMATS = ("text", "json", "markdown")
CATALOG_COLUMNS = ("code", "name", "severity", "category", "commands", "fixable")


def fix_kind(rule: "Rule") -> str:
    """``safe`` / ``unsafe`` for a rule with fixed edits, ``computed`` when a remedy planner builds each
    finding's fix (and its safety), ``""`` without a fix."""
    if rule.fix is None:
        return ""
    return "computed" if rule.fix.planner else rule.fix.safety


def catalog_rows(rules: Iterable["Rule"]) -> list[dict[str, Any]]:
    """One plain record per rule, sorted by code: the columns of ``doctor rules`` plus a summary line."""
    rows = []
    for r in sorted(rules, key=lambda r: r.code):
        rows.append({
            "code": r.code, "name": r.name, "severity": r.severity, "category": r.category,
            "commands": list(r.commands), "fixable": r.fix is not None, "fix_safety": fix_kind(r) or None,
            "summary": first_sentence(str(r.docs.get("what_it_does") or "")),
        })
    return rows


def render_catalog(rules: Iterable["Rule"], fmt: str = "text", color: bool | None = None,
                   width: int | None = None) -> str:
    """The rule table in `fmt`: ``text`` (rich table), ``json`` (a list of records) or ``markdown``.

    Raises InputError for another format.
    """
    rows = catalog_rows(rules)
    if fmt == "json":
        import json

        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    if fmt == "markdown":
        lines = ["| " + " | ".join(CATALOG_COLUMNS) + " |", "|" + "---|" * len(CATALOG_COLUMNS)]
        for row in rows:
            lines.append("| " + " | ".join(_cell(row, c).replace("|", "\\|") for c in CATALOG_COLUMNS) + " |")
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise InputError(f"unknown catalogue format {fmt!r} (choose from {', '.join(CATALOG_FORMATS)})",
                         file="--format")
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from finetune_doctor.reporters.text import (SEVERITY_STYLE, TextReporter, keep_numbers_whole, make_console,
                                                strip_trailing)

    opts = TextReporter(color=color, width=width)
    console = make_console(opts.color, opts.width)
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, header_style="bold")
    # under 100 columns the category goes (`doctor explain` and --format json keep it): with it, the longest
    # rule name and the commands cannot share 80 columns without cutting a word
    columns = [c for c in CATALOG_COLUMNS if opts.width >= 100 or c != "category"]
    for col in columns:
        table.add_column(col, no_wrap=col in ("code", "name", "severity"))
    for row in rows:
        table.add_row(*(Text(_cell(row, c), style=SEVERITY_STYLE[row["severity"]] if c == "severity" else "")
                        for c in columns))
    keep_numbers_whole(table, opts.width)
    console.print(table)
    console.print(f"{len(rows)} rules · `doctor explain CODE` shows one rule's documentation", markup=False)
    return strip_trailing(console.file.getvalue())  # type: ignore[attr-defined]


def _cell(row: dict[str, Any], col: str) -> str:
    v = row[col]
    if col == "commands":
        return ", ".join(v)
    if col == "fixable":
        return row["fix_safety"] or ""
    return str(v)


def first_sentence(text: str) -> str:
    """The first sentence of `text`, on one line (what SARIF's shortDescription and the catalogue show)."""
    flat = " ".join(text.split())
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z`(\"'])", flat)
    return flat[: m.start()] if m else flat


_YAML_LINE = re.compile(r"^\s*(?:#.*|- .*|-|[a-z_][a-z0-9_.\-]*:(?:\s.*)?)$")
_JSON_KEY = re.compile(r'"[^"\n]+"\s*:')
_ENV_CMD = re.compile(r"^[A-Z_][A-Z0-9_]*=\S* +(?:llamafactory-cli|torchrun|deepspeed|python|accelerate) ")


def _lang(body: str) -> str:
    """The fence language of an example, by content: ``json`` when it parses as JSON or is a JSON object with
    an elision (``{"fp16": {...}, ...}``), ``console`` for a command line, ``yaml`` when every line is a
    snake_case ``key: value``, a list item or a comment (how LLaMA-Factory configs look), ``text`` otherwise
    -- a log excerpt such as ``[deepspeed] OVERFLOW! ...`` starts with a bracket but is not JSON."""
    import json

    head = body.lstrip()
    if head.startswith(("{", "[")):
        try:
            json.loads(body)
            return "json"
        except ValueError:
            if _JSON_KEY.search(body):
                return "json"
    first = next((x for x in body.splitlines() if x.strip() and not x.lstrip().startswith("#")), "")
    if _JSON_KEY.match(first.lstrip()):   # a fragment of a DeepSpeed/dataset_info JSON: "key": {...},
        return "json"
    if head.startswith(("$ ", "doctor ", "llamafactory-cli ", "torchrun ", "deepspeed ", "pip ")) \
            or _ENV_CMD.match(head):
        return "console"
    lines = [x for x in body.splitlines() if x.strip()]
    if lines and all(_YAML_LINE.match(x) for x in lines):
        return "yaml"
    return "text"


def _fence(text: str) -> str:
    """`text` as a fenced code block, the language chosen by `_lang`."""
    body = str(text).strip("\n")
    if "```" in body:
        return body
    lang = _lang(body)
    return f"```{lang}\n{body}\n```"


def _para(text: Any) -> str:
    """A docs text as markdown paragraphs: a blank line in the rule file's folded scalar (``>-``) reaches here as
    one newline, which becomes a paragraph break (trial 16: `doctor explain FD317` printed one 40-line paragraph)."""
    return "\n\n".join(p.strip() for p in str(text).strip().split("\n") if p.strip())


def fix_safety_text(rule: "Rule") -> str:
    """The *Fix safety* section: the rule's own words (``docs.fix_safety``) or a statement of its safety."""
    if rule.fix is None:
        return ""
    own = rule.docs.get("fix_safety")
    if own:
        return _para(own)
    if rule.fix.planner:
        return (f"The fix is computed for each finding by the `{rule.fix.planner}` remedy planner, which "
                "re-runs the estimator on each candidate and ranks the ones that make the run fit. Each "
                "computed fix states its own safety; fixes that change the effective batch, the sequence "
                "length or the numerics are unsafe and are applied only with `--unsafe-fixes`.")
    keys = ", ".join(dict.fromkeys(_edit_words(e) for e in rule.fix.edits))
    edits = f" It edits {keys}." if keys else ""
    if rule.fix.safety == "safe":
        return ("This fix is marked safe: it does not change what the run computes, so `--fix` applies it, "
                "keeping the file's comments, key order and quoting." + edits)
    return ("This fix is marked unsafe: it changes how the run trains (numerics, effective batch, or a "
            "memory/throughput trade-off), so it is applied only with `--unsafe-fixes`, after you have "
            "read it." + edits)


def _edit_words(edit: Any) -> str:
    """One fix edit in words: a templated key or file (filled per finding) is described, never shown as code."""
    key, where = edit.key.source, edit.file.source
    key_text = "the key each finding names" if "{" in key else f"`{key}`"
    where_text = "config, or the command line where the key was given" if "{" in where else where
    return f"{key_text} ({where_text})"


def render_explain(rule: "Rule", heading: bool = True) -> str:
    """A rule's documentation as Markdown, ruff-style. `heading` False drops the ``# name (CODE)`` line
    (SARIF viewers show the rule's name themselves)."""
    d = rule.docs
    out: list[str] = []
    if heading:
        out += [f"# {rule.name} ({rule.code})", ""]
    meta = (f"Severity: {rule.severity} · Category: {rule.category} · "
            f"Commands: {', '.join(rule.commands)}")
    out += [meta, ""]
    if rule.fix is not None:
        if rule.fix.planner:
            out += ["Fix is computed for each finding.", ""]
        else:
            out += [f"Fix is available ({rule.fix.safety}).", ""]
    out += ["## What it does", _para(d.get("what_it_does", "")), ""]
    out += ["## Why is this bad?", _para(d.get("why_bad", "")), ""]
    if d.get("known_problems"):
        out += ["## Known problems", _para(d["known_problems"]), ""]
    if d.get("example"):
        out += ["## Example", _fence(d["example"]), ""]
    if d.get("use_instead"):
        if not d.get("example"):
            out += ["## Example"]
        out += ["Use instead:", _fence(d["use_instead"]), ""]
    if rule.fix is not None:
        out += ["## Fix safety", fix_safety_text(rule), ""]
    refs = d.get("references") or []
    if isinstance(refs, str):
        refs = [refs]
    if refs:
        out += ["## References", *(f"- <{r}>" if _is_url(r) else f"- {r}" for r in refs), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _is_url(s: Any) -> bool:
    return isinstance(s, str) and bool(re.match(r"^https?://\S+$", s))
