"""The evaluator's fast paths (issue #22) read facts as the general path does: exact types first, any Mapping or
sequence after, and each namespace taken as it was when the evaluator was made."""

from collections import OrderedDict
from types import MappingProxyType

from finetune_doctor.engine.expr import NULL, Evaluator, Facts, wrap


def test_wrap_gives_the_same_views_for_exact_types_and_subclasses():
    assert wrap(None) is NULL
    assert wrap(True) is True and wrap(0) == 0 and type(wrap(0)) is int
    assert wrap("bf16") == "bf16"
    for m in ({"a": {"b": 1}}, OrderedDict(a={"b": 1}), MappingProxyType({"a": {"b": 1}})):
        w = wrap(m)
        assert isinstance(w, Facts)
        assert w.a.b == 1 and w.missing is NULL and w.a.missing.deeper is NULL
    assert wrap(({"k": 1}, None)) == [Facts({"k": 1}), NULL]
    assert wrap([[1, None]]) == [[1, NULL]]


def test_a_namespace_is_read_as_it_was_when_the_evaluator_was_made():
    cfg = {"bf16": True, "nested": {"stage": 3}}
    ev = Evaluator({"cfg": cfg})
    cfg["bf16"] = False
    cfg["fp16"] = True
    assert ev.truth("cfg.bf16 and cfg.fp16 is None") is True
    assert ev.eval("cfg.nested.stage") == 3
    assert ev.truth("") is True and ev.truth(None) is True
    assert ev.truth("cfg.nested.nothing") is False


def test_looping_over_a_mapping_fact_yields_its_keys_and_ends():
    # without __iter__, `for x in facts` used the __getitem__(0), (1), ... fallback, which never raises IndexError:
    # a rule (a user's --rules file) looping over a mapping fact hung `doctor lint`
    ev = Evaluator({"cfg": {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}})
    assert ev.eval("[k for k in cfg.zero_optimization]") == ["stage", "offload_param"]
    assert ev.truth("any(k == 'stage' for k in cfg.zero_optimization)") is True
    assert ev.eval("[k for k in cfg.missing]") == []
