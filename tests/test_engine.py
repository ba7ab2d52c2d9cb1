"""The rules engine: rule-file validation, the safe expression language, locations, fixes and the rule cache."""

import pytest

from finetune_doctor.engine.evaluate import RuleContext, evaluate
from finetune_doctor.engine.expr import Evaluator, split_template
from finetune_doctor.engine.loader import load_rules, parse_rule
from finetune_doctor.errors import InputError
from finetune_doctor.types import SourceDoc

RULE = """code: XX001
name: my-rule
severity: warning
category: config
commands: [check, lint]
for_each: "[k for k in lint.keys if k.kind == 'unknown']"
when: "cfg.learning_rate > 1e-3"
message: "key {item.key} with lr {cfg.learning_rate:.0e}: {'a: b' if True else ''}"
location: {file: config, key: "{item.key}"}
fix:
  title: "drop {item.key}"
  safety: safe
  edits:
    - {file: config, key: "{item.key}", delete: true}
docs:
  what_it_does: x
  why_bad: y
"""


def write_rule(d, text=RULE, name="my-rule"):
    (d / f"{name}.yaml").write_text(text)
    return d


def test_missing_facts_read_as_none_and_never_raise():
    ev = Evaluator({"cfg": {"lr": "5e-6", "n": None}})
    assert ev.truth("cfg.missing.deeper is None")
    assert not ev.truth("cfg.lr > 1e-3")          # a mistyped value is not "greater"
    assert not ev.truth("cfg.missing > 1")
    assert ev.eval("len([x for x in cfg.absent])") == 0


def test_templates_respect_quotes_and_format_specs():
    assert split_template("a {x:.1f} {'k: v'} {{lit}}") == [("a ", "x", ".1f"), (" ", "'k: v'", None),
                                                            (" {lit}", None, None)]
    assert Evaluator({"x": 2.345}).render("v={x:.1f} {{y}}") == "v=2.3 {y}"


def test_user_rule_directory_end_to_end(tmp_path):
    rules = load_rules([str(write_rule(tmp_path))])
    mine = tuple(r for r in rules if r.code == "XX001")
    ctx = RuleContext(facts={"cfg": {"learning_rate": 5e-3, "lerning_rate": 1},
                             "lint": {"keys": [{"key": "lerning_rate", "kind": "unknown"}]}},
                      sources={"config": SourceDoc("config", "c.yaml", {"lerning_rate": (4, 1)})})
    [f] = evaluate(mine, ctx)
    assert (f.location.file, f.location.line, f.location.key) == ("c.yaml", 4, "lerning_rate")
    assert f.message == "key lerning_rate with lr 5e-03: a: b"
    assert f.fix.safety == "safe" and f.fix.edits[0].delete and f.fix.edits[0].key == "lerning_rate"


def test_command_line_keys_are_located_there():
    data = {**_data(), "for_each": None, "when": "True", "message": "m",
            "location": {"file": "config", "key": "cutoff_len"}}
    data.pop("fix")
    rule = parse_rule(data, "/x/my-rule.yaml")
    ctx = RuleContext(facts={"cfg": {}}, sources={"config": SourceDoc("config", "c.yaml", {"cutoff_len": (3, 1)}),
                                                  "override": SourceDoc("override", "<command line>",
                                                                        {"cutoff_len": (1, 1)})})
    [f] = evaluate((rule,), ctx)
    assert f.location.file == "<command line>"


def _data():
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(RULE)


@pytest.mark.parametrize("change, error", [
    ({"severity": "fatal"}, "severity must be one of"),
    ({"when": "cfg.x >"}, "invalid expression"),
    ({"message": "{cfg.x"}, "unclosed placeholder"),
    ({"surprise": 1}, "unknown rule field"),
    ({"docs": {"what_it_does": "x"}}, "docs need the sections why_bad"),
    ({"fix": {"title": "t", "safety": "maybe"}}, "fix.safety must be safe or unsafe"),
])
def test_bad_rule_files_name_the_problem(change, error):
    data = {**_data(), **change}
    with pytest.raises(Exception) as e:
        parse_rule(data, "/x/my-rule.yaml")
    assert error in str(e.value)


def test_rule_file_named_after_rule_and_codes_unique(tmp_path):
    with pytest.raises(InputError, match="named after the rule"):
        load_rules([str(write_rule(tmp_path, name="other-name"))])
    dup = tmp_path / "dup"
    dup.mkdir()
    write_rule(dup, RULE.replace("XX001", "FD601").replace("my-rule", "dup-rule"), name="dup-rule")
    with pytest.raises(InputError, match="defined twice"):
        load_rules([str(dup)])


def test_cache_is_keyed_by_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "r").mkdir()
    d = write_rule(tmp_path / "r")
    first = [r for r in load_rules([str(d)]) if r.code == "XX001"][0]
    assert list((tmp_path / "cache" / "finetune-doctor").glob("rules-*.marshal"))
    # an edited rule gets a new cache entry, and a now-broken rule fails loudly instead of coming from the cache
    import time

    time.sleep(0.01)
    write_rule(d, RULE.replace("cfg.learning_rate > 1e-3", "cfg.learning_rate >"))
    from finetune_doctor.engine import loader

    loader._load_dir.cache_clear()
    with pytest.raises(InputError, match="invalid expression"):
        load_rules([str(d)])
    assert first.code == "XX001"


SUFFIXED = RULE.replace('''message: "key {item.key} with lr {cfg.learning_rate:.0e}: {'a: b' if True else ''}"''',
                        '''message:
  text: "key {item.key}"
  suffix: {text: "({item.condition})", when: item.condition}''')


def test_a_text_message_with_a_declared_suffix(tmp_path):
    """``message: {text, suffix}``: the suffix clause is added only when its condition holds (the form of the
    ten rules that showed a problem's condition with an inline `x if c else y`, issue #22)."""
    rules = load_rules([str(write_rule(tmp_path, SUFFIXED))])
    mine = tuple(r for r in rules if r.code == "XX001")
    keys = [{"key": "a_key", "kind": "unknown", "condition": "transformers 5.x"},
            {"key": "b_key", "kind": "unknown", "condition": None}]
    ctx = RuleContext(facts={"cfg": {"learning_rate": 5e-3}, "lint": {"keys": keys}},
                      sources={"config": SourceDoc("config", "c.yaml", {"a_key": (1, 1), "b_key": (2, 1)})})
    assert sorted(f.message for f in evaluate(mine, ctx)) == ["key a_key (transformers 5.x)", "key b_key"]


@pytest.mark.parametrize("message, error", [
    ('message:\n  text: "x"\n  by: cfg.stage\n  cases: {sft: "y"}', "a `text`"),
    ('message:\n  text: ""', "a `text`"),
    ('message:\n  text: "x"\n  suffix: {when: cfg.stage}', "message.suffix"),
])
def test_a_text_message_is_not_also_a_table(tmp_path, message, error):
    text = RULE.replace('''message: "key {item.key} with lr {cfg.learning_rate:.0e}: {'a: b' if True else ''}"''', message)
    with pytest.raises(InputError, match=error):
        load_rules([str(write_rule(tmp_path, text))])
