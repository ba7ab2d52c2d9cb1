"""Options of one invocation: the command line merged over the project configuration.

Project configuration lives in ``[tool.finetune-doctor]`` of a ``pyproject.toml`` or in a
``.finetune-doctor.toml``, found by walking up from the first input path (projectconfig.py). The command line
wins over the file, as in ruff.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any


def _split(v: str | None) -> list[str] | None:
    if v is None:
        return None
    return [s.strip() for s in v.split(",") if s.strip()]


def _check_version(flag: str, given: str | None) -> None:
    """A version flag must hold a version (numbers.py bounds it): one line naming the flag otherwise."""
    if given is None:
        return
    from finetune_doctor.errors import InputError
    from finetune_doctor.numbers import parse_version

    if parse_version(given) is None:
        shown = given if len(given) <= 40 else given[:40] + f"… ({len(given)} characters)"
        raise InputError(f"expected a version such as 2.5.1, got {shown!r}", file=flag)


@dataclass(frozen=True)
class Options:
    """The options of one command, from its command line, the project configuration and the defaults."""

    command: str
    paths: tuple[str, ...] = ()
    gpu: str | None = None
    nnodes: int | None = None
    format: str = "text"
    output: str | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    fail_on: str = "error"
    rules_dirs: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    project_file: str | None = None
    torch_version: str | None = None         # the training machine's torch (default: a current stack)
    transformers_version: str | None = None  # ... and transformers
    model_config: str | None = None          # --model-config FILE|DIR: the model's config.json
    offline: bool = False                    # --offline: never download a model's JSON configs
    env_file: str | None = None              # --env FILE: the training machine's `llamafactory-cli env` output
    accelerate_config: str | None = None     # --accelerate-config FILE: the accelerate config of the launch
    launch: str | None = None                # a file holding the launch command line (a run folder's cmdline.txt)
    host_ram: str | None = None              # --host-ram SIZE: host RAM per node of the training machine
    strict: bool = False                     # --strict: verdict-moving assumptions and unchecked files are errors
    context: str | None = None               # --context FILE: the training machine captured by `doctor context`
    config_file: str | None = None           # lint --config FILE: this project configuration, no discovery
    lf_version: str | None = None            # --llamafactory VERSION: the training machine's LLaMA-Factory

    @classmethod
    def from_cli(cls, command: str, paths: list[str], gpu: str | None = None, nnodes: int | None = None,
                 fmt: str | None = None, output: str | None = None, select: str | None = None,
                 ignore: str | None = None, fail_on: str | None = None,
                 rules_dirs: tuple[str, ...] = (), torch_version: str | None = None,
                 transformers_version: str | None = None, model_config: str | None = None,
                 offline: bool = False, env_file: str | None = None, accelerate_config: str | None = None,
                 launch: str | None = None, host_ram: str | None = None, strict: bool = False,
                 context: str | None = None, config_file: str | None = None,
                 lf_version: str | None = None, **_: Any) -> "Options":
        from finetune_doctor.projectconfig import find_project_config, load_project_config

        proj = load_project_config(config_file) if config_file else find_project_config(paths[0] if paths else ".")
        fmt = fmt or proj.get("format")
        if fmt is None:
            fmt = "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"
        for flag, given in (("--torch", torch_version), ("--transformers", transformers_version)):
            _check_version(flag, given)
        sel = _split(select) if select is not None else proj.get("select")
        ign = (_split(ignore) or []) + list(proj.get("ignore") or [])
        return cls(
            command=command,
            paths=tuple(paths),
            gpu=gpu or proj.get("gpu"),
            nnodes=nnodes or proj.get("nnodes"),
            format=fmt,
            output=output,
            select=tuple(sel) if sel else None,
            ignore=tuple(ign),
            fail_on=fail_on or proj.get("fail-on") or "error",
            rules_dirs=tuple(rules_dirs) + tuple(proj.get("rules") or ()),
            per_file_ignores={k: tuple(v) for k, v in (proj.get("per-file-ignores") or {}).items()},
            project_file=proj.get("__file__"),
            torch_version=torch_version or proj.get("torch"),
            transformers_version=transformers_version or proj.get("transformers"),
            model_config=model_config,
            offline=bool(offline or proj.get("offline")),
            env_file=env_file,
            accelerate_config=accelerate_config,
            launch=launch,
            host_ram=host_ram,
            strict=bool(strict or proj.get("strict")),
            context=context,
            config_file=config_file,
            lf_version=lf_version or proj.get("llamafactory"),
        )
