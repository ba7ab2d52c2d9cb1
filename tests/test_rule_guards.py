"""The judge's prefilter (issue #22): a rule whose condition starts with a test of one fact path that is false on
the facts is not evaluated (engine/expr.py `leading_guards`, engine/evaluate.py `_ruled_out`). It must never
change a finding: each guard is checked against the evaluator's own answer, and lints of LLaMA-Factory's
example configs give the same findings with the prefilter on and off."""

from pathlib import Path

import pytest

from finetune_doctor.engine import evaluate
from finetune_doctor.engine.evaluate import _ruled_out
from finetune_doctor.engine.expr import Evaluator, ExprError, each_guards, leading_guards

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"


def test_only_leading_path_tests_are_guards():
    src = "cfg.galore and cfg.stage == 'sft' and cfg.optim in ('adamw', None) and len(cfg.x) > 1 and cfg.y"
    assert leading_guards(src) == (("truthy", ("cfg", "galore"), None), ("eq", ("cfg", "stage"), "sft"),
                                   ("in", ("cfg", "optim"), ("adamw", None)))
    assert leading_guards("run.zero_stage is not None") == (("not-none", ("run", "zero_stage"), None),)
    # `or` at the top: a false first operand does not make the condition false
    assert leading_guards("cfg.a and cfg.b or cfg.c") == ()
    assert leading_guards("len(cfg.a) > 1 and cfg.b") == ()        # the first conjunct is no guard: none after it
    assert leading_guards("cfg.a == cfg.b and cfg.c") == ()         # compared with another fact, not a constant
    assert leading_guards("cfg.a == None") == () and leading_guards("cfg.a > 1") == ()
    assert leading_guards("cfg.a != 'x' and not cfg.b and cfg.c is None and cfg.d not in (1, 2)") == (
        ("ne", ("cfg", "a"), "x"), ("not", ("cfg", "b"), None), ("none", ("cfg", "c"), None),
        ("not-in", ("cfg", "d"), (1, 2)))
    assert leading_guards("(cfg.a or cfg.b == 2) and cfg.c") == (
        ("or", (), (("truthy", ("cfg", "a"), None), ("eq", ("cfg", "b"), 2))), ("truthy", ("cfg", "c"), None))
    assert leading_guards("(cfg.a or len(cfg.b)) and cfg.c") == ()   # an operand of `or` that is no guard
    assert leading_guards("cfg.__class__ and cfg.a") == ()          # a refused name is left to the evaluator
    assert leading_guards("cfg.a and (") == ()                      # a syntax error is left to the evaluator


SOURCES = ["cfg.a", "cfg.a.b", "cfg.a is not None", "cfg.a == 'x'", "cfg.a == 1", "cfg.a in ('x', 2)",
           "cfg.a in ('x', None)", "cfg.a.b == True", "cfg.a and cfg.b == 0", "not cfg.a", "not cfg.a.b",
           "cfg.a is None", "cfg.a != 'x'", "cfg.a != 0", "cfg.a not in ('x', 2)", "cfg.a not in ('x', None)",
           "cfg.a or cfg.b", "(cfg.a == 'x' or cfg.b) and not cfg.a.b", "cfg.a.b is None or cfg.b != 0"]
VALUES = [None, 0, 1, 0.0, "", "x", "y", True, False, 2, [], [1], (), {}, {"b": None}, {"b": True}, {"b": "x"},
          {"b": {}}, "abc", 1.5]


@pytest.mark.parametrize("source", SOURCES)
def test_a_guard_rules_out_only_what_the_evaluator_finds_false(source):
    guards = leading_guards(source)
    assert guards
    decided = 0
    for a in VALUES:
        for b in (None, 0, "x"):
            for facts in ({"cfg": {"a": a, "b": b}}, {"cfg": {"b": b}}, {"cfg": None}, {"cfg": "text"}):
                try:
                    truth = Evaluator(facts).truth(source)
                except ExprError:
                    truth = "raised"
                if _ruled_out(guards, facts):
                    decided += 1
                    assert truth is False, (source, facts)
    assert decided > 0   # the prefilter does decide some of these


def test_a_for_each_over_one_path_is_a_guard():
    assert each_guards("lint.keys") == (("each", ("lint", "keys"), None),)
    assert each_guards("[k for k in lint.keys if k.kind == 'unknown']") == (("each", ("lint", "keys"), None),)
    assert each_guards("[k for k in lint.keys for j in k.xs]") == ()     # two loops
    assert each_guards("[k for k in sorted(lint.keys)]") == () and each_guards("lint.keys + ds.keys") == ()


@pytest.mark.parametrize("source", ["cfg.a", "[k for k in cfg.a if k.kind == 'x']", "[k.b for k in cfg.a]"])
def test_an_each_guard_rules_out_only_an_empty_iteration(source):
    guards = each_guards(source)
    decided = 0
    for a in (None, [], (), [{"kind": "x", "b": 1}], [{"kind": "y"}], {}, "", 0, "ab", {"kind": "x"}):
        facts = {"cfg": {"a": a}}
        if _ruled_out(guards, facts):
            decided += 1
            assert list(Evaluator(facts).eval(source) or []) == [], (source, a)
    assert decided == 3   # None, [] and () only


def test_a_namespace_not_in_the_facts_decides_nothing():
    assert not _ruled_out(leading_guards("ev.crashed"), {"cfg": {}})
    assert not _ruled_out(leading_guards("cfg.a.b"), {"cfg": {"a": "str"}})   # evaluating it raises: left to it


def _lint_all(jobs=1):
    from finetune_doctor.pipeline import lint as pipe
    from finetune_doctor.settings import Options

    files = sorted(str(p) for p in EXAMPLES.rglob("*.yaml"))
    opts = Options.from_cli(command="lint", paths=files)
    report = pipe.run(files, opts, jobs=jobs)
    return [(f.code, f.location.file, f.location.line, f.message, f.fix) for f in report.findings]


def test_the_examples_give_the_same_findings_with_the_prefilter_off(monkeypatch):
    calls = []
    real = evaluate._ruled_out

    def counting(guards, facts):
        out = real(guards, facts)
        calls.append(out)
        return out

    monkeypatch.setattr(evaluate, "_ruled_out", counting)
    on = _lint_all()
    assert sum(calls) > len(calls) // 4   # it rules out a good share of the rules on these configs
    monkeypatch.setattr(evaluate, "_ruled_out", lambda guards, facts: False)
    off = _lint_all()
    assert on == off and len(on) >= 5


LF_FULL = Path("/work/shared/reference/llamafactory/examples")


def _fixture_files():
    """Every YAML and JSON under fixtures/, the held-out folders excepted (scored elsewhere, never read here)."""
    return [str(p) for p in sorted((ROOT / "fixtures").rglob("*"))
            if "heldout" not in p.parts and p.is_file() and p.suffix in (".yaml", ".yml", ".json")]


def _reports(files):
    """Each file linted on its own, as repr of every finding and the skipped list (a malformed file stops its lint
    with an InputError, kept as its outcome)."""
    import json

    from finetune_doctor.errors import InputError
    from finetune_doctor.pipeline import lint as pipe
    from finetune_doctor.settings import Options

    out = []
    for f in files:
        try:
            report = pipe.run([f], Options.from_cli(command="lint", paths=[f]), jobs=1)
        except InputError as err:
            out.append(f"{f}: InputError {err}")
            continue
        out.extend(repr(x) for x in report.findings)
        out.append(json.dumps(getattr(report, "skipped", None), default=repr))
    return out


@pytest.mark.parametrize("corpus", ["fixtures", "lf-examples"])
def test_every_fixture_gives_the_same_report_with_every_rule_evaluated(monkeypatch, corpus):
    """Byte-identical reports (every field of every finding, the skipped files, the errors) with the prefilter and
    with every rule's condition evaluated, on all of fixtures/ and on LLaMA-Factory's examples/ where present."""
    if corpus == "lf-examples" and not LF_FULL.is_dir():
        pytest.skip("LLaMA-Factory's examples/ is not on this machine (fixtures/llamafactory/examples is linted)")
    files = _fixture_files() if corpus == "fixtures" else sorted(str(p) for p in LF_FULL.rglob("*.yaml"))
    runs = []
    real = evaluate._run_rule

    def counting(rule, ctx, base):
        runs.append(rule.code)
        return real(rule, ctx, base)

    monkeypatch.setattr(evaluate, "_run_rule", counting)
    on = _reports(files)
    ran_on = len(runs)
    monkeypatch.setattr(evaluate, "_ruled_out", lambda guards, facts: False)
    off = _reports(files)
    assert on == off
    assert sum(x.startswith("Finding(") for x in on) >= 30
    assert ran_on * 3 < len(runs) - ran_on   # the prefilter leaves most rules of these files unevaluated
