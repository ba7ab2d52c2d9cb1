"""No bundled rule may fail when a fact it reads is missing (trial 10 case 06: with the card named but its memory
unknown, FD602 failed on ``0.4 * hw.capacity_gib`` with "unsupported operand type(s) for *: 'float' and '_Null'",
and the user was shown an FD097 error finding about the tool instead of a diagnosis).

The general check: the facts of real `check` runs are captured as the judge receives them; then, for every rule and
every fact name its expressions read (``ns.field`` and ``ns.field.sub`` chains, parsed from the rule's compiled
expressions), that one fact is set to None and the rule is run again. It may fire or not; it may not raise. A missing
fact in arithmetic is missing too (engine/expr.py `_Null`), so a comparison against it is never true.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.engine import judge as judge_mod
from finetune_doctor.engine.evaluate import RULE_FAILED, RuleContext, _run_rule
from finetune_doctor.engine.expr import Evaluator

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "fixtures" / "llamafactory" / "examples"
FX = ROOT / "fixtures" / "trial10" / "unknown_card"
PM = ROOT / "fixtures" / "postmortem" / "case_001"
NAMESPACES = ("cfg", "run", "model", "hw", "mem", "ds", "lint", "data", "ev", "gpus", "accel", "machine")


def _capture(args: list[str], monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple, RuleContext]]:
    seen: list[tuple[tuple, RuleContext]] = []
    real = judge_mod.evaluate

    def spy(rules, ctx):
        seen.append((rules, ctx))
        return real(rules, ctx)

    monkeypatch.setattr(judge_mod, "evaluate", spy)
    res = CliRunner().invoke(main, [*args, "--format", "json", "--fail-on", "never"])
    assert res.exit_code == 0, res.output[-2000:]
    assert seen, "the judge was not reached"
    return seen


def _chains(rule) -> set[tuple[str, ...]]:
    """Every ``ns.a`` and ``ns.a.b`` a rule's expressions read, for the fact namespaces."""
    out: set[tuple[str, ...]] = set()
    for e in rule.expressions():
        for node in ast.walk(ast.parse(e.source, mode="eval")):
            attrs: list[str] = []
            n = node
            while isinstance(n, ast.Attribute):
                attrs.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name) and n.id in NAMESPACES and attrs:
                path = (n.id, *reversed(attrs))
                out.update(path[:i] for i in range(2, min(len(path), 3) + 1))
    return out


def _nulled(facts: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """A copy of `facts` with the value at `path` set to None (the dicts along the path copied, the rest shared);
    None when the path is not a present, non-None value."""
    out = dict(facts)
    cur: Any = out
    for i, k in enumerate(path):
        if not isinstance(cur, dict) or cur.get(k) is None:
            return None
        if i == len(path) - 1:
            cur[k] = None
            return out
        cur[k] = dict(cur[k]) if isinstance(cur[k], dict) else cur[k]
        cur = cur[k]
    return None


CASES = {
    # the card named, its size unknown, two ranks from the launch line (trial 10 case 06's shape)
    "unknown-card": ["check", str(FX / "train.sh"), "--env", str(FX / "env.txt"), "--offline", "--no-data"],
    # a known multi-GPU node under ZeRO-3 and full fine-tuning: the memory, ds and hw facts all present
    "zero3-full": ["check", str(EX / "train_full" / "qwen3_full_sft.yaml"), "--gpu", "8xA100-80GB",
                   "--offline", "--no-data"],
    # a crashed run's postmortem: the ev facts of a log, the config beside it
    "postmortem": ["postmortem", str(PM), "--log", str(PM / "log.txt"), "--config", str(PM / "config.yaml"),
                   "--offline"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_rule_raises_with_any_fact_it_reads_missing(case: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    seen = _capture(CASES[case], monkeypatch)
    failures: list[str] = []
    tried = 0
    for rules, ctx in seen:
        for rule in rules:
            if rule.name == RULE_FAILED:
                continue
            for path in sorted(_chains(rule)):
                facts = _nulled(ctx.facts, path)
                if facts is None:
                    continue
                if rule.requires and any(facts.get(ns) is None for ns in rule.requires):
                    continue
                tried += 1
                c2 = RuleContext(facts=facts, sources=ctx.sources, extra=ctx.extra)
                try:
                    _run_rule(rule, c2, Evaluator(facts))
                except Exception as err:   # noqa: BLE001 - the failure is what this test reports
                    failures.append(f"{rule.code} {rule.name} with {'.'.join(path)}=None: "
                                    f"{type(err).__name__}: {str(err)[:200]}")
    assert tried > 100, tried   # the capture reached the rules that read run/mem/hw/ev facts
    assert not failures, "\n".join(failures)


def test_a_missing_fact_in_arithmetic_is_missing():
    ev = Evaluator({"mem": {"w": 30.0}, "hw": {"capacity_gib": None}})
    assert ev.truth("mem.w > 0.4 * hw.capacity_gib") is False
    assert ev.truth("mem.w - hw.capacity_gib < 0") is False
    assert ev.eval("hw.capacity_gib * 2 + 1") is None or ev.eval("hw.capacity_gib * 2 + 1") == None  # noqa: E711
    assert ev.render("{mem.w - hw.capacity_gib}") == "None"
