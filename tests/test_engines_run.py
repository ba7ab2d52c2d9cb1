"""run/engines.py: the engine, its settings and the ranks of a run, against what the launchers, accelerate,
transformers, LLaMA-Factory and Megatron-Core do with the same inputs (each expectation cites the code that
decides it)."""

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.config.accelerate import accelerate_config_from_values, load_accelerate_config, parse_launch
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run
from finetune_doctor.run.engines import LaunchInputs

LF = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "examples"
ENGINES = Path(__file__).resolve().parent.parent / "fixtures" / "engines"
LORA = {"model_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct", "stage": "sft", "finetuning_type": "lora",
        "lora_target": "all", "bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048}


def _yaml(rel: str) -> dict:
    return YAML(typ="safe", pure=True).load((LF / rel).read_text(encoding="utf-8"))


class _DS:
    """A resolved DeepSpeed config as readers/deepspeed/dsconfig.py hands it to resolve_run (only what the run reads)."""

    def __init__(self, stage: int):
        self.resolved, self.defaults = {"zero_optimization": {"stage": stage}}, {}


def _run(cfg: dict, gpu: str = "8xA100-80GB", acc=None, launch=None, ds=None):
    arch, _ = load_arch(cfg["model_name_or_path"])
    return resolve_run(cfg, arch, parse_gpu_spec(gpu), ds, launch=LaunchInputs(acc, launch))


def _acc(name: str):
    return load_accelerate_config(str(LF / "accelerate" / name))


def test_plain_runs_keep_their_engine():
    assert _run(LORA).engine == "ddp" and _run(LORA, "1xA100-80GB").engine == "single"
    assert _run(_yaml("train_lora/qwen3_lora_sft_ds3.yaml"), ds=_DS(3)).engine == "deepspeed"


def test_fsdp1_from_lf_config():
    r = _run(LORA, acc=_acc("fsdp_config.yaml"))
    assert (r.engine, r.fsdp, r.fsdp_version, r.fsdp_sharding, r.fsdp_reshard_after_forward) == (
        "fsdp", True, 1, "FULL_SHARD", True)
    # num_processes: 2 over num_machines: 1 (accelerate utils/launch.py: nproc_per_node = num_processes // machines)
    assert (r.world_size, r.nnodes, r.gpus_per_node, r.launcher) == (2, 1, 2, "accelerate")
    assert r.fsdp_backward_prefetch == "BACKWARD_PRE" and r.fsdp_use_orig_params
    assert r.fsdp_cpu_ram_efficient_loading and r.fsdp_wrap == "TRANSFORMER_BASED_WRAP"


def test_fsdp2_offload_multinode():
    r2 = _run(LORA, acc=_acc("fsdp2_config.yaml"))
    assert (r2.fsdp_version, r2.fsdp_sharding, r2.fsdp_param_dtype) == (2, "FULL_SHARD", "bfloat16")
    assert _run(LORA, acc=_acc("fsdp_config_offload.yaml")).fsdp_offload_params
    m = _run(LORA, acc=_acc("fsdp_config_multiple_nodes.yaml"))
    assert (m.world_size, m.nnodes, m.gpus_per_node) == (16, 2, 8)


def test_fsdp_mixed_precision_source():
    # TrainingArguments.mixed_precision: bf16/fp16 from the YAML win over ACCELERATE_MIXED_PRECISION (the config)
    fp16_cfg = accelerate_config_from_values({"distributed_type": "FSDP", "num_processes": 2, "mixed_precision": "fp16"},
                                             "a.yaml")
    assert _run(LORA, acc=fp16_cfg).fsdp_param_dtype == "bfloat16"
    plain = {k: v for k, v in LORA.items() if k != "bf16"}
    r = _run(plain, acc=fp16_cfg)
    assert (r.fsdp_param_dtype, r.autocast) == ("float16", "float16")
    no = accelerate_config_from_values({"distributed_type": "FSDP", "num_processes": 2, "mixed_precision": "no"}, "a")
    assert _run(plain, acc=no).fsdp_param_dtype is None
    # QLoRA: the plugin's mixed precision becomes the 4-bit storage dtype, which LF sets to the compute dtype
    q = _run({**LORA, "quantization_bit": 4}, acc=fp16_cfg)
    assert q.fsdp_param_dtype == q.compute_dtype == "bfloat16"


def test_launch_flags_override_the_config_file():
    cmd = parse_launch("accelerate launch --config_file c.yaml --num_processes 4 --fsdp_version 2 "
                       "--fsdp_reshard_after_forward false src/train.py cfg.yaml")
    r = _run(LORA, acc=_acc("fsdp_config.yaml"), launch=cmd)
    assert (r.world_size, r.fsdp_version, r.fsdp_sharding, r.fsdp_source) == (4, 2, "SHARD_GRAD_OP", "accelerate launch")


def test_yaml_fsdp_option_uses_transformers_defaults():
    # the YAML's `fsdp` option list, as LLaMA-Factory's extras/fp8/llama3_fp8_fsdp_sft.yaml (ff6d4d1) writes it
    cfg = YAML(typ="safe", pure=True).load((ENGINES / "llama3_full_sft_fsdp_option.yaml").read_text(encoding="utf-8"))
    r = _run(cfg)
    # transformers 5.24 _process_fsdp_args: FSDP2, TRANSFORMER_BASED_WRAP, no rank-0 loading unless asked
    assert (r.engine, r.fsdp_version, r.fsdp_wrap, r.fsdp_cpu_ram_efficient_loading) == (
        "fsdp", 2, "TRANSFORMER_BASED_WRAP", False)
    assert r.world_size == 8 and r.fsdp_source == "YAML fsdp/fsdp_config"
    off = _run({**cfg, "fsdp": "full_shard offload auto_wrap"})
    assert off.fsdp_offload_params


def test_deepspeed_wins_over_fsdp():
    cfg = {**_yaml("train_full/qwen3_full_sft.yaml")}
    r = _run(cfg, acc=_acc("fsdp2_config.yaml"), ds=_DS(3))
    assert r.engine == "deepspeed" and r.fsdp_ignored and not r.fsdp


def test_accelerate_deepspeed_config_without_yaml_key():
    acc = accelerate_config_from_values({"distributed_type": "DEEPSPEED", "num_processes": 2, "mixed_precision": "bf16",
                                         "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "cpu",
                                                              "offload_param_device": "none"}}, "a.yaml")
    r = _run(LORA, acc=acc)
    assert (r.engine, r.deepspeed, r.zero_stage, r.offload_optimizer, r.offload_param) == (
        "deepspeed", True, 3, "cpu", None)


def test_fsdp1_flat_dtype_conflicts():
    acc = _acc("fsdp_config.yaml")
    assert _run(LORA, acc=acc).fsdp_flat_dtype_conflict is None
    assert "norm" in _run({**LORA, "upcast_layernorm": True}, acc=acc).fsdp_flat_dtype_conflict
    frz = {**LORA, "finetuning_type": "freeze", "freeze_trainable_modules": "mlp"}
    assert "freeze_trainable_modules" in _run(frz, acc=acc).fsdp_flat_dtype_conflict
    assert _run({**LORA, "upcast_layernorm": True}, acc=_acc("fsdp2_config.yaml")).fsdp_flat_dtype_conflict is None


@pytest.mark.parametrize(("line", "world", "nodes", "per"), [
    ("torchrun --nnodes 2 --nproc_per_node 8 src/train.py c.yaml", 16, 2, 8),
    ("NNODES=2 NPROC_PER_NODE=4 llamafactory-cli train c.yaml", 8, 2, 4),
    ("CUDA_VISIBLE_DEVICES=0,1,2 llamafactory-cli train c.yaml", 3, 1, 3),   # default: every visible device
    ("deepspeed --include localhost:4,5,6,7 src/train.py c.yaml", 4, 1, 4),
    ("deepspeed --num_nodes 2 --num_gpus 8 src/train.py c.yaml", 16, 2, 8),
    ("python src/train.py c.yaml", 1, 1, 1),
])
def test_world_from_launch_lines(line, world, nodes, per):
    r = _run(LORA, launch=parse_launch(line))
    assert (r.world_size, r.nnodes, r.gpus_per_node) == (world, nodes, per)


def test_ray_workers():
    cfg = _yaml("train_lora/qwen3_lora_sft_ray.yaml")
    r = _run(cfg, gpu="8xA100-80GB")
    # one GPU per worker, PACK placement (trainer_utils.py get_placement_group)
    assert (r.launcher, r.world_size, r.gpus_per_node, r.nnodes, r.ray_num_workers) == ("ray", 4, 4, 1, 4)
    big = _run({**cfg, "ray_num_workers": 12}, gpu="8xA100-80GB")
    assert (big.world_size, big.gpus_per_node, big.nnodes) == (12, 8, 2)
    ignored = _run(cfg, launch=parse_launch("llamafactory-cli train c.yaml"))
    assert ignored.launcher == "llamafactory-cli" and ignored.world_size == 8
    assert any("USE_RAY" in n for n in ignored.notes)
    used = _run(cfg, launch=parse_launch("USE_RAY=1 llamafactory-cli train c.yaml"))
    assert used.launcher == "ray" and used.world_size == 4


def test_mcore_adapter_example():
    r = _run(_yaml("megatron/qwen3_moe_full.yaml"))
    assert (r.engine, r.mcore, r.mcore_tp, r.mcore_pp, r.mcore_ep, r.mcore_cp) == ("megatron", "mca", 1, 4, 2, 1)
    # DP = 8 / (TP·PP·CP) = 2; expert DP = 8 / (ETP·EP·PP) = 1 (ETP defaults to TP)
    assert (r.mcore_dp, r.mcore_expert_dp, r.mcore_etp) == (2, 1, 1)
    assert r.mcore_distributed_optimizer and r.mcore_recompute == "full" and r.mcore_error is None
    assert (r.weights_dtype, r.trainable_dtype, r.deepspeed) == ("bfloat16", "bfloat16", False)


def test_megatron_bridge_example_and_defaults():
    r = _run(_yaml("megatron_bridge/llama3_sft.yaml"))
    assert r.mcore == "bridge" and r.finetuning_type == "lora" and r.mcore_distributed_optimizer
    assert r.mcore_dp == 8 and r.mcore_error is None


def test_mca_adapter_adjustments():
    base = {**_yaml("megatron/qwen3_moe_full.yaml"), "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 4}
    # mcore_adapter model_config.py:368-370: TP > 1 with EP > 1 forces sequence parallelism
    assert _run(base).mcore_sp
    lora = _run({**_yaml("megatron/qwen3_moe_full.yaml"), "finetuning_type": "lora"})
    assert lora.finetuning_type == "full" and any("no adapter" in n for n in lora.notes)
    assert _run({**_yaml("megatron/qwen3_moe_full.yaml"), "sequence_parallel": True}).mcore_sp is False  # TP 1


@pytest.mark.parametrize(("change", "gpu", "needle", "key"), [
    ({"tensor_model_parallel_size": 3, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1},
     "6xA100-80GB", "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)",
     "tensor_model_parallel_size"),
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "tensor_model_parallel_size": 7, "pipeline_model_parallel_size": 1,
      "expert_model_parallel_size": 1}, "7xA100-80GB", "num_query_groups (4) must be a multiple or divisor",
     "tensor_model_parallel_size"),
    ({"pipeline_model_parallel_size": 5, "expert_model_parallel_size": 1}, "5xA100-80GB",
     "The number of layers (48) must be a multiple", "pipeline_model_parallel_size"),
    ({"expert_model_parallel_size": 3, "pipeline_model_parallel_size": 1}, "6xA100-80GB",
     "num_moe_experts (128) is not divisible by expert_model_parallel_size (3)", "expert_model_parallel_size"),
    ({"pipeline_model_parallel_size": 4}, "4xA100-80GB", "world_size (4) is not divisible by "
     "expert_tensor_model_pipeline_parallel size (8)", "expert_model_parallel_size"),
    ({"use_distributed_optimizer": False}, "8xA100-80GB", "overlap_param_gather only supported with distributed",
     "overlap_param_gather"),
])
def test_megatron_layout_errors(change, gpu, needle, key):
    r = _run({**_yaml("megatron/qwen3_moe_full.yaml"), **change}, gpu=gpu)
    assert r.mcore_error is not None and needle in r.mcore_error and r.mcore_error_key == key


def test_megatron_model_and_bridge_checks():
    dense = {**_yaml("megatron/qwen3_moe_full.yaml"), "model_name_or_path": "Qwen/Qwen3-8B",
             "expert_model_parallel_size": 2, "pipeline_model_parallel_size": 1}
    assert "num_moe_experts must be non None" in _run(dense).mcore_error
    gemma = {**_yaml("megatron/qwen3_moe_full.yaml"), "model_name_or_path": "google/gemma-2-9b",
             "expert_model_parallel_size": 1, "pipeline_model_parallel_size": 1}
    assert "Model gemma2 is not supported by mcore_adapter" in _run(gemma).mcore_error
    br = {**_yaml("megatron_bridge/llama3_sft.yaml"), "tensor_model_parallel_size": 3}
    assert "must divide `world_size` (8)" in _run(br).mcore_error
    assert "`sequence_parallel` requires" in _run({**_yaml("megatron_bridge/llama3_sft.yaml"),
                                                   "sequence_parallel": True}).mcore_error


def test_run_facts_are_asdict_without_the_architecture():
    """Run.facts() builds its dict field by field (no deep copy of the ModelArch); it must equal what
    dataclasses.asdict gives for every field but `arch`."""
    from dataclasses import asdict

    run = _run(_yaml("train_lora/qwen3_lora_dpo.yaml"), acc=_acc("fsdp_config.yaml"))
    want = asdict(run)
    want.pop("arch")
    got = run.facts()
    for k in ("tokens_per_micro_batch", "quantized", "global_batch"):
        got.pop(k)
    assert got == want and "arch" not in got


@pytest.mark.parametrize("ft, ds, expect", [
    # ZeRO-3 with neither flag: HF writes bf16/fp16 "enabled: false", so zero.Init creates every tensor in fp32
    # (deepspeed partition_parameters.py `_set_dtype`) — frozen weights included
    ("full", _DS(3), ("float32", "float32", "float32")),
    ("lora", _DS(3), ("float32", "float32", "float32")),
    # no DeepSpeed: LF upcasts the trainable params (adapter.py:337-349) and no autocast runs, so a full run is fp32
    ("full", None, ("bfloat16", "float32", "float32")),
    # LoRA: peft casts the input to the adapter's dtype; the bf16 base computes in bf16
    ("lora", None, ("bfloat16", "float32", "bfloat16")),
    # ZeRO-2 does not create the model: the full run upcast by LF computes in fp32
    ("full", _DS(2), ("bfloat16", "float32", "float32")),
])
def test_neither_bf16_nor_fp16_is_fp32_where_upstream_makes_it_so(ft, ds, expect):
    cfg = {**LORA, "model_name_or_path": "Qwen/Qwen2.5-7B", "finetuning_type": ft, "bf16": None}
    run = _run(cfg, ds=ds)
    assert (run.weights_dtype, run.trainable_dtype, run.compute_dtype) == expect
    assert run.autocast is None
