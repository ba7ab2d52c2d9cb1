"""Read an accelerate config file and the command line that launched (or will launch) a run.

Two inputs decide which engine runs and over how many ranks when LLaMA-Factory's YAML alone does not say it:

* an **accelerate config** (``accelerate config`` writes it; LLaMA-Factory ships ``examples/accelerate/*.yaml``),
  read as accelerate 1.15 (commit 16cb6eb) reads it: ``commands/config/config_args.py`` loads YAML or JSON into a
  ``ClusterConfig``; ``commands/launch.py:1257-1276`` (``_validate_launch_command``) copies every key of its
  ``fsdp_config`` mapping to the launch argument of the same name with an ``fsdp_`` prefix, and a flag given on
  the command line wins over the file (``key not in args.nondefault``);
* a **launch command line**: ``accelerate launch``, ``torchrun`` / ``python -m torch.distributed.run``,
  ``deepspeed``, ``llamafactory-cli train`` (``lmf``), with ``KEY=value`` environment prefixes and ``export``
  lines, as pasted in an issue or kept as ``cmdline.txt`` in a run folder. `parse_launch` returns what each
  launcher makes of it: torchrun's ``--nnodes``/``--nproc_per_node``, deepspeed's ``--num_nodes``/``--num_gpus``/
  ``--include``, llamafactory-cli's ``NNODES``/``NPROC_PER_NODE``/``FORCE_TORCHRUN``/``USE_MCA``/``USE_RAY``
  environment (LLaMA-Factory ff6d4d1 ``launcher.py:57-132``, ``extras/misc.py:339-344``).

Readers only read and type: which engine and world size follow from these is run/engines.py's business.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.lfenv import env_enabled

# accelerate's launch defaults for the FSDP flags (commands/launch.py:514-601 at 16cb6eb): what an FSDP config that
# omits a key runs with once `accelerate launch` has filled it.
FSDP_LAUNCH_DEFAULTS: dict[str, Any] = {
    "fsdp_version": 1, "fsdp_offload_params": False, "fsdp_min_num_params": int(1e8),
    "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_reshard_after_forward": True, "fsdp_auto_wrap_policy": None,
    "fsdp_transformer_layer_cls_to_wrap": None, "fsdp_backward_prefetch": None, "fsdp_state_dict_type": None,
    "fsdp_forward_prefetch": False, "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": True,
    "fsdp_sync_module_states": True, "fsdp_activation_checkpointing": False,
}
_FSDP_KEYS = tuple(FSDP_LAUNCH_DEFAULTS)


@dataclass(frozen=True)
class AccelerateConfig:
    """An accelerate config as accelerate launch applies it.

    `values` is the file as written; `positions` the (line, column) of every dotted key; `fsdp` the FSDP settings
    under their launch names (``fsdp_sharding_strategy``), each key the file gives (prefixed the way
    ``_validate_launch_command`` prefixes it). `explicit` lists the FSDP keys the file itself sets.
    """

    path: str
    values: dict[str, Any]
    positions: dict[str, tuple[int, int]]
    distributed_type: str | None = None      # FSDP | DEEPSPEED | MULTI_GPU | NO | MEGATRON_LM | ...
    num_processes: int | None = None          # all ranks over all machines
    num_machines: int | None = None
    mixed_precision: str | None = None        # no | fp16 | bf16 | fp8
    fsdp: dict[str, Any] = field(default_factory=dict)
    deepspeed: dict[str, Any] = field(default_factory=dict)
    gpu_ids: str | None = None

    def fsdp_value(self, key: str) -> Any:
        """An FSDP launch setting: the file's value, else accelerate launch's default (FSDP_LAUNCH_DEFAULTS)."""
        return self.fsdp.get(key, FSDP_LAUNCH_DEFAULTS.get(key))

    def key_of(self, launch_key: str) -> str:
        """The dotted key in the file that holds a launch setting (``fsdp_config.fsdp_offload_params``)."""
        for cand in (f"fsdp_config.{launch_key}", f"fsdp_config.{launch_key[5:]}"):
            if cand in self.positions:
                return cand
        return f"fsdp_config.{launch_key}"


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*\d+\s*", v):
        return int(v)
    return None


def _fsdp_section(raw: Any) -> dict[str, Any]:
    """``fsdp_config`` keys under their launch names (commands/launch.py:1264-1265: an unprefixed key gains
    ``fsdp_``)."""
    out: dict[str, Any] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            key = str(k) if str(k).startswith("fsdp") else f"fsdp_{k}"
            out[key] = v
    return out


def accelerate_config_from_values(values: dict[str, Any], path: str,
                                  positions: dict[str, tuple[int, int]] | None = None) -> AccelerateConfig:
    """An `AccelerateConfig` from already parsed values (a config written inline, a test). Raises InputError when
    the top level is not a mapping."""
    if not isinstance(values, dict):
        raise InputError("an accelerate config must be a mapping of keys", file=path, line=1)
    dt = values.get("distributed_type")
    mp = values.get("mixed_precision")
    gpu_ids = values.get("gpu_ids")
    return AccelerateConfig(
        path=path, values=dict(values), positions=dict(positions or {}),
        distributed_type=str(dt).upper() if dt is not None else None,
        num_processes=_as_int(values.get("num_processes")), num_machines=_as_int(values.get("num_machines")),
        mixed_precision=str(mp).lower() if mp is not None else None,
        fsdp=_fsdp_section(values.get("fsdp_config")),
        deepspeed=dict(values.get("deepspeed_config") or {}) if isinstance(values.get("deepspeed_config"), dict) else {},
        gpu_ids=None if gpu_ids is None else str(gpu_ids))


def load_accelerate_config(path: str) -> AccelerateConfig:
    """Read an accelerate config file (YAML, or JSON as accelerate also accepts, config_args.py
    ``load_config_from_file``). Raises InputError for a file that cannot be read or parsed, is not a mapping, or
    has no ``distributed_type`` (accelerate's ClusterConfig requires it)."""
    from finetune_doctor.readers.textfile import read_text
    from finetune_doctor.readers.config.yamlcfg import parse_yaml_text

    text = read_text(path, "accelerate config")
    values, positions = parse_yaml_text(text, path)
    cfg = accelerate_config_from_values(values, path, positions)
    if cfg.distributed_type is None:
        raise InputError("not an accelerate config: no distributed_type (accelerate config writes one)", file=path,
                         line=1)
    return cfg


# ---- launch command lines -------------------------------------------------------------------------------------

LAUNCHERS = ("accelerate", "torchrun", "deepspeed", "llamafactory-cli", "python")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class LaunchCommand:
    """One launch command line, as its launcher reads it.

    `launcher`: accelerate | torchrun | deepspeed | llamafactory-cli | python. `env` holds the ``KEY=value``
    prefixes and ``export`` lines before it. `options` are the launcher's own ``--flag value`` pairs (names with
    dashes turned into underscores), `script` the training entry point and `script_args` what follows it;
    `config` is the first YAML/JSON the script is given (LLaMA-Factory's training config), `line` the 1-based line
    where the command starts in the text.
    """

    launcher: str
    env: dict[str, str]
    options: dict[str, str]
    script: str | None = None
    script_args: tuple[str, ...] = ()
    config: str | None = None
    line: int = 1
    text: str = ""

    @property
    def accelerate_config(self) -> str | None:
        """The ``--config_file`` of an ``accelerate launch``."""
        return self.options.get("config_file") if self.launcher == "accelerate" else None

    def visible_devices(self) -> int | None:
        """GPUs ``CUDA_VISIBLE_DEVICES`` (or ASCEND_RT_VISIBLE_DEVICES) leaves visible, None when unset."""
        for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            v = self.env.get(name)
            if v is not None:
                return len([d for d in v.split(",") if d.strip()])
        return None

    def states_ranks(self) -> bool:
        """Whether the line says how many ranks run: visible devices, torchrun's ``--nproc_per_node``, the
        deepspeed launcher's ``--num_gpus``/``--include``, accelerate's ``--num_processes``, ``NPROC_PER_NODE`` for
        ``llamafactory-cli``, or plain ``python`` (one process). ``llamafactory-cli train`` alone runs torchrun over
        however many devices the machine shows (LF launcher.py), which the line does not say (trial 5)."""
        o = self.options
        return bool(self.visible_devices() is not None or self.launcher == "python"
                     or (self.launcher == "torchrun" and o.get("nproc_per_node"))
                     or (self.launcher == "deepspeed" and (o.get("num_gpus") or o.get("include")))
                     or (self.launcher == "accelerate" and o.get("num_processes"))
                     or (self.launcher == "llamafactory-cli" and self.env.get("NPROC_PER_NODE")))

    def env_flag(self, name: str) -> bool:
        """LLaMA-Factory's ``is_env_enabled`` of the launch's variables (readers/lfenv.py)."""
        return env_enabled(name, self.env)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Shell lines with backslash continuations joined, each with its first physical line number."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        out.append((start, buf))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:   # an unbalanced quote in a pasted snippet: split on blanks
        return line.split("#", 1)[0].split()


def _options(tokens: list[str], value_flags: frozenset[str] = frozenset()) -> tuple[dict[str, str], int]:
    """``--flag value`` / ``--flag=value`` pairs up to the first positional; returns (options, index of it).

    A flag in `_SWITCHES`, or followed by another flag (or nothing), is a switch (``"true"``); `value_flags`
    always take a value."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if not t.startswith("-") or t in ("-", "--"):
            if t == "--":
                i += 1
            break
        name = t.lstrip("-")
        if "=" in name:
            k, v = name.split("=", 1)
            opts[k.replace("-", "_")] = v
            i += 1
            continue
        key = name.replace("-", "_")
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if key in _SWITCHES or nxt is None or (nxt.startswith("-") and key not in value_flags):
            opts[key] = "true"
            i += 1
        else:
            opts[key] = nxt
            i += 2
    return opts, i


# flags that take no value, so that `--multi_gpu src/train.py` does not swallow the script
_SWITCHES = frozenset({"multi_gpu", "use_fsdp", "use_deepspeed", "cpu", "tpu", "quiet", "debug", "no_python",
                       "module", "use_megatron_lm", "standalone", "no_local_rank", "bind_cores_to_rank", "autotuning"})


def _config_of(args: list[str]) -> str | None:
    for a in args:
        if not a.startswith("-") and "=" not in a and a.lower().endswith((".yaml", ".yml", ".json")):
            return a
    return None


# LLaMA-Factory's pre-0.7 scripts that load a model without training (src/export_model.py, cli_demo.py,
# web_demo.py, api_demo.py): a launcher running one of them launches no training (trial 9, LlamaFactory#3131:
# `accelerate launch --use_fsdp src/export_model.py ...` was read as a training launch)
NOT_TRAINING_SCRIPTS = frozenset({"export_model.py", "cli_demo.py", "web_demo.py", "api_demo.py"})


def _command(tokens: list[str], env: dict[str, str], line: int, text: str) -> LaunchCommand | None:
    """The launch command `tokens` start (after env prefixes), or None when they launch no training."""
    cmd = _any_command(tokens, env, line, text)
    if cmd is not None and cmd.script and Path(str(cmd.script)).name in NOT_TRAINING_SCRIPTS:
        return None
    return cmd


def _any_command(tokens: list[str], env: dict[str, str], line: int, text: str) -> LaunchCommand | None:
    """`_command` before the non-training scripts are set aside."""
    if not tokens:
        return None
    head = Path(tokens[0]).name
    rest = tokens[1:]
    if head in ("python", "python3") and len(rest) >= 2 and rest[0] == "-m" and rest[1] in (
            "torch.distributed.run", "torch.distributed.launch"):
        head, rest = "torchrun", rest[2:]
    elif head in ("python", "python3") and len(rest) >= 2 and rest[0] == "-m" and rest[1] == "accelerate.commands.launch":
        head, rest = "accelerate", ["launch", *rest[2:]]
    if head == "accelerate":
        if not rest or rest[0] != "launch":
            return None
        opts, i = _options(rest[1:])
        return _with_script(LaunchCommand("accelerate", env, opts, line=line, text=text), rest[1 + i:])
    if head == "torchrun":
        opts, i = _options(rest)
        return _with_script(LaunchCommand("torchrun", env, opts, line=line, text=text), rest[i:])
    if head == "deepspeed":
        opts, i = _options(rest, frozenset({"include", "exclude", "hostfile", "num_gpus", "num_nodes"}))
        return _with_script(LaunchCommand("deepspeed", env, opts, line=line, text=text), rest[i:])
    if head in ("llamafactory-cli", "lmf"):
        # v1 (USE_V1=1) trains with sft/dpo/rm as well as train (LF main v1/launcher.py _DIST_TRAIN_COMMANDS)
        if not rest or rest[0] not in (("train", "sft", "dpo", "rm") if env_enabled("USE_V1", env) else ("train",)):
            return None
        args = tuple(rest[1:])
        return LaunchCommand("llamafactory-cli", env, {}, "train", args, _config_of(list(args)), line, text)
    if head in ("python", "python3") and rest and rest[0].endswith(".py"):
        args = tuple(rest[1:])
        return LaunchCommand("python", env, {}, rest[0], args, _config_of(list(args)), line, text)
    return None


def _with_script(cmd: LaunchCommand, tail: list[str]) -> LaunchCommand:
    script = tail[0] if tail else None
    args = tuple(tail[1:])
    if script and Path(script).name in ("llamafactory-cli", "lmf") and args[:1] == ("train",):
        args = args[1:]
    return LaunchCommand(cmd.launcher, cmd.env, cmd.options, script, args, _config_of(list(args)), cmd.line,
                         cmd.text)


def parse_launch(text: str, path: str = "<command line>") -> LaunchCommand:
    """The first training launch in `text` (a pasted command, a ``cmdline.txt``, a ``train.sh``).

    Environment assignments before the command (``CUDA_VISIBLE_DEVICES=0,1 accelerate launch ...``) and ``export``
    lines above it are collected into `env`; comment lines and other commands are skipped. Raises InputError
    naming `path` when no line launches training with one of `LAUNCHERS`.
    """
    env: dict[str, str] = {}
    for line, logical in _logical_lines(text):
        tokens = _split(logical)
        if not tokens:
            continue
        if tokens[0] == "export":
            for t in tokens[1:]:
                if _ENV_RE.match(t):
                    k, v = t.split("=", 1)
                    env[k] = v
            continue
        local = dict(env)
        while tokens and _ENV_RE.match(tokens[0]):
            k, v = tokens.pop(0).split("=", 1)
            local[k] = v
        if tokens and tokens[0] == "env":   # `env KEY=v cmd`
            tokens.pop(0)
            while tokens and _ENV_RE.match(tokens[0]):
                k, v = tokens.pop(0).split("=", 1)
                local[k] = v
        if not tokens:
            env = local   # a bare assignment line sets a shell variable for the lines below
            continue
        cmd = _command(tokens, local, line, logical.strip())
        if cmd is not None:
            return cmd
    raise InputError("no training launch found (expected accelerate launch, torchrun, deepspeed or "
                     "llamafactory-cli train)", file=path)


def parse_launch_or_none(text: str, path: str = "<command line>") -> LaunchCommand | None:
    """`parse_launch`, or None when `text` holds no launch it reads (the words after ``doctor check --``)."""
    try:
        return parse_launch(text, path)
    except InputError:
        return None


def read_launch_file(path: str) -> LaunchCommand:
    """`parse_launch` on a file (a run folder's ``cmdline.txt``, a launch script); InputError as `parse_launch` and
    for a file that cannot be read."""
    from finetune_doctor.readers.textfile import read_text

    return parse_launch(read_text(path, "launch command"), path)


LAUNCH_FILES = ("cmdline.txt",)


def launch_file_in(run_dir: str) -> str | None:
    """The file of a run folder that holds its launch command line (``cmdline.txt``), or None. For the
    postmortem: ``Options(launch=launch_file_in(run_dir))`` makes the config half read it."""
    for name in LAUNCH_FILES:
        p = Path(run_dir) / name
        if p.is_file():
            return str(p)
    return None
