"""fixer.py: edits keep every other byte of the file; atomic, idempotent, refuse stale files.

The round-trip tests run over every YAML and DeepSpeed JSON that LLaMA-Factory ships (copied to a temp dir) and
check the result line by line against the original: the only changed lines are the edited keys, every comment
survives, and LLaMA-Factory's reading of the new file (OmegaConf typing) equals the old reading plus the edits.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.fixes.edit import FixResult, apply_edits, diff_edits
from finetune_doctor.readers.config.yamlcfg import parse_yaml_text
from finetune_doctor.types import Edit

EXAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "examples"
needs_ref = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="shared LLaMA-Factory examples not present")
YAMLS = sorted(EXAMPLES.rglob("*.yaml")) if EXAMPLES.is_dir() else []
JSONS = sorted(EXAMPLES.rglob("*.json")) if EXAMPLES.is_dir() else []


def _changes(old: str, new: str) -> tuple[list[str], list[str]]:
    """(removed lines, added lines) between two texts."""
    removed, added = [], []
    sm = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            removed += old.splitlines()[i1:i2]
            added += new.splitlines()[j1:j2]
    return removed, added


def _comments(text: str) -> list[str]:
    """Every comment in a YAML text (own-line and trailing), as written."""
    out = []
    for line in text.splitlines():
        m = re.search(r"(?:^|\s)(#.*)$", line)
        if m:
            out.append(m.group(1))
    return out


def _typed(text: str):
    return parse_yaml_text(text, "<t>")[0]


@needs_ref
@pytest.mark.parametrize("src", YAMLS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_yaml_round_trip_changes_only_the_edited_keys(src, tmp_path):
    path = tmp_path / src.name
    shutil.copy(src, path)
    old = path.read_text()
    before = _typed(old)
    had_bf16 = "bf16" in before
    edits = [Edit(str(path), "bf16", False), Edit(str(path), "enable_liger_kernel", True)]
    res = apply_edits(str(path), edits, expect_text=old)
    new = path.read_text()
    assert res.changed and res.text == new
    removed, added = _changes(old, new)
    if had_bf16 and before["bf16"] is not False:
        assert [r.split("#")[0].strip() for r in removed] == ["bf16: true"]
        assert sorted(a.split("#")[0].strip() for a in added) == ["bf16: false", "enable_liger_kernel: true"]
    elif had_bf16:  # already false: only the insert
        assert removed == [] and added == ["enable_liger_kernel: true"]
    else:
        assert removed == [] and sorted(added) == ["bf16: false", "enable_liger_kernel: true"]
    assert _comments(new) == _comments(old)
    after = _typed(new)
    assert after == {**before, "bf16": False, "enable_liger_kernel": True}
    assert list(after)[: len(before)] == list(before)  # key order kept, new key appended
    # idempotent: the same edits again change nothing
    again = apply_edits(str(path), edits, expect_text=new)
    assert not again.changed and path.read_text() == new


@needs_ref
@pytest.mark.parametrize("src", [p for p in YAMLS if "train" in p.parent.name], ids=lambda p: p.name)
def test_yaml_rename_and_delete_on_examples(src, tmp_path):
    """A rename (delete + set of a missing sibling) keeps the line and its comment; a delete drops one line."""
    path = tmp_path / src.name
    shutil.copy(src, path)
    old = path.read_text()
    before = _typed(old)
    # a rename moves the value; the unrelated delete next to it must stay a delete
    edits = [Edit(str(path), "cutoff_len", delete=True),
             Edit(str(path), "cutoff_length_renamed", before["cutoff_len"]),
             Edit(str(path), "output_dir", delete=True)]
    apply_edits(str(path), edits, expect_text=old)
    new = path.read_text()
    removed, added = _changes(old, new)
    assert [r.split(":")[0] for r in removed] == ["cutoff_len", "output_dir"]
    assert [a.split(":")[0] for a in added] == ["cutoff_length_renamed"]
    assert _comments(new) == _comments(old)
    want = {("cutoff_length_renamed" if k == "cutoff_len" else k): v for k, v in before.items() if k != "output_dir"}
    got = _typed(new)
    assert got == want and list(got) == list(want)  # the renamed key sits where the old one was


@needs_ref
@pytest.mark.parametrize("src", JSONS, ids=lambda p: p.name)
def test_deepspeed_json_dotted_edits_keep_the_rest(src, tmp_path):
    path = tmp_path / src.name
    shutil.copy(src, path)
    old = path.read_text()
    data = json.loads(old)
    edits = [Edit(str(path), "zero_optimization.stage", 1), Edit(str(path), "gradient_clipping", 1.0)]
    apply_edits(str(path), edits, expect_text=old)
    new = path.read_text()
    removed, added = _changes(old, new)
    expect_removed = [ln for ln in old.splitlines() if re.match(r'\s*"(stage|gradient_clipping)":', ln)]
    assert removed == expect_removed
    want_added = [re.sub(r'(:\s*)[^,]*', lambda m: m.group(1) + ("1" if "stage" in ln else "1.0"), ln, count=1)
                  for ln in expect_removed]
    if "gradient_clipping" not in data:  # inserted after the last top-level key instead
        want_added = [w for w in want_added if "stage" in w]
        assert '  "gradient_clipping": 1.0' in added
        added = [a for a in added if "gradient_clipping" not in a and a.strip() not in ("}", "},")]
    assert [a for a in added if a.strip() not in ("}", "},")] == want_added
    data["zero_optimization"]["stage"] = 1
    data["gradient_clipping"] = 1.0
    assert json.loads(new) == data
    # same indentation unit as the file (2 spaces in LF's examples)
    indents = {len(ln) - len(ln.lstrip(" ")) for ln in new.splitlines() if ln.startswith(" ")}
    assert min(indents) == 2
    assert not apply_edits(str(path), edits, expect_text=new).changed


def test_json_detects_four_space_and_tab_indent(tmp_path):
    for unit in ("    ", "\t"):
        p = tmp_path / f"ds{len(unit)}.json"
        p.write_text(json.dumps({"train_batch_size": "auto", "zero_optimization": {"stage": 3}}, indent=unit) + "\n")
        apply_edits(str(p), [Edit(str(p), "zero_optimization.offload_optimizer", {"device": "cpu"})])
        text = p.read_text()
        assert f'\n{unit}{unit}"offload_optimizer": {{\n{unit}{unit}{unit}"device": "cpu"\n{unit}{unit}}}' in text
        assert json.loads(text)["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"}}


def test_json_numbers_keep_their_spelling(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text('{\n  "sub_group_size": 1e9,\n  "zero_optimization": {"stage": 3, "x": 5E8},\n  "bf16": {"enabled": "auto"}\n}\n')
    apply_edits(str(p), [Edit(str(p), "bf16.enabled", True), Edit(str(p), "zero_optimization.stage", delete=True)])
    assert p.read_text() == '{\n  "sub_group_size": 1e9,\n  "zero_optimization": {"x": 5E8},\n  "bf16": {"enabled": true}\n}\n'


def test_yaml_quoting_and_value_spelling(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("template: 'qwen'   # single quotes\nreport_to: \"none\"\nrun_name: plain\nlearning_rate: 1.0e-4\n")
    apply_edits(str(p), [Edit(str(p), "template", "llama3"), Edit(str(p), "report_to", "wandb"),
                         Edit(str(p), "run_name", "on"), Edit(str(p), "learning_rate", 2e-5),
                         Edit(str(p), "dataset", "a: b")])
    assert p.read_text() == ("template: 'llama3'   # single quotes\nreport_to: \"wandb\"\nrun_name: \"on\"\n"
                             "learning_rate: 2.0e-5\ndataset: \"a: b\"\n")
    assert _typed(p.read_text())["run_name"] == "on"  # a plain `on` would be the bool True for LF


def test_yaml_block_values_empty_values_and_crlf(tmp_path):
    p = tmp_path / "c.yaml"
    text = ("---\r\n# header\r\nmodel_name_or_path: m\r\ndataset:\r\n- a   # first\r\n- b\r\nval_size:\r\n"
            "lora_target: all\r\nextra:\r\n  nested: 1\r\n  # inner\r\n  other: 2\r\nlast: x")
    p.write_text(text, newline="")
    apply_edits(str(p), [Edit(str(p), "dataset", ["c", "d"]), Edit(str(p), "val_size", 0.1),
                         Edit(str(p), "extra.nested", 5), Edit(str(p), "extra.added", True),
                         Edit(str(p), "new_top", 3)])
    out = p.read_bytes().decode()
    assert out == ("---\r\n# header\r\nmodel_name_or_path: m\r\ndataset: [c, d]\r\nval_size: 0.1\r\n"
                   "lora_target: all\r\nextra:\r\n  nested: 5\r\n  # inner\r\n  other: 2\r\n  added: true\r\n"
                   "last: x\r\nnew_top: 3\r\n")


def test_insert_after_a_named_sibling(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("### model\nmodel_name_or_path: m\n\n### method\nstage: sft\nfinetuning_type: lora\n")
    apply_edits(str(p), [Edit(str(p), "flash_attn", "fa2")], after={"flash_attn": "model_name_or_path"})
    assert p.read_text() == "### model\nmodel_name_or_path: m\nflash_attn: fa2\n\n### method\nstage: sft\n" \
                            "finetuning_type: lora\n"


def test_rename_pairs_with_the_delete_whose_value_it_moves(tmp_path):
    """Edits of several fixes merged for one file: [delete A, set N = B's value, delete B] renames B, not A."""
    p = tmp_path / "c.yaml"
    p.write_text("compute_dtype: bfloat16  # derived\nevaluation_strategy: steps  # old name\nx: 1\n")
    apply_edits(str(p), [Edit(str(p), "compute_dtype", delete=True), Edit(str(p), "eval_strategy", "steps"),
                         Edit(str(p), "evaluation_strategy", delete=True)])
    assert p.read_text() == "eval_strategy: steps  # old name\nx: 1\n"
    # without a value match the set pairs with the following delete (rules write [set new, delete old])
    p.write_text("a: 1\nb: 2\nc: 3\n")
    apply_edits(str(p), [Edit(str(p), "a", delete=True), Edit(str(p), "n", 9), Edit(str(p), "b", delete=True)])
    assert p.read_text() == "n: 9\nc: 3\n"


def test_unrelated_delete_and_insert_are_not_a_rename(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("a: 1\nb: 2\nc: 3\n")
    apply_edits(str(p), [Edit(str(p), "a", delete=True), Edit(str(p), "c", 4), Edit(str(p), "z", 9)])
    assert p.read_text() == "b: 2\nc: 4\nz: 9\n"


def test_stale_file_is_not_written(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("bf16: false\n")
    res = apply_edits(str(p), [Edit(str(p), "bf16", True)], expect_text="bf16: false\nfp16: true\n")
    assert isinstance(res, FixResult) and res.stale and not res.changed
    assert p.read_text() == "bf16: false\n"


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("bf16: false\n")
    os.chmod(p, 0o640)
    apply_edits(str(p), [Edit(str(p), "bf16", True)], expect_text="bf16: false\n")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c.yaml"]
    assert p.read_text() == "bf16: true\n"


def test_diff_edits_writes_nothing(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("stage: sft\nbf16: false\n")
    d = diff_edits(str(p), [Edit(str(p), "bf16", True)])
    assert d.splitlines()[-2:] == ["-bf16: false", "+bf16: true"]
    assert d.startswith(f"--- {p}\n+++ {p}\n")
    assert p.read_text() == "stage: sft\nbf16: false\n"
    assert diff_edits(str(p), [Edit(str(p), "bf16", False)]) == ""


def test_a_rename_keeps_the_value_as_written_unless_the_value_changes(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("learing_rate: 1.0e-4  # peak\nlr: '3'\n")
    apply_edits(str(p), [Edit(str(p), "learning_rate", 1.0e-4), Edit(str(p), "learing_rate", None, delete=True),
                         Edit(str(p), "lr_new", 3), Edit(str(p), "lr", None, delete=True)])
    # same value: the text moves untouched; a new value (the string '3' becomes the number 3) is written anew
    assert p.read_text() == "learning_rate: 1.0e-4  # peak\nlr_new: 3\n"


def test_bad_input_is_an_input_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("a: [1, 2\n")
    with pytest.raises(InputError) as err:
        apply_edits(str(p), [Edit(str(p), "a", 1)])
    assert err.value.file == str(p)
    j = tmp_path / "d.json"
    j.write_text('{"zero_optimization": 3}')
    with pytest.raises(InputError, match="not an object"):
        apply_edits(str(j), [Edit(str(j), "zero_optimization.stage", 2)])
