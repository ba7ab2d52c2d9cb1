"""The rule pack as a whole (issue #2: every rule has its documentation and a failing and a passing fixture).

Read straight from the rule files (not through the loader's own checks, which this test must not trust):
codes and names are unique and stable in form, each file is named after its rule, every rule carries the five
documentation sections `doctor explain` and SARIF `help` are built from, every rule that `check`, `lint` or
`estimate` evaluates has its cases in tests/rule_cases/ (run by test_rule_cases.py), and every rule that only
runs in `postmortem`, `gpus` or `data` is at least named by some test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from finetune_doctor.engine.loader import bundled_rules_dir, load_rules
from parsecache import cached, ruamel_safe_load
from test_rule_cases import CASES, load_case_file

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
RULE_FILES = sorted(bundled_rules_dir().glob("*.yaml"))
# ruamel's own parse of each file, kept between processes (parsecache.py): both pytest-xdist workers collect this file
RAW = {p: ruamel_safe_load(p.read_text(encoding="utf-8")) for p in RULE_FILES}
STATIC = {"check", "lint", "estimate"}
DOC_SECTIONS = ("what_it_does", "why_bad", "example", "use_instead", "references")


def test_the_pack_is_the_one_the_engine_loads():
    assert len(RULE_FILES) >= 60
    assert {d["code"] for d in RAW.values()} == {r.code for r in load_rules()}


def test_codes_and_names_are_unique_and_well_formed():
    codes = [d["code"] for d in RAW.values()]
    names = [d["name"] for d in RAW.values()]
    assert len(set(codes)) == len(codes), sorted(c for c in codes if codes.count(c) > 1)
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    assert all(re.fullmatch(r"FD\d{3}", c) for c in codes), codes
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names), names


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_file_is_named_after_its_rule(path):
    assert RAW[path]["name"] == path.stem


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_rule_has_every_documentation_section(path):
    docs = RAW[path].get("docs") or {}
    missing = [s for s in DOC_SECTIONS if not docs.get(s)]
    assert not missing, f"{path.name}: docs lack {missing}"
    refs = docs["references"]
    assert isinstance(refs, list) and all(isinstance(r, str) and r.strip() for r in refs), refs


@pytest.mark.parametrize("path", [p for p in RULE_FILES if STATIC & set(RAW[p]["commands"])], ids=lambda p: p.stem)
def test_static_rule_has_failing_and_passing_cases(path):
    cases = CASES / f"{path.stem}.yaml"
    assert cases.is_file(), f"{RAW[path]['code']} runs in {RAW[path]['commands']}: add tests/rule_cases/{cases.name}"
    data = load_case_file(cases)
    assert len(data.get("fail") or []) >= 1 and len(data.get("pass") or []) >= 1, \
        f"{cases.name}: needs at least one fail and one pass entry"
    for entry in (data.get("fail") or []) + (data.get("pass") or []):
        assert entry.get("command", "check") in RAW[path]["commands"], f"{cases.name}: {entry.get('name')}"


def test_every_case_file_names_a_rule():
    names = {d["name"] for d in RAW.values()}
    orphans = [p.name for p in CASES.glob("*.yaml") if p.stem not in names]
    assert not orphans, orphans


def _asserted_strings(path: Path) -> set[str]:
    """The string constants of a test file that an assertion compares or a parametrized case table lists: where a
    test says "this finding, this rule". A name in a comment, a docstring or a lookup table does not count."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()

    def grab(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out.update(re.findall(r"[A-Za-z0-9-]+", n.value))
                out.add(n.value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            grab(node.test)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "parametrize":
            grab(node)
    return out


def _all_asserted_strings(files: list[Path]) -> set[str]:
    """The union of `_asserted_strings` over `files`, kept by tests/parsecache.py keyed by this function's and
    `_asserted_strings`' source and every file's path and text: parsing and walking the ~260 test files was ~1 CPU s
    of the fast lane (issue #22, 2026-12-07); an edited test file or an edited walker walks them all again."""
    import inspect

    texts = [inspect.getsource(_asserted_strings), inspect.getsource(_all_asserted_strings)]
    for p in files:
        texts += [str(p), p.read_text(encoding="utf-8")]

    def build() -> set[str]:
        out: set[str] = set()
        for p in files:
            out |= _asserted_strings(p)
        return out

    return cached("test_rule_registry-asserted-strings", texts, build)


def test_rules_outside_check_lint_estimate_are_asserted_by_a_test():
    """postmortem/gpus/data-only rules have no config to lint; their fixtures are run directories and GPU
    recordings, exercised by the tests of those commands. Each must be what some test asserts (its code or name
    inside an assert, or in a parametrized case table): a name met only in a comment or a table proves nothing."""
    files = sorted(p for p in TESTS.rglob("*.py") if p.name != Path(__file__).name)
    asserted = _all_asserted_strings(files)
    unasserted = [f"{d['code']} {d['name']}" for d in RAW.values()
                  if not STATIC & set(d["commands"]) and d["code"] not in asserted and d["name"] not in asserted]
    assert not unasserted, f"rules no test asserts: {unasserted}"


INTERNAL = re.compile(r"reference/|LF_FACTS|REPORT\.md|misconfigs\.md|§|\b[Cc]ases? \d{3}\b|fixtures/cases")


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.stem)
def test_docs_cite_only_what_a_user_can_open(path):
    """`doctor explain` and SARIF help reach pip-installed users, who have neither this repository's reference
    notes nor its case numbers: every reference is a URL and the prose names no internal file or case."""
    docs = RAW[path]["docs"]
    bad_refs = [r for r in docs["references"] if not re.fullmatch(r"https?://\S+", r)]
    assert not bad_refs, f"{path.name}: references that are not URLs: {bad_refs}"
    hits = [(s, m.group(0)) for s in DOC_SECTIONS[:-1] for m in INTERNAL.finditer(str(docs.get(s, "")))]
    assert not hits, f"{path.name}: internal pointers in docs: {hits}"


# Inline ``x if c else y`` in the messages of rules that `doctor lint` evaluates, counted per rule file as distinct
# expressions (issue #22: a message variant is a table keyed by a fact's declared values, `message: {by, cases,
# default}`; a condition stays an expression, and one condition repeated in each case of a table counts once).
# The count may only go down: a rule converted to a table leaves this list, a new rule writes its variants as a
# table. 2026-12-07: 57 distinct (65 raw) in 29 files; the tables by run.finetuning_type (learning-rate-high,
# learning-rate-too-high), run.mcore (megatron-parallel-layout), item.what (offload-param-without-zero3) and
# run.trainable_dtype (lora-all-moe-experts) took 7 variants out (50). Each one left is a condition, not a variant:
INLINE_CONDITIONS = {
    # a clause or value shown only when a fact is known or present (a variant needs a declared value to key on)
    "bf16-unsupported-gpu": (2, "which key the user set (pure_bf16 or bf16); '?' when the capability is unknown"),
    "deepspeed-batch-mismatch": (1, "item.silent, a bool: whether DeepSpeed stops or steps every micro-batch"),
    "deepspeed-config-invalid": (4, "inside a table by check: a suggestion found, the value 'auto', stage 3, the "
                                    "clipping group's clause"),
    "deepspeed-precision-mismatch": (2, "inside a table by check: whether the upstream line is known, and its form"),
    "deepspeed-setting-ignored": (3, "inside a table by check: which legacy leaf (cpu_offload or cpu_offload_params) "
                                     "was written, and two known-or-not clauses"),
    "eager-attention-long-context": (1, "0 when the model is not known"),
    "fp16-on-bf16-model": (6, "model known or not, its alias differing, a quantized name, hw.bf16 True/False/None"),
    "fsdp-incompatible-quantization": (4, "a PTQ checkpoint before quantization_bit, then the method with LF's "
                                          "default 'bnb' (two facts in order); FSDP 2 shown only when it is 2"),
    "fsdp-qlora-quant-storage": (1, "the FSDP version shown only when it is 2"),
    "fsdp1-mixed-dtype-unit": (1, "which of two dtypes is the mixed one"),
    "fsdp2-sharding-strategy-ignored": (1, "a bool written as true/false"),
    "galore-optim-mismatch": (1, "whether `optim` was left unset"),
    "gradient-clipping-missing": (1, "whether a DeepSpeed config is given"),
    "kt-with-unsloth": (1, "which of two bool keys the user set"),
    "learning-rate-high": (1, "whether warm-up is configured"),
    "learning-rate-too-high": (1, "whether warm-up is configured"),
    "lora-all-moe-experts": (1, "whether DeepSpeed keeps fp32 master weights (in its bytes and in its words)"),
    "megatron-deepspeed-ignored": (1, "a bool: the distributed optimizer or not"),
    "megatron-parallel-layout": (1, "the plural of rank"),
    "oft-rank-and-block-size": (1, "the value, or the default when unset"),
    "optimizer-options-without-switch": (1, "the optimizer's name when the run is resolved"),
    "overlap-comm-risk": (2, "the buffer size when known; the DeepSpeed release when it is a known-bad one"),
    "predicted-oom": (5, "memory already in use, the cutoff assumption, the update's temporaries, the interval: "
                         "each shown when known"),
    "quantization-needs-lora": (1, "run.ptq_lora_only, a bool: a pre-quantized checkpoint or quantization_bit"),
    "quantization-options-without-bit": (1, "the weights' dtype when the run is resolved"),
    "ray-workers-ignored": (1, "the plural of rank"),
    "zero3-incompatible-quantization": (3, "a PTQ checkpoint before quantization_bit, then the method with LF's "
                                           "default 'bnb' (two facts in order)"),
}
INLINE_CONDITIONAL = re.compile(r"\bif\b[^{}]*?\belse\b")
INLINE_LEFT = sum(n for n, _ in INLINE_CONDITIONS.values())   # 49 in 27 files


def _message_texts(m) -> list[str]:
    if not isinstance(m, dict):
        return [str(m)]
    return [str(v) for v in (m.get("cases") or {}).values()] + [
        str(m.get("text") or ""), str(m.get("default") or ""), str((m.get("suffix") or {}).get("text") or "")]


def test_lint_rule_messages_hold_no_more_inline_conditionals():
    counts = {p.stem: len({" ".join(c.split()) for t in _message_texts(RAW[p]["message"])
                           for c in INLINE_CONDITIONAL.findall(t)})
              for p in RULE_FILES if "lint" in RAW[p]["commands"]}
    left = {k: v for k, v in counts.items() if v}
    assert INLINE_LEFT == 49 and sum(left.values()) <= INLINE_LEFT, left
    # each rule keeps no more than the conditions listed (with why), and a converted rule leaves the list
    assert {k: v for k, v in left.items() if v > INLINE_CONDITIONS.get(k, (0, ""))[0]} == {}
    assert set(left) == set(INLINE_CONDITIONS), sorted(set(left) ^ set(INLINE_CONDITIONS))
    assert counts["unused-suppression"] == 0


def test_the_fate_of_an_undeclared_key_has_one_wording():
    """The rules that show the key schema's problems word LLaMA-Factory's fate for an undeclared key
    (KeyProblem.fate, readers/config/keyschema.py) in message tables, one case per opening and fate (``check/fate``);
    each fate is worded once, the same in every case of every rule."""
    words: dict[str, set[str]] = {}
    fate = re.compile(r'LLaMA-Factory (?:stops with "[^"]*"|drops it silently [^.]*? no effect)')
    def case_table(message):   # the table by item.case: the message itself or one of its parts
        for t in (message, *message.get("parts", ())) if isinstance(message, dict) else ():
            if isinstance(t, dict) and t.get("by") == "item.case":
                return t
        return None

    tables = {p.stem: case_table(RAW[p]["message"]) for p in RULE_FILES}
    rules = [n for n, t in tables.items() if t and any(str(c).endswith("/stops") for c in t["cases"])]
    assert sorted(rules) == ["derived-key", "renamed-key", "unknown-key", "unverified-config-problem"]
    for p in RULE_FILES:
        if p.stem in rules:
            for case, text in tables[p.stem]["cases"].items():
                if "/" in case:
                    found = fate.findall(" ".join(str(text).split()))
                    assert len(found) == 1, (p.stem, case)
                    words.setdefault(case.split("/")[1], set()).add(found[0])
    assert {k: len(v) for k, v in words.items()} == {"stops": 1, "drops": 1}, words
