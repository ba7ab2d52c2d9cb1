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


# Fields a flag fills and the project configuration may fill when the flag is unset: (field, project key).
FROM_PROJECT = (("gpu", "gpu"), ("nnodes", "nnodes"), ("torch_version", "torch"),
                ("transformers_version", "transformers"), ("lf_version", "llamafactory"))
# Fields only a flag fills (an input path or a machine fact of this invocation, never the project's).
FROM_CLI_ONLY = ("model_config", "env_file", "accelerate_config", "launch", "host_ram", "context", "config_file")


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
    def from_cli(cls, command: str, paths: list[str], **flags: Any) -> "Options":
        """The options of `command` on `paths` from its parsed flags, named as the fields they fill (``fmt`` for
        ``format``; ``select``/``ignore`` as the comma-separated text given; ``rules_dirs`` the --rules folders),
        merged over the project configuration found from the first path (or ``config_file``): a flag given wins,
        the project's value fills an unset one (`FROM_PROJECT`), and --rules folders add to the project's. A flag
        that is no Options field (a command's own, such as check's --no-data) is not read. Raises InputError for a
        --torch/--transformers value that is not a version and for a project file that cannot be read.

        One keyword mapping instead of a parameter per flag (there were 22, issue #22): the flags are declared once,
        as the fields of `Options` and as click options in cli.py (lintcli.OPTIONS for lint's own reader)."""
        from finetune_doctor.projectconfig import find_project_config, load_project_config

        def flag(name: str) -> Any:
            return flags.get(name)

        config_file = flag("config_file")
        proj = load_project_config(config_file) if config_file else find_project_config(paths[0] if paths else ".")
        fmt = flag("fmt") or proj.get("format")
        if fmt is None:
            fmt = "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"
        for name, field_name in (("--torch", "torch_version"), ("--transformers", "transformers_version")):
            _check_version(name, flag(field_name))
        sel = _split(flag("select")) if flag("select") is not None else proj.get("select")
        ign = (_split(flag("ignore")) or []) + list(proj.get("ignore") or [])
        return cls(
            command=command,
            paths=tuple(paths),
            format=fmt,
            output=flag("output"),
            select=tuple(sel) if sel else None,
            ignore=tuple(ign),
            fail_on=flag("fail_on") or proj.get("fail-on") or "error",
            rules_dirs=tuple(flag("rules_dirs") or ()) + tuple(proj.get("rules") or ()),
            per_file_ignores={k: tuple(v) for k, v in (proj.get("per-file-ignores") or {}).items()},
            project_file=proj.get("__file__"),
            offline=bool(flag("offline") or proj.get("offline")),
            strict=bool(flag("strict") or proj.get("strict")),
            **{name: flag(name) for name in FROM_CLI_ONLY},
            **{name: flag(name) or proj.get(key) for name, key in FROM_PROJECT},
        )
