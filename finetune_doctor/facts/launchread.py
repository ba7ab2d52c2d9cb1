"""How a training config is launched, read into its `Assembly` (facts/assembly.py): the launch command line
(``--launch``, a run folder's cmdline.txt, ``doctor check -- ...``), the accelerate config (``--accelerate-config``,
the launch's ``--config_file``, the one beside the YAML) and llamafactory-cli's launch variables in this
environment. Split from facts/config.py at the 800-line cap (issue #22); facts/config.py `assemble_config` calls
`read_launch`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.facts import machine
from finetune_doctor.facts.assembly import Assembly
from finetune_doctor.fsutil import display_path, real_parent
from finetune_doctor.settings import Options
from finetune_doctor.types import SourceDoc


def _read_accelerate(path: str) -> Any:
    """readers/config/accelerate.py's `load_accelerate_config`, imported once there is a file to read (a lint of a
    config alone reads none)."""
    from finetune_doctor.readers.config.accelerate import load_accelerate_config

    return load_accelerate_config(path)


def read_launch(asm: Assembly, opts: Options, *, lenient: bool) -> None:
    """Read the launch command line (``opts.launch``, e.g. a run folder's cmdline.txt) and the accelerate config
    (``--accelerate-config``, else the launch's ``--config_file``) into ``asm.launch`` and ``sources["accelerate"]``.

    A config named by ``--accelerate-config`` that cannot be read is an InputError; one named only inside a
    launch command line (relative to where the run was launched, which may not be here) is a note, as is a launch
    file that holds no launch under `lenient` (postmortem).
    """
    from finetune_doctor.run.engines import LaunchInputs

    launch = acc = None
    if not getattr(opts, "launch", None):
        launch = machine.launch(asm.context)
        if launch is None and asm.doc.path == "<command line>":
            # `doctor check -- llamafactory-cli train ...` launches the run as the same words in a cmdline.txt do
            # (pipeline/check.py reads such a file as its own --launch): one reading for every form (trial 5)
            from finetune_doctor.readers.config.accelerate import parse_launch_or_none

            launch = parse_launch_or_none(asm.doc.text, asm.doc.path)
    if getattr(opts, "launch", None):
        from finetune_doctor.readers.config.accelerate import read_launch_file

        try:
            launch = read_launch_file(opts.launch)
        except InputError as err:
            if not lenient:
                raise
            asm.notes.append(f"launch command not read ({err})")
    path = getattr(opts, "accelerate_config", None)
    if path:
        acc = _read_accelerate(path)
    elif launch is not None and launch.accelerate_config:
        found = next((p for p in (Path(launch.accelerate_config), Path(opts.launch).parent / launch.accelerate_config)
                      if p.is_file()), None)
        if found is None:
            asm.notes.append(f"the launch's accelerate config {launch.accelerate_config} is not on this machine: "
                             "its FSDP settings are not known (--accelerate-config FILE)")
        else:
            acc = _read_accelerate(str(found))
    if acc is None and not path:
        acc = machine.accelerate(asm.context)
    if launch is None and acc is None and not lenient:
        acc = _accelerate_beside(asm)
        launch = _env_launch() if acc is None else None
    if acc is not None:
        asm.sources["accelerate"] = SourceDoc("accelerate", display_path(acc.path) or acc.path, dict(acc.positions))
        from finetune_doctor.facts.accel import accelerate_fact

        asm.facts["lint"]["accelerate"] = accelerate_fact(acc)
    if launch is not None or acc is not None:
        asm.launch = LaunchInputs(acc, launch)


# accelerate's own default file name (accelerate config writes default_config.yaml) and the names users give it
ACCELERATE_BESIDE = ("accelerate_config.yaml", "accelerate_config.yml", "accelerate.yaml", "default_config.yaml",
                     "fsdp_config.yaml")
# llamafactory-cli's launch variables (LLaMA-Factory launcher.py: FORCE_TORCHRUN starts torchrun, NNODES and
# NPROC_PER_NODE size it)
LAUNCH_ENV = ("FORCE_TORCHRUN", "NNODES", "NPROC_PER_NODE")


def _accelerate_beside(asm: Assembly) -> Any:
    """The one accelerate config beside the training YAML (`ACCELERATE_BESIDE`), with a note; None when there is
    none, several, or a file of that name that is not an accelerate config."""
    here = real_parent(asm.doc.path)
    base = str(here)
    # os.path on strings: five pathlib joins and stats per config were ~3 % of a lint of LF's examples (issue #22)
    found = [here / n for n in ACCELERATE_BESIDE if os.path.isfile(os.path.join(base, n))]
    if len(found) != 1:
        return None
    from finetune_doctor.readers.config.accelerate import load_accelerate_config   # once there is one (#22)
    try:
        acc = load_accelerate_config(str(found[0]))
    except InputError:
        return None
    asm.notes.append(f"launch read from the accelerate config beside the YAML ({found[0].name}); "
                     "--accelerate-config FILE names another")
    return acc


def _env_launch() -> Any:
    """A ``llamafactory-cli train`` launch from FORCE_TORCHRUN/NNODES/NPROC_PER_NODE in this environment, or None
    when none is set."""
    import os

    env = {k: os.environ[k] for k in LAUNCH_ENV if os.environ.get(k)}
    if not env.get("FORCE_TORCHRUN") and not env.get("NNODES"):
        return None
    from finetune_doctor.readers.config.accelerate import LaunchCommand   # only when the environment launches
    return LaunchCommand(launcher="llamafactory-cli", env=env, options={}, script="train",
                         text=" ".join(f"{k}={v}" for k, v in env.items()) + " llamafactory-cli train")
