"""Every rule against its own cases: `tests/rule_cases/<rule-name>.yaml` (sqlfluff's yaml test cases, for configs).

A case file holds ``fail:`` and ``pass:`` lists. Each entry is a LLaMA-Factory run as a user writes it:

    name:      what the entry shows (the test id)
    config:    the LLaMA-Factory YAML body, written to ``config.yaml``
    deepspeed: optional DeepSpeed JSON body, written to ``ds_config.json`` (the config names it)
    files:     optional {relative path: text} written next to the config (datasets, dataset_info.json, a model's
               config.json)
    gpu:       optional --gpu spec; overrides: optional list of KEY=VALUE; command: check (default) | lint | estimate
               | postmortem (the directory is the run folder: its ``files:`` are the logs, ``--config config.yaml``)
    nvml:      optional recorded NVML snapshot (a fixtures/gpus/ file, or a path written by ``files:``) that the
               run sees as this machine's GPUs instead of ``--gpu``, replayed through hardware/fake.py's FakeAdapter
    data:      scan the datasets (check only; default false, which passes --no-data)
    expect_fix_keys:  fail entries: the set of keys the finding's fix edits (required when that fix has edits)
    expect_edits:     fail entries: edits ({key, value} or {key, delete: true}) the fix must contain
    expect_message:   fail entries: a piece of text the finding's message must contain
                      (every edit that any finding on a fail entry proposes must change its file's value: a
                      deletion of a key the file holds, or a value other than the one it holds)
    slow:             true for an entry that takes seconds (it builds a model with transformers): the slow lane
    known_misfire:    a rule that misbehaves on this entry today (why, in words): the entry is a strict xfail, so
                      it starts failing the day the rule is repaired and the mark must go

Each entry is run through the real CLI (`finetune_doctor.cli.main`, ``--format json``) in a fresh directory that
is the working directory, as LLaMA-Factory resolves relative paths from where it is launched. A ``fail`` entry
must produce a finding with the rule's code, a ``pass`` entry must not. Both must exit 0 or 1 (an input error is
never a pass), and a ``pass`` entry must give the rule something to look at: the fact namespaces the rule
``requires`` are shown to have been present in the report (a GPU for ``hw``, a memory estimate for ``mem``, a
DeepSpeed file for ``ds``, scanned data for ``data``, a known model for ``model``), so a rule that is merely
skipped does not count as passing.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.engine.loader import load_rules
from parsecache import ruamel_safe_load

# the memory rules' cases were written against a fixed error model (tests/conftest.py pinned_error_model)
pytestmark = pytest.mark.usefixtures("pinned_error_model")

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "rule_cases"
ENTRY_KEYS = {"name", "config", "deepspeed", "files", "gpu", "nvml", "overrides", "command", "data", "expect_fix_keys",
              "expect_edits", "expect_message", "known_misfire", "options", "slow", "config_name"}
COMMANDS = ("check", "lint", "estimate", "postmortem")

RULES = {r.name: r for r in load_rules()}


@functools.lru_cache(maxsize=None)
def _parsed(path: Path, text: str) -> Any:
    # keyed by the text too, so an edited file is parsed again; ruamel's pure-Python parser takes ~10 ms a file,
    # and test_rule_registry.py reads every case file that collection here has parsed already
    # and (parsecache.py) the parse is kept between processes: both pytest-xdist workers collect this file
    return ruamel_safe_load(text)


def load_case_file(path: Path) -> dict[str, Any]:
    """One case file, validated: unknown keys are errors so that a typo cannot silently test nothing."""
    data = copy.deepcopy(_parsed(path, path.read_text(encoding="utf-8")))   # a copy: no caller shares an entry
    assert isinstance(data, dict) and set(data) <= {"fail", "pass"}, f"{path.name}: only fail: and pass: lists"
    for kind in ("fail", "pass"):
        for i, entry in enumerate(data.get(kind) or []):
            where = f"{path.name} {kind}[{i}]"
            assert isinstance(entry, dict) and "config" in entry, f"{where}: an entry needs a config body"
            assert not set(entry) - ENTRY_KEYS, f"{where}: unknown keys {sorted(set(entry) - ENTRY_KEYS)}"
            assert entry.get("command", "check") in COMMANDS, f"{where}: command must be one of {COMMANDS}"
            if kind == "pass":
                assert not {"expect_fix_keys", "expect_edits", "expect_message"} & set(entry), \
                    f"{where}: expectations belong to fail entries"
    return data


def _params() -> list[Any]:
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        data = load_case_file(path)
        for kind in ("fail", "pass"):
            for i, entry in enumerate(data.get(kind) or []):
                label = entry.get("name") or str(i)
                marks = ([pytest.mark.xfail(strict=True, reason=str(entry["known_misfire"]))]
                         if entry.get("known_misfire") else [])
                if entry.get("slow"):
                    marks.append(pytest.mark.slow)
                out.append(pytest.param(path.stem, kind, entry, id=f"{path.stem}:{kind}:{label}", marks=marks))
    return out


def run_entry(entry: dict[str, Any], where: Path) -> tuple[int, dict[str, Any], str]:
    """Write the entry's files under `where` and run its command there; returns (exit code, report, output)."""
    name = entry.get("config_name", "config.yaml")   # e.g. bird.yml: the suffix LF's read_args tests
    (where / name).write_text(entry["config"], encoding="utf-8")
    if entry.get("deepspeed") is not None:
        (where / "ds_config.json").write_text(entry["deepspeed"], encoding="utf-8")
    for rel, text in (entry.get("files") or {}).items():
        p = where / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    command = entry.get("command", "check")
    args = [command, name]
    if command == "postmortem":     # the entry's files are the run folder (logs), its config the run's YAML
        args = [command, ".", "--config", name]
    if command not in ("lint", "postmortem"):
        args += [str(o) for o in entry.get("overrides") or []]
    elif entry.get("overrides"):
        raise AssertionError("lint takes no KEY=VALUE overrides")
    if command == "check" and not entry.get("data"):
        args.append("--no-data")
    if entry.get("gpu"):
        args += ["--gpu", str(entry["gpu"])]
    args += [str(a) for a in entry.get("options") or []]   # e.g. --torch 2.5 (the training machine's stack)
    args += ["--format", "json", "--fail-on", "never"]
    r = CliRunner().invoke(main, args)
    out = r.stdout
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        report = {}
    return r.exit_code, report, r.output


# how a report shows that a namespace a rule `requires` was there to be judged
WITNESS = {
    "hw": lambda rep, entry: (rep.get("hardware") or {}).get("gpu") is not None,
    "mem": lambda rep, entry: rep.get("memory") is not None,
    # lint's report names no DeepSpeed input; there a `deepspeed:` key without deepspeed-file-missing shows it was read
    "ds": lambda rep, entry: (rep.get("inputs") or {}).get("deepspeed") is not None or (
        entry.get("command") == "lint" and "deepspeed:" in entry["config"]
        and not any(f["name"] == "deepspeed-file-missing" for f in rep.get("findings", []))),
    "data": lambda rep, entry: rep.get("data") is not None,
    "model": lambda rep, entry: (rep.get("run") or {}).get("params_b") is not None,
}


@pytest.mark.parametrize(("rule_name", "kind", "entry"), _params())
def test_rule_case(rule_name: str, kind: str, entry: dict[str, Any], tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    rule = RULES.get(rule_name)
    assert rule is not None, f"tests/rule_cases/{rule_name}.yaml names no rule"
    command = entry.get("command", "check")
    assert command in rule.commands, f"{rule.code} is not evaluated by `doctor {command}`"
    monkeypatch.chdir(tmp_path)
    # tests never reach a network: a model config not on this machine fails at once instead of after the download
    # timeout (one case took 6-17 s waiting for huggingface.co)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if entry.get("nvml"):
        _replay_nvml(entry, tmp_path, monkeypatch)
    code, report, output = run_entry(entry, tmp_path)
    assert code in (0, 1) and report, f"`doctor {command}` did not produce a report (exit {code}):\n{output}"
    hits = [f for f in report["findings"] if f["code"] == rule.code]
    codes = sorted({f["code"] for f in report["findings"]})
    if kind == "pass":
        assert not hits, f"{rule.code} fired on a pass case: {hits[0]['message']}"
        missing = [ns for ns in rule.requires if ns in WITNESS and not WITNESS[ns](report, entry)]
        assert not missing, f"pass case gives {rule.code} nothing to judge: {missing} absent from the report"
        return
    assert hits, f"{rule.code} did not fire; findings: {codes}"
    if entry.get("expect_message"):
        assert any(entry["expect_message"] in f["message"] for f in hits), [f["message"] for f in hits]
    with_edits = [f for f in hits if f.get("fix") and f["fix"].get("edits")]
    if with_edits:
        assert "expect_fix_keys" in entry, \
            f"{rule.code} proposes edits {[e['key'] for e in with_edits[0]['fix']['edits']]}: declare expect_fix_keys"
    if "expect_fix_keys" in entry:
        want = set(entry["expect_fix_keys"])
        got = [{e["key"] for e in f["fix"]["edits"]} for f in with_edits]
        assert want in got, f"fix edits {got}, expected {sorted(want)}"
    for want_edit in entry.get("expect_edits") or []:
        edits = [e for f in with_edits for e in f["fix"]["edits"]]
        assert any(_edit_matches(e, want_edit) for e in edits), f"no edit {want_edit} in {edits}"
    # a fix that changes nothing is a bug (issue 14: `bf16: true -> true` offered for fp16 + bf16): every edit of
    # every finding on a failing fixture must change the value its file holds
    for f in [f for f in report["findings"] if f.get("fix") and f["fix"].get("edits")]:
        for e in f["fix"]["edits"]:
            assert not _is_noop(e, tmp_path, entry), f"{f['code']} proposes an edit that changes nothing: {e}"


_ABSENT = object()


def _current(edit: dict[str, Any], where: Path, entry: dict[str, Any]) -> Any:
    """The value the edited file holds at the edit's key (dotted for JSON), or _ABSENT."""
    from finetune_doctor.readers.config.yamlcfg import load_config

    name = Path(str(edit["file"])).name
    if edit["file"] in ("<command line>", "override"):
        return _ABSENT
    if name.endswith(".json"):
        data: Any = json.loads((where / name).read_text(encoding="utf-8"))
    else:
        data = load_config(str(where / name), ()).values
        if edit["key"] in data:          # a LLaMA-Factory key that itself holds a dot is looked up whole
            return data[edit["key"]]
    for part in str(edit["key"]).split("."):   # dotted keys of JSON and of nested YAML (an accelerate config)
        if not isinstance(data, dict) or part not in data:
            return _ABSENT
        data = data[part]
    return data


def _is_noop(edit: dict[str, Any], where: Path, entry: dict[str, Any]) -> bool:
    now = _current(edit, where, entry)
    if edit.get("delete"):
        return now is _ABSENT
    return now is not _ABSENT and now == edit.get("value") and type(now) is type(edit.get("value"))


def _replay_nvml(entry: dict[str, Any], where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make NVML detection read the entry's recorded snapshot (the environment variable that keeps tests off the
    real NVML is lifted for this entry only)."""
    from finetune_doctor.hardware import nvml
    from finetune_doctor.hardware.fake import FakeAdapter

    rel = str(entry["nvml"])
    path = where / rel if (where / rel).is_file() or (entry.get("files") or {}).get(rel) is not None else ROOT / rel
    assert entry.get("gpu") is None, "nvml: and gpu: exclude each other (--gpu wins over NVML)"
    monkeypatch.delenv("FINETUNE_DOCTOR_NO_NVML", raising=False)
    monkeypatch.setattr(nvml, "open_adapter", lambda *a, **k: FakeAdapter(path))


def _edit_matches(edit: dict[str, Any], want: dict[str, Any]) -> bool:
    if edit["key"] != want["key"]:
        return False
    if want.get("delete"):
        return bool(edit.get("delete"))
    return "value" not in want or edit.get("value") == want["value"]
