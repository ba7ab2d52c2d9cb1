"""FSDP/FSDP2 and Megatron per-rank terms against their definitions, computed here independently from the model's
parameter shapes: FSDP2 chunks every parameter on dim 0 over the shard group (torch ``_fsdp_param.py``), FSDP1
pads each unit's FlatParameter to a multiple of it (``_flat_param.py``), accelerate 1.15.0 carves the tail unit
(``utils/fsdp_utils.py:857-885``); Megatron's bytes per parameter are ``18`` or ``6 + 12/DP`` and its activations
Korthikanti et al.'s Table 2 (megatron/training/theoretical_memory_usage.py at d98e8a6)."""

import math

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.activations import activation_terms
from finetune_doctor.analyzers.memory.fsdp import compute_view
from finetune_doctor.analyzers.memory.megatron import stage_layers
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

GIB = float(1 << 30)


def _fsdp_run(model: str, n: int, cfg: dict | None = None, **fsdp):
    base = {"model_name_or_path": model, "finetuning_type": "full", "bf16": True, "per_device_train_batch_size": 1,
            "cutoff_len": 2048, "optim": "adamw_torch_fused"}
    acc = accelerate_config_from_values({"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": n,
                                         "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", **fsdp}},
                                        "acc.yaml")
    arch, _ = load_arch(model)
    return resolve_run({**base, **(cfg or {})}, arch, parse_gpu_spec(f"{n}xA100-80GB"), launch=LaunchInputs(acc))


def _params(arch):
    """Every parameter as (numel, dim-0 rows), from the shapes: linears [out, in], 1-D norms, embeddings [V, h]."""
    out = []
    for i in range(arch.num_layers):
        out += [(lin.params, lin.out_features) for lin in arch.layer_linears(i)]
        other = arch.layer_other_params(i)
        out.append((other, other))   # norms are 1-D: their rows are their elements
    out.append((arch.embedding_params(), arch.vocab_size))
    if arch.lm_head_params():
        out.append((arch.lm_head_params(), arch.vocab_size))
    out.append((arch.final_norm_params(), arch.final_norm_params()))
    return out


def test_fsdp2_full_shards_byte_exact():
    n = 3   # neither the vocabulary (151936) nor the widths divide by 3: padding is exercised
    run = _fsdp_run("Qwen/Qwen3-4B", n, fsdp_version=2, fsdp_reshard_after_forward=True)
    t = compute_terms(run)
    per_rank = sum(math.ceil(rows / n) * (numel / rows) for numel, rows in _params(run.arch))
    # trainable in fp32 (LF's upcast; accelerate's FSDP2 upcast under mixed precision), gradients fp32, AdamW 8 B
    assert t.weights == pytest.approx(4 * per_rank, rel=2e-4)
    assert t.gradients == pytest.approx(4 * per_rank, rel=2e-4) and t.states == pytest.approx(8 * per_rank, rel=2e-4)
    # tied embeddings: the tail unit is [final norm, embed] (accelerate's tail_embed), kept unsharded from its
    # forward to its backward; two decoder layers (running + prefetched) are smaller here
    a = run.arch
    tail = 2 * (a.final_norm_params() + a.embedding_params())
    assert a.tie_word_embeddings and t.live_params == max(tail, 2 * 2 * a.layer_params(0))
    assert t.master == 0 and t.grads_always == 0 and t.buffers == 0


def test_fsdp1_root_unit_and_prefetch():
    run = _fsdp_run("meta-llama/Llama-3.1-8B", 2, fsdp_version=1, fsdp_sharding_strategy="FULL_SHARD",
                    fsdp_backward_prefetch="BACKWARD_PRE")
    a = run.arch
    t = compute_terms(run)
    # FSDP1's root (embed + final norm + lm_head) is never resharded after forward; BACKWARD_PRE prefetches one layer
    root = a.embedding_params() + a.lm_head_params() + a.final_norm_params()
    assert t.live_params == 2 * (root + 2 * a.layer_params(0))
    units = [a.layer_params(i) for i in range(a.num_layers)] + [root]
    assert t.weights == pytest.approx(4 * sum(math.ceil(u / 2) for u in units), rel=1e-9)


def test_no_reshard_keeps_the_model_unsharded():
    a1 = _fsdp_run("Qwen/Qwen3-4B", 4, fsdp_version=1, fsdp_sharding_strategy="SHARD_GRAD_OP")
    a2 = _fsdp_run("Qwen/Qwen3-4B", 4, fsdp_version=2, fsdp_reshard_after_forward=False)
    full = 2 * a1.arch.total_params()
    assert compute_terms(a1).live_params == pytest.approx(full, rel=1e-9)
    assert compute_terms(a2).live_params == pytest.approx(full, rel=1e-9)
    # ZeRO-2-like: states and gradients still sharded
    assert compute_terms(a2).states == pytest.approx(compute_terms(_fsdp_run("Qwen/Qwen3-4B", 4, fsdp_version=2)).states)


def test_no_shard_and_hybrid_groups():
    ns = _fsdp_run("Qwen/Qwen3-4B", 4, fsdp_version=1, fsdp_sharding_strategy="NO_SHARD")
    assert compute_terms(ns).states == pytest.approx(8 * count_params(ns).trainable, rel=1e-9)
    arch, _ = load_arch("Qwen/Qwen3-4B")
    acc = accelerate_config_from_values({"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 16,
                                         "num_machines": 2, "fsdp_config": {"fsdp_sharding_strategy": "HYBRID_SHARD",
                                                                            "fsdp_auto_wrap_policy":
                                                                                "TRANSFORMER_BASED_WRAP"}}, "a")
    hy = resolve_run({"model_name_or_path": "Qwen/Qwen3-4B", "finetuning_type": "full", "bf16": True}, arch,
                     parse_gpu_spec("8xA100-80GB"), launch=LaunchInputs(acc))
    full8 = _fsdp_run("Qwen/Qwen3-4B", 8, fsdp_version=1, fsdp_sharding_strategy="FULL_SHARD")
    # HYBRID_SHARD shards within a node (8 ranks) and replicates across the 2 nodes
    assert hy.world_size == 16 and compute_terms(hy).states == pytest.approx(compute_terms(full8).states, rel=1e-6)


def test_offload_moves_shards_to_host():
    on = _fsdp_run("meta-llama/Llama-3.1-8B", 2, fsdp_version=1, fsdp_offload_params=True)
    off = _fsdp_run("meta-llama/Llama-3.1-8B", 2, fsdp_version=1)
    t_on, t_off = compute_terms(on), compute_terms(off)
    assert t_on.weights == t_on.gradients == t_on.states == 0 and t_on.live_params == t_off.live_params
    # the host pins each rank's shards, fp32 gradients and Adam states (16 B per trainable element / 2), per node
    shard = t_off.weights + t_off.gradients + t_off.states
    assert t_on.host - t_off.host == pytest.approx(2 * shard - max(0.0, t_off.host - 3 * GIB * 2), rel=1e-6)


def test_host_at_load_without_rank0_loading():
    eff = _fsdp_run("meta-llama/Llama-3.1-8B", 8, fsdp_version=2, fsdp_cpu_ram_efficient_loading=True)
    every = _fsdp_run("meta-llama/Llama-3.1-8B", 8, fsdp_version=2, fsdp_cpu_ram_efficient_loading=False)
    model = 2.0 * eff.arch.total_params()   # bf16 checkpoint in CPU memory
    assert compute_terms(every).host - compute_terms(eff).host == pytest.approx(7 * model, rel=1e-9)


def test_fsdp_activations_are_the_half_precision_models():
    run = _fsdp_run("Qwen/Qwen3-4B", 2, fsdp_version=2)
    t = compute_terms(run)
    view = compute_view(run)
    assert view.trainable_dtype == "bfloat16" and view.autocast == "bfloat16"
    assert t.activations == activation_terms(view, count_params(run), run.tokens_per_micro_batch).saved
    assert t.autocast_cache == 0   # FSDP casts the parameters; autocast keeps no weight copies


def test_fsdp_qlora_packs_4bit_weights_in_the_compute_dtype():
    q = _fsdp_run("meta-llama/Meta-Llama-3-8B-Instruct", 2,
                  cfg={"finetuning_type": "lora", "lora_target": "all", "quantization_bit": 4}, fsdp_version=1)
    lora = _fsdp_run("meta-llama/Meta-Llama-3-8B-Instruct", 2, cfg={"finetuning_type": "lora", "lora_target": "all"},
                     fsdp_version=1)
    tq, tl = compute_terms(q), compute_terms(lora)
    assert q.fsdp_param_dtype == "bfloat16" and tq.weights < 0.45 * tl.weights
    assert tq.states == pytest.approx(tl.states, rel=1e-9)   # the same fp32 adapters


# ---- Megatron ------------------------------------------------------------------------------------------------

def _mcore(model: str, gpus: int, **keys):
    cfg = {"model_name_or_path": model, "stage": "sft", "finetuning_type": "full", "bf16": True,
           "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "cutoff_len": 4096, **keys}
    arch, _ = load_arch(model)
    return resolve_run(cfg, arch, parse_gpu_spec(f"{gpus}xA100-80GB"))


def _formula_weights_optimizer(run, stage: int) -> float:
    """theoretical_memory_usage.py's weight+optimizer bytes of pipeline rank `stage`, from the shapes."""
    a = run.arch
    tp, pp, ep, etp = run.mcore_tp, run.mcore_pp, run.mcore_ep, run.mcore_etp
    dense = expert = 0.0
    for i in stage_layers(run, stage):
        for lin in a.layer_linears(i):
            if lin.expert:
                expert += lin.params / (etp * ep)
            else:
                dense += lin.params / tp
        dense += a.layer_other_params(i)
    if stage == 0:
        dense += a.embedding_params() / tp
    if stage == pp - 1:
        dense += a.final_norm_params() + (a.embedding_params() / tp if (not a.tie_word_embeddings or pp > 1) else 0)

    def per(dp):
        return 6 + 12 / dp if run.mcore_distributed_optimizer else 18

    return dense * per(run.mcore_dp * run.mcore_cp) + expert * per(run.mcore_expert_dp)


@pytest.mark.parametrize("keys", [
    {"pipeline_model_parallel_size": 4, "expert_model_parallel_size": 2, "use_distributed_optimizer": True,
     "recompute_granularity": "full"},
    {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 4, "use_distributed_optimizer": False},
])
def test_megatron_weights_and_optimizer_follow_the_formula(keys):
    run = _mcore("Qwen/Qwen3-30B-A3B", 8, **keys)
    t = compute_terms(run)
    got = t.weights + t.grads_always + t.master + t.states
    want = max(_formula_weights_optimizer(run, s) for s in {0, run.mcore_pp - 1})
    assert got == pytest.approx(want, rel=0.02)   # the busier stage's activations may pick the other stage


def test_megatron_activations_selective_sp_follow_table2():
    run = _mcore("Qwen/Qwen3-8B", 8, tensor_model_parallel_size=4, sequence_parallel=True,
                 pipeline_model_parallel_size=2, recompute_granularity="selective")
    a = run.arch
    t = compute_terms(run)
    s, b, h, ffn = 4096, 1, a.hidden_size, a.intermediate_size
    per_layer = s * b * h * (18 + 4 * 1.5 * ffn / h) / 4      # SwiGLU: the formula's gated multiplier
    in_flight = min(2, 8)
    stage0 = per_layer * len(stage_layers(run, 0)) * in_flight + (8 * s * b + s * b * h) * in_flight
    stage1 = per_layer * len(stage_layers(run, 1)) + 4 * s * b * h / 4
    assert t.activations in (pytest.approx(stage0, rel=1e-9), pytest.approx(stage1, rel=1e-9))


def test_megatron_full_recompute_keeps_layer_inputs():
    run = _mcore("Qwen/Qwen3-8B", 8, tensor_model_parallel_size=2, sequence_parallel=True,
                 recompute_granularity="full")
    t = compute_terms(run)
    s, h = 4096, run.arch.hidden_size
    # with SP the formula's SP branch applies (no 5 % allowance); the last stage adds the final norm's output
    kept = 2 * s * h / 2 * run.arch.num_layers + (8 * s + s * h) + 4 * s * h / 2
    assert t.activations == pytest.approx(kept, rel=1e-9)
    assert t.recompute > 0 and t.logits > 0   # PP = 1: the one stage computes the logits too


def test_megatron_busiest_stage_and_lf_example():
    run = _mcore("Qwen/Qwen3-30B-A3B-Instruct-2507", 8, pipeline_model_parallel_size=4, expert_model_parallel_size=2,
                 use_distributed_optimizer=True, recompute_granularity="full", overlap_param_gather=True,
                 overlap_grad_reduce=True)
    est = estimate(run, parse_gpu_spec("8xA100-80GB"))
    # LLaMA-Factory's example says "GPU memory: 8 * 78GB" for this layout (examples/megatron/qwen3_moe_full.yaml)
    assert 0.9 * 78 < est.total < 1.1 * 78
