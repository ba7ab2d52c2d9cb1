"""Run the selected rules over the facts and turn every hit into a `Finding`.

The engine owns everything rules share: iterating ``for_each`` items, rendering messages, locating keys in
the source files, building fixes from edit specs, and calling named remedy planners for computed fixes.
A rule never knows about files or the terminal.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from finetune_doctor.engine.expr import NULL, Evaluator, ExprError, Guard, Template, unwrap
from finetune_doctor.engine.loader import Message, Rule
from finetune_doctor.errors import InputError
from finetune_doctor.types import Edit, Finding, Fix, Location, SourceDoc

Planner = Callable[["RuleContext", Rule, Evaluator], "Fix | None"]
PLANNERS: dict[str, Planner] = {}
PLANNER_LOADERS: list[Callable[[], None]] = []
"""Imports that register planners, run once when a firing rule names a planner not registered yet: the judge adds
engine/planners.py's, so a command whose findings need no planner does not import it (~5 ms of a one-file lint,
issue #22), nor what a planner reaches (FD101's fix effect reaches the memory model)."""


def planner(name: str) -> Callable[[Planner], Planner]:
    """Register a remedy planner: a function that computes a rule's fix (e.g. the OOM remedy search)."""

    def deco(fn: Planner) -> Planner:
        PLANNERS[name] = fn
        return fn

    return deco


@dataclass
class RuleContext:
    """What rules are evaluated against: fact namespaces, the source files, and planner inputs.

    `facts` maps namespace names (cfg, run, ds, model, hw, mem, lint, data, ev, gpus, ...) to plain
    dicts/lists. `sources` maps a role (config, deepspeed, ...) to the `SourceDoc` read for it.
    `extra` carries live objects that planners need (the Run, the estimator) and never reaches a rule.
    """

    facts: dict[str, Any]
    sources: dict[str, SourceDoc] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def role_for(self, role: str | None, key: str | None) -> str:
        """A config key given as ``key=value`` on the command line lives there, not in the file: findings point at
        the command line and no edit of the file is proposed (the command line would override it again)."""
        role = role or "config"
        ov = self.sources.get("override")
        if role == "config" and key and ov is not None and (
                key in ov.positions or any(key.startswith(k + ".") for k in ov.positions)):
            return "override"
        return role

    def locate(self, role: str | None, key: str | None) -> Location:
        doc = self.sources.get(self.role_for(role, key))
        if doc is None:
            doc = self.sources.get("config") or next(iter(self.sources.values()), None)
            if doc is None:
                return Location(None, None, None, key)
        return doc.locate(key)


RULE_FAILED = "rule-failed"
"""The meta rule (rules/rule-failed.yaml) that reports a rule whose evaluation raised, from ``lint.rule_failures``."""


def evaluate(rules: tuple[Rule, ...], ctx: RuleContext) -> list[Finding]:
    """Evaluate `rules` in order; returns the findings sorted by severity then position.

    A rule whose ``requires`` namespaces are absent (None) is skipped: e.g. memory rules without a model.
    A rule whose evaluation raises (an expression meeting facts of a shape it did not expect: trial 6's FD708 on a
    chat config, ``'str' + _Null``) never takes the report down: its failure is recorded in ``lint.rule_failures``
    ({code, name, rule_file, error}) and reported by the meta rule `rule-failed` (FD097, error) when it is among
    `rules`; every other rule still runs. An InputError (a rule naming an unknown planner) still stops the run.
    """
    base = Evaluator(ctx.facts)
    out: list[Finding] = []
    facts = ctx.facts
    failures: list[dict[str, Any]] = []
    for rule in rules:
        if rule.name == RULE_FAILED or (rule.requires and any(facts.get(ns) is None for ns in rule.requires)):
            continue
        if rule.for_each is None:
            if rule.when is not None and _ruled_out(rule.when.guards, facts):
                continue
        elif _ruled_out(rule.for_each.each_guards, facts):
            continue
        try:
            out.extend(_run_rule(rule, ctx, base))
        except InputError:
            raise
        except Exception as err:   # noqa: BLE001 - one rule's bug must not hide every other rule's findings
            text = str(err) if isinstance(err, ExprError) else f"{type(err).__name__}: {err}"
            failures.append({"code": rule.code, "name": rule.name, "rule_file": rule.path, "error": text})
    meta = [r for r in rules if r.name == RULE_FAILED]
    if failures and meta:
        lint = dict(facts.get("lint") or {})
        lint["rule_failures"] = failures
        out.extend(_run_rule(meta[0], ctx, Evaluator({**facts, "lint": lint})))
    dedup: dict[tuple, Finding] = {}
    for f in out:
        dedup.setdefault((f.code, f.location.file, f.location.line, f.location.key, f.message), f)
    return sorted(dedup.values(), key=Finding.sort_key)


_MISSING = object()


def _ruled_out(guards: tuple[Guard, ...], facts: Mapping[str, Any]) -> bool:
    """Whether one of a condition's leading guards (expr.py `leading_guards`) is false on the raw facts, read the
    way the evaluator reads them (a missing key or an attribute of None is None); the rule then cannot fire and its
    condition is not evaluated: the same findings, without ~10 us of evaluation each for most rules of most files
    (issue #22). A guard whose path meets a value that is neither a dict nor None (the evaluation would raise or
    see a non-dict mapping), or whose value is not a plain type, decides nothing: the condition is evaluated."""
    for g in guards:
        held = _holds(g, facts)
        if held is None:
            return False
        if not held:
            return True
    return False


def _holds(guard: Guard, facts: Mapping[str, Any]) -> bool | None:
    """The truth of one guard on the raw facts as the evaluator would find it, or None when it cannot be told
    without evaluating (a namespace not in the facts, a path through a non-dict, a value of another type)."""
    test, path, const = guard
    if test == "or":   # operands in order, as `or` evaluates them: true at the first true one
        for g in const:
            held = _holds(g, facts)
            if held is None or held:
                return held
        return False
    v = facts.get(path[0], _MISSING)
    if v is _MISSING:
        return None   # a function or a namespace this command does not assemble
    for name in path[1:]:
        if v is None:
            break
        if type(v) is not dict:
            return None
        v = v.get(name)
    if test == "not-none" or test == "none":
        return (v is None) == (test == "none")
    if test == "each":   # something to iterate, or not: no item to judge
        return None if not (v is None or type(v) in (list, tuple)) else bool(v)
    if v is None:   # NULL: falsy, equal to None only (no "eq"/"ne" constant is None), `in` only beside a None
        if test == "in" or test == "not-in":
            return (None in const) == (test == "in")
        return test == "not" or test == "ne"
    t = type(v)
    if test == "truthy" or test == "not":
        return None if t not in _TRUTHY_TYPES else bool(v) == (test == "truthy")
    if t not in _PLAIN_TYPES:
        return None
    if test == "eq":
        return bool(v == const)
    if test == "ne":
        return bool(v != const)
    return (v in const) == (test == "in")


_PLAIN_TYPES = frozenset({str, int, float, bool})
_TRUTHY_TYPES = _PLAIN_TYPES | {dict, list, tuple}


def _run_rule(rule: Rule, ctx: RuleContext, base: Evaluator) -> list[Finding]:
    items: list[Any]
    if rule.for_each is not None:
        seq = base.eval(rule.for_each)
        items = list(seq) if seq is not None and seq is not NULL else []
    else:
        items = [None]
    found = []
    for item in items:
        ev = base.with_names(item=item) if rule.for_each is not None else base
        if not ev.truth(rule.when):
            continue
        message = _message(rule, ev)
        location = _location(rule, ctx, ev)
        fix = _fix(rule, ctx, ev, location)
        found.append(Finding(rule.code, rule.name, rule.severity, rule.category, message, location, fix))
    return found


def _message(rule: Rule, ev: Evaluator) -> str:
    if rule.message.parts:   # each part a text or a table; an empty one (a table's "" default) adds nothing
        text = " ".join(t for t in (ev.render(_pick(p, ev)) for p in rule.message.parts) if t.strip())
    else:
        text = ev.render(_pick(rule.message, ev))
    suffix = rule.message.suffix
    if suffix is not None and ev.truth(rule.message.suffix_when):
        text = f"{text} {ev.render(suffix)}"
    return _one_stop(" ".join(text.split()))


_DOUBLED_STOP = re.compile(r"(?<![.])\.\.(?=\s|$)")


def _one_stop(text: str) -> str:
    """One full stop where a quoted sentence that ends with its own meets the template's ("... wrap in the model.."
    in trial 3's run-crashed); an ellipsis ("...") is left alone."""
    return _DOUBLED_STOP.sub(".", text) if ".." in text else text


def _pick(msg: Message, ev: Evaluator) -> Template:
    """The message template: the message's one text, or the case of its table that the selector's value names."""
    if msg.text is not None:
        return msg.text
    value = unwrap(ev.eval(msg.by)) if msg.by is not None else None
    hit = msg.cases.get(str(value)) if value is not None else None
    if hit is None:
        hit = msg.default
    if hit is None:   # the loader admits no table that can get here; a producer emitting an undeclared value can
        raise ExprError(f"message table has no case for {msg.by.source if msg.by else ''} == {value!r}")
    return hit


def _location(rule: Rule, ctx: RuleContext, ev: Evaluator) -> Location:
    loc = rule.location
    if loc.from_ is not None:
        v = unwrap(ev.eval(loc.from_))
        if isinstance(v, Mapping):
            return Location(v.get("file"), v.get("line"), v.get("column"), v.get("key"))
    key = ev.render(loc.key) if loc.key is not None and loc.key.source else None
    role = ev.render(loc.file) if loc.file is not None and loc.file.source else "config"
    if loc.line is not None:
        doc = ctx.sources.get(role)
        line = unwrap(ev.eval(loc.line))
        return Location(doc.path if doc else role, line, None, key)
    return ctx.locate(role, key)


def _fix(rule: Rule, ctx: RuleContext, ev: Evaluator, location: Location) -> Fix | None:
    spec = rule.fix
    if spec is None:
        return None
    if spec.planner:
        fn = PLANNERS.get(spec.planner)
        while fn is None and PLANNER_LOADERS:
            PLANNER_LOADERS.pop()()
            fn = PLANNERS.get(spec.planner)
        if fn is None:
            raise InputError(f"rule {rule.code} names an unknown planner {spec.planner!r}", file=rule.path)
        return fn(ctx, rule, ev)
    edits = []
    for e in spec.edits:
        if e.when is not None and not ev.truth(e.when):
            continue
        key = ev.render(e.key)
        role = ctx.role_for(ev.render(e.file), key)
        doc = ctx.sources.get(role)
        if doc is None:
            continue
        value = unwrap(ev.eval(e.value_expr)) if e.value_expr is not None else e.value
        edits.append(Edit(doc.path, key, value, e.delete))
    title = " ".join(ev.render(spec.title).split())
    if not title or title == "None":
        return None   # the rule's title is conditional and empty here: no prescription applies
    safety = "safe" if spec.safe_when is not None and ev.truth(spec.safe_when) else spec.safety
    return Fix(title=title, edits=tuple(edits), safety=safety,
               cost=ev.render(spec.cost) if spec.cost is not None else None)
