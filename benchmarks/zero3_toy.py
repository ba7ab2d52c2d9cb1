"""The toy ZeRO-3 stack the CPU diagnostics of issue 23 share (benchmarks/zero3_ga_peak.py, zero3_saved_weights.py):
the rank's environment for a 2-process gloo group, a stack of trainable decoder-like MLP layers, and a ZeRO-3 config
whose bucket and reuse limits are DeepSpeed's defaults scaled to the stack.

Used by zero3_frozen_gather.py too (its own adapter-carrying stack, this config and environment).
Every function takes `torch` (imported by the caller inside its child process, after the environment is set) so
that importing this module imports nothing heavy.
"""

from __future__ import annotations

import os
from typing import Any


def rank_env(rank: int, world: int, port: int, **extra: str) -> None:
    """Set the variables torch.distributed's env:// rendezvous and DeepSpeed's CPU accelerator read for `rank`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), DS_ACCELERATOR="cpu", **extra)


def toy_net(torch: Any, h: int, layers: int, ckpt: bool = False) -> Any:
    """A new model: a linear embedding (h x h), `layers` residual MLP blocks (h -> 4h -> h, no bias: 8·h² elements
    each) and a linear head whose squared mean is the loss; `ckpt` wraps each block in torch's reentrant
    activation checkpointing, as transformers' gradient_checkpointing_enable does by default."""
    from torch.utils.checkpoint import checkpoint

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(h, 4 * h, bias=False)
            self.down = torch.nn.Linear(4 * h, h, bias=False)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Linear(h, h, bias=False)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))
            self.head = torch.nn.Linear(h, h, bias=False)

        def forward(self, x):
            x = self.emb(x)
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=True) if ckpt else layer(x)
            return self.head(x).pow(2).mean()

    return Net()


def zero3_config(h: int, micro_batch: int, grad_accum: int, **zero: Any) -> dict[str, Any]:
    """A DeepSpeed config for the toy stack: ZeRO-3 with the persistence threshold at 0 (every weight partitioned),
    DeepSpeed's 1e9-element reuse distance and live-parameter limits and its prefetch/reduce buckets scaled as a 7B
    Llama sees them (1e9 elements ~ 5 decoder layers of 202 M, so 4.3 layers; the prefetch bucket 5e7·0.94 ~ 0.06
    layer; the reduce bucket ~ one layer), torch's Adam; `zero` adds or overrides zero_optimization keys."""
    layer_el = 2 * 4 * h * h
    zo = {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": int(4.3 * layer_el),
          "stage3_max_live_parameters": int(4.3 * layer_el), "stage3_prefetch_bucket_size": int(0.06 * layer_el),
          "reduce_bucket_size": layer_el, **zero}
    return {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": grad_accum,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_allow_untested_optimizer": True, "zero_optimization": zo}
