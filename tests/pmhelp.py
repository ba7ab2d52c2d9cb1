"""One way for the postmortem tests to run the pipeline: on a fixture file copied into a fresh run folder (so no
other fixture beside it is read), or on a run folder as it is (`diagnose_dir`), as `doctor postmortem RUN_DIR`
would."""

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


def diagnose_dir(run_dir: str | os.PathLike | None, logs: tuple[str | os.PathLike, ...] | list = (),
                 config: str | os.PathLike | None = None, *, plot: str | None = None,
                 overrides: tuple[str, ...] = (), deepspeed: str | None = None, **opts: Any) -> Report:
    """The Report of ``doctor postmortem RUN_DIR [--log LOG ...] [--config CONFIG]`` on `run_dir` as it is (a
    folder or one log file; nothing copied). `opts` are Options fields (gpu=, launch=, ...); `plot`, `overrides`
    and `deepspeed` are the pipeline's own arguments."""
    return pm.run(None if run_dir is None else str(run_dir), [str(x) for x in logs],
                  None if config is None else str(config), Options(command="postmortem", **opts), plot=plot,
                  overrides=overrides, deepspeed=deepspeed)


def first_of_text(tmp_path: Path, text: str):
    """The first finding of ``doctor postmortem`` on a run folder holding one log whose text is `text` (a user's
    words or a one-line paste, a newline added); fails when there is none."""
    (tmp_path / "train.log").write_text(text + "\n", encoding="utf-8")
    r = diagnose_dir(str(tmp_path))
    assert r.findings, "no finding"
    return r.findings[0]


def diagnose(tmp_path: Path, fixture: str | os.PathLike, **opts: Any) -> list:
    """The findings of `diagnose_report`, in report order (the first is the diagnosis)."""
    return list(diagnose_report(tmp_path, fixture, **opts).findings)


def in_folder(folder: str) -> Callable[..., list]:
    """`diagnose` for the fixtures of one folder under fixtures/postmortem/ (``diagnose(tmp_path, "x.log")``)."""
    def run(tmp_path: Path, name: str, **opts: Any) -> list:
        return diagnose(tmp_path, FIXTURES / folder / name, **opts)
    return run
