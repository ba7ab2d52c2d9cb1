"""LLaMA-Factory's own argument parser as the oracle of launch parity: does LF 0.9.5 start on this config?

`lf_verdict(path)` reads a training YAML exactly as ``llamafactory-cli train path`` does (``OmegaConf.load`` then
``OmegaConf.to_container``, LF 0.9.5 ``hparams/parser.py:85-99`` ``read_args``) and calls LF's
``get_train_args`` on it (parser.py:304-534), with the questions LF and transformers ask of the machine answered as
a single-node machine of bf16-capable CUDA GPUs launched by ``torchrun`` would answer them. No model, tokenizer or
dataset is loaded and no process group is created:

* ``transformers.training_args.TrainingArguments._setup_devices`` (transformers 5.6.0 training_args.py, the
  cached property behind ``.device`` / ``.n_gpu`` / ``.parallel_mode``) is replaced by one that sets a
  ``distributed_state`` as accelerate's ``PartialState`` would under torchrun: ``distributed_type`` MULTI_GPU
  (DEEPSPEED when ``deepspeed`` is set), ``num_processes`` = `world_size`, rank 0, device ``cuda:0``. So
  ``parallel_mode`` is DISTRIBUTED and ``world_size`` is what DeepSpeed's "auto" batch arithmetic sees.
* ``is_torch_bf16_gpu_available`` / ``is_torch_tf32_available`` / ``is_torch_cuda_available`` answer True where
  transformers' ``_validate_args`` and LF's parser ask them (training_args.py ``_validate_args``; LF parser.py:381,
  extras/misc.py:144-157 ``get_current_device``).
* the environment is torchrun's (``LOCAL_RANK``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``) and nothing else of the caller's: ``ALLOW_EXTRA_ARGS``, ``USE_MCA``, ``ACCELERATE_*`` and
  ``DISABLE_VERSION_CHECK`` are removed while LF runs, and ``os.environ`` is restored afterwards.
* the HF DeepSpeed weakref that ``is_deepspeed_zero3_enabled`` reads is cleared after each call
  (transformers ``integrations/deepspeed.py`` ``unset_hf_deepspeed_config``), so one config's ZeRO-3 does not leak
  into the next.

After a config parses, the checks LF makes before the first step that depend only on the config and the files it
names are run too ("static" phase): the template name against LF's registry (``data/template.py``
``get_template_and_fix_tokenizer``: "Template X does not exist.") and every dataset name against the
dataset_info.json of ``dataset_dir`` (``data/parser.py`` ``get_dataset_list``: "Undefined dataset X in
dataset_info.json.").

A config that fails only because an optional package is missing here (``check_version(..., mandatory=True)`` in
parser.py:205-256 raises ImportError naming ``pip install``) is not a verdict about the config: it comes back with
``missing_package`` set and is left out of the parity count.

Heavy imports (torch, transformers, llamafactory) happen on the first call; the tests import this module only
where llamafactory is installed.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import io
import os
import re
import sys
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

WORLD_SIZE = 8          # a single node of 8 GPUs, as torchrun --nproc-per-node 8 would set it
_KEEP_OUT = ("ALLOW_EXTRA_ARGS", "USE_MCA", "USE_MEGATRON_BRIDGE", "DISABLE_VERSION_CHECK", "FORCE_TORCHRUN",
             "USE_RAY", "USE_KT", "LLAMAFACTORY_VERBOSITY")


@dataclass(frozen=True)
class Verdict:
    """LF's answer for one config.

    `accepted` is True when ``get_train_args`` returned and the static checks passed. `phase` is ``parse``
    (get_train_args raised: HfArgumentParser, a dataclass ``__post_init__``, LF's own checks, transformers'
    ``TrainingArguments.__post_init__``, DeepSpeed config loading), ``static`` (a template or dataset name LF would
    reject before the first step) or ``ok``. `error` is ``"<ExceptionType>: <message>"`` as LF raised it.
    `missing_package` names the package when the failure is only an absent optional dependency.
    """

    accepted: bool
    phase: str
    error: str | None = None
    missing_package: str | None = None


def read_like_lf(path: Path) -> Any:
    """The value LF's ``read_args`` passes to ``parse_dict`` for a YAML file (OmegaConf, YAML 1.1 typing)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(Path(path).absolute()))


def build_parsers_once(module: types.ModuleType) -> None:
    """Make `module`'s ``HfArgumentParser(dataclass_types)`` calls return one parser per list of dataclasses.

    LF builds a new ``HfArgumentParser`` on every ``get_train_args``/``get_args`` call (0.9.5
    ``hparams/parser.py:260``, main ``hparams/parser.py:310`` and ``v1/config/arg_parser.py:36``, 0.9.0
    ``hparams/parser.py:147``): an argparse action for each of ~350 dataclass fields, 63 % of an oracle verdict
    (cProfile over every 15th corpus config, 2026-12-07: 34 of 54 ms). The parser keeps no state between calls
    on the path the oracles take (``parse_dict`` reads only ``dataclass_types``; argparse's ``parse_args`` fills
    a fresh namespace), so one parser per list of dataclasses gives the same verdicts: with and without it, the
    verdicts on all 4,315 configs of the corpus were byte-identical for 0.9.5, main and 0.9.0, and v1's on the
    2,308 of tests/test_parity_v1.py (2026-12-07; one corpus took 147 s -> 56 s for 0.9.5, 157 s -> 89 s for main
    in one child process, same minutes).
    """
    real = module.HfArgumentParser
    built: dict[Any, Any] = {}

    def parser_once(dataclass_types: Any, **kwargs: Any) -> Any:
        types_key = tuple(dataclass_types) if isinstance(dataclass_types, (list, tuple)) else (dataclass_types,)
        key = (types_key, tuple(sorted(kwargs.items())))
        if key not in built:
            built[key] = real(dataclass_types, **kwargs)
        return built[key]

    module.HfArgumentParser = parser_once


@lru_cache(maxsize=1)
def _lf() -> types.SimpleNamespace:
    """Import LF and transformers once, with the device answers patched in."""
    os.environ.setdefault("LLAMAFACTORY_VERBOSITY", "WARN")
    import torch
    import transformers.training_args as ta
    from accelerate.utils import DistributedType
    from transformers.integrations import deepspeed as hf_ds

    import llamafactory.extras.misc as lf_misc
    import llamafactory.hparams.parser as lf_parser

    # torchaudio is imported at the top of LF's data/mm_plugin.py (0.9.5 line 30) for audio decoding only; the
    # template registry never calls it, and the test environment does not install it
    if "torchaudio" not in sys.modules:
        stub = types.ModuleType("torchaudio")
        stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = stub
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.data.template import TEMPLATES

    def _setup_devices(self: Any) -> Any:
        kind = DistributedType.DEEPSPEED if self.deepspeed else DistributedType.MULTI_GPU
        self.distributed_state = types.SimpleNamespace(
            distributed_type=kind, num_processes=int(os.environ.get("WORLD_SIZE", WORLD_SIZE)),
            process_index=0, local_process_index=0, device=torch.device("cuda", 0), backend="nccl")
        self._n_gpu = 1
        return torch.device("cuda", 0)

    ta.TrainingArguments._setup_devices = property(_setup_devices)
    build_parsers_once(lf_parser)
    import logging

    logging.getLogger("llamafactory").setLevel(logging.ERROR)   # LF's advice lines are not verdicts
    for mod in (ta, lf_parser, lf_misc):
        for name in ("is_torch_bf16_gpu_available", "is_torch_tf32_available", "is_torch_cuda_available"):
            if hasattr(mod, name):
                setattr(mod, name, lambda *a, **k: True)
    return types.SimpleNamespace(get_train_args=lf_parser.get_train_args, templates=TEMPLATES,
                                 get_dataset_list=get_dataset_list, unset_ds=hf_ds.unset_hf_deepspeed_config)


@contextlib.contextmanager
def _torchrun_env(cwd: Path, world_size: int) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    for k in list(os.environ):
        if k in _KEEP_OUT or k.startswith("ACCELERATE_"):
            del os.environ[k]
    os.environ.update(LOCAL_RANK="0", RANK="0", WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", LLAMAFACTORY_VERBOSITY="WARN",
                      HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # An integer where LF opens a path (`accelerator_config: 7` is open(7), `true` is open(1)) would open and then
    # close a file descriptor of this test process. On a launcher the descriptor is not open (or is a terminal
    # that cannot be read as JSON), so LF fails there; here the same failure is raised without touching the fd.
    real_open = builtins.open

    def no_fd_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, int):
            raise OSError(9, "Bad file descriptor")
        return real_open(file, *args, **kwargs)

    builtins.open = io.open = no_fd_open   # transformers' AcceleratorConfig.from_json_file calls io.open
    os.chdir(cwd)
    try:
        yield
    finally:
        builtins.open = io.open = real_open
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


_PIP = re.compile(r"pip install (?:-U )?['\"]?([A-Za-z0-9_.\-]+)")


def _missing_package(err: BaseException) -> str | None:
    """The package an ImportError from LF's ``check_version``/transformers' ``require_version`` names."""
    if not isinstance(err, ImportError):
        return None
    m = _PIP.search(str(err))
    return m.group(1) if m else (getattr(err, "name", None) or "unknown")


def lf_verdict(path: Path, *, cwd: Path | None = None, world_size: int = WORLD_SIZE) -> Verdict:
    """Run LF 0.9.5's ``get_train_args`` (and its static pre-step checks) on the YAML at `path`.

    The working directory is `cwd` (default: the config's folder) while LF runs, as LF resolves ``deepspeed``,
    ``dataset_dir`` and ``output_dir`` from where it is launched. Never raises for a config: every exception of
    LF's becomes a verdict.
    """
    lf = _lf()
    path = Path(path).resolve()
    try:
        args = read_like_lf(path)
    except Exception as err:  # OmegaConf refuses the file before LF sees it (duplicate keys, bad YAML)
        return Verdict(False, "parse", f"{type(err).__name__}: {err}")
    with _torchrun_env(Path(cwd) if cwd else path.parent, world_size):
        try:
            model_args, data_args, _training, _ft, _gen = lf.get_train_args(args)
        except BaseException as err:  # noqa: BLE001 - asserts and SystemExit are LF's verdict too
            if isinstance(err, KeyboardInterrupt):
                raise
            return Verdict(False, "parse", f"{type(err).__name__}: {err}", _missing_package(err))
        finally:
            lf.unset_ds()
        static = _static_checks(lf, data_args)
    if static is not None:
        return Verdict(False, "static", static)
    return Verdict(True, "ok")


def _static_checks(lf: types.SimpleNamespace, data_args: Any) -> str | None:
    """LF's pre-step checks that need only the config and the files it names (template, dataset names)."""
    template = data_args.template
    if template is not None:
        try:
            known = template in lf.templates
        except TypeError:  # a list or mapping: TEMPLATES[...] raises TypeError in get_template_and_fix_tokenizer
            return f"TypeError: unhashable type: {type(template).__name__!r}"
        if not known:
            return f"ValueError: Template {template} does not exist."
    ddir = data_args.dataset_dir
    if isinstance(ddir, str) and (ddir.startswith("REMOTE:") or ddir == "ONLINE"):
        return None  # the dataset_info.json of a hub repository cannot be read offline: no static verdict
    for names in (data_args.dataset, data_args.eval_dataset):
        if not names:
            continue
        try:
            lf.get_dataset_list(names, data_args.dataset_dir)
        except Exception as err:  # noqa: BLE001 - LF's own message is the verdict
            return f"{type(err).__name__}: {err}"
    return None
