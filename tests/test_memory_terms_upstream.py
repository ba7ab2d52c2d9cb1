"""The memory terms derived from upstream source (issue 23), each against an independent reference: numbers
computed here by hand from the upstream formula the module cites (stated beside each assert), or the upstream
function itself where the test environment has it (transformers' smart_resize). Tolerances are stated; most are
exact because the terms are byte counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import compute_terms, estimate
from finetune_doctor.analyzers.memory.activations import activation_bytes_per_token_layer
from finetune_doctor.analyzers.memory.ddp import bucket_count, reducer_bucket_bytes
from finetune_doctor.analyzers.memory.hostsave import save_host_bytes
from finetune_doctor.analyzers.memory.npu import hccl_bytes, is_npu
from finetune_doctor.analyzers.memory.qlora import dequant_transient_bytes
from finetune_doctor.analyzers.memory.vision import image_tokens, smart_resize, tower_working_bytes
from finetune_doctor.analyzers.memory.zero3 import (all_layers_gathered_bytes,
                                                    largest_trainable_elements, persistent_elements,
                                                    quantized_load_bytes, recompute_leak,
                                                    reduce_scatter_bytes, zero3_live)
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.reserve import TABLE
from finetune_doctor.dtypes import weight_bytes_per_param
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.deepspeed.dsauto import hf_auto_values
from finetune_doctor.readers.deepspeed.dsconfig import load_ds_config
from finetune_doctor.readers.runlogs.logs import read_text_log
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

MIB = float(1 << 20)
GIB = float(1 << 30)
L3 = "meta-llama/Meta-Llama-3-8B"
# Llama-3-8B shapes (config.json): h 4096, 32 layers, 32 heads, 8 kv heads (1024 wide), I 14336, V 128256
Q, K, V, O = 4096 * 4096, 4096 * 1024, 4096 * 1024, 4096 * 4096
G = U = D = 4096 * 14336
P_LAYER = Q + K + V + O + G + U + D          # 218,103,808 linear elements per layer
HEAD = 128256 * 4096


class _DS:
    """A resolved DeepSpeed config as readers/deepspeed/dsconfig.py hands it to resolve_run."""

    def __init__(self, zo: dict):
        self.resolved = {"zero_optimization": zo}
        self.defaults = {}


def _run(model=L3, gpus="8xA100-80GB", zo: dict | None = None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "full"}
    arch, _ = load_arch(model)
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec(gpus), _DS(zo) if zo else None)


# ---- ZeRO-3 ----------------------------------------------------------------------------------------------------

def test_hf_auto_values_follow_transformers_formula(tmp_path):
    # transformers integrations/deepspeed.py:230-240: hidden², int(0.9·hidden²), 10·hidden
    assert hf_auto_values(4096) == {"reduce_bucket_size": 16777216, "stage3_prefetch_bucket_size": 15099494,
                                    "stage3_param_persistence_threshold": 40960}
    # and the reader that fills the "auto" keys (readers/deepspeed/dsauto.py) lands on the same numbers
    p = tmp_path / "ds_z3.json"
    p.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {
        "stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto"}}))
    ds = load_ds_config(str(p), str(tmp_path / "train.yaml"), 1, {}, 8, 4096)
    zo = ds.resolved["zero_optimization"]
    assert {k: zo[k] for k in hf_auto_values(4096)} == hf_auto_values(4096)


def test_persistent_parameters_are_the_ones_under_the_threshold():
    # threshold 10·4096 = 40960 (HF auto). Per layer: two RMSNorm weights (4096 each); LoRA r8 A = 8 × in and
    # B = 8 × out for q,k,v,o,gate,up,down: A of q,k,v,o,gate,up (8·4096 = 32768 ≤ 40960) and B of q,o,down
    # (32768) and k,v (8·1024 = 8192); not A of down (8·14336) nor B of gate/up (8·14336 = 114688).
    run = _run(finetuning_type="lora", lora_target="all", lora_rank=8,
               zo={"stage": 3, "stage3_param_persistence_threshold": 40960})
    per_layer = 2 * 4096 + 6 * 32768 + 3 * 32768 + 2 * 8192
    assert persistent_elements(run) == 32 * per_layer + 4096      # + the final norm


def test_zero3_live_set_full_finetune_default_config():
    # DeepSpeed defaults: max_reuse_distance 1e9, prefetch bucket 5e7, checkpointing on (LF default).
    run = _run(zo={"stage": 3})
    z = zero3_live(run)
    # at the loss the output layer is gathered (its reuse follows at once); no earlier module is within 1e9
    # elements of its reuse: the last layer's closest, k_proj, is P_LAYER - K + 2·HEAD = 1,264,582,656 away
    assert P_LAYER - K + 2 * HEAD > 1e9
    assert z.at_loss == 2.0 * HEAD
    # in the last layer's checkpointed backward every module is re-run and kept until its own backward
    # (2·suffix <= 2·(P_LAYER - Q) < 1e9), and the prefetch takes whole modules of the next layer in forward order
    # until 5e7 elements are passed: q, k, v, o (41,943,040) then gate (58,720,256) crosses it
    prefetch = Q + K + V + O + G
    assert z.in_backward == 2.0 * (P_LAYER + prefetch)
    assert z.peak == 2.0 * HEAD


def test_zero3_reuse_distance_keeps_the_last_layer_across_the_boundary():
    # with max_reuse_distance 1.5e9 the last layer's modules are all within reach of their reuse
    # (P_LAYER - n + 2·HEAD <= 1,264,582,656 < 1.5e9) and the one before is not (3·P_LAYER more)
    run = _run(zo={"stage": 3, "stage3_max_reuse_distance": 1.5e9})
    z = zero3_live(run)
    assert z.at_loss == 2.0 * (HEAD + P_LAYER)
    prefetch = Q + K + V + O + G
    assert z.in_backward == 2.0 * (P_LAYER + prefetch)     # the kept layer is not counted twice


def test_zero3_holds_the_whole_gradient_of_a_parameter_larger_than_the_bucket():
    # stage3.py:1626 copies a gradient into the IPG buffer only when it fits; with "auto" buckets (4096² =
    # 16,777,216 elements) the output layer's 128256 × 4096 gradient does not and is held whole, in bf16
    full = _run(zo={"stage": 3, "reduce_bucket_size": 16777216})
    c = count_params(full)
    assert largest_trainable_elements(full, c) == HEAD
    assert reduce_scatter_bytes(full, c.trainable, HEAD) == 2.0 * HEAD
    # LoRA r8 on every linear: the largest matrix is 8 × 14336 (gate/up B, down A), inside the bucket, so the
    # bucket's flat copy (reduce_scatter_coalesced's torch.cat, at most the trainable elements) is what is held
    lora = _run(finetuning_type="lora", lora_target="all", lora_rank=8, zo={"stage": 3, "reduce_bucket_size": 16777216})
    cl = count_params(lora)
    assert largest_trainable_elements(lora, cl) == 8 * 14336
    assert reduce_scatter_bytes(lora, cl.trainable, 8 * 14336) == 2.0 * min(16777216, cl.trainable)
    # an embedding trained beside the adapter (additional_target) is the largest tensor again
    emb = _run(finetuning_type="lora", lora_target="all", lora_rank=8, additional_target="embed_tokens",
               zo={"stage": 3})
    assert largest_trainable_elements(emb, count_params(emb)) == HEAD
    # the backward moments carry it: ZeRO-3 full fine-tuning's grads_in_backward is that gradient
    assert compute_terms(full).grads_in_backward == 2.0 * HEAD
    # and nothing outside ZeRO-3
    assert reduce_scatter_bytes(_run(zo={"stage": 2}), c.trainable, HEAD) == 0.0


def test_zero3_offload_optimizer_moves_the_flat_gradient_partition_to_the_host():
    on = compute_terms(_run(zo={"stage": 3, "offload_optimizer": {"device": "cpu"}}))
    off = compute_terms(_run(zo={"stage": 3}))
    n = count_params(_run(zo={"stage": 3})).trainable
    assert off.grads_always == n * 2.0 / 8            # stage3.py:790: partition numel x 2 bytes, on the GPU
    assert on.grads_always == 0.0                      # stage3.py:333: the device is cpu under offload


# ---- QLoRA -----------------------------------------------------------------------------------------------------

def test_qlora_dequantised_weight_is_the_largest_linear_in_the_compute_dtype():
    q = _run(finetuning_type="lora", quantization_bit=4)
    plain = _run(finetuning_type="lora")
    # MatMul4Bit.backward: dequantize_4bit(B).to(grad_output.dtype): gate/up/down, 4096 x 14336, bf16
    assert dequant_transient_bytes(q) == 2.0 * G
    assert dequant_transient_bytes(plain) == 0.0
    assert compute_terms(q).recompute - compute_terms(plain).recompute == pytest.approx(2.0 * G, abs=1.0)


# ---- DDP -------------------------------------------------------------------------------------------------------

def test_ddp_buckets_hold_one_copy_of_the_trainable_gradients_only():
    run = _run(gpus="2xA100-80GB", finetuning_type="lora", lora_target="all", lora_rank=8)
    c = count_params(run)
    # LoRA r8 on all 7 linears of 32 layers: 8·(in+out) each; trainable fp32 (LF upcasts adapters)
    per_layer = 8 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 3)
    assert c.trainable == 32 * per_layer
    assert reducer_bucket_bytes(run, c.trainable) == 4.0 * c.trainable
    assert reducer_bucket_bytes(run, c.trainable, bucket_view=True) == 0.0
    # 1 MiB first bucket, then 25 MiB ones: 4·20,971,520 = 83,886,080 B -> 1 + ceil(82,837,504 / 26,214,400) = 5
    assert bucket_count(run, c.trainable) == 5
    single = _run(gpus="A100-80GB", finetuning_type="lora")
    assert reducer_bucket_bytes(single, c.trainable) == 0.0


# ---- NPU -------------------------------------------------------------------------------------------------------

def test_npu_hccl_buffers_and_allocator_column():
    hw = parse_gpu_spec("8x910B")
    assert is_npu(hw) and not is_npu(parse_gpu_spec("8xA100-80GB"))
    arch, _ = load_arch(L3)
    ddp = resolve_run({"bf16": True, "finetuning_type": "lora", "cutoff_len": 2048}, arch, hw)
    ds = resolve_run({"bf16": True, "finetuning_type": "lora", "cutoff_len": 2048}, arch, hw, _DS({"stage": 2}))
    # CANN: 2 x HCCL_BUFFSIZE (200 MB) per communicator; DeepSpeed clones the world group (groups.py:723-735)
    assert hccl_bytes(ddp) == 1 * 2 * 200 * MIB
    assert hccl_bytes(ds) == 2 * 2 * 200 * MIB
    est = estimate(ddp, hw)
    table = json.loads(TABLE.read_text(encoding="utf-8"))["classes"]
    # llamafactory-cli exports PYTORCH_CUDA_ALLOC_CONF, which torch_npu never reads: the "off" column
    assert est.details["reserve_share"] == table[est.details["reserve_class"]]["off"]["median"]


NPU_LOG = """\
  File "/app/src/llamafactory/train/sft/workflow.py", line 96, in run_sft
RuntimeError: NPU out of memory. Tried to allocate 1.96 GiB (NPU 3; 60.97 GiB total capacity; 12.41 GiB already \
allocated; 12.41 GiB current active; 1.10 GiB free; 58.52 GiB reserved in total by PyTorch) If reserved memory is \
>> allocated memory try setting max_split_size_mb to avoid fragmentation.
torch.OutOfMemoryError: NPU out of memory. Tried to allocate 674.00 MiB
"""


def test_npu_oom_message_is_read_with_its_sizes(tmp_path):
    p = tmp_path / "train.log"
    p.write_text(NPU_LOG)
    ooms = [o for o in read_text_log(str(p)).ooms if o.format == "npu"]
    assert len(ooms) == 2
    a, b = ooms
    assert (a.requested, a.gpu, a.total, a.allocated, a.free, a.reserved) == pytest.approx(
        (1.96 * GIB, 3, 60.97 * GIB, 12.41 * GIB, 1.10 * GIB, 58.52 * GIB))
    assert a.exc == "RuntimeError"
    assert (b.requested, b.gpu, b.total) == (674 * MIB, None, None)


# ---- attention the model runs itself, and the batch shape --------------------------------------------------------

def test_bloom_ignores_flash_attn_and_keeps_fp32_probabilities():
    arch, _ = load_arch("bigscience/bloom-560m")
    fa2 = resolve_run({"bf16": True, "finetuning_type": "lora", "flash_attn": "fa2", "cutoff_len": 1024}, arch,
                      parse_gpu_spec("A100-80GB"))
    assert fa2.attention == "eager" and fa2.attention_saved == "fp32+cast"
    assert any("flash_attn: fa2 does not apply" in n for n in fa2.notes)
    sdpa = fa2.with_(attention="sdpa")
    # modeling_bloom.py:280: fp32 softmax output (4 B) + its bf16 cast (2 B) per score, instead of SDPA's fp32
    # log-sum-exp per head (4 B)
    diff = activation_bytes_per_token_layer(fa2) - activation_bytes_per_token_layer(sdpa)
    assert diff == (4 + 2) * arch.num_heads * 1024 - 4 * arch.num_heads


def test_auto_attention_is_eager_on_llama_before_transformers_4_36():
    # transformers 4.36.0 made SDPA the default and first gave LLaMA/Mistral an SDPA class (#26572, #28005); LF's
    # flash_attn: auto leaves the choice to transformers, so an older transformers keeps the eager kernel
    from finetune_doctor.run.attention import auto_kernel

    llama, _ = load_arch("huggyllama/llama-7b")
    hw = parse_gpu_spec("A100-40GB")
    cfg = {"bf16": True, "finetuning_type": "lora", "cutoff_len": 512, "per_device_train_batch_size": 8}
    old = resolve_run(cfg, llama, hw, stack={"transformers": "4.35.2"})
    new = resolve_run(cfg, llama, hw, stack={"transformers": "4.36.0"})
    unknown = resolve_run(cfg, llama, hw)
    assert (old.attention, new.attention, unknown.attention) == ("eager", "sdpa", "sdpa")
    assert any("eager attention" in n for n in old.notes) and not any("eager attention" in n for n in new.notes)
    # an explicit kernel is kept whatever the transformers
    assert resolve_run({**cfg, "flash_attn": "fa2"}, llama, hw, stack={"transformers": "4.35.2"}).attention == "fa2"
    # eager keeps the fp32 probabilities and their bf16 cast per score (6 B) where SDPA keeps a log-sum-exp per head
    diff = activation_bytes_per_token_layer(old) - activation_bytes_per_token_layer(new)
    assert diff == (4 + 2) * llama.num_heads * 512 - 4 * llama.num_heads
    qwen2, _ = load_arch("Qwen/Qwen2-7B")   # first released in 4.37 with SDPA: no older kernel to fall back to
    assert qwen2.model_type == "qwen2" and auto_kernel(qwen2, (4, 35, 2)) == "sdpa"
    assert auto_kernel(llama, (4, 35, 2)) == "eager" and auto_kernel(llama, None) == "sdpa"
    assert auto_kernel(llama, (4, 36)) == "sdpa"


def test_scores_scale_with_the_batch_shape_not_the_token_count():
    arch, _ = load_arch("baichuan-inc/Baichuan2-13B-Chat")
    hw = parse_gpu_spec("A100-80GB")

    def rec(mb, s):
        r = resolve_run({"bf16": True, "finetuning_type": "lora", "flash_attn": "fa2", "cutoff_len": s,
                         "per_device_train_batch_size": mb}, arch, hw)
        return r, compute_terms(r).recompute
    r1, long_one = rec(1, 8192)
    r4, four = rec(4, 2048)
    assert r1.attention_saved == "half+masked"
    # the checkpointed layer rebuilt in backward keeps 2·e bytes per score: b × heads × s² of them
    scores = lambda b, s: 2 * 2 * arch.num_heads * b * s * s  # noqa: E731
    assert long_one - four == pytest.approx(scores(1, 8192) - scores(4, 2048), rel=0.02)


# ---- vision tower ----------------------------------------------------------------------------------------------

def _upstream_smart_resize():
    """transformers' own smart_resize, taken from its source file (importing the module needs torchvision)."""
    import ast
    import importlib.util
    import math
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("transformers is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "qwen2_vl" / "image_processing_qwen2_vl.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "smart_resize")
    ns: dict = {"math": math}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), ns)
    return ns["smart_resize"]


def test_smart_resize_matches_transformers():
    upstream = _upstream_smart_resize()
    for h, w in ((768, 768), (1080, 1920), (8000, 8000), (30, 4000), (50, 50), (3584, 3584)):
        assert smart_resize(h, w) == tuple(upstream(h, w, 28, 3136, 12845056))


def test_image_tokens_from_image_max_pixels():
    # LF resize: 8000x8000 down to 768x768 (default image_max_pixels); smart_resize: 768 -> 756 (27 x 28);
    # (756/14)² = 2916 patches, / 2² = 729 tokens
    assert image_tokens(8000, 8000) == 729
    # with image_max_pixels = 64e6 the processor's own cap (12,845,056) decides: 3584 x 3584 -> 256² patches
    assert image_tokens(8000, 8000, max_pixels=64_000_000) == (3584 // 14) ** 2 // 4


def test_vision_tower_working_set_by_hand():
    arch, _ = load_arch("Qwen/Qwen2-VL-7B-Instruct")
    n = 2916
    # width 1280, 16 heads (head_dim 80), MLP 5120: attention phase (5·2 + 24)·1280 = 43,520 B per patch beats the
    # MLP's 2·2·1280 + 3·2·5120 = 35,840; + cos/sin 2·4·80; + fp32 pixels 3·2·14²·4
    per_patch = 34 * 1280 + 2 * 4 * 80 + 3 * 2 * 196 * 4
    assert tower_working_bytes(arch.raw, n, n, eager=False) == n * per_patch
    # eager: at the softmax, 7·2·1280 B per patch beside 16 heads × n² scores of bf16 + fp32 copy + fp32 softmax
    tables = 2 * 4 * 80 + 3 * 2 * 196 * 4
    assert tower_working_bytes(arch.raw, n, n, eager=True) == n * (14 * 1280 + tables) + 16 * n * n * 10
    # fp16 on CUDA takes the half_to_float kernel: no fp32 copy, the cast back peaks at 2·2 + 4
    assert tower_working_bytes(arch.raw, n, n, eager=True, fp16=True) == n * (14 * 1280 + tables) + 16 * n * n * 8


@pytest.mark.slow
@pytest.mark.parametrize("impl,tol", [("sdpa", 0.03), ("eager", 0.03)])
def test_vision_tower_working_set_against_a_real_cpu_forward(impl, tol):
    # transformers' own Qwen2-VL vision tower (two blocks of the 7B's shapes, random bf16 weights), one real CPU
    # forward of a 16 x 16-patch image under no_grad, measured by the live-bytes tracker (the analogue of
    # max_memory_allocated): everything beyond weights and inputs against the formula minus its pixel term
    torch = pytest.importorskip("torch")
    vl = pytest.importorskip("transformers.models.qwen2_vl.modeling_qwen2_vl")
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

    from finetune_doctor.probes.tracker import LiveBytesTracker

    arch, _ = load_arch("Qwen/Qwen2-VL-7B-Instruct")
    vc = {k: v for k, v in arch.raw["vision_config"].items() if k != "model_type"}
    cfg = Qwen2VLVisionConfig(**{**vc, "depth": 2})
    cfg._attn_implementation = impl
    torch.manual_seed(0)
    model = vl.Qwen2VisionTransformerPretrainedModel._from_config(cfg, dtype=torch.bfloat16).eval()
    n = 256
    x = torch.randn(n, 3 * 2 * 14 * 14)
    grid = torch.tensor([[1, 16, 16]])
    tr = LiveBytesTracker()
    tr.track(model.parameters(), "weights")
    tr.track(model.buffers(), "buffers")
    tr.track([x, grid], "inputs")
    tr.default_category = "activations"
    with torch.no_grad(), tr:
        model(x, grid_thw=grid)
    measured = tr.peak.by_category["activations"]
    predicted = tower_working_bytes(arch.raw, n, n, eager=impl == "eager") - n * 3 * 2 * 196 * 4
    assert predicted == pytest.approx(measured, rel=tol)


# ---- host RAM at save ------------------------------------------------------------------------------------------

def test_host_at_zero3_save_gathers_the_16bit_model_on_rank0():
    zo = {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"},
          "stage3_gather_16bit_weights_on_model_save": True}
    full = _run(zo=zo)
    c = count_params(full)
    assert save_host_bytes(full, c)[0] == 2.0 * c.total
    lora = _run(zo=zo, finetuning_type="lora")
    cl = count_params(lora)
    assert save_host_bytes(lora, cl)[0] == 2.0 * cl.adapter            # transformers 5.6 trainer.py:3784-3787
    old = lora.with_(stack_sources=(("transformers", "4.44.0", "test"),))
    assert save_host_bytes(old, cl)[0] == 2.0 * cl.total
    no_gather = _run(zo={**zo, "stage3_gather_16bit_weights_on_model_save": False})
    assert save_host_bytes(no_gather, c)[0] == 0.0
    est = estimate(full, parse_gpu_spec("8xA100-80GB"))
    assert est.host == pytest.approx(est.details["host_steady_gib"] + 2.0 * c.total / GIB)


def test_zero3_reduce_scatter_flattens_one_bucket_in_backward():
    # coalesced_collectives.py:122 torch.cat of the bucket's chunks: min(reduce_bucket_size, trainable) x 2 bytes.
    # A full fine-tuning's output layer (128256 x 4096) is larger than that bucket and held whole instead (the
    # assertion moved from 2 x 16777216 when stage3.py:1626/:1642 was read, issue 23; the test above)
    full = compute_terms(_run(zo={"stage": 3, "reduce_bucket_size": 16777216}))
    assert full.grads_in_backward == 2.0 * HEAD
    small = _run(model="Qwen/Qwen2.5-0.5B", zo={"stage": 3, "reduce_bucket_size": 5e8})
    assert largest_trainable_elements(small, count_params(small)) < 5e8      # 151936 x 896 = 136,134,656
    n_small = count_params(small).trainable                                     # 494M: all of it fits one bucket
    assert n_small < 5e8 and compute_terms(small).grads_in_backward == 2.0 * n_small
    lora = _run(finetuning_type="lora", lora_target="q_proj,v_proj", zo={"stage": 3, "reduce_bucket_size": 5e8})
    n = count_params(lora).trainable
    assert n < 5e8 and compute_terms(lora).grads_in_backward == 2.0 * n
    assert compute_terms(_run(zo={"stage": 2})).grads_in_backward == count_params(_run()).trainable * 2.0 / 8


# ---- bitsandbytes < 0.43.2: MatMul4Bit keeps its input (qlora.py) ------------------------------------------------

def _qlora(bnb: str | None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "lora",
            "quantization_bit": 4, "lora_target": "q_proj,v_proj"}
    arch, _ = load_arch(L3)
    stack = (("bitsandbytes", bnb, "env.txt"),) if bnb else ()
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec("A100-80GB"), None, stack_sources=stack)


def _bnb_delta(**cfg) -> tuple[float, float]:
    old, new = compute_terms(_qlora("0.43.1", **cfg)), compute_terms(_qlora("0.48.2", **cfg))
    return old.activations - new.activations, old.recompute - new.recompute


def test_old_bitsandbytes_keeps_the_inputs_lora_does_not_already_keep():
    # Hand computation, Llama-3-8B, T = 1 x 2048 tokens, bf16 (2 bytes), 32 layers. LoRA on q,v keeps the
    # attention norm's output already (lora_A's input); 0.43.1 (ctx.tensors = (A, B), _functions.py:516) adds
    # o_proj's input (32 heads x 128 = 4096), the MLP norm's output (4096) and down_proj's input (I = 14336).
    T, per = 2048, 2 * (4096 + 4096 + 14336)
    saved, rec = _bnb_delta(disable_gradient_checkpointing=True)
    assert saved == pytest.approx(T * 32 * per, rel=1e-12)     # 2.75 GiB: exact, same integer arithmetic
    assert rec == 0.0
    # LF's default reentrant checkpointing: the first forward runs under no_grad, only the recomputed layer keeps them
    saved, rec = _bnb_delta()
    assert (saved, rec) == (0.0, pytest.approx(T * per, rel=1e-12))
    # non-reentrant: the checkpoint's hooks do not see ctx.tensors, so every layer keeps all four inputs
    saved, rec = _bnb_delta(use_reentrant_gc=False)
    assert saved == pytest.approx(T * 32 * 2 * (4096 + 4096 + 4096 + 14336), rel=1e-12)
    assert rec == pytest.approx(T * per, rel=1e-12)
    # adapters on every linear keep every input already (x itself, lora_dropout 0): nothing to add, under autocast
    # (peft's 4-bit layer does not cast then) and with bf16 adapters alike
    assert _bnb_delta(disable_gradient_checkpointing=True, lora_target="all") == (0.0, 0.0)
    assert _bnb_delta(disable_gradient_checkpointing=True, lora_target="all", bf16=False, pure_bf16=True) == (0.0, 0.0)
    # no autocast, fp32 adapters on a bf16 model: lora_A keeps peft's fp32 cast, so every x is MatMul4Bit's alone
    saved, _ = _bnb_delta(disable_gradient_checkpointing=True, lora_target="all", bf16=False)
    assert saved == pytest.approx(T * 32 * 2 * (4096 + 4096 + 4096 + 14336), rel=1e-12)


def test_old_bitsandbytes_input_counts_for_adapted_projections_when_lora_dropout_is_above_zero():
    # lora_dropout > 0: peft's nn.Dropout gives lora_A a new tensor and keeps only its bool mask, so the x that
    # MatMul4Bit (0.43.1, ctx.tensors = (A, B)) keeps is held by nothing else, adapted or not: every distinct input
    # of the layer counts (q/k/v's 4096, o_proj's 4096, gate/up's 4096, down_proj's 14336), Llama-3-8B, T = 2048.
    T, every = 2048, 2 * (4096 + 4096 + 4096 + 14336)
    for target in ("q_proj,v_proj", "all"):
        saved, rec = _bnb_delta(disable_gradient_checkpointing=True, lora_target=target, lora_dropout=0.05)
        assert saved == pytest.approx(T * 32 * every, rel=1e-12), target
        assert rec == 0.0
    # at rate 0 the q/v adapters' lora_A keeps x itself: that input is not counted twice
    saved, _ = _bnb_delta(disable_gradient_checkpointing=True, lora_target="all", lora_dropout=0.0)
    assert saved == 0.0


def test_bitsandbytes_version_boundary_and_the_unknown_version_assumption():
    # PR #1270 first shipped in 0.43.2 (0.43.1 :516 keeps A, 0.43.2 :516 keeps None)
    off = {"disable_gradient_checkpointing": True}
    t = {v: compute_terms(_qlora(v, **off)).activations for v in ("0.42.0", "0.43.1", "0.43.2", "0.44.1")}
    assert t["0.42.0"] == t["0.43.1"] > t["0.43.2"] == t["0.44.1"]
    unknown = estimate(_qlora(None, **off))
    (a,) = [x for x in unknown.details["assumptions"] if x.name == "bitsandbytes-version"]
    assert a.value == "0.48.2" and a.alternatives == ("0.43.1",)
    assert unknown.per_gpu["total"] == pytest.approx(estimate(_qlora("0.48.2", **off)).per_gpu["total"], rel=1e-12)
    for v in ("0.43.1", "0.48.2"):
        assert not [x for x in estimate(_qlora(v, **off)).details["assumptions"] if x.name == "bitsandbytes-version"]


def test_unknown_bitsandbytes_is_weighed_in_the_report_as_the_env_file_would_give_it(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    cfg = tmp_path / "qlora.yaml"
    cfg.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\nstage: sft\ndo_train: true\n"
                   "finetuning_type: lora\nlora_target: q_proj,v_proj\nquantization_bit: 4\n"
                   "dataset: alpaca_en_demo\ntemplate: llama3\ncutoff_len: 2048\nper_device_train_batch_size: 1\n"
                   "bf16: true\ndisable_gradient_checkpointing: true\noutput_dir: saves/x\n")

    def check(*extra: str) -> dict:
        r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "A100-80GB", "--no-data", "--offline",
                                      "--format", "json", *extra])
        assert r.exit_code in (0, 1), r.output
        return json.loads(r.stdout)

    rep = check()
    (a,) = [x for x in rep["assumptions"] if x["name"] == "bitsandbytes-version"]
    envs = {}
    for v in ("0.43.1", "0.48.2"):
        env = tmp_path / f"freeze-{v}.txt"
        env.write_text(f"bitsandbytes=={v}\n")
        envs[v] = check("--env", str(env))
        assert "bitsandbytes-version" not in {x["name"] for x in envs[v]["assumptions"]}
    old = envs["0.43.1"]["memory"]["per_gpu_gib"]["total"]
    # the weighed alternative is the total the pip freeze gives (the report rounds to 0.01 GiB)
    assert a["effect"]["total_gib"]["0.43.1"] == pytest.approx(old, abs=0.011)
    # 2.75 GiB of kept inputs (hand computation above) plus the allocator's reserve on them
    assert old - rep["memory"]["per_gpu_gib"]["total"] > 2.75


def test_final_logit_softcapping_keeps_tanh_output():
    # Gemma-2 (config.json final_logit_softcapping 30.0): logits / 30, tanh, * 30 (modeling_gemma2.py:536-540);
    # tanh's saved output is one more V-wide bf16 tensor per token at the loss and through the loss's backward:
    # 2048 tokens x 256000 x 2 bytes = 1,048,576,000 bytes
    from finetune_doctor.analyzers.memory.logits import final_softcap, logit_terms

    g2 = _run(model="google/gemma-2-2b", gpus="1xA100-80GB", finetuning_type="lora")
    assert final_softcap(g2) == 30.0
    g2_plain = g2.with_(arch=dataclasses.replace(g2.arch, raw={}))        # the same shapes without the cap
    assert final_softcap(g2_plain) is None
    with_cap, without = logit_terms(g2, 2048), logit_terms(g2_plain, 2048)
    assert with_cap.forward - without.forward == 2048 * 256000 * 2.0
    assert with_cap.backward - without.backward == 2048 * 256000 * 2.0
    # Llama-3 has no cap
    assert final_softcap(_run()) is None


# ---- ZeRO-3 + bitsandbytes: the whole quantized model at load ---------------------------------------------------

def test_zero3_bitsandbytes_model_loads_whole_on_every_rank():
    # transformers enters zero.Init only for a model that is not quantized (modeling_utils.py:1525 at 5.6.0) and
    # the bnb quantizer puts the whole model on the rank's device (quantizer_bnb_4bit.py:102-111); DeepSpeed
    # partitions it at initialize. Llama-3-8B: 32 layers of 218,103,808 linear elements in their packed storage,
    # embedding + untied head (2 × 128256 × 4096) and 65 RMSNorm weights of 4096 in bf16
    zo = {"stage": 3}
    q = _run(finetuning_type="lora", lora_target="all", quantization_bit=4, zo=zo)
    c = count_params(q)
    assert c.base == 32 * P_LAYER + 2 * HEAD + 65 * 4096
    wq = q.linear_weight_bytes or weight_bytes_per_param(q.weights_dtype, q.double_quantization)
    assert 0.5 < wq < 0.6                                   # 4 bits plus the blocks' absmax
    whole = 32 * P_LAYER * wq + (2 * HEAD + 65 * 4096) * 2.0
    assert quantized_load_bytes(q, c) == pytest.approx(whole, rel=1e-12)
    t = compute_terms(q)
    assert t.load_whole == pytest.approx(whole, rel=1e-12)
    assert t.init_floor == pytest.approx(whole, rel=1e-12)
    # 8 ranks: the partitioned weights are an eighth of it, but the load moment and the reserve see it whole
    assert t.weights < whole / 4
    est = estimate(q, parse_gpu_spec("8xA100-80GB"))
    assert est.details["moments_gib"]["model load"] == pytest.approx(whole / GIB, rel=1e-9)
    assert est.per_gpu["total"] - est.details["runtime_gib"] >= whole / GIB - 1e-9
    assert est.per_gpu["weights"] < whole / GIB / 2         # the step holds partitions and gathered layers only
    # nothing outside ZeRO-3 + bitsandbytes: ZeRO-2 QLoRA loads on its rank anyway (counted in weights), ZeRO-3
    # without quantization loads under zero.Init
    for other in (_run(finetuning_type="lora", quantization_bit=4, zo={"stage": 2}),
                  _run(finetuning_type="lora", zo=zo)):
        assert quantized_load_bytes(other, count_params(other)) == 0.0
        assert compute_terms(other).load_whole == 0.0


def test_zero3_qlora_70b_does_not_load_on_24gb_cards():
    # Llama-2-70B in NF4 is ~35 GiB whole: eight 24 GB cards hold its partitions, but not the load on each rank
    q = _run(model="meta-llama/Llama-2-70b-hf", gpus="8xRTX-4090", finetuning_type="lora", quantization_bit=4,
             zo={"stage": 3})
    est = estimate(q, parse_gpu_spec("8xRTX-4090"))
    assert est.details["moments_gib"]["model load"] > 30.0
    assert est.details["first_oom"] == "model load"
    assert est.fits is False


# ---- ZeRO-3: DeepSpeed 0.16.0-0.16.7 and non-reentrant checkpointing ---------------------------------------------

def _z3_lora(ds: str | None, **cfg):
    base = {"bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048, "finetuning_type": "lora",
            "lora_target": "all", "use_reentrant_gc": False}
    arch, _ = load_arch(L3)
    stack = (("deepspeed", ds, "env.txt"),) if ds else ()
    return resolve_run({**base, **cfg}, arch, parse_gpu_spec("8xA100-80GB"), _DS({"stage": 3}), stack_sources=stack)


def test_deepspeed_016_keeps_every_checkpointed_layer_gathered_without_reentrant_checkpointing():
    # #6726 (v0.16.0) kept ds_grads_remaining across the forward and the recompute; #7258 (v0.16.8) rolled it back.
    # Every decoder layer's linears gathered in bf16: 32 x 218,103,808 elements (+ the LoRA matrices above the
    # "auto"-less default persistence threshold of 1e5: r8 x 14336 = 114,688 on gate/up/down)
    leak, fixed, before = _z3_lora("0.16.4"), _z3_lora("0.16.8"), _z3_lora("0.15.4")
    assert recompute_leak(leak) and not recompute_leak(fixed) and not recompute_leak(before)
    assert not recompute_leak(_z3_lora("0.16.4", use_reentrant_gc=True))     # reentrant: first forward has no grad
    assert not recompute_leak(_z3_lora("0.16.4", disable_gradient_checkpointing=True))
    lora_big = 3 * 8 * 14336 * 32                  # lora_A of down, lora_B of gate and up: above 1e5 elements
    assert all_layers_gathered_bytes(leak) == pytest.approx(2.0 * (32 * P_LAYER + lora_big), rel=1e-12)
    c = count_params(leak)
    gap = compute_terms(leak).live_params - compute_terms(fixed).live_params
    assert gap == pytest.approx(all_layers_gathered_bytes(leak) - zero3_live(fixed, c).peak, rel=1e-12)
    assert gap > 10 * GIB                          # most of a bf16 8B model, on each of the 8 ranks


def test_unnamed_deepspeed_is_weighed_as_the_leaking_release(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from finetune_doctor.analyzers.memory.zero3 import RECOMPUTE_LEAK_RELEASE
    from finetune_doctor.cli import main
    from finetune_doctor.facts.assumestack import FROZEN_HOLD_LABEL, LEAK_RELEASE

    assert LEAK_RELEASE == RECOMPUTE_LEAK_RELEASE
    monkeypatch.setenv("FINETUNE_DOCTOR_NO_NVML", "1")
    ds = Path(__file__).resolve().parents[1] / "fixtures/llamafactory/examples/deepspeed/ds_z3_config.json"
    cfg = tmp_path / "train.yaml"

    def report(**extra) -> dict:
        keys = {"model_name_or_path": L3, "stage": "sft", "do_train": True, "finetuning_type": "lora",
                "lora_target": "all", "deepspeed": str(ds), "dataset": "alpaca_en_demo", "template": "llama3",
                "cutoff_len": 4096, "per_device_train_batch_size": 4, "bf16": True, "output_dir": "out", **extra}
        cfg.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in keys.items()))
        r = CliRunner().invoke(main, ["check", str(cfg), "--gpu", "8xRTX-4090", "--no-data", "--offline",
                                      "--format", "json"])
        assert r.exit_code in (0, 1), r.output
        d = json.loads(r.stdout)
        return d["memory"]["per_gpu_gib"]["total"], {a["name"]: a for a in d["assumptions"]}

    total, seen = report(use_reentrant_gc=False)
    # the leaking release holds the 32 layers gathered on every rank (~12 GiB of bf16 linears) beyond the
    # reuse-distance set the release assumed keeps
    assert seen["deepspeed-version"]["effect"]["total_gib"][RECOMPUTE_LEAK_RELEASE] > total + 8.0
    # reentrant checkpointing (LF's default): an unnamed DeepSpeed holds one layer at a time (LF's deepspeed extra
    # installs <= 0.18.4); the one release weighed is one from 0.19.3 on, which holds every frozen layer gathered at
    # the first layer's backward (zero3.py `frozen_recompute_hold`); at 4 x 4096 tokens the loss (fp32 logits of
    # 16,384 tokens) stays the peak either way, so the total does not move
    total_re, seen_re = report()
    effect = seen_re["deepspeed-version"]["effect"]["total_gib"]
    assert list(effect) == [FROZEN_HOLD_LABEL] and effect[FROZEN_HOLD_LABEL] == total_re
