"""Lay out a real user case (fixtures/cases/NNN) the way it ran, so `doctor check` reads it as the user's run.

The case's YAML names its DeepSpeed file as the user wrote it (`ds_z2_config.json`, `examples/deepspeed/...`).
The harness copies the YAML into a temporary LLaMA-Factory-like root, puts the case's own ds_config.json at the
referenced path, and, where the case only names a LLaMA-Factory example, the bundled copy of that example.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "fixtures" / "cases"
LF_EXAMPLES = ROOT / "fixtures" / "llamafactory" / "examples"


def case_ids() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if p.is_dir() and (p / "config.yaml").exists())


def lay_out(case: str, tmp: Path, base: Path = CASES) -> Path:
    """Copy case `case` of `base` (fixtures/cases, or another folder laid out alike) into `tmp` and return the
    path of its config.yaml there."""
    src = base / case
    shutil.copytree(LF_EXAMPLES, tmp / "examples")
    cfg = tmp / "config.yaml"
    text = (src / "config.yaml").read_text(encoding="utf-8")
    cfg.write_text(text, encoding="utf-8")
    m = re.search(r"^deepspeed:\s*([^\s#]+)", text, re.M)
    if m:
        target = tmp / m.group(1)
        target.parent.mkdir(parents=True, exist_ok=True)
        if (src / "ds_config.json").exists():
            shutil.copy(src / "ds_config.json", target)
        elif not target.exists():
            # the case names a file it did not paste and that is not a LLaMA-Factory example: use the LF example
            # of the stage its name or comment states (ZeRO-2 when it states none, as the index infers)
            line = text[m.start():text.find("\n", m.start())].lower()
            stage = "3" if re.search(r"z(ero)?[-_ ]?3|stage[ -]?3", line) else "2"
            offload = "_offload" if "offload" in line else ""
            shutil.copy(LF_EXAMPLES / "deepspeed" / f"ds_z{stage}{offload}_config.json", target)
    return cfg


def run_json(*args: str) -> tuple[int, dict]:
    """`doctor ARGS --format json` in-process: (exit code, the report). A crash or a bad-input exit (2) fails the test."""
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    res = CliRunner().invoke(main, [*args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)
