"""No bundled rule may raise on any config, however odd its values (trial 6: FD708 raised on every chat config with
`quantization_device_map`, and the whole lint stopped with exit 2, hiding every other file's findings).

Every rule is run over a corpus: LLaMA-Factory's own example configs (fixtures/llamafactory/examples, the parity
corpus) and hostile configs built here from the keys the rules read: each key absent, null, a string, a list, a
mapping or a number where another type is expected, in a train, a chat and an export config. The engine turns a
raising rule into an FD097 `rule-failed` finding (engine/evaluate.py); this test fails on any such finding, naming
the rule and its error. A separate test shows the engine's side: a rule that raises is reported, the others still
report, and the exit code is 1 (an error finding), never 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.engine.loader import bundled_rules_dir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "fixtures" / "llamafactory" / "examples").rglob("*.yaml"))


def _rule_keys() -> list[str]:
    """The config keys the bundled rules name (`cfg.KEY`, `'KEY' in cfg`, `cfg.get('KEY')`)."""
    keys: set[str] = set()
    for p in bundled_rules_dir().glob("*.yaml"):
        text = p.read_text(encoding="utf-8")
        keys.update(re.findall(r"\bcfg\.([a-z][a-z_0-9]*)", text))
        keys.update(re.findall(r"'([a-z][a-z_0-9]*)' in cfg", text))
        keys.update(re.findall(r"cfg\.get\('([a-z][a-z_0-9]*)'", text))
    keys.discard("get")
    return sorted(keys)


KEYS = _rule_keys()
HEADS = {   # the three config kinds LF's CLI reads; each hostile body is appended to one of them
    "train": "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
             "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: saves/q\n",
    "chat": "model_name_or_path: /models/Qwen2.5-7B-Instruct-AWQ\ntemplate: qwen\ninfer_backend: vllm\n",
    "export": "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nadapter_name_or_path: saves/q\ntemplate: qwen\n"
              "finetuning_type: lora\nexport_dir: out/merged\n",
}
ODD = {"null": "null", "string": "'odd'", "list": "[1, 'a']", "mapping": "{a: 1}", "number": "-3",
       "bool": "true", "empty": "''"}


def _hostile(kind: str, odd: str) -> str:
    head = HEADS[kind]
    lines = [f"{k}: {ODD[odd]}" for k in KEYS if not head.startswith(f"{k}:") and f"\n{k}:" not in head]
    return head + "\n".join(lines) + "\n"


def _failures(report: dict) -> list[str]:
    return [f["message"] for f in report.get("findings", []) if f["code"] == "FD097"]


def _run(args: list[str]) -> tuple[int, dict, str]:
    r = CliRunner().invoke(main, [*args, "--format", "json", "--fail-on", "never"])
    try:
        rep = json.loads(r.stdout)
    except json.JSONDecodeError:
        rep = {}
    return r.exit_code, rep, r.output


def test_corpus_is_real():
    assert len(EXAMPLES) >= 20 and len(KEYS) >= 30, (len(EXAMPLES), len(KEYS))


def test_no_rule_raises_on_lf_examples():
    code, rep, out = _run(["lint", *map(str, EXAMPLES)])
    assert code == 0 and rep, out[-2000:]
    assert not _failures(rep), _failures(rep)


@pytest.mark.parametrize("kind", sorted(HEADS))
@pytest.mark.parametrize("odd", sorted(ODD))
def test_no_rule_raises_on_hostile_values(kind: str, odd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "config.yaml").write_text(_hostile(kind, odd), encoding="utf-8")
    code, rep, out = _run(["lint", "config.yaml"])
    assert code == 0 and rep, out[-2000:]
    assert not _failures(rep), _failures(rep)


@pytest.mark.parametrize("kind", sorted(HEADS))
def test_no_rule_raises_in_check(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`check` resolves the run and the memory facts too: the rules that read `run`, `mem`, `hw` get evaluated."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    body = HEADS[kind] + "quantization_device_map: auto\ndouble_quantization: true\ncutoff_len: 4096\n"
    (tmp_path / "config.yaml").write_text(body, encoding="utf-8")
    code, rep, out = _run(["check", "config.yaml", "--offline", "--no-data", "--gpu", "4090"])
    assert code == 0 and rep, out[-2000:]
    assert not _failures(rep), _failures(rep)


BROKEN = """code: FD900
name: always-breaks
severity: warning
category: config
commands: [check, lint, estimate]
when: "cfg.template + 1"
message: "never shown"
docs: {what_it_does: x, why_bad: x, example: x, use_instead: x, references: [x]}
"""


def test_a_raising_rule_is_reported_and_hides_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "always-breaks.yaml").write_text(BROKEN, encoding="utf-8")
    (tmp_path / "a.yaml").write_text(HEADS["chat"] + "quantization_device_map: auto\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text(HEADS["train"] + "fp16: true\nbf16: true\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["lint", "a.yaml", "b.yaml", "--rules", "rules", "--format", "json"])
    assert r.exit_code == 1, r.output
    rep = json.loads(r.stdout)
    failed = [f for f in rep["findings"] if f["code"] == "FD097"]
    assert sorted(Path(f["location"]["file"]).name for f in failed) == ["a.yaml", "b.yaml"]
    assert all("FD900 (always-breaks)" in f["message"] and "can only concatenate" in f["message"]
               or "unsupported operand" in f["message"] for f in failed), failed
    codes = {(Path(f["location"]["file"]).name, f["code"]) for f in rep["findings"]}
    assert ("a.yaml", "FD708") in codes            # the bundled rules still report on both files
    assert any(name == "b.yaml" and c != "FD097" for name, c in codes), codes
    # --ignore FD097 removes the report of the failure, not the other findings
    r2 = CliRunner().invoke(main, ["lint", "a.yaml", "--rules", "rules", "--format", "json", "--ignore", "FD097"])
    rep2 = json.loads(r2.stdout)
    assert [f["code"] for f in rep2["findings"]] == ["FD708"] and r2.exit_code == 0, r2.output
