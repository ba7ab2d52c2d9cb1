"""Whether DeepSpeed ZeRO-3 holds more on a rank when gradient accumulation is 2 than when it is 1, at the same micro
batch, on CPU (gloo, 2 processes): the test of the chenyaofo gist's pair that issue 23's (a) rows hinge on
(r6m-b-gist-llama7b-z3-ckpt-b8 39.1 GiB at accumulation 1, ...-b8-ga2 63.9 GiB at 2; results
benchmarks/results/memory_z3c_split.md).

A small stack of trainable decoder-like layers (full fine-tuning) runs through ``deepspeed.initialize`` with the
DeepSpeed found first on sys.path, with and without activation checkpointing; after warm-up steps, one whole
optimizer step (``gradient_accumulation_steps`` micro-steps, each forward, backward and ``engine.step()``) runs under
a dispatch mode that counts every storage created until it is freed (`_meter`), giving the peak of bytes
allocated above what was live when the step began (the partitions, the fp32 master and Adam's states are
live in both). CPU tensors only: no caching allocator, so this is the tensor side (``max_memory_allocated``), and
with gloo there are no side streams.

    DS_ACCELERATOR=cpu LOCAL_SIZE=2 python benchmarks/zero3_ga_peak.py

No GPU, no network, no weights: random tensors. Prints one JSON line per (checkpointing, accumulation).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero3_toy  # noqa: E402

H, LAYERS, MB, SEQ = 128, 8, 2, 1024


def _meter():
    """A torch dispatch mode that counts the bytes of every storage an operator creates while the mode is on, from
    its creation until the storage is freed (``weakref.finalize`` on the storage, whose Python object torch keeps
    alive as long as the storage lives), and the peak of that count. Outputs that share storage with an input (views,
    in-place operators) are not new memory and are skipped, so what was live before the mode is not counted."""
    import weakref

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Meter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = self.peak = 0
            self.seen: set[int] = set()

        def _gone(self, key: int, n: int) -> None:
            self.live -= n
            self.seen.discard(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                      if isinstance(t, torch.Tensor)}
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor):
                    continue
                st = t.untyped_storage()
                key, n = id(st), st.nbytes()
                if n == 0 or key in self.seen or st.data_ptr() in inputs:
                    continue
                self.seen.add(key)
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(st, self._gone, key, n)
            return out

    return Meter()


def _run(rank: int, world: int, port: int, ckpt: bool, ga: int, out: str) -> None:
    zero3_toy.rank_env(rank, world, port, LOCAL_SIZE=str(world))
    import torch
    import deepspeed

    torch.manual_seed(0)
    layer_el = 2 * 4 * H * H
    cfg = zero3_toy.zero3_config(H, MB, ga, overlap_comm=True, contiguous_gradients=True)
    with deepspeed.zero.Init(config_dict_or_path=cfg):
        model = zero3_toy.toy_net(torch, H, LAYERS, ckpt)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    def one_step() -> None:
        for _ in range(ga):
            x = torch.randn(MB, SEQ, H, requires_grad=True)
            loss = engine(x)
            engine.backward(loss)
            engine.step()

    for _ in range(3):
        one_step()
    meter = _meter()
    with meter:
        one_step()
    peak, end = meter.peak, meter.live
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"deepspeed": deepspeed.__version__, "checkpointing": ckpt, "gradient_accumulation": ga,
                       "peak_bytes_above_start": peak, "end_bytes_above_start": end,
                       "decoder_elements": LAYERS * layer_el, "elements_per_rank": LAYERS * layer_el // world,
                       "micro_batch": [MB, SEQ, H]}, f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=29651)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    k = 0
    for ckpt in (True, False):
        for ga in (1, 2):
            out = os.path.join(tempfile.mkdtemp(), "r.json")
            mp.spawn(_run, args=(2, args.port + k, ckpt, ga, out), nprocs=2)
            k += 1
            with open(out, encoding="utf-8") as f:
                print(json.dumps(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
