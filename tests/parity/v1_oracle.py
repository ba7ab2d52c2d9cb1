"""LLaMA-Factory v1's own code as the launch-parity oracle for v1 configs, run in a child process.

Usage: ``python v1_oracle.py LF_SRC < configs.json > verdicts.json``: for every entry of the input list -- a YAML
path, or ``{"path": ..., "world": N}`` -- it reads the file the way v1's ``get_args`` does (``OmegaConf.load`` then
``OmegaConf.to_container``, LF main ``v1/config/arg_parser.py`` L40-44) and calls ``get_args(dict)``; the verdict
is ``{"accepted": bool, "error": "<Type>: message" | null}``. LF_SRC (the snapshot's ``src`` folder) is put first
on ``sys.path`` here only, so the test process keeps whatever ``llamafactory`` release it imports for the v0
oracle. ``ALLOW_EXTRA_KEYS`` is removed from the environment: the default launch.

With a ``world``, a config v1 parses is then laid out the way v1 lays it out at start-up on that many processes:
v1's own ``DistributedStrategy`` (``v1/accelerator/interface.py``) with ``RANK``/``WORLD_SIZE`` set as torchrun
sets them (unset for one process), then v1's own ``BatchGenerator.__init__`` (``v1/core/utils/batching.py``) up to
the point where it starts reading data: its ``DistributedInterface`` answers the data-parallel size the strategy
computed, and ``_init_data_provider`` -- the first step after the layout checks -- ends the replay; for
``dist_config: {name: fsdpturbo}`` then v1's own ``FSDPTurboParallelState.initialize`` (the expert-parallel size),
stopped where it would build device meshes. ``torchdata``
(imported by that module for the data loader, never used before that point) is stubbed when it is not installed.
"""

from __future__ import annotations

import json
import os
import sys
import types


class _LaidOut(Exception):
    """BatchGenerator got past its layout checks."""


def _layout(args: object, world: int) -> None:
    for k in ("RANK", "WORLD_SIZE"):
        os.environ.pop(k, None)
    if world > 1:
        os.environ.update(RANK="0", WORLD_SIZE=str(world))
    from llamafactory.v1.accelerator.interface import DistributedStrategy

    train = args[2]   # get_args returns (model, data, training, sample) arguments
    strategy = DistributedStrategy(mp_replicate_size=train.mp_replicate_size, mp_shard_size=train.mp_shard_size,
                                   dp_size=train.dp_size, cp_size=train.cp_size)
    try:
        import torchdata.stateful_dataloader  # noqa: F401
    except ImportError:
        mod = types.ModuleType("torchdata.stateful_dataloader")
        sampler = types.ModuleType("torchdata.stateful_dataloader.sampler")
        mod.StatefulDataLoader, sampler.StatefulDistributedSampler = object, object
        sys.modules.update({"torchdata": types.ModuleType("torchdata"), "torchdata.stateful_dataloader": mod,
                            "torchdata.stateful_dataloader.sampler": sampler})
    import llamafactory.v1.core.utils.batching as batching

    class _Mesh:
        def get_world_size(self, dim: object = None) -> int:
            return strategy.dp_size

    def _stop(self: object) -> None:
        raise _LaidOut

    batching.DistributedInterface = _Mesh
    batching.BatchGenerator._init_data_provider = _stop
    try:
        batching.BatchGenerator(dataset=[], renderer=None, micro_batch_size=train.micro_batch_size,
                                global_batch_size=train.global_batch_size, cutoff_len=train.cutoff_len)
    except _LaidOut:
        pass
    dist = train.dist_config
    if dist is not None and dist.get("name") == "fsdpturbo":
        # the plugin's expert layout when it shards the model: its own initialize, stopped where it builds meshes
        from llamafactory.v1.plugins.trainer_plugins.distributed.fsdpturbo import FSDPTurboParallelState

        class _Interface(_Mesh):
            class strategy:   # noqa: N801 - the attribute v1 reads
                cp_size = train.cp_size

            def get_device_mesh(self, dim: object = None) -> None:
                raise _LaidOut

        try:
            FSDPTurboParallelState().initialize(_Interface(), dist)
        except _LaidOut:
            pass


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    os.environ.pop("ALLOW_EXTRA_KEYS", None)
    from omegaconf import OmegaConf

    import llamafactory.v1.config.arg_parser as v1_parser
    from llamafactory.v1.config.arg_parser import get_args
    from oracle import build_parsers_once   # tests/parity/oracle.py, beside this script

    build_parsers_once(v1_parser)

    out = []
    for entry in json.load(sys.stdin):
        path, world = (entry, None) if isinstance(entry, str) else (entry["path"], entry.get("world"))
        try:
            args = get_args(OmegaConf.to_container(OmegaConf.load(path)))
            if world is not None:
                _layout(args, int(world))
            out.append({"accepted": True, "error": None})
        except Exception as err:   # every exception is a refusal to start: that is the verdict
            out.append({"accepted": False, "error": f"{type(err).__name__}: {err}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
