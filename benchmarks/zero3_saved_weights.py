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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero3_toy  # noqa: E402

H, LAYERS = 64, 8


def _run(rank: int, world: int, port: int, build: str, out: str) -> None:
    zero3_toy.rank_env(rank, world, port)
    import torch
    import deepspeed
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    torch.manual_seed(0)
    layer_el = 2 * 4 * H * H
    # the reuse distance keeps the last layers across the forward/backward boundary, nothing earlier
    extra = {"memory_efficient_linear": False} if build == "init, memory_efficient_linear false" else {}
    cfg = zero3_toy.zero3_config(H, 2, 1, **extra)
    linear_bk = torch.nn.functional.linear
    if build.startswith("init"):
        with deepspeed.zero.Init(config_dict_or_path=cfg):
            model = zero3_toy.toy_net(torch, H, LAYERS)
    else:
        model = zero3_toy.toy_net(torch, H, LAYERS)
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
