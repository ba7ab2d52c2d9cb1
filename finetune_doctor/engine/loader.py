"""Load rule files (``rules/*.yaml``) into `Rule` values, checking every field up front.

The rule-file format is part of the contract (DESIGN.md "Rule files"). A rule file with an unknown field,
a bad severity or an expression that does not parse is an input error naming the file and line, so that a
user's own rule directory fails loudly rather than silently never firing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from finetune_doctor.engine.expr import Expr, ExprError, Template, compile_expr, compile_template
from finetune_doctor.errors import InputError
from finetune_doctor.types import SEVERITIES

COMMANDS = ("check", "lint", "estimate", "postmortem", "probe", "gpus", "data")
CATEGORIES = ("config", "precision", "memory", "deepspeed", "numerics", "data", "distributed", "hardware", "runtime")
DOC_SECTIONS = ("what_it_does", "why_bad", "example", "use_instead", "references")
MESSAGE_FIELDS = {"text", "by", "cases", "default", "suffix", "parts"}
TABLE_FIELDS = {"by", "cases", "default"}
SUFFIX_FIELDS = {"when", "text"}
TOP_FIELDS = {"code", "name", "severity", "category", "commands", "requires", "for_each", "when", "message",
              "location", "fix", "docs", "tags"}
FIX_FIELDS = {"title", "safety", "edits", "planner", "cost", "safe_when"}
EDIT_FIELDS = {"file", "key", "value", "value_expr", "delete", "when"}
LOCATION_FIELDS = {"file", "key", "line", "from"}


@dataclass(frozen=True)
class EditSpec:
    """One edit of a rule's fix: the file role, the key, the value (literal or an expression) or a deletion."""

    file: Template            # a role: config | deepspeed, or an expression in {..}
    key: Template             # may hold {..} placeholders
    value: Any = None
    value_expr: Expr | None = None
    delete: bool = False
    when: Expr | None = None


@dataclass(frozen=True)
class FixSpec:
    """A rule's fix: its title, safety, edits, the remedy planner that computes it and its cost line."""

    title: Template
    safety: str = "unsafe"
    edits: tuple[EditSpec, ...] = ()
    planner: str | None = None
    cost: Template | None = None
    safe_when: Any = None      # an expression: where it holds, this finding's fix is safe whatever `safety` says


@dataclass(frozen=True)
class LocationSpec:
    """Where a finding points: ``from`` (an expression giving {file, line, column, key}), or a ``file`` role and a
    ``key`` (templates) with an optional ``line`` expression."""

    file: Template | None = None
    key: Template | None = None
    line: Expr | None = None
    from_: Expr | None = None


@dataclass(frozen=True)
class Message:
    """A rule's message: one template, or a table of templates keyed by the value of the selector `by`.

    In a table, the case keys were checked at load against the values the selected fact declares
    (facts/schema.py `Field.values`), so a misspelt case is a load error; a value with no case takes `default`,
    which the loader requires unless the cases cover every declared value.
    A message of `parts` renders each part (a text or a table, itself a `Message` with no suffix or parts) and
    joins the non-empty ones with a space: a sentence whose opening and ending vary apart (the key schema's choice
    and type problems) is one table per variant instead of their product.
    """

    text: Template | None = None
    by: Expr | None = None
    cases: Mapping[str, Template] = field(default_factory=dict)
    default: Template | None = None
    suffix: Template | None = None        # appended to whichever case renders, when `suffix_when` holds
    suffix_when: Expr | None = None
    parts: tuple["Message", ...] = ()

    def templates(self) -> tuple[Template, ...]:
        """Every template the message can render (the text, or each case then the default, or each part's; then
        the suffix)."""
        if self.parts:
            return (*(t for p in self.parts for t in p.templates()), *((self.suffix,) if self.suffix else ()))
        if self.text is not None:
            return tuple(t for t in (self.text, self.suffix) if t is not None)
        return tuple(t for t in (*self.cases.values(), self.default, self.suffix) if t is not None)


@dataclass(frozen=True)
class Rule:
    """One rule file, parsed and compiled: each expression an `Expr` (parsed once), each template a `Template`.
    `path` is where it came from (for `doctor explain` and error messages)."""

    code: str
    name: str
    severity: str
    category: str
    commands: tuple[str, ...]
    message: Message
    when: Expr | None = None
    for_each: Expr | None = None
    requires: tuple[str, ...] = ()
    location: LocationSpec = LocationSpec()
    fix: FixSpec | None = None
    docs: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    path: str = ""

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    def expressions(self) -> tuple[Expr, ...]:
        """Every compiled expression of the rule, placeholders included (the loader parses them all once to validate
        a pack it has not cached)."""
        out: list[Expr] = [e for e in (self.when, self.for_each, self.message.by, self.message.suffix_when,
                                       *(p.by for p in self.message.parts)) if e is not None]
        temps = [*self.message.templates(), self.location.file, self.location.key]
        out += [e for e in (self.location.line, self.location.from_) if e is not None]
        if self.fix is not None:
            temps += [self.fix.title, self.fix.cost]
            for ed in self.fix.edits:
                temps += [ed.file, ed.key]
                out += [e for e in (ed.value_expr, ed.when) if e is not None]
        for t in temps:
            if t is not None:
                out.extend(t.exprs())
        return tuple(out)


@lru_cache(maxsize=1)
def bundled_rules_dir() -> Path:
    """The rule pack: top-level ``rules/`` in a checkout, ``finetune_doctor/_bundled_rules`` in a wheel."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "_bundled_rules", here.parent / "rules"):
        if cand.is_dir():
            return cand
    raise InputError("the bundled rule pack is missing (reinstall finetune-doctor)", file=str(here))


def load_rules(extra_dirs: list[str] | tuple[str, ...] = ()) -> tuple[Rule, ...]:
    """All rules: the bundled pack plus every ``*.yaml`` in `extra_dirs`, sorted by code.

    Raises InputError on a malformed rule file or a duplicate code/name. The merged answer is kept while the
    directories' packs are the ones `_load_dir` keeps (each is read once per process): a lint of many files asks
    once per file, and the merge and duplicate check over ~250 names cost ~0.2 ms each time (issue #22).
    """
    packs = [_load_dir(str(bundled_rules_dir()))]
    for d in extra_dirs:
        if not Path(d).is_dir():
            raise InputError("rule directory does not exist", file=d)
        packs.append(_load_dir(str(Path(d).resolve())))
    key = tuple(extra_dirs)
    kept = _MERGED.get(key)
    if kept is not None and len(kept[0]) == len(packs) and all(a is b for a, b in zip(kept[0], packs)):
        return kept[1]
    merged = _merge(packs)
    _MERGED[key] = (tuple(packs), merged)
    return merged


_MERGED: dict[tuple[str, ...], tuple[tuple[tuple[Rule, ...], ...], tuple[Rule, ...]]] = {}


def _merge(packs: list[tuple[Rule, ...]]) -> tuple[Rule, ...]:
    rules = [r for pack in packs for r in pack]
    seen: dict[str, str] = {}
    for r in rules:
        for ident in (r.code, r.name):
            if ident in seen and seen[ident] != r.path:
                raise InputError(f"rule {ident!r} is defined twice (also in {seen[ident]})", file=r.path)
            seen[ident] = r.path
    return tuple(sorted(rules, key=lambda r: r.code))


@lru_cache(maxsize=16)
def _load_dir(path: str) -> tuple[Rule, ...]:
    raw, cached = _raw_rules(path)
    # a cached pack was validated when it was written: skip re-parsing every expression (~10 ms per process)
    return tuple(parse_rule(data, p, check_expressions=not cached) for p, data in raw)


def _cache_file(path: str, files: list[tuple[str, int, int]]) -> tuple[Path, str] | None:
    """Where the parsed YAML of a rule directory is cached, and the key it must hold: the directory and every
    file's name, size and mtime (`files`, from `_listing`).

    Parsing ~60 rule files with ruamel costs ~100 ms per process, most of `doctor lint`'s budget; reading the
    same data back as JSON costs ~1 ms. The file is named by a CRC-32 of the key and holds the key itself, which
    is compared in full on reading (no digest to trust; hashlib's OpenSSL binding cost ~6 ms of start-up).
    FINETUNE_DOCTOR_NO_CACHE=1 turns the cache off.
    """
    import binascii

    from finetune_doctor.fsutil import cache_dir

    base = cache_dir()
    if base is None:
        return None
    key = ";".join([path, *(f"{name}:{size}:{mtime}" for name, size, mtime in files)])
    return base / f"rules-{binascii.crc32(key.encode('utf-8', 'surrogatepass')):08x}.marshal", key


def _listing(path: str) -> list[tuple[str, int, int]]:
    """(name, size, mtime in ns) of every ``*.yaml`` entry of the rule directory `path`, by name: what
    ``sorted(Path(path).glob("*.yaml"))`` and a ``stat`` of each give (hidden files included, as pathlib's glob
    matches them), read with one ``scandir`` instead of ~150 Path objects (~2 ms -> ~0.6 ms of every lint's
    start-up, issue #22). Raises OSError as ``stat`` does."""
    import os

    with os.scandir(path) as entries:
        found = [(e.name, e.stat()) for e in entries if e.name.endswith(".yaml")]
    return [(name, st.st_size, st.st_mtime_ns) for name, st in sorted(found, key=lambda x: x[0])]


def _raw_rules(path: str) -> tuple[list[tuple[str, Any]], bool]:
    """The parsed YAML of each rule file, and whether it came from the cache."""
    import json
    import marshal

    found = _cache_file(path, _listing(path))
    if found is not None:
        try:   # marshal: a third of json.loads' time for the ~270 kB pack (issue #22)
            data = marshal.loads(found[0].read_bytes())
            if isinstance(data, dict) and data.get("key") == found[1]:
                return [(p, d) for p, d in data["rules"]], True
        except (OSError, ValueError, EOFError, KeyError, TypeError):
            pass
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    out: list[tuple[str, Any]] = []
    for p in sorted(Path(path).glob("*.yaml")):
        try:
            data = yaml.load(p.read_text(encoding="utf-8"))
        except Exception as err:  # ruamel raises several parser error types
            line = getattr(getattr(err, "problem_mark", None), "line", None)
            raise InputError(f"malformed rule file: {getattr(err, 'problem', err)}", file=str(p),
                             line=None if line is None else line + 1) from None
        out.append((str(p), data))
    for p, data in out:   # validate before caching: only a pack that loads cleanly is ever cached
        parse_rule(data, p)
    if found is not None:
        from finetune_doctor.fsutil import prune_cache, write_bytes

        # through JSON first: what YAML reads beyond JSON's types (dates) is kept as text, as before
        plain = json.loads(json.dumps({"key": found[1], "rules": out}, default=str))
        try:
            found[0].parent.mkdir(parents=True, exist_ok=True)
            write_bytes(str(found[0]), marshal.dumps(plain))
            prune_cache(found[0], "rules-", legacy=(("rules-", ".json"),))   # older packs were JSON
        except (InputError, OSError, ValueError):
            pass   # best effort: no cache, never an error
    return out, False


def parse_rule(data: Any, path: str, *, check_expressions: bool = True) -> Rule:
    """Validate one rule mapping and compile it; raises InputError naming the file and the bad field.

    Every expression becomes an `Expr` and every template a `Template` (engine/expr.py), shared by all rules that
    hold the same text and parsed at most once per process. `check_expressions=False` (a pack already validated,
    read back from the cache) leaves the parsing to first use; every structural check still runs."""

    def bad(msg: str) -> InputError:
        return InputError(msg, file=path)

    if not isinstance(data, dict):
        raise bad("a rule file must be a mapping")
    unknown = set(data) - TOP_FIELDS
    if unknown:
        raise bad(f"unknown rule field(s): {', '.join(sorted(unknown))}")
    for req in ("code", "name", "severity", "category", "commands", "message"):
        if req not in data:
            raise bad(f"missing rule field {req!r}")
    if _stem(path) != data["name"]:
        raise bad(f"rule file must be named after the rule: {data['name']}.yaml")
    if data["severity"] not in SEVERITIES:
        raise bad(f"severity must be one of {', '.join(SEVERITIES)}")
    if data["category"] not in CATEGORIES:
        raise bad(f"category must be one of {', '.join(CATEGORIES)}")
    cmds = tuple(data["commands"])
    if not cmds or any(c not in COMMANDS for c in cmds):
        raise bad(f"commands must be a non-empty subset of {', '.join(COMMANDS)}")
    loc = data.get("location") or {}
    if set(loc) - LOCATION_FIELDS:
        raise bad(f"unknown location field(s): {', '.join(sorted(set(loc) - LOCATION_FIELDS))}")
    docs = data.get("docs") or {}
    missing = [s for s in ("what_it_does", "why_bad") if not docs.get(s)]
    if missing:
        raise bad(f"docs need the sections {', '.join(missing)}")
    rule = Rule(code=str(data["code"]), name=str(data["name"]), severity=data["severity"],
                category=data["category"], commands=cmds, message=_message(data["message"], bad),
                when=_expr(data.get("when")), for_each=_expr(data.get("for_each")),
                requires=tuple(data.get("requires") or ()),
                location=LocationSpec(file=_template(loc.get("file")), key=_template(loc.get("key")),
                                      line=_expr(loc.get("line")), from_=_expr(loc.get("from"))),
                fix=_fix_spec(data.get("fix"), bad), docs=dict(docs), tags=tuple(data.get("tags") or ()), path=path)
    if check_expressions:
        for key in ("when", "for_each"):
            e = getattr(rule, key)
            try:
                if e is not None:
                    e.node
            except ExprError as err:
                raise bad(f"{key}: {err}") from None
        try:
            for e in rule.expressions():
                e.node
        except ExprError as err:
            raise bad(f"{err}") from None
        _check_names(rule, data, path)
        _check_cases(rule, path)
    return rule


def _stem(path: str) -> str:
    """``Path(path).stem``, without building a Path for the usual ``NAME.yaml`` (~150 per process, ~0.5 ms of a
    lint's start-up, issue #22); any other shape goes through pathlib."""
    import os

    name = os.path.basename(path)
    if len(name) > 5 and name.endswith(".yaml") and name[-6] != ".":
        return name[:-5]
    return Path(path).stem


def _expr(v: Any) -> Expr | None:
    return None if v is None or v == "" else compile_expr(str(v))


def _template(v: Any) -> Template | None:
    return None if v is None else compile_template(str(v))


def _message(m: Any, bad: Any) -> Message:
    """A message: a template string; ``{text: template, suffix: {text, when}}`` (one text and a clause added when a
    condition holds); a table ``{by: <expression>, cases: {value: template}, default: template, suffix}``; or
    ``{parts: [template or {by, cases, default}, ...], suffix}`` (the parts rendered in turn, joined by a space)."""
    if not isinstance(m, dict):
        return Message(text=compile_template(str(m).strip()))
    if set(m) - MESSAGE_FIELDS:
        raise bad(f"unknown message field(s): {', '.join(sorted(set(m) - MESSAGE_FIELDS))}")
    suffix = m.get("suffix") or {}
    if not isinstance(suffix, dict) or set(suffix) - SUFFIX_FIELDS or (suffix and not suffix.get("text")):
        raise bad("message.suffix is a mapping {text: template, when: condition}")
    if "parts" in m:
        parts = m["parts"]
        if set(m) - {"parts", "suffix"} or not isinstance(parts, list) or not parts:
            raise bad("message.parts is a non-empty list of parts (each a template or a table `by`, `cases`, "
                      "`default`), with an optional `suffix` beside it")
        if any(isinstance(p, dict) and (set(p) - TABLE_FIELDS or "by" not in p) for p in parts):
            raise bad("a message part is a template or a table of `by`, `cases` and `default` only")
        return Message(parts=tuple(_message(p, bad) for p in parts),
                       suffix=_template(str(suffix["text"]).strip()) if suffix else None,
                       suffix_when=_expr(suffix.get("when")))
    if "text" in m:
        if set(m) - {"text", "suffix"} or not m.get("text"):
            raise bad("a message is a `text` (with an optional `suffix`) or a table (`by`, `cases`), not both")
        return Message(text=compile_template(str(m["text"]).strip()),
                       suffix=_template(str(suffix["text"]).strip()) if suffix else None,
                       suffix_when=_expr(suffix.get("when")))
    cases = m.get("cases")
    if not m.get("by") or not isinstance(cases, dict) or not cases:
        raise bad("a message table needs `by` (the expression it switches on) and a non-empty `cases` mapping")
    return Message(by=compile_expr(str(m["by"])),
                   cases={str(k): compile_template(str(v).strip()) for k, v in cases.items()},
                   default=None if m.get("default") is None else compile_template(str(m["default"]).strip()),
                   suffix=_template(str(suffix["text"]).strip()) if suffix else None,
                   suffix_when=_expr(suffix.get("when")))


def _fix_spec(f: Any, bad: Any) -> FixSpec | None:
    if not f:
        return None
    if set(f) - FIX_FIELDS:
        raise bad(f"unknown fix field(s): {', '.join(sorted(set(f) - FIX_FIELDS))}")
    if f.get("safety", "unsafe") not in ("safe", "unsafe"):
        raise bad("fix.safety must be safe or unsafe")
    edits = []
    for e in f.get("edits") or []:
        if set(e) - EDIT_FIELDS:
            raise bad(f"unknown edit field(s): {', '.join(sorted(set(e) - EDIT_FIELDS))}")
        if "file" not in e or "key" not in e:
            raise bad("every fix edit needs file and key")
        edits.append(EditSpec(file=compile_template(str(e["file"])), key=compile_template(str(e["key"])),
                              value=e.get("value"), value_expr=_expr(e.get("value_expr")),
                              delete=bool(e.get("delete", False)), when=_expr(e.get("when"))))
    if not f.get("title"):
        raise bad("fix.title is required")
    return FixSpec(title=compile_template(str(f["title"])), safety=f.get("safety", "unsafe"), edits=tuple(edits),
                   planner=f.get("planner"), cost=_template(f.get("cost")), safe_when=_expr(f.get("safe_when")))


def _check_cases(rule: Rule, path: str) -> None:
    """A message table's case keys must be values its selector's fact declares; an uncovered value needs a
    default (each table part of a message of `parts` alike). Raises InputError naming the file and the line of the
    bad case."""
    for message in (rule.message, *rule.message.parts):
        _check_table(rule, message, path)


def _check_table(rule: Rule, message: Message, path: str) -> None:
    if message.by is None:
        return
    from finetune_doctor.engine.expr import FUNCTIONS
    from finetune_doctor.engine.names import declared_values
    from finetune_doctor.facts import namespaces

    values = declared_values(message.by.node, namespaces(), FUNCTIONS,
                             item_from=rule.for_each.node if rule.for_each is not None else None)
    if values is None:
        raise InputError(f"message table switches on {message.by.source!r}, a fact that declares no values "
                         "(facts/<ns>.py: F(..., values=...))", file=path, line=_line_of(path, "by:"))
    for case in message.cases:
        if case not in values:
            raise InputError(f"message case {case!r} is not a value of {message.by.source} "
                             f"(declared: {', '.join(values)})", file=path, line=_line_of(path, f"{case}:"))
    uncovered = [v for v in values if v not in message.cases]
    if uncovered and message.default is None:
        raise InputError(f"message table has no case for {', '.join(uncovered)} and no default", file=path,
                         line=_line_of(path, "cases:"))


def _check_names(rule: Rule, data: dict[str, Any], path: str) -> None:
    """Every namespace in ``requires`` and every fact name in the rule's expressions must be declared
    (facts/__init__.py); the first that is not is an InputError naming the file and the line it is on."""
    from finetune_doctor.engine.expr import FUNCTIONS
    from finetune_doctor.engine.names import check_names
    from finetune_doctor.facts import namespaces

    spaces = namespaces()
    for ns in data.get("requires") or ():
        if ns not in spaces:
            raise InputError(f"requires names an unknown fact namespace {ns!r} (known: {', '.join(spaces)})",
                             file=path, line=_line_of(path, str(ns)))
    problems = check_names([e.node for e in rule.expressions()], spaces, FUNCTIONS,
                           item_from=rule.for_each.node if rule.for_each is not None else None)
    if problems:
        p = problems[0]
        raise InputError(p.message, file=path, line=_line_of(path, p.name))


def _line_of(path: str, name: str) -> int | None:
    """The first line of the rule file that mentions `name` (its last dotted part as a fallback)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for needle in (name, name.rsplit(".", 1)[-1]):
        for i, line in enumerate(lines, 1):
            if needle in line:
                return i
    return None


def find_rule(rules: tuple[Rule, ...], ident: str) -> Rule:
    """A rule by code (case-insensitive) or name; raises InputError with a did-you-mean."""
    for r in rules:
        if ident.upper() == r.code.upper() or ident == r.name:
            return r
    import difflib

    names = [r.name for r in rules] + [r.code for r in rules]
    near = difflib.get_close_matches(ident, names, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise InputError(f"no rule {ident!r}{hint}", file="rules")


def select_rules(rules: tuple[Rule, ...], command: str, select: list[str] | None,
                 ignore: list[str] | None) -> tuple[Rule, ...]:
    """Rules that `command` evaluates, filtered ruff-style: a selector matches a code prefix or a name.

    Kept per (rule tuple, command, selectors) for the process: a lint of many files selects from the same merged
    tuple for every file (issue #22)."""
    key = (id(rules), command, tuple(select) if select else None, tuple(ignore) if ignore else None)
    kept = _SELECTED.get(key)
    if kept is not None and kept[0] is rules:
        return kept[1]
    out = _select(rules, command, select, ignore)
    if len(_SELECTED) < 256:
        _SELECTED[key] = (rules, out)   # the rule tuple is held so that its id() stays its own
    return out


_SELECTED: dict[tuple[Any, ...], tuple[tuple[Rule, ...], tuple[Rule, ...]]] = {}


def _select(rules: tuple[Rule, ...], command: str, select: list[str] | None,
            ignore: list[str] | None) -> tuple[Rule, ...]:
    def hit(r: Rule, sels: list[str]) -> bool:
        return any(r.code.upper().startswith(s.upper()) or r.name == s or s.upper() == "ALL" for s in sels)

    out = []
    for r in rules:
        if command not in r.commands:
            continue
        if select and not hit(r, select):
            continue
        if ignore and hit(r, ignore):
            continue
        out.append(r)
    return tuple(out)
