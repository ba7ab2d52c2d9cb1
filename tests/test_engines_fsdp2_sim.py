"""The analytic FSDP2 terms (analyzers/memory/fsdp.py) against a fake-mode FSDP2 simulation on CPU.

The simulation is PyTorch's own: a LLaMA built from its config inside ``FakeTensorMode``, sharded with
``fully_shard`` over a fake process group the way accelerate 1.15.0 ``fsdp2_prepare_model`` shards it (each decoder
layer, the embedding, the ``[final norm, lm_head]`` tail with ``reshard_after_forward=False``, the root;
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16)`` as ``set_mixed_precision``
builds it; trainable parameters in fp32), and measured by ``torch.distributed._tools.fsdp2_mem_tracker.
FSDPMemTracker`` over two optimizer steps. The analytic peak (``peak_allocated``, the tensor peak without the
allocator reserve) must agree within 3 %, the sharded parameters and the optimizer states to the byte.
"""

from __future__ import annotations

import pytest

from finetune_doctor.analyzers.memory import estimate
from finetune_doctor.arch import ModelArch
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

pytestmark = pytest.mark.slow

MIB = float(1 << 20)
SHAPE = {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4}


def _simulate(world: int, reshard: bool, vocab: int, checkpointing: bool, batch: int, seq: int) -> dict[str, float]:
    """FSDPMemTracker's peak snapshot (MiB by category, and "Total") of two training steps of rank 0."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from finetune_doctor.probes.build import zero3_setup

    mesh = zero3_setup(world, 0)   # a fake process group and a 1-D mesh, made outside FakeTensorMode
    cfg = transformers.LlamaConfig(**SHAPE, vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    with FakeTensorMode():
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(cfg)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        bf16 = torch.bfloat16
        mp = MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model.model.embed_tokens, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard([model.model.norm, model.lm_head], mesh=mesh, mp_policy=mp, reshard_after_forward=False)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False, fused=False)
        ids = torch.randint(0, vocab, (batch, seq))
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((ids,))
        with tracker:
            for step in range(2):
                loss = model(input_ids=ids, labels=ids).loss   # the Trainer keeps the loss, not the outputs
                loss.backward()
                del loss
                opt.step()
                opt.zero_grad()
                if step == 0:
                    tracker.reset_mod_stats()
        snap = tracker.get_tracker_snapshot("peak")
    dev = next(iter(snap.values()))
    return {str(getattr(k, "value", k)): v / MIB for k, v in dev.items()}


def _analytic(world: int, reshard: bool, vocab: int, checkpointing: bool, batch: int, seq: int):
    arch = ModelArch(name="sim-llama", model_type="llama", hidden_size=SHAPE["hidden_size"],
                     num_layers=SHAPE["num_hidden_layers"], num_heads=SHAPE["num_attention_heads"],
                     num_kv_heads=SHAPE["num_key_value_heads"], intermediate_size=SHAPE["intermediate_size"],
                     vocab_size=vocab, dtype="float32")
    acc = accelerate_config_from_values({"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": world,
                                         "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": reshard,
                                                         "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}, "acc.yaml")
    cfg = {"finetuning_type": "full", "bf16": True, "per_device_train_batch_size": batch, "cutoff_len": seq,
           "optim": "adamw_hf", "flash_attn": "sdpa", "disable_gradient_checkpointing": not checkpointing}
    run = resolve_run(cfg, arch, parse_gpu_spec(f"{world}xA100-80GB"), launch=LaunchInputs(acc))
    assert run.engine == "fsdp" and run.fsdp_version == 2
    return estimate(run)


@pytest.mark.parametrize(("world", "reshard", "vocab", "checkpointing"), [
    (4, True, 16000, True),     # FULL_SHARD, checkpointed layers: the loss dominates
    (2, False, 16000, True),    # reshard_after_forward: false (SHARD_GRAD_OP): every unit stays unsharded
    (8, True, 32000, False),    # no checkpointing: every layer's activations are saved
])
def test_analytic_fsdp2_matches_fake_mode(world, reshard, vocab, checkpointing):
    sim = _simulate(world, reshard, vocab, checkpointing, batch=2, seq=1024)
    est = _analytic(world, reshard, vocab, checkpointing, batch=2, seq=1024)
    terms = est.details["terms_bytes"]
    assert terms["weights"] / MIB == pytest.approx(sim["Sharded Param"], rel=1e-3)
    assert terms["states"] / MIB == pytest.approx(sim["OptState"], rel=1e-3)
    assert est.peak_allocated * 1024 == pytest.approx(sim["Total"], rel=0.03), (est.details["phase_gib"], sim)
