"""Apply each rule's fix and re-run the rule: the finding must be gone (issue #21, trial 11 case 11).

A prescription that does not cure is worse than none: FD643 offered `export_device: cpu` for a GPTQ export that
LLaMA-Factory loads with device_map="auto" whatever export_device says (model/model_utils/quantization.py), and
applying it gave the same finding. For every ``fail`` entry of tests/rule_cases/ whose finding carries edits of
(``expect_fix_keys``), this runs the entry with ``--select CODE``, writes that finding's edits (safe and unsafe,
YAML and DeepSpeed JSON alike) with the writer `--fix` uses (fixes/edit.py `apply_edits`), runs the entry again on
the written files and asserts that the rule no longer fires at the key it pointed at; so for each alternative a
remedy planner ranks as reaching the 5 % target, applied alone to a fresh copy. Fixes of the postmortem (a
finished run cannot be re-run) and of `estimate` are outside it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from finetune_doctor.fixes.edit import apply_edits
from finetune_doctor.types import Edit
from test_rule_cases import CASES, RULES, _replay_nvml, load_case_file, run_entry

# about 15 s for ~110 entries on the 2-core machine (three CLI runs each): CI's lane, not the fast one
pytestmark = [pytest.mark.usefixtures("pinned_error_model"), pytest.mark.slow]


def _params() -> list[Any]:
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        for i, entry in enumerate(load_case_file(path).get("fail") or []):
            if not entry.get("expect_fix_keys") or entry.get("known_misfire") or entry.get("slow"):
                continue
            if entry.get("command", "check") not in ("check", "lint"):
                continue
            out.append(pytest.param(path.stem, entry, id=f"{path.stem}:{entry.get('name') or i}"))
    return out


@pytest.mark.parametrize(("rule_name", "entry"), _params())
def test_applying_the_fix_removes_the_finding(rule_name: str, entry: dict[str, Any], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rule = RULES[rule_name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if entry.get("nvml"):
        _replay_nvml(entry, tmp_path, monkeypatch)
    first = copy.deepcopy(entry)
    first["options"] = [*(entry.get("options") or []), "--select", rule.code]
    code, before, output = run_entry(first, tmp_path)
    hits = [f for f in before.get("findings", []) if f["code"] == rule.code]
    assert hits, f"{rule.code} did not fire before the fix:\n{output}"
    hits = [f for f in hits if (f.get("fix") or {}).get("edits")]   # a finding with advice only is not probed
    keys = {(f.get("location") or {}).get("key") for f in hits}
    left = _apply_and_rerun(entry, rule.code, [e for f in hits for e in f["fix"]["edits"]], keys, tmp_path)
    assert not left, f"{rule.code} still fires after its own fix was applied: {left[0]['message']}"
    # each alternative that says it reaches the 5 % target (a remedy planner's ranked sets), applied on its own
    for f in hits:
        for k, alt in enumerate(f["fix"].get("alternatives") or []):
            eff = alt.get("effect") or {}
            worst = max(eff.get("p_oom_model_after") or 0.0, eff.get("p_oom_model_assumed_after") or 0.0)
            if not alt.get("edits") or "launch with" in alt["title"] or worst > 0.05:
                continue   # an environment edit is no file edit; an over-target set says so in its cost
            where = tmp_path / f"alt{k}"
            where.mkdir()
            monkeypatch.chdir(where)
            left = _apply_and_rerun(entry, rule.code, alt["edits"], keys, where, fresh=True)
            assert not left, f"{rule.code} still fires after alternative {alt['title']!r}: {left[0]['message']}"


def _apply_and_rerun(entry: dict[str, Any], code: str, edits: list[dict[str, Any]], keys: set[Any], where: Path,
                     fresh: bool = False) -> list[dict[str, Any]]:
    """Write `edits` (the report's JSON edits) into the entry's files under `where` (written first when `fresh`),
    run the entry again with `--select CODE`, and return the findings of CODE still at one of `keys`."""
    if fresh:
        run_entry({**entry, "options": [*(entry.get("options") or []), "--select", "FD000"]}, where)
    per_file: dict[str, list[Edit]] = {}
    for e in edits:
        per_file.setdefault(e["file"], []).append(Edit(e["file"], e["key"], e.get("value"), bool(e.get("delete"))))
    assert per_file, f"{code} offers no edit here"
    cli = per_file.pop("<command line>", [])   # an edit of a KEY=VALUE override: the user changes the override
    for path, file_edits in per_file.items():   # the edits as `--fix` writes them (fixes/edit.py), every file alike
        target = Path(path) if Path(path).is_absolute() else where / path
        apply_edits(str(target), file_edits)
    again = _read_back(entry, where)
    assert again != entry or cli, f"{code}'s fix wrote nothing"
    # a KEY=VALUE the fix edits goes with it: the user drops it from the command line once the YAML holds the fix
    edited = {e.key for es in per_file.values() for e in es} | {e.key for e in cli}
    again["overrides"] = [o for o in entry.get("overrides") or [] if str(o).split("=", 1)[0] not in edited]
    again["overrides"] += [f"{e.key}={_yaml_scalar(e.value)}" for e in cli if not e.delete]
    again["options"] = [*(entry.get("options") or []), "--select", code]
    _, after, output = run_entry(again, where)
    assert after, output
    return [f for f in after["findings"] if f["code"] == code and (f.get("location") or {}).get("key") in keys]


def _read_back(entry: dict[str, Any], where: Path) -> dict[str, Any]:
    """The entry with every file it wrote (config, DeepSpeed JSON, `files:`) as the fixer left it."""
    out = copy.deepcopy(entry)
    out["config"] = (where / entry.get("config_name", "config.yaml")).read_text(encoding="utf-8")
    if entry.get("deepspeed") is not None:
        out["deepspeed"] = (where / "ds_config.json").read_text(encoding="utf-8")
    out["files"] = {rel: (where / rel).read_text(encoding="utf-8") for rel in entry.get("files") or {}}
    if not entry.get("files"):
        out.pop("files")
    return out


def _yaml_scalar(value: Any) -> str:
    return "true" if value is True else "false" if value is False else "null" if value is None else str(value)
