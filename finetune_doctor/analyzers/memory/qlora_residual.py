"""QLoRA's fp32 residual stream: when bitsandbytes' 4-bit (or 8-bit) linears hand an fp32 norm output back in fp32, the MLP's
output and with it every later residual add are fp32, so each checkpointed decoder layer keeps its input at 4 bytes
per element instead of 2, and the MLP's saved activations are fp32 too.

The chain, each step from upstream source:

1. **The norm's output is fp32** in two cases.
   * An RMSNorm that multiplies by its weight *after* re-casting (transformers 5.6.0
     ``models/llama/modeling_llama.py:62-67``: ``hidden_states.to(torch.float32)`` ... ``return self.weight *
     hidden_states.to(input_dtype)``) whose weight is fp32: torch's type promotion makes the product fp32.
     LLaMA-Factory makes the norm weights fp32 with ``upcast_layernorm`` (model/model_utils/checkpointing.py:171-175
     at the oracle snapshot ff6d4d1: every 1-D parameter whose name holds ``norm`` or ``ln``, extras/constants.py:54),
     which its parser recommends for quantized training (hparams/parser.py:563-564). Gemma's RMSNorm instead returns
     ``output.type_as(x)`` (models/gemma/modeling_gemma.py:73-78), the input's dtype, and liger's RMSNorm returns
     its input's dtype (run/savers.py): neither promotes. `RECAST_RMSNORM_TYPES` lists the transformers 5.6.0 model
     types whose RMSNorm ends with that line (``grep -l "return self.weight \\* hidden_states.to(input_dtype)"
     models/*/modeling_*.py``, decoder language models and their VLM wrappers); remote code and other types are not
     assumed to promote.
   * ``torch.nn.LayerNorm`` under CUDA autocast: ``layer_norm`` is one of the ops autocast runs in float32 whatever
     its inputs (torch's autocast op reference, "CUDA Ops that can autocast to float32"), so its output is fp32.
2. **bitsandbytes returns its input's dtype.** ``Linear4bit.forward`` remembers ``inp_dtype = x.dtype``, computes in
   ``compute_dtype`` and returns ``.to(inp_dtype)`` — read in the wheels 0.41.1 ``nn/modules.py:243/:250``, 0.42.0
   :251/:258, 0.43.1 :463/:470, 0.43.3 :472/:479, 0.44.1 :479/:486, 0.45.0 :478/:484, 0.46.0 :490/:496, 0.48.2
   :525/:532, every release LLaMA-Factory accepts (>= 0.39.0). 8-bit alike: ``MatMul8bitLt.forward`` returns its
   output in ``A.dtype`` (0.41.1 ``autograd/_functions.py:405/:408``, 0.43.3 :399/:402, 0.45.0 :373/:376, 0.46.0
   :231, 0.48.2 :227 and ``backends/default/ops.py:64`` for the outlier path) and ``Linear8bitLt.forward`` hands it
   back unchanged (0.48.2 ``nn/modules.py:1062-1076``). A ``torch.nn.Linear`` under autocast returns the
   autocast dtype instead, which is why a LoRA run on a 16-bit model keeps a half-precision residual.
3. **The MLP reads the MLP norm's fp32 output**: gate and up (quantized) return fp32, SiLU and the product stay fp32,
   down_proj returns fp32, and ``residual + hidden_states`` (bf16 + fp32) is fp32 by type promotion. From the
   first layer's MLP on, the stream stays fp32 (each later norm reads fp32, each later MLP adds fp32), so every
   decoder layer but the first receives an fp32 input, and the final norm and lm_head's input are fp32. The
   attention branch does not widen anything saved: SDPA and flash attention run on half-precision casts of q, k,
   v under autocast.

Not counted here: the fp32 q/k/v projection outputs and rotary products of the layer being computed (transients
of one layer; what attention saves is its half-precision cast).
"""

from __future__ import annotations

from finetune_doctor.run import Run

# transformers 5.6.0 model types whose RMSNorm returns ``self.weight * hidden_states.to(input_dtype)`` (module
# docstring, step 1): the decoder LMs and the VLMs built on them among that grep's hits
RECAST_RMSNORM_TYPES = frozenset({
    "apertus", "arcee", "aria", "bamba", "bitnet", "chameleon", "cwm", "deepseek_v2", "deepseek_v3", "diffllama",
    "doge", "dots1", "emu3", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe", "exaone4", "exaone_moe", "falcon_h1",
    "glm", "glm4", "glm4_moe", "glm4_moe_lite", "glm4v", "glm4v_moe", "granite", "granitemoe", "granitemoehybrid",
    "granitemoeshared", "hunyuan_v1_dense", "hunyuan_v1_moe", "idefics2", "idefics3", "internvl", "jamba", "jetmoe",
    "lfm2", "lfm2_moe", "llama", "longcat_flash", "minimax", "minimax_m2", "ministral", "ministral3", "mistral",
    "mistral3", "mixtral", "mllama", "nemotron_h", "olmoe", "phi3", "phi4_multimodal", "pixtral", "qwen2",
    "qwen2_5_omni", "qwen2_5_vl", "qwen2_moe", "qwen2_vl", "qwen3", "qwen3_moe", "qwen3_omni_moe", "qwen3_vl",
    "qwen3_vl_moe", "seed_oss", "smollm3", "solar_open", "youtu", "zamba", "zamba2"})


def bnb_linears(run: Run) -> bool:
    """Whether the decoder's linears are bitsandbytes ``Linear4bit`` / ``Linear8bitLt`` modules in the forward that
    runs: on-the-fly 4- or 8-bit with the bnb method (LF model/model_utils/quantization.py:178-189), not replaced
    by unsloth's kernels."""
    return (run.quantization_bit in (4, 8) and (run.quantization_method or "bnb") in ("bnb", "bitsandbytes")
            and not run.use_unsloth)


def norm_output_fp32(run: Run) -> bool:
    """Whether a decoder layer's norm hands the MLP an fp32 tensor in this run (module docstring, step 1)."""
    a = run.arch
    if run.liger_rms_norm:
        return False
    if a.norm == "layernorm":
        return run.autocast is not None
    return a.norm == "rmsnorm" and run.upcast_layernorm and a.model_type in RECAST_RMSNORM_TYPES


def fp32_residual(run: Run) -> bool:
    """Whether the residual stream is fp32 because bitsandbytes' linears return the norm's fp32 output in fp32
    (module docstring). False for every run without bitsandbytes 4- or 8-bit linears."""
    return bnb_linears(run) and norm_output_fp32(run)
