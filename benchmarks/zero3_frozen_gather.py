"""How many parameter elements DeepSpeed ZeRO-3 keeps gathered on a rank during backward, for frozen (LoRA-style)
and trainable (full fine-tuning) decoder layers under activation checkpointing, on CPU (gloo, 2 processes).

A diagnostic for issue 23's ZeRO-3 LoRA rows (benchmarks/results/memory_issue23_dev.md, session 11): they read near
the unpartitioned run, which would follow if frozen parameters re-gathered by a checkpoint's recompute were not
released. DeepSpeed's own regression test for its fix (a31eb3165, first in v0.19.3) says the bug "left frozen
params gathered after backward". This runs a small stack of layers (frozen or trainable base linears, a trainable
low-rank adapter beside each frozen one, torch.utils.checkpoint per layer) through ``deepspeed.initialize`` with the
DeepSpeed found first on sys.path, and reports, at every layer boundary of the backward and after it, the elements
of non-persistent parameters whose ``ds_status`` is AVAILABLE (gathered). The reuse distance, live-parameter limit
and prefetch bucket are scaled to the model as a 7B Llama sees DeepSpeed's defaults (1e9 elements ~ 4.3 layers of
233 M; "auto" prefetch 0.9·h² ~ 6 % of a layer).

    DS_ACCELERATOR=cpu PYTHONPATH=/path/to/deepspeed-src python benchmarks/zero3_frozen_gather.py --reentrant 1

An older DeepSpeed runs from its source tree: ``git archive v0.16.4 deepspeed accelerator op_builder | tar -x``, then
copy ``accelerator`` to ``deepspeed/accelerator`` and ``op_builder`` to ``deepspeed/ops/op_builder`` (what its
setup.py does), and make ``deepspeed/comm/torch.py`` ``build_shm_op`` return None (the CPU accelerator would
JIT-build a shared-memory collective from csrc/; gloo does the collectives without it). The installed DeepSpeed
(0.19.8) needs only DS_ACCELERATOR=cpu. Its version string reads 0.0.0 from a source tree.

No GPU, no network, no model weights: random tensors only. Prints one JSON line per configuration (frozen base,
then trainable base); elements counted are parameter elements of this rank's gathered (AVAILABLE) parameters.
Results: benchmarks/results/memory_issue23_dev.md, session 11.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero3_toy  # noqa: E402

H, LAYERS, RANK = 64, 8, 4


def _run(rank: int, world: int, port: int, frozen: bool, reentrant: bool, out: str) -> None:
    zero3_toy.rank_env(rank, world, port)
    import torch
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(H, 4 * H, bias=False)
            self.down = torch.nn.Linear(4 * H, H, bias=False)
            self.a = torch.nn.Linear(H, RANK, bias=False)       # adapter beside `up`
            self.b = torch.nn.Linear(RANK, 4 * H, bias=False)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x) + self.b(self.a(x))))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Linear(H, H, bias=False)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
            self.head = torch.nn.Linear(H, H, bias=False)

        def forward(self, x):
            x = self.emb(x)
            if frozen:                       # as transformers' enable_input_require_grads does for a frozen embedding
                x.requires_grad_(True)
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=reentrant)
                x = _Probe.apply(x)
            return self.head(x).pow(2).mean()

    layer_el = 2 * 4 * H * H
    # the shared scaled config (zero3_toy.py); this stack's layer is the same 8·H² elements plus the adapters
    cfg = zero3_toy.zero3_config(H, micro_batch=2, grad_accum=1)
    seen: list[int] = []

    def gathered(model) -> int:
        return sum(p.ds_numel for p in model.parameters()
                   if getattr(p, "ds_status", None) == ZeroParamStatus.AVAILABLE and not p.ds_persist)

    class _Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            seen.append(gathered(engine.module))
            return g

    model = Net()
    for n, p in model.named_parameters():
        p.requires_grad_(not frozen or n.split(".")[-2] in ("a", "b"))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
                                      config=cfg)
    total = sum(p.ds_numel for p in engine.module.parameters())
    rows = []
    for step in range(3):
        seen.clear()
        loss = engine(torch.randn(2, 16, H))
        at_loss = gathered(engine.module)
        engine.backward(loss)
        after = gathered(engine.module)
        engine.step()
        rows.append({"step": step, "at_loss": at_loss, "max_in_backward": max(seen or [0]), "after_backward": after,
                     "after_step": gathered(engine.module)})
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"deepspeed": deepspeed.__version__, "frozen": frozen, "reentrant": reentrant,
                       "model_elements": total, "layer_elements": layer_el, "steps": rows}, f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reentrant", type=int, default=1)
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--frozen-only", action="store_true", help="skip the trainable-base run")
    args = ap.parse_args(argv)
    import tempfile

    import torch.multiprocessing as mp

    for frozen in (True,) if args.frozen_only else (True, False):
        out = os.path.join(tempfile.mkdtemp(), "r.json")
        mp.spawn(_run, args=(2, args.port + (0 if frozen else 1), frozen, bool(args.reentrant), out), nprocs=2)
        with open(out, encoding="utf-8") as f:
            print(json.dumps(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
