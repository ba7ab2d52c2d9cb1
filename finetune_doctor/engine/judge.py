"""The one judge: load the rule pack, select, evaluate over the facts, then suppress — the same way for every command.

Steps, in order:

1. load the bundled rules plus ``--rules`` / project ``rules`` directories (engine/loader.py; names checked);
2. select the rules whose ``commands`` hold this command, then ``--select`` / ``--ignore`` (code prefixes or names,
   ruff-style);
3. evaluate them over the fact namespaces and the source files (engine/evaluate.py);
4. drop what suppression comments cover (``# doctor: ignore[...]`` in every YAML source read: the training config,
   a config a postmortem joined) and report the comments that hid nothing (rule unused-suppression, fact
   ``lint.unused_suppressions``);
5. drop what ``per-file-ignores`` of the project configuration names for the file a finding points at (any file
   kind: YAML, DeepSpeed JSON, logs, dataset files, recordings).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from finetune_doctor.engine import suppression
from finetune_doctor.engine.evaluate import PLANNER_LOADERS, RULE_FAILED, RuleContext, evaluate
from finetune_doctor.engine.expr import save_code_cache
from finetune_doctor.engine.loader import Rule, load_rules, select_rules
from finetune_doctor.settings import Options
from finetune_doctor.types import SEVERITY_RANK, Finding, SourceDoc

_COMMENTED = (".yaml", ".yml")   # file kinds whose comments can carry suppressions (JSON has none)


def _load_planners() -> None:
    """Register the remedy planners the rules name (engine/planners.py), on the first finding that needs one."""
    import finetune_doctor.engine.planners  # noqa: F401


PLANNER_LOADERS.append(_load_planners)


def rules_for(opts: Options, command: str) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """(all loaded rules, the ones `command` evaluates after --select/--ignore). Raises InputError for a bad rule."""
    every = load_rules(opts.rules_dirs)
    selected = select_rules(every, command, list(opts.select) if opts.select else None, list(opts.ignore))
    return every, _with_rule_failed(every, selected, opts)


def _with_rule_failed(every: tuple[Rule, ...], selected: tuple[Rule, ...], opts: Options) -> tuple[Rule, ...]:
    """`selected` plus the meta rule that reports a failing rule (FD097), which `--select` alone does not drop:
    `--select FD708` on a file where FD708 raises must say so rather than print a clean report. Only `--ignore`
    naming it (code or name) turns it off."""
    if any(r.name == RULE_FAILED for r in selected):
        return selected
    meta = [r for r in every if r.name == RULE_FAILED]
    ignore = [s.upper() for s in opts.ignore or ()]
    if not meta or any(meta[0].code.upper().startswith(s) or s == meta[0].name.upper() for s in ignore):
        return selected
    return selected + (meta[0],)


def judge(command: str, facts: dict[str, Any], sources: Mapping[str, SourceDoc], opts: Options, *,
          texts: Mapping[str, str] | None = None, live: Mapping[str, Any] | None = None,
          order: str = "position") -> list[Finding]:
    """The findings of `command` over `facts`, suppressed and ordered.

    `texts` maps a file path to its text for files whose comments may suppress findings (every YAML in `sources`
    is read from disk when not given). `live` holds the objects remedy planners need (facts/config.py
    `Assembly.live`). `order` is "position" (severity, file, line, code) or "rank" (severity, the rule's
    ``rank:N`` tag, code: the postmortem's cause-first order).
    """
    every, selected = rules_for(opts, command)
    ctx = RuleContext(facts=facts, sources=dict(sources), extra=dict(live or {}))
    found = evaluate(selected, ctx)
    found = _suppress(found, _comment_texts(sources, texts), every, selected, ctx)
    found = _hedge_absence(found, selected, facts)
    save_code_cache()   # the next process skips parsing and compiling the expressions this one used
    if (facts.get("lint") or {}).get("config_kind") in ("train-v1", "export-v1"):
        found = [_v1_fix(f, sources) for f in found]
    return _order(_per_file_ignores(found, opts), selected, order)


def _hedge_absence(found: list[Finding], rules: tuple[Rule, ...], facts: Mapping[str, Any]) -> list[Finding]:
    """Findings of rules tagged ``absence`` (their only basis is a key the config does not set) made at most
    warnings when the config shows cut-paste signs (facts/cutpaste.py, ``lint.config_cut``): the key may be in the
    part of the file the paste lost, so LF stopping on it is not certain (trial 11 cases 08, 09). Their messages
    say so themselves; this caps what they cannot: the severity a rule file fixes."""
    if not (facts.get("lint") or {}).get("config_cut"):
        return found
    absent = {r.code for r in rules if "absence" in r.tags}
    return [replace(f, severity="warning") if f.code in absent and f.severity == "error" else f for f in found]


def _v1_fix(f: Finding, sources: Mapping[str, SourceDoc]) -> Finding:
    """`f` with only the prescriptions a v1 config can take: the remedy planners and fix tables write v0 keys
    (`pure_bf16`, `finetuning_type`, `image_max_pixels`, ...), which v1's parser rejects ("Some keys are not used
    by the HfArgumentParser"). A set of edits that touches a key v1 does not declare is dropped, alternatives
    included; the finding stays, its message intact."""
    if f.fix is None:
        return f
    from dataclasses import replace

    from finetune_doctor.readers.config.lfrelease import v1_catalog

    fields = v1_catalog()["fields"]
    doc = sources.get("config")
    config = doc.path if doc is not None else None

    def takes(fix: Any) -> bool:
        return all(not _same_file(e.file, config or "") or e.key.split(".")[0] in fields for e in fix.edits)

    alts = tuple(a for a in f.fix.alternatives if takes(a))
    if takes(f.fix):
        return replace(f, fix=replace(f.fix, alternatives=alts))
    if alts:
        return replace(f, fix=replace(alts[0], alternatives=alts[1:]))
    return replace(f, fix=None)


def apply_suppressions(findings: list[Finding], texts: Mapping[str, str], opts: Options, command: str) -> list[Finding]:
    """Steps 4-5 alone, for findings made elsewhere: suppression comments of `texts` ({path: YAML text}), the
    unused-suppression findings, then per-file-ignores; sorted by position."""
    every, selected = rules_for(opts, command)
    found = _suppress(list(findings), texts, every, selected, RuleContext(facts={"lint": {}}))
    return _order(_per_file_ignores(found, opts), selected, "position")


def _comment_texts(sources: Mapping[str, SourceDoc], texts: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(texts or {})
    for doc in sources.values():
        path = doc.path
        if path in out or not path or not (doc.role == "config" or path.lower().endswith(_COMMENTED)):
            continue
        from finetune_doctor.readers.textfile import provided

        given = provided(path)
        if given is not None:
            out[path] = given.decode("utf-8-sig", errors="replace")
            continue
        try:
            if os.path.isfile(path):
                out[path] = Path(path).read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            continue   # the reader already reported an unreadable file; nothing to suppress in it
    return out


def _same_file(a: str | None, b: str) -> bool:
    if not a:
        return False
    return a == b or os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _suppress(findings: list[Finding], texts: Mapping[str, str], every: tuple[Rule, ...],
              selected: tuple[Rule, ...], ctx: RuleContext) -> list[Finding]:
    parsed = {p: sup for p, sup in ((p, suppression.parse_suppressions(t or "")) for p, t in texts.items()) if sup}
    if not parsed:   # the common case: no suppression comment
        return findings
    evaluated = [r.code for r in selected] + [r.name for r in selected]
    known = [r.code for r in every] + [r.name for r in every]
    remaining = list(findings)
    unused: list[dict[str, Any]] = []
    for path, sup in parsed.items():
        mine = [f for f in remaining if _same_file(f.location.file, path)]
        others = [f for f in remaining if not _same_file(f.location.file, path)]
        kept, used = suppression.apply(mine, sup)
        remaining = others + kept
        unused.extend(suppression.unused(sup, used, path, evaluated, known))
    meta = tuple(r for r in selected if r.name == "unused-suppression")
    if meta and unused:
        lint = dict(ctx.facts.get("lint") or {})
        lint["unused_suppressions"] = unused
        extra = evaluate(meta, RuleContext(facts={**ctx.facts, "lint": lint}, sources=ctx.sources, extra=ctx.extra))
        for path, sup in parsed.items():   # an unused-suppression finding can itself be suppressed file-wide
            file_wide = suppression.Suppressions(tuple(d for d in sup.directives if d.scope == "file"))
            mine = [f for f in extra if _same_file(f.location.file, path)]
            kept, _ = suppression.apply(mine, file_wide)
            extra = [f for f in extra if not _same_file(f.location.file, path)] + kept
        remaining.extend(extra)
    return remaining


def ignored_codes(path: str | None, opts: Options) -> list[str]:
    """The codes/names ``per-file-ignores`` lists for `path`.

    A pattern matches the path relative to the project configuration's folder (ruff's rule), the path as given,
    or its file name, with shell-style wildcards (``*.json``, ``configs/**/ds_*.json``).
    """
    if not path or not opts.per_file_ignores:
        return []
    cands = {path.replace(os.sep, "/"), os.path.basename(path)}
    if opts.project_file:
        root = os.path.dirname(os.path.abspath(opts.project_file))
        try:
            rel = os.path.relpath(os.path.abspath(path), root)
        except ValueError:
            rel = None
        if rel is not None and not rel.startswith(os.pardir):
            cands.add(rel.replace(os.sep, "/"))
    out: list[str] = []
    for pat, codes in opts.per_file_ignores.items():
        pats = {pat, pat.replace("**/", "")}
        if any(fnmatch.fnmatch(c, p) for c in cands for p in pats):
            out.extend(codes)
    return out


def _per_file_ignores(findings: Iterable[Finding], opts: Options) -> list[Finding]:
    if not opts.per_file_ignores:
        return list(findings)
    kept = []
    for f in findings:
        codes = ignored_codes(f.location.file, opts)
        if any(f.code.upper().startswith(c.upper()) or f.name == c for c in codes):
            continue
        kept.append(f)
    return kept


def _rank(rule: Rule) -> int:
    for t in rule.tags:
        if isinstance(t, str) and t.startswith("rank:"):
            try:
                return int(t[5:])
            except ValueError:
                pass
    return 100


def _order(findings: list[Finding], rules: tuple[Rule, ...], order: str) -> list[Finding]:
    if order != "rank":
        return sorted(findings, key=Finding.sort_key)
    ranks = {r.code: _rank(r) for r in rules}
    return sorted(findings, key=lambda f: (-SEVERITY_RANK.get(f.severity, 0), ranks.get(f.code, 100), f.code,
                                           f.location.file or "", f.location.line or 0))
