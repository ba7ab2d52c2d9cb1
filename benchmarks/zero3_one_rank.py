"""Whether a ZeRO-3 parameter gathered on a single rank occupies storage of its own, on CPU (gloo): the check of
analyzers/memory/zero3.py's one-rank rule (issue 23, wt/mem13b).

DeepSpeed's ``all_gather_coalesced`` returns ``_no_gather_coalesced`` when the partition world is one rank
(0.19.8 runtime/zero/partition_parameters.py:1559-1560; ``self.num_partitions == 1`` at v0.11.1 :1062-1063,
v0.14.2 :1166-1167, v0.16.4 :1207-1208; ``self.world_size == 1`` at v0.9.0 :846-848), and its ``NoGatherHandle``
sets ``param.data = param.ds_tensor.data.to(device).view(ds_shape)`` (0.19.8 :61-76, v0.14.2 :44-56): a partition
already on the rank's device is returned as it is, so the "gathered" parameter is a view of the partition and adds
no bytes. With two ranks the gather allocates a flat buffer of the whole parameter (``_all_gather_dtype``).

The toy stack of benchmarks/zero3_toy.py is built inside ``deepspeed.zero.Init`` and run through
``deepspeed.initialize``; at the loss of steps 1 and 2 (step 0 records DeepSpeed's trace) it sums, over the
non-persistent parameters DeepSpeed reports AVAILABLE, the storage bytes of ``param.data`` that are not the
partition's own storage (``ds_tensor``), counted once per storage. With one rank that sum is 0 while the
parameters are AVAILABLE; with two it is the gathered bytes.

    DS_ACCELERATOR=cpu python benchmarks/zero3_one_rank.py

What the CPU cannot show: a partition kept on the host (``offload_param``) is copied to the GPU by the same
``.to(device)``, so there a gather does allocate (the doctor keeps its gathered bytes then). No GPU, no network,
no weights: random tensors. Prints one JSON line per world size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero3_toy  # noqa: E402

H, LAYERS = 64, 8


def gathered_storage_bytes(params, available) -> tuple[int, int]:
    """(storage bytes of AVAILABLE, non-persistent parameters that are not their partition's storage, counted once
    per storage; elements of those parameters) over `params`; `available` is DeepSpeed's AVAILABLE status."""
    seen, own, numel = set(), 0, 0
    for p in params:
        if getattr(p, "ds_status", None) != available or p.ds_persist:
            continue
        numel += p.ds_numel
        st = p.data.untyped_storage()
        if st.data_ptr() == p.ds_tensor.untyped_storage().data_ptr() or st.data_ptr() in seen:
            continue
        seen.add(st.data_ptr())
        own += st.nbytes()
    return own, numel


def _run(rank: int, world: int, port: int, out: str) -> None:
    zero3_toy.rank_env(rank, world, port)
    import torch
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    torch.manual_seed(0)
    cfg = zero3_toy.zero3_config(H, 2, 1)
    with deepspeed.zero.Init(config_dict_or_path=cfg):
        model = zero3_toy.toy_net(torch, H, LAYERS)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    rows = []
    for step in range(3):
        seen: list = []

        def at_loss(_module, _inputs, _output):
            seen.append(gathered_storage_bytes(engine.module.parameters(), ZeroParamStatus.AVAILABLE))

        h = engine.module.head.register_forward_hook(at_loss)
        loss = engine(torch.randn(2, 16, H))
        h.remove()
        engine.backward(loss)
        engine.step()
        own, numel = seen[-1]
        rows.append({"step": step, "available_elements_at_loss": numel, "own_storage_bytes_at_loss": own})
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"deepspeed": deepspeed.__version__, "world": world, "steps": rows}, f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=29611)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    for world in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out.json")
            mp.spawn(_run, args=(world, args.port + world, out), nprocs=world, join=True)
            with open(out, encoding="utf-8") as f:
                print(f.read())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
