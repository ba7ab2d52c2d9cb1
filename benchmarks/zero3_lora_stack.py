"""Which ZeRO-3 parameters stay gathered through a LoRA step when the model is the real stack (transformers'
Qwen2 built under ``zero.Init`` through ``HfDeepSpeedConfig``, peft LoRA on every linear, transformers'
reentrant gradient checkpointing with ``enable_input_require_grads``), on CPU (gloo, 2 processes): issue 23's
ZeRO-3 LoRA rows read 30-50 % above the model, near the unpartitioned run. benchmarks/zero3_frozen_gather.py
answered this for a hand-made stack of linears; this asks it of the stack LLaMA-Factory and ms-swift run.

Per configuration (``lora``: base frozen, adapters train; ``full``: every parameter trains) it prints one JSON line
with, on rank 0 of step 3 (the coordinator's trace is complete after step 1): the elements of non-persistent
parameters DeepSpeed reports AVAILABLE (gathered) at the loss (the output layer's forward hook), at every decoder
layer's backward boundary (its first module's backward hook), after backward and after the optimizer step, and
the storage bytes those gathered parameters hold. The reuse distance, live-parameter limit and prefetch bucket
are scaled to this model as a 7B Qwen2 sees DeepSpeed's defaults and transformers' "auto" values (1e9 elements
~ 4.3 decoder layers; prefetch 0.9·h²; persistence threshold 10·h; reduce bucket h²).

    DS_ACCELERATOR=cpu python benchmarks/zero3_lora_stack.py [lora|full|lora-nr|lora-drop ...]

Modes: ``lora`` (reentrant checkpointing, lora_dropout 0), ``lora-nr`` (non-reentrant), ``lora-drop``
(lora_dropout 0.05, ms-swift's default), ``full``; ``ZERO3_PROBE_GA=2`` runs two micro-steps per optimizer step.

Installed stack only (here DeepSpeed 0.19.8, transformers 5.6.0, peft 0.18.1, torch 2.13 CPU). No GPU, no network,
no weights: a config built in memory, random initialisation. Results: benchmarks/results/memory_z3_mem16.md.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero3_toy  # noqa: E402

H, INTER, LAYERS, VOCAB, SEQ = 128, 352, 8, 2048, 64
GA = int(os.environ.get("ZERO3_PROBE_GA", "1"))     # gradient accumulation (micro-steps per optimizer step)


def _config(layer_el: int) -> dict:
    zo = {"stage": 3, "stage3_param_persistence_threshold": 10 * H, "stage3_max_reuse_distance": int(4.3 * layer_el),
          "stage3_max_live_parameters": int(4.3 * layer_el), "stage3_prefetch_bucket_size": int(0.9 * H * H),
          "reduce_bucket_size": H * H}
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": GA,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
            "zero_allow_untested_optimizer": True, "zero_optimization": zo}


def _run(rank: int, world: int, port: int, mode: str, out: str) -> None:
    zero3_toy.rank_env(rank, world, port)
    import deepspeed
    import torch
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=H, intermediate_size=INTER, num_hidden_layers=LAYERS, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=VOCAB, tie_word_embeddings=False, max_position_embeddings=256)
    layer_el = 2 * H * H + 2 * H * (H // 2) + 3 * H * INTER
    ds = _config(layer_el)
    keep = HfDeepSpeedConfig(ds)       # held alive, as TrainingArguments holds it: transformers then enters zero.Init
    model = Qwen2ForCausalLM._from_config(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": not mode.endswith("-nr")})
    if mode.startswith("lora"):
        from peft import LoraConfig, get_peft_model
        model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.05 if "drop" in mode else 0.0))
    params = [p for p in model.parameters() if p.requires_grad]
    engine, *_ = deepspeed.initialize(model=model, model_parameters=params, config=ds)
    named = [(n, p) for n, p in engine.module.named_parameters() if hasattr(p, "ds_id")]

    def gathered() -> tuple[int, int, list[str]]:
        el = byts = 0
        names = []
        for n, p in named:
            if p.ds_status == ZeroParamStatus.AVAILABLE and not p.ds_persist:
                el += p.ds_numel
                byts += p.data.numel() * p.data.element_size()
                names.append(n)
        return el, byts, names

    rec: dict = {"mode": mode, "grad_accum": GA, "layer_elements": layer_el, "total_elements": sum(p.ds_numel for _, p in named),
                 "frozen_elements": sum(p.ds_numel for _, p in named if not p.requires_grad),
                 "persistent_elements": sum(p.ds_numel for _, p in named if p.ds_persist)}
    snaps: list = []
    base = engine.module.base_model.model if mode.startswith("lora") else engine.module
    head = base.lm_head
    head = getattr(head, "base_layer", head)
    head.register_forward_hook(lambda *a: snaps.append(("loss",) + gathered()[:2]))
    for i, layer in enumerate(base.model.layers):
        layer.register_full_backward_pre_hook(lambda *a, i=i: snaps.append((f"bwd layer {i}",) + gathered()[:2]))
    at0: list = []
    base.model.layers[0].register_full_backward_pre_hook(lambda *a: at0.append(gathered()[2]))
    x = torch.randint(0, VOCAB, (1, SEQ))
    for step in range(3 * GA):
        snaps.clear()
        loss = engine(input_ids=x, labels=x).loss
        engine.backward(loss)
        snaps.append(("after backward",) + gathered()[:2])
        engine.step()
        snaps.append(("after step",) + gathered()[:2])
    rec["step3"] = snaps
    rec["gathered_at_layer0"] = sorted({n.split(".layers.")[-1].split(".", 1)[-1] for n in at0[-1]})
    rec["layers_gathered_at_layer0"] = sorted({int(n.split(".layers.")[1].split(".")[0]) for n in at0[-1]
                                               if ".layers." in n})
    del keep
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(rec, f)


def main() -> int:
    import torch.multiprocessing as mp

    for k, mode in enumerate(sys.argv[1:] or ("lora", "full")):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            mp.spawn(_run, args=(2, 29611 + k, mode, out), nprocs=2, join=True)
            with open(out, encoding="utf-8") as f:
                print(json.dumps(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
