"""Per-process memos on the lint path (issue #22) give the answers the uncached lookups give, and notice changes
to the file system that matter: the HF-layout lookup, the resolved folder of a file, the project configuration."""

from __future__ import annotations

from pathlib import Path

from finetune_doctor import fsutil
from finetune_doctor.projectconfig import _find, find_project_config
from finetune_doctor.readers.model import caches


def _snapshot(root: Path, repo: str, rev: str) -> Path:
    snap = root / ("models--" + repo.replace("/", "--")) / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "llama"}')
    return snap / "config.json"


def test_hf_layout_lookup_sees_a_download_made_after_a_miss(tmp_path):
    root = tmp_path / "hub"
    root.mkdir()
    assert caches.hf_layout_config("org/model-a", [root]) is None
    assert caches.hf_layout_config("org/model-a", [root]) is None   # the kept miss
    made = _snapshot(root, "org/model-a", "abc")   # a download after the miss: a new folder in the root
    assert caches.hf_layout_config("org/model-a", [root]) == made


def test_hf_layout_lookup_sees_a_new_snapshot_and_a_removed_file(tmp_path):
    root = tmp_path / "hub"
    (root / "models--org--model-b" / "snapshots").mkdir(parents=True)
    assert caches.hf_layout_config("org/model-b", [root]) is None
    first = _snapshot(root, "org/model-b", "r1")   # a snapshot added inside an existing repository folder
    assert caches.hf_layout_config("org/model-b", [root]) == first
    first.unlink()   # the found file is gone: looked up again, not returned from the memo
    assert caches.hf_layout_config("org/model-b", [root]) is None
    # the case-insensitive match of the folder name still answers
    other = _snapshot(root, "Org/Model-C", "r1")
    assert caches.hf_layout_config("org/model-c", [root]) == other


def test_real_parent_follows_a_linked_file_and_a_linked_folder(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.yaml").write_text("x: 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.yaml").symlink_to(real / "a.yaml")   # the file is a link: its target's folder
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)   # the folder is a link
    assert fsutil.real_parent(str(elsewhere / "b.yaml")) == real.resolve()
    assert fsutil.real_parent(str(tmp_path / "alias" / "a.yaml")) == real.resolve()
    assert fsutil.real_parent(str(elsewhere / "missing.yaml")) == elsewhere.resolve()
    for p in (elsewhere / "b.yaml", tmp_path / "alias" / "a.yaml", elsewhere / "missing.yaml"):
        assert fsutil.real_parent(str(p)) == Path(p).resolve().parent


def test_project_config_of_nested_folders_comes_from_the_nearest(tmp_path):
    top = tmp_path / "proj"
    deep = top / "a" / "b"
    deep.mkdir(parents=True)
    (top / "pyproject.toml").write_text('[tool.finetune-doctor]\nfail-on = "warning"\n')
    (top / "a" / ".finetune-doctor.toml").write_text('fail-on = "never"\n')
    _find.cache_clear()
    try:
        got = find_project_config(str(deep / "x.yaml"))
        assert (got["fail-on"], got["__file__"]) == ("never", str((top / "a" / ".finetune-doctor.toml").resolve()))
        got = find_project_config(str(top / "y.yaml"))
        assert (got["fail-on"], got["__file__"]) == ("warning", str((top / "pyproject.toml").resolve()))
        # a pyproject.toml without the tool table does not stop the search
        (deep / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        _find.cache_clear()
        assert find_project_config(str(deep / "x.yaml"))["fail-on"] == "never"
    finally:
        _find.cache_clear()


# --- keys already found clean (readers/config/keymemo.py) and models resolved once per lint (facts/archmemo.py) ---

def _fresh_key_memo():
    from finetune_doctor.readers.config import keymemo

    keymemo._CLEAN.clear()
    return keymemo


def test_a_clean_key_is_checked_once_per_value_and_context(monkeypatch):
    from finetune_doctor.readers.config import keyschema
    from finetune_doctor.readers.config.lfrelease import choose

    _fresh_key_memo()
    calls: list[str] = []
    real = keyschema._check_one
    monkeypatch.setattr(keyschema, "_check_one", lambda ctx, key, value: calls.append(key) or real(ctx, key, value))
    rel = choose("0.9.3")
    cfg = {"stage": "sft", "finetuning_type": "lora", "lora_rank": 8}
    assert keyschema.check_keys(cfg, env={}, release=rel) == []
    assert keyschema.check_keys(cfg, env={}, release=rel) == []
    assert calls == ["stage", "finetuning_type", "lora_rank"]   # the second config asked nothing again
    keyschema.check_keys({**cfg, "lora_rank": 16}, env={}, release=rel)   # another value: checked
    keyschema.check_keys(cfg, env={}, release=choose("0.9.2"))           # another release: checked
    assert calls[3:] == ["lora_rank", "stage", "finetuning_type", "lora_rank"]


def test_the_memo_keeps_true_apart_from_one_and_never_hides_a_problem():
    from finetune_doctor.readers.config.keyschema import check_keys
    from finetune_doctor.readers.config.lfrelease import choose

    _fresh_key_memo()
    rel = choose("0.9.3")
    assert check_keys({"stage": "sft", "lora_rank": 8}, env={}, release=rel) == []
    # the same key with a value of another type (bool True == 1 in Python) is a problem the memo must not hide
    wrong = check_keys({"stage": "sft", "lora_rank": True}, env={}, release=rel)
    assert [p.key for p in wrong] == ["lora_rank"]
    # a key a later release added is clean on 0.9.5 and not on an older release, memo warm or not
    cold_old = check_keys({"stage": "sft", "finetuning_type": "oft"}, env={}, release=choose("0.9.1"))
    _fresh_key_memo()
    assert check_keys({"stage": "sft", "finetuning_type": "oft"}, env={}, release=choose("0.9.5")) == []
    warm_old = check_keys({"stage": "sft", "finetuning_type": "oft"}, env={}, release=choose("0.9.1"))
    assert cold_old == warm_old and [p.key for p in warm_old] == ["finetuning_type"]


def test_every_example_config_gives_the_same_key_problems_with_the_memo_warm():
    from finetune_doctor.readers.config.keyschema import check_keys
    from finetune_doctor.readers.config.lfrelease import choose
    from finetune_doctor.readers.config.yamlcfg import load_config

    examples = sorted((Path(__file__).parent.parent / "fixtures" / "llamafactory" / "examples").rglob("*.yaml"))
    docs = [load_config(str(p)).values for p in examples]
    for version in ("0.9.5", "0.8.3"):
        rel = choose(version)
        cold = []
        for values in docs:
            _fresh_key_memo()
            cold.append(check_keys(values, env={}, release=rel))
        warm = [check_keys(values, env={}, release=rel) for values in docs]   # the memo filled by every file
        assert warm == cold
        assert any(cold)   # the corpus has problems on this release: the comparison compares something


def _hub(tmp_path: Path, monkeypatch, repo: str, hidden: int) -> None:
    """An HF cache at tmp_path/hf holding `repo`'s config.json with `hidden` as its hidden_size."""
    import json

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    snap = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / "r1"
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
        "intermediate_size": 4 * hidden, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "vocab_size": 1000, "torch_dtype": "bfloat16"}))


def test_a_model_is_resolved_once_in_a_lint_and_anew_in_the_next(tmp_path, monkeypatch):
    from finetune_doctor.facts import archmemo as fc
    from finetune_doctor.readers.model import modelcfg

    _hub(tmp_path, monkeypatch, "acme/tiny-llama", 64)
    calls = []
    real = modelcfg.load_arch

    def counting(*a, **kw):
        calls.append(kw.get("model_name_or_path", a[0] if a else None))
        return real(*a, **kw)

    kw = dict(model_name_or_path="acme/tiny-llama", base_dir=str(tmp_path), cache_dir=None, model_config=None,
              allow_download=False, offline=True, exact=False, transformers_major=None, template=None,
              multimodal=None, context_config=None)
    with fc.arch_memo():
        first: list = []
        a1, _ = fc.load_arch_once(counting, dict(kw), first)
        second: list = []
        a2, _ = fc.load_arch_once(counting, dict(kw), second)
        assert a2 is a1 and second == first and len(calls) == 1
        fc.load_arch_once(counting, {**kw, "template": "llama3"}, [])   # another argument: resolved again
        assert len(calls) == 2
    _hub(tmp_path, monkeypatch, "acme/tiny-llama", 128)   # the cache changed between two lints
    with fc.arch_memo():
        a3, _ = fc.load_arch_once(counting, dict(kw), [])
    assert len(calls) == 3 and a3.hidden_size == 128 and a1.hidden_size == 64
    a4, _ = fc.load_arch_once(counting, dict(kw), [])   # outside a scope: no memo
    assert len(calls) == 4 and a4.hidden_size == 128


def test_an_unresolved_model_raises_the_same_error_from_the_memo(tmp_path, monkeypatch):
    import pytest

    from finetune_doctor.errors import InputError
    from finetune_doctor.facts import archmemo as fc
    from finetune_doctor.readers.model.modelcfg import load_arch

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    kw = dict(model_name_or_path=str(tmp_path / "no-such-model"), base_dir=str(tmp_path), cache_dir=None,
              model_config=None, allow_download=False, offline=True, exact=False, transformers_major=None,
              template=None, multimodal=None, context_config=None)
    with fc.arch_memo():
        with pytest.raises(InputError) as one:
            fc.load_arch_once(load_arch, dict(kw), [])
        with pytest.raises(InputError) as two:
            fc.load_arch_once(load_arch, dict(kw), [])
    assert str(one.value) == str(two.value) and "no-such-model" in str(two.value)


# --- YAML scalars typed once per text (readers/config/yamlcfg.py `_typed_node`, yamlnodes.py `_loader`) ---

_SCALARS = """\
a: on
b: yes
c: 1e-4
d: "1e-4"
e: 0x10
f: 1_000
g: .inf
h: ~
i: True
j: '1'
k: 1
l: 1.0
m: sft
n: [on, "on", 1e-4, 2]
"""


def test_scalars_are_typed_the_same_with_the_memos_cold_and_warm():
    from finetune_doctor.readers.config import yamlcfg, yamlnodes

    yamlcfg._TYPED.clear()
    yamlnodes._LOADER.clear()
    cold, pos = yamlcfg.parse_yaml_text(_SCALARS, "x.yaml")
    # OmegaConf's reading (PyYAML 1.1 resolvers plus its float pattern); quoted scalars stay strings
    assert cold == {"a": True, "b": True, "c": 1e-4, "d": "1e-4", "e": 16, "f": 1000, "g": float("inf"), "h": None,
                    "i": True, "j": "1", "k": 1, "l": 1.0, "m": "sft", "n": [True, "on", 1e-4, 2]}
    warm, pos2 = yamlcfg.parse_yaml_text(_SCALARS.replace("m: sft", "m: lora"), "x.yaml")
    assert {k: v for k, v in warm.items() if k != "m"} == {k: v for k, v in cold.items() if k != "m"}
    assert warm["m"] == "lora" and pos2 == pos
    assert [type(warm[k]) for k in "ijkl"] == [bool, str, int, float]   # True, '1', 1 and 1.0 kept apart


def test_an_integer_past_the_digit_limit_is_refused_each_time_with_its_own_line():
    import pytest

    from finetune_doctor.errors import InputError
    from finetune_doctor.readers.config import yamlcfg

    big = "9" * (yamlcfg.MAX_INT_DIGITS + 1)
    for text, line in ((f"a: {big}\n", 1), (f"b: 1\nc: {big}\n", 2)):
        with pytest.raises(InputError) as err:
            yamlcfg.parse_yaml_text(text, "x.yaml")
        assert err.value.line == line
