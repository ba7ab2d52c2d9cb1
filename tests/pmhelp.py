"""One way for the postmortem tests to run the pipeline on a fixture: copy the file into a fresh run folder (so no
other fixture beside it is read) and diagnose that folder as `doctor postmortem RUN_DIR` would."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options
from finetune_doctor.types import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "postmortem"


def diagnose_report(tmp_path: Path, fixture: str | os.PathLike, config: str | None = None, **opts: Any) -> Report:
    """The Report of `fixture` (a path, or a name under fixtures/postmortem/) copied alone into tmp_path/run;
    `config` is YAML text written there as training_args.yaml; `opts` are Options fields (gpu=, transformers_version=,
    ...)."""
    src = Path(fixture) if os.path.isabs(fixture) else FIXTURES / fixture
    d = Path(tmp_path) / "run"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, d / src.name)
    cfg = None
    if config is not None:
        cfg = d / "training_args.yaml"
        cfg.write_text(config)
    return pm.run(str(d), [], str(cfg) if cfg else None, Options(command="postmortem", **opts))


def diagnose(tmp_path: Path, fixture: str | os.PathLike, **opts: Any) -> list:
    """The findings of `diagnose_report`, in report order (the first is the diagnosis)."""
    return list(diagnose_report(tmp_path, fixture, **opts).findings)


def in_folder(folder: str) -> Callable[..., list]:
    """`diagnose` for the fixtures of one folder under fixtures/postmortem/ (``diagnose(tmp_path, "x.log")``)."""
    def run(tmp_path: Path, name: str, **opts: Any) -> list:
        return diagnose(tmp_path, FIXTURES / folder / name, **opts)
    return run
