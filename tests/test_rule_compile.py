"""Rules are compiled once at load: one parse per expression per process, message tables checked at load, and
`doctor explain` / SARIF help that read as text for every rule of the pack."""

import ast
import re

import pytest
from ruamel.yaml import YAML

from finetune_doctor.engine.evaluate import RuleContext, evaluate
from finetune_doctor.engine.loader import load_rules, parse_rule
from finetune_doctor.errors import InputError
from finetune_doctor.reporters.catalog import render_explain
from finetune_doctor.reporters.sarif import rule_descriptor

TABLE_RULE = """code: XX002
name: table-rule
severity: warning
category: deepspeed
commands: [lint]
for_each: "ds.problems"
message:
  by: item.check
  cases:
    unknown_key: "{item.key} is not a key ({item.section})"
    removed: "{item.key} was removed in {item.removed}"
  default: "{item.key}: {item.upstream}"
  suffix: {when: "item.upstream", text: "Upstream error: {item.upstream}"}
location: {file: deepspeed, key: "{item.key}"}
docs: {what_it_does: x, why_bad: y}
"""


def _rule(text: str, **change):
    data = {**YAML(typ="safe").load(text), **change}
    return parse_rule(data, f"/x/{data['name']}.yaml")


def test_a_message_table_picks_the_case_its_selector_names():
    rule = _rule(TABLE_RULE)
    ctx = RuleContext(facts={"ds": {"problems": [
        {"check": "unknown_key", "key": "a.b", "section": "a"},
        {"check": "removed", "key": "c", "removed": "0.9", "upstream": "boom"},
        {"check": "pydantic", "key": "d", "upstream": "bad type"}]}})
    got = sorted(f.message for f in evaluate((rule,), ctx))
    assert got == ["a.b is not a key (a)", "c was removed in 0.9 Upstream error: boom",
                   "d: bad type Upstream error: bad type"]


def test_a_misspelt_case_is_a_load_error_naming_the_declared_values():
    bad = TABLE_RULE.replace("    removed:", "    remvoed:")
    with pytest.raises(InputError, match="message case 'remvoed' is not a value of item.check"):
        _rule(bad)


def test_a_table_without_default_must_cover_every_declared_value():
    no_default = TABLE_RULE.replace('  default: "{item.key}: {item.upstream}"\n', "")
    with pytest.raises(InputError, match="no case for .*too_new.* and no default"):
        _rule(no_default)


def test_a_table_on_a_fact_without_declared_values_is_a_load_error():
    other = TABLE_RULE.replace("by: item.check", "by: item.key")
    with pytest.raises(InputError, match="declares no values"):
        _rule(other)


PARTS_RULE = TABLE_RULE.replace("""  by: item.check
  cases:
    unknown_key: "{item.key} is not a key ({item.section})"
    removed: "{item.key} was removed in {item.removed}"
  default: "{item.key}: {item.upstream}"
""", """  parts:
  - "{item.key}:"
  - by: item.check
    cases: {removed: "gone in {item.removed};"}
    default: ""
  - by: item.check
    cases: {unknown_key: "not a key of {item.section}"}
    default: "see the log"
""").replace("table-rule", "parts-rule").replace("XX002", "XX004")


def test_a_message_of_parts_joins_each_part_and_skips_an_empty_one():
    rule = _rule(PARTS_RULE)
    ctx = RuleContext(facts={"ds": {"problems": [
        {"check": "unknown_key", "key": "a.b", "section": "a"},
        {"check": "removed", "key": "c", "removed": "0.9", "upstream": "boom"}]}})
    got = sorted(f.message for f in evaluate((rule,), ctx))
    # the first: part 2 renders "" (its default) and adds no space; the second keeps the suffix after the parts
    assert got == ["a.b: not a key of a", "c: gone in 0.9; see the log Upstream error: boom"]


@pytest.mark.parametrize("old, new, error", [
    ('{removed: "gone', '{gone: "gone', "message case 'gone' is not a value of item.check"),
    ('    default: ""', '    default: ""\n    suffix: {text: x}',
     "a message part is a template or a table of `by`, `cases` and `default` only"),
    ("  - by: item.check\n    cases: {unknown", "  - by: item.key\n    cases: {unknown", "declares no values"),
    ("  parts:\n", "  text: x\n  parts:\n", "message.parts is a non-empty list"),   # parts or a text, not both
    ("gone in {item.removed}", "gone in {itme.removed}", "unknown name 'itme'"),   # a part's template, its selector
    ("  - by: item.check\n    cases: {unknown", "  - by: item.chekc\n    cases: {unknown", "no field 'chekc'"),
])
def test_a_table_part_is_checked_at_load_like_a_table(old, new, error):
    assert old in PARTS_RULE
    with pytest.raises(InputError, match=re.escape(error)):
        _rule(PARTS_RULE.replace(old, new, 1))


def test_every_expression_is_parsed_once_however_often_it_runs(monkeypatch):
    calls = []
    real = ast.parse

    def counting(src, *a, **k):
        calls.append(src)
        return real(src, *a, **k)

    monkeypatch.setattr(ast, "parse", counting)
    # expressions no other test uses, so the process-wide cache has not seen them
    text = (TABLE_RULE.replace("table-rule", "count-rule").replace("XX002", "XX003")
            .replace('"ds.problems"', '"[p for p in ds.problems if p.key != \'never-7731\']"'))
    rule = _rule(text)
    parsed_at_load = len(calls)
    # each distinct expression at most once (ones another rule already holds are not parsed again), the new one once
    assert parsed_at_load <= len({e.source for e in rule.expressions()})
    assert sum("never-7731" in c for c in calls) == 1
    ctx = RuleContext(facts={"ds": {"problems": [{"check": "removed", "key": f"k{i}", "removed": "1"}
                                                 for i in range(50)]}})
    for _ in range(3):
        assert len(evaluate((rule,), ctx)) == 50
    assert len(calls) == parsed_at_load   # 150 findings later: no expression parsed again


_FENCE = re.compile(r"```.*?```", re.S)


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.code)
def test_explain_and_sarif_help_read_as_text(rule):
    """Outside the example code blocks, the documentation holds no brace: no template code reaches a reader."""
    for text in (render_explain(rule), rule_descriptor(rule)["help"]["markdown"]):
        prose = _FENCE.sub("", text)
        assert "{" not in prose and "}" not in prose, (rule.code, [ln for ln in prose.splitlines()
                                                                   if "{" in ln or "}" in ln])


@pytest.mark.parametrize("source", [
    "().__class__", "'{0.__class__}'.format(cfg)", "(lambda: 1)()", "__import__('os')", "cfg._d",
    "[x := 1]", "cfg.a.mro()",
])
def test_simpleevals_whitelist_still_refuses(source):
    from finetune_doctor.engine.expr import Evaluator, ExprError

    with pytest.raises(ExprError):
        Evaluator({"cfg": {"a": 1}}).eval(source)


@pytest.mark.parametrize("source", ["9 ** 9 ** 9", "'a' * 10 ** 9", "open('/etc/passwd')", "eval('1')"])
def test_no_builtins_and_capped_operators(source):
    from finetune_doctor.engine.expr import Evaluator, ExprError

    with pytest.raises(ExprError):
        Evaluator({}).eval(source)


def test_compiled_expressions_keep_the_languages_meaning():
    from finetune_doctor.engine.expr import Evaluator

    ev = Evaluator({"cfg": {"lr": "5e-6", "n": 3, "xs": [{"k": "a"}, {"k": "b"}]}})
    assert ev.eval("cfg.missing is None") and not ev.eval("cfg.lr > 1e-3") and not ev.eval("cfg.missing < 1")
    assert ev.eval("1 < cfg.n < 5") and not ev.eval("1 < cfg.n < 2") and not ev.eval("5 < cfg.n < 'x'")
    assert ev.eval("[x.k for x in cfg.xs if x.k != 'a']") == ["b"]
    assert ev.eval("'a' in [x.k for x in cfg.xs]") and ev.eval("join(sorted(['b', 'a']))") == "a, b"


def _fresh_code_cache(monkeypatch, cache_home):
    from finetune_doctor.engine import expr  # noqa: F811 - the module, as a fresh process would read its cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_CACHE", raising=False)
    monkeypatch.setattr(expr, "_CODE_CACHE", None)   # as a new process starts
    monkeypatch.setattr(expr, "_CODE_NEW", {})
    return expr


def test_compiled_expressions_are_reused_by_the_next_process(tmp_path, monkeypatch):
    """issue #22: the code of the expressions a run evaluated is cached; the next run evaluates it to the same
    values without parsing, checking or lowering the expression again."""
    from finetune_doctor.engine.expr import Evaluator

    source = "cfg.n * 2 if cfg.lr > 1e-5 else -1"
    facts = {"cfg": {"n": 3, "lr": 3e-5}}
    expr = _fresh_code_cache(monkeypatch, tmp_path)
    assert Evaluator(facts).eval(expr.Expr(source)) == 6
    expr.save_code_cache()
    assert list((tmp_path / "finetune-doctor").glob("exprs-*.marshal"))

    expr = _fresh_code_cache(monkeypatch, tmp_path)

    def refuse(*_a, **_k):
        raise AssertionError("lowered again")

    monkeypatch.setattr(expr, "lower", refuse)
    monkeypatch.setattr(expr.ast, "parse", refuse)
    assert Evaluator(facts).eval(expr.Expr(source)) == 6
    assert Evaluator({"cfg": {"n": 3, "lr": 1e-6}}).eval(expr.Expr(source)) == -1


def test_a_damaged_expression_cache_is_ignored_and_the_whitelist_still_applies(tmp_path, monkeypatch):
    from finetune_doctor.engine.expr import Evaluator, ExprError

    expr = _fresh_code_cache(monkeypatch, tmp_path)
    path = expr._code_cache_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00not marshal")
    assert Evaluator({"cfg": {"a": 2}}).eval(expr.Expr("cfg.a + 1")) == 3
    with pytest.raises(ExprError):
        Evaluator({}).eval(expr.Expr("().__class__"))
    expr.save_code_cache()
    expr = _fresh_code_cache(monkeypatch, tmp_path)
    assert expr._cached_code("cfg.a + 1") is not None
    assert expr._cached_code("().__class__") is None   # refused expressions are never cached


def test_no_expression_cache_is_written_when_caching_is_off(tmp_path, monkeypatch):
    from finetune_doctor.engine.expr import Evaluator

    expr = _fresh_code_cache(monkeypatch, tmp_path)
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_CACHE", "1")
    assert Evaluator({"cfg": {"a": 2}}).eval(expr.Expr("cfg.a * 5")) == 10
    expr.save_code_cache()
    assert not (tmp_path / "finetune-doctor").exists()
