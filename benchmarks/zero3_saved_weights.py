"""Whether autograd keeps gathered ZeRO-3 weights alive from the forward to the backward when no activation
checkpointing is used, on CPU (gloo, 2 processes): the test of issue 23's one reading that reaches the ZeRO-3
rows without checkpointing (FlagPerf's Llama-2-7B/ChatGLM3-6B cases and the chenyaofo gist, 15-32 % under; results
benchmarks/results/memory_z3c_split.md).

A small stack of decoder-like layers (``torch.nn.Linear`` everywhere, so every matmul goes through
``torch.nn.functional.linear``) is run through ``deepspeed.initialize`` with the DeepSpeed found first on sys.path,
built three ways: inside ``deepspeed.zero.Init`` with ``memory_efficient_linear`` at its default (true: how
transformers builds a model under ZeRO-3, and FlagPerf's run_pretraining.py), inside it with the option false, and
outside zero.Init (converted by ``deepspeed.initialize``). During the forward a ``saved_tensors_hooks`` pair records
every tensor autograd saves; at the loss it sums the storage bytes, counted once per storage, of the saved 2-D
tensors shaped like a decoder weight (or its transpose) whose storage is still allocated. DeepSpeed's release swaps
``param.data`` for an empty tensor, so a saved Parameter shows 0 bytes afterwards while a saved view of the gathered
storage (``weight.t()``, what torch's own linear saves) still shows all of it. ``gathered_at_loss`` is the elements
of non-persistent parameters DeepSpeed itself reports AVAILABLE at the loss (what zero3.py `zero3_live` models).

    DS_ACCELERATOR=cpu python benchmarks/zero3_saved_weights.py

No GPU, no network, no weights: random tensors. Prints one JSON line per build.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

H, LAYERS = 64, 8


def _run(rank: int, world: int, port: int, build: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), DS_ACCELERATOR="cpu")
    import torch
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    torch.manual_seed(0)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(H, 4 * H, bias=False)
            self.down = torch.nn.Linear(4 * H, H, bias=False)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Linear(H, H, bias=False)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
            self.head = torch.nn.Linear(H, H, bias=False)

        def forward(self, x):
            x = self.emb(x)
            for layer in self.layers:
                x = layer(x)
            return self.head(x).pow(2).mean()

    layer_el = 2 * 4 * H * H
    # DeepSpeed's defaults scaled to the stack as a 7B Llama sees them (1e9 elements ~ 5 layers of 202 M): the reuse
    # distance keeps the last layers across the forward/backward boundary, nothing earlier
    zo = {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": int(4.3 * layer_el),
          "stage3_max_live_parameters": int(4.3 * layer_el), "stage3_prefetch_bucket_size": int(0.06 * layer_el),
          "reduce_bucket_size": layer_el}
    if build == "init, memory_efficient_linear false":
        zo["memory_efficient_linear"] = False
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
           "zero_allow_untested_optimizer": True, "zero_optimization": zo}
    linear_bk = torch.nn.functional.linear
    if build.startswith("init"):
        with deepspeed.zero.Init(config_dict_or_path=cfg):
            model = Net()
    else:
        model = Net()
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    shapes = {(4 * H, H), (H, 4 * H)}
    rows = []
    for step in range(3):
        saved: list = []

        def pack(t):
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = engine(torch.randn(2, 16, H))
        seen, kept = set(), 0
        for t in saved:
            if t.dim() == 2 and tuple(t.shape) in shapes:
                st = t.untyped_storage()
                if st.data_ptr() not in seen and st.nbytes() > 0:
                    seen.add(st.data_ptr())
                    kept += st.nbytes()
        gathered = sum(p.ds_numel for p in engine.module.parameters()
                       if getattr(p, "ds_status", None) == ZeroParamStatus.AVAILABLE and not p.ds_persist)
        saved.clear()
        engine.backward(loss)
        engine.step()
        rows.append({"step": step, "saved_weight_bytes_at_loss": kept, "gathered_at_loss": gathered})
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"deepspeed": deepspeed.__version__, "build": build,
                       "linear_wrapped": torch.nn.functional.linear is not linear_bk,
                       "decoder_weight_bytes": LAYERS * layer_el * 4, "layer_elements": layer_el, "steps": rows}, f)


BUILDS = ("init, memory_efficient_linear default", "init, memory_efficient_linear false", "outside zero.Init")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=29631)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    for k, build in enumerate(BUILDS):
        out = os.path.join(tempfile.mkdtemp(), "r.json")
        mp.spawn(_run, args=(2, args.port + k, build, out), nprocs=2)
        with open(out, encoding="utf-8") as f:
            print(json.dumps(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
