"""DeepSpeed ZeRO-3 on the device beyond the partitions: persistent parameters held whole, the parameters the
partitioned-parameter coordinator keeps gathered (the layer being recomputed and differentiated, the modules that
the max-reuse-distance rule keeps across the forward/backward boundary, the prefetch bucket) and, with
``offload_param``, what still reaches the GPU.

Derived from DeepSpeed 0.19.8 (the version docs/ARCHITECTURE.md "Sources" names), read in the installed package:

* persistence: ``runtime/zero/parameter_offload.py:316-330`` (``mark_persistent_parameters``): every parameter with
  ``ds_numel <= param_persistence_threshold`` (default 1e5, ``runtime/zero/config.py:228``) is marked ``ds_persist``
  while the running total stays under ``model_persistence_threshold`` (default ``sys.maxsize``); persistent
  parameters are never partitioned or released (``partitioned_param_coordinator.py:641-643``).
* release: ``partitioned_param_coordinator.py:634-662`` (``__params_to_release``): after a submodule runs, a
  parameter is kept gathered when it occurs again within the next ``max_reuse_distance`` elements of the recorded
  trace (``stage3_max_reuse_distance``, default 1e9, ``config.py:251``). The trace is forward then backward; with
  activation checkpointing each layer's backward first re-runs its forward.
* prefetch: ``partitioned_param_coordinator.py:452-470``: up to ``min(max_live_parameters - available,
  prefetch_bucket_size)`` elements of the next modules of the trace are all-gathered ahead (whole modules: the loop
  tests the running count before it pops the next parameter, so the last module may overshoot the bucket).
* ``"auto"`` values as transformers fills them (5.6.0 ``integrations/deepspeed.py:199-240``): ``reduce_bucket_size
  = hidden²``, ``stage3_prefetch_bucket_size = int(0.9·hidden²)``, ``stage3_param_persistence_threshold =
  10·hidden`` (their one home: readers/deepspeed/dsauto.py `hf_auto_values`, which resolves them for the run).
* the gradient side (IPG bucket of ``reduce_bucket_size`` elements, ``stage3.py:779-783``; the flat gradient
  partition ``grad_partitions_flat_buffer``, ``stage3.py:786-795``, pinned on the host when the optimizer is
  offloaded with pin_memory) stays in buffers.py and weights.py; what the reduction holds beside the bucket during
  backward (a bucket's flat copy, or the whole gradient of a tensor larger than the bucket, stage3.py:1626/:1642)
  is `reduce_scatter_bytes` here.
* a bitsandbytes model is loaded whole on every rank (`quantized_load_bytes`): transformers builds it outside
  ``zero.Init`` and puts it on the rank's device; DeepSpeed partitions it only at ``deepspeed.initialize``.
* DeepSpeed 0.16.0-0.16.7 with non-reentrant activation checkpointing keeps every checkpointed layer gathered
  through backward (`recompute_leak`); DeepSpeed 0.19.3 and later with reentrant checkpointing keeps every frozen
  base layer (LoRA, OFT) gathered until backward ends (`frozen_recompute_hold`).
* a model built outside zero.Init (accelerate before 1.0.0 with ``zero3_init_flag: false``) is whole on every rank
  until ``deepspeed.initialize`` (`unpartitioned_load_bytes`).

Pure Python: element counts from `ModelArch`, bytes from the stored dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.analyzers.memory.params import ParamCounts, _canonical, _targets
from finetune_doctor.dtypes import dtype_bytes, weight_bytes_per_param
from finetune_doctor.run import Run
from finetune_doctor.run.stack import frozen_hold_shape, named_deepspeed, named_release_holds, parse_version

# runtime/zero/config.py defaults (DeepSpeed 0.19.8)
DEFAULTS = {"stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
            "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5,
            "reduce_bucket_size": 5e8}


def ds_model_bytes(run: Run) -> float:
    """Bytes per element of DeepSpeed's model dtype, the dtype of the buffers ZeRO calls half precision: the
    gathered parameters, the IPG and reduce-scatter buckets and ZeRO-3's flat gradient partition. 2 with fp16 or
    bf16 enabled, else 4: the engine casts the module to half only when one is enabled (engine.py
    ``_configure_distributed_model``), ``get_data_types`` returns float32 as the model dtype otherwise and the
    gradient-accumulation dtype follows it (v0.14.2 engine.py:891-906, 0.19.8 :1799-1810; ``data_types.
    grad_accum_dtype`` not read), ZeRO-3 allocates ``grad_partitions_flat_buffer`` in that dtype (v0.14.2
    stage3.py:498-500, 0.19.8 :791-793) and its IPG buffer in the parameters' dtype (``self.dtype``, 0.19.8
    stage3.py:238; v0.14.2 :490-492); ZeRO-1/2 keep their buckets in the parameters' dtype too
    (stage_1_and_2.py:394). LLaMA-Factory's DeepSpeed "auto" precision follows its bf16/fp16 flags, so the
    run's compute dtype says which."""
    return 4.0 if run.compute_dtype == "float32" else 2.0


def setting(run: Run, key: str) -> float:
    """The ZeRO-3 value of `key` the run uses: the resolved config's, else DeepSpeed's default."""
    return float(run.ds_buckets.get(key, DEFAULTS[key]))


@dataclass(frozen=True)
class Zero3Live:
    """Bytes of one rank, ZeRO-3 only.

    `persistent` parameters below the threshold, whole on every rank (already counted once as a 1/N partition
    in `weights`: this is the other (N-1)/N); `at_loss` gathered at the end of the forward (the output layer and
    the modules kept for their reuse in backward); `in_backward` gathered while the last layer's backward runs
    (that layer whole where reuse keeps it, what the boundary kept of earlier layers, and the prefetch of the next
    layer); `peak` the larger of the two.
    """

    persistent: float
    at_loss: float
    in_backward: float

    @property
    def peak(self) -> float:
        return max(self.at_loss, self.in_backward)


def _modules(run: Run, layer: int) -> list[tuple[float, float]]:
    """(elements as the trace counts them, bytes when gathered) of each leaf module of decoder layer `layer` in
    forward order, persistent parameters excluded. A LoRA-wrapped linear is its base plus lora_A and lora_B (each
    a module of its own with parameters, all visited together); a quantized base counts its packed storage."""
    a = run.arch
    thr = setting(run, "stage3_param_persistence_threshold")
    names, _ = _targets(a, run.lora_target) if run.finetuning_type == "lora" else (set(), False)
    wq = _stored_bytes(run)
    out = []
    for lin in a.layer_linears(layer):
        per = lin.in_features * lin.out_features
        n = per * lin.count
        byts = n * wq
        if _canonical(lin.name) in names and lin.targetable:
            for m in (run.lora_rank * lin.in_features, run.lora_rank * lin.out_features):
                if m > thr:              # lora_A/B above the threshold are partitioned like the base
                    n += m * lin.count
                    byts += m * lin.count * ds_model_bytes(run)
        out.append((byts / 2.0 if run.quantized else float(n), byts))
    return out


def _stored_bytes(run: Run) -> float:
    """Bytes per gathered decoder-linear element: the engine casts every parameter to the half dtype
    (DeepSpeed engine ``_configure_distributed_model``), or leaves fp32 without fp16/bf16 (`ds_model_bytes`);
    quantized weights keep their packed storage."""
    if run.quantized:
        return run.linear_weight_bytes or weight_bytes_per_param(run.weights_dtype, run.double_quantization)
    return ds_model_bytes(run)


def persistent_elements(run: Run, counts: ParamCounts | None = None) -> float:
    """Elements of the parameters DeepSpeed keeps whole (``ds_numel <= threshold``): norm weights and biases,
    q/k norms, small LoRA matrices, a MoE router below the threshold."""
    a = run.arch
    thr = setting(run, "stage3_param_persistence_threshold")
    names, _ = _targets(a, run.lora_target) if run.finetuning_type == "lora" else (set(), False)
    total = 0.0
    for kind, n in a.layer_groups():
        per_layer = 0.0
        norm = a.norm_params()
        if norm:
            # a LayerNorm is two tensors (weight, bias) of `hidden` each
            w = a.hidden_size
            parts = 2 if a.norm == "layernorm" else 1
            if w <= thr:
                per_layer += a.layer_norms * parts * w
        for lin in a.kind_linears(kind):
            if lin.bias and lin.out_features <= thr:
                per_layer += lin.out_features * lin.count
            if run.finetuning_type == "lora" and _canonical(lin.name) in names and lin.targetable:
                for m in (run.lora_rank * lin.in_features, run.lora_rank * lin.out_features):
                    if m <= thr:
                        per_layer += m * lin.count
        total += n * per_layer
    if a.final_norm and a.hidden_size <= thr:
        total += a.final_norm_params()
    return total


def gather_allocates(run: Run) -> bool:
    """Whether gathering a ZeRO-3 parameter allocates storage of its own on the device: False on one rank with the
    partitions on the device, where DeepSpeed's "gathered" parameter is a view of its partition.

    Why: ``all_gather_coalesced`` returns ``_no_gather_coalesced`` when the partition world is one rank (0.19.8
    runtime/zero/partition_parameters.py:1559-1560; ``self.num_partitions == 1`` at v0.11.1 :1062-1063, v0.14.2
    :1166-1167, v0.16.4 :1207-1208; ``self.world_size == 1`` at v0.9.0 :846-848), whose ``NoGatherHandle`` sets
    ``param.data = param.ds_tensor.data.to(device).view(ds_shape)`` (0.19.8 :61-76, v0.14.2 :44-56): ``Tensor.to``
    returns the tensor itself when it is already on that device, so nothing is allocated, and a weight autograd
    keeps (`linear_weights_retained`, `recompute_leak`) is that same partition. With ``offload_param`` the
    partition is on the host and ``.to`` copies it to the device: the gather allocates as on several ranks.
    Measured on CPU with benchmarks/zero3_one_rank.py (DeepSpeed 0.19.8, the toy stack built under zero.Init): at
    the loss 102,400 elements are AVAILABLE on one rank with 0 bytes of storage beside the partitions, and on two
    ranks the same elements hold 409,600 bytes (fp32) of gathered storage."""
    return bool(run.offload_param) or max(run.world_size, 1) > 1


def zero3_live(run: Run, counts: ParamCounts | None = None) -> Zero3Live:
    """The ZeRO-3 device terms of `run` (Zero3Live, bytes); all zero outside ZeRO-3 and on one rank whose
    partitions stay on the device (`gather_allocates`).

    Boundary rule (parameter_offload / coordinator lines in the module docstring): module m of layer i is kept
    gathered from its forward to its reuse when the elements the trace visits in between are under
    ``max_reuse_distance`` R. With checkpointing that distance is ``P_i - s_m + 3·Σ_{k>i} P_k + 2·P_head`` (the rest of
    the forward, the head's backward, each later layer re-run and differentiated, then layer i re-run up to m);
    without it ``2·(suffix_i(m) + Σ_{k>i} P_k + P_head)``. Inside a checkpointed layer's backward, module m was
    just re-run and is reused by its own backward after ``2·suffix_i(m)`` elements. The output layer is reused
    right after the loss (nothing with parameters runs in between) and is gathered at the loss moment.
    """
    if not (run.deepspeed and run.zero_stage == 3):
        return Zero3Live(0.0, 0.0, 0.0)
    a = run.arch
    N = max(run.world_size, 1)
    if not gather_allocates(run):
        # one rank, partitions on the device: a gathered parameter is its partition (`gather_allocates`), and a
        # persistent one is already whole in `weights`
        return Zero3Live(0.0, 0.0, 0.0)
    R = setting(run, "stage3_max_reuse_distance")
    prefetch = min(setting(run, "stage3_prefetch_bucket_size"), setting(run, "stage3_max_live_parameters"))
    persistent = persistent_elements(run) * ds_model_bytes(run) * (1.0 - 1.0 / N)
    head_el = float(a.vocab_size * a.hidden_size)   # the output layer (the embedding itself when tied)
    head_b = output_layer_gathered_bytes(run)
    L = a.num_layers
    mods = [_modules(run, i) for i in sorted({max(L - 4, 0), L - 1})]
    last = mods[-1]
    P = sum(n for n, _ in last)                     # one (late) layer, in trace elements
    gc = run.gradient_checkpointing
    kept_b = 0.0                                    # kept across the forward/backward boundary
    for back in range(min(L, 64)):                  # layer L-1-back; beyond R nothing more can be kept
        later = back * P
        suffix = 0.0
        any_kept = False
        for n, b in reversed(last):
            dist = (P - n + 3 * later + 2 * head_el) if gc else 2 * (suffix + later + head_el)
            if dist < R:
                kept_b += b
                any_kept = True
            suffix += n
        if not any_kept:
            break
    # the last layer's backward: each of its modules re-run (checkpointing) and kept while its own backward comes
    # within R; without checkpointing the boundary rule above already decided
    in_layer = 0.0
    if gc:
        suffix = 0.0
        for n, b in reversed(last):
            if 2 * suffix < R:
                in_layer += b
            suffix += n
        # the modules of the last layer the boundary kept are the same tensors
        boundary_last = sum(b for n, b in last if (P - n + 2 * head_el) < R)
        in_layer = max(in_layer - boundary_last, 0.0)
    # prefetch: the trace's next modules are the previous layer's, re-run in forward order (checkpointing) or
    # differentiated in reverse order; whole modules up to the bucket
    pre = 0.0
    got = 0.0
    for n, b in (last if gc else list(reversed(last))):
        if got >= prefetch:
            break
        pre += b
        got += n
    at_loss = head_b + kept_b
    in_backward = kept_b + in_layer + pre
    return Zero3Live(persistent, at_loss, in_backward)


def output_layer_gathered_bytes(run: Run) -> float:
    """Bytes of the output layer (the embedding itself when tied) gathered for the loss: vocab × hidden in the
    half dtype (`ds_model_bytes`)."""
    return float(run.arch.vocab_size * run.arch.hidden_size) * ds_model_bytes(run)


def offload_param_device(run: Run, live: Zero3Live) -> float:
    """With ``offload_param`` the partitions stay on the host (pinned when pin_memory: buffers.py counts them);
    the device holds only what is gathered and the persistent parameters (bytes)."""
    if not (run.deepspeed and run.zero_stage == 3 and run.offload_param):
        return 0.0
    return live.peak + live.persistent


# DeepSpeed's #6726 (cd20a3bbc, first in 0.16.0) and its rollback #7258 (f45950258, first in 0.16.8)
RECOMPUTE_LEAK_FROM, RECOMPUTE_LEAK_UNTIL = (0, 16, 0), (0, 16, 8)
RECOMPUTE_LEAK_RELEASE = "0.16.4"      # the release of that range the doctor weighs when none is named



def recompute_leak_applies(run: Run) -> bool:
    """Whether the conditions of `recompute_leak` other than the DeepSpeed release hold: ZeRO-3, activation
    checkpointing, and LLaMA-Factory's ``use_reentrant_gc: false``."""
    return bool(run.deepspeed and run.zero_stage == 3 and run.gradient_checkpointing and not run.use_reentrant_gc)


def recompute_leak(run: Run) -> bool:
    """Whether every checkpointed decoder layer stays gathered through backward (DeepSpeed 0.16.0 to 0.16.7 with
    non-reentrant checkpointing). An unnamed DeepSpeed is taken as a release outside that range; facts/assume.py's
    ``deepspeed-version`` assumption then weighs 0.16.4 (``RECOMPUTE_LEAK_RELEASE``) as its alternative.

    Source: DeepSpeed #6726 (cd20a3bbc, 2024-11-22, first tagged in v0.16.0) changed ``_post_backward_module_hook``
    (runtime/zero/parameter_offload.py) to keep ``module.ds_grads_remaining`` across calls instead of zeroing it
    at each forward; a module that runs forward twice in a step with grad enabled (the forward, then a
    non-reentrant checkpoint's recompute) then never counts back to 0 in backward, so
    ``post_sub_module_backward_function`` never releases its parameters. #7258 (f45950258, 2025-05-19, first in
    v0.16.8) rolled it back for DeepSpeed issue #7116. Reentrant checkpointing (LF's default ``use_reentrant_gc:
    true``, model_args.py:149-152) runs the first forward without grad and is not affected. Measured with
    benchmarks/zero3_frozen_gather.py (CPU, 2 ranks, an 8-layer stack, frozen or trainable base): with
    non-reentrant checkpointing v0.16.0/0.16.4/0.16.6/0.16.7 hold 7 of 8 layers gathered at the last layer
    boundary of backward and all 8 after it; v0.16.8, 0.17.2, 0.17.6, 0.19.2 and 0.19.8 hold 4 (the reuse-distance
    rule `zero3_live` models), as 0.16.4 does with reentrant checkpointing."""
    if not recompute_leak_applies(run):
        return False
    found = named_deepspeed(run)
    v = parse_version(found[0]) if found else None
    return v is not None and RECOMPUTE_LEAK_FROM <= (tuple(v) + (0, 0, 0))[:3] < RECOMPUTE_LEAK_UNTIL


# DeepSpeed #8148's releases and the shape of run it needs: run/stack.py (one home, read by facts/assumestack.py too)


def frozen_recompute_hold(run: Run) -> bool:
    """Whether the frozen base weights of every decoder layer stay gathered until the end of backward: DeepSpeed
    0.19.3 or later as the inputs name it (``--env``, the packages here, a context file), ZeRO-3,
    reentrant activation checkpointing (LLaMA-Factory's default ``use_reentrant_gc: true``, hparams/model_args.py),
    and an adapter method (LoRA, OFT) whose base decoder is frozen and not quantized.

    Why (DeepSpeed 0.19.8, runtime/zero/partitioned_param_coordinator.py): ``fetch_sub_module`` marks a fetch made
    during a forward inside a running backward graph task (``torch._C._current_graph_task_id() != -1``, :389: a
    checkpoint's recompute) and, for a parameter that does not require grad, calls ``update_recompute_parameters``
    on the last module of ``__active_backward_submodules`` (:393-394), which adds that module's id to the
    parameter's ``ds_active_sub_modules`` (:37-40); ``__release_param`` frees only parameters with no active
    submodule, so the parameter stays gathered until that owner's own backward release (``release_sub_module``
    :503-505, :520-522) or ``release_backward_leftovers`` at the backward's end (:554-565, called from stage3.py
    ``backward_epilogue`` :3068). Under reentrant checkpointing the whole layer is recomputed from
    ``CheckpointFunction.backward``, when the innermost module whose backward has begun and not ended is an
    enclosing one (the decoder stack or the model), so each layer's frozen weights are attributed to it and the
    layers accumulate through backward. Trainable parameters are not attributed (:392) and a non-reentrant
    recompute runs inside the module whose backward needs it, so full fine-tuning and non-reentrant runs keep the
    reuse-distance set `zero3_live` counts.

    Measured with benchmarks/zero3_lora_stack.py (CPU, gloo, 2 ranks; transformers 5.6.0's Qwen2 built under
    zero.Init through HfDeepSpeedConfig, peft 0.18.1 LoRA on every linear, reentrant checkpointing, 8 layers of
    184,320 elements): at layer 0's backward DeepSpeed 0.19.3 and 0.19.8 hold 1,483,008 elements gathered (all 8
    layers' base weights), 0.19.2 and 0.16.4 hold 192,768 (one layer); full fine-tuning holds 184,320 at 0.19.8;
    non-reentrant LoRA holds none at 0.19.8. Everything is released at the end of backward.
    Quantized (bitsandbytes) bases were not measured and are left out.

    A DeepSpeed the inputs do not name is taken to predate the hold: LLaMA-Factory's ``deepspeed`` extra installs
    ``deepspeed>=0.10.0,<=0.18.4`` (requirements/deepspeed.txt from bf04ca6, 2026-02-02, to LF's main of
    2026-08-18), and no measured run shows the hold yet (every dated calibration row predates 0.19.3); a release
    with it is weighed as the `deepspeed-version` assumption's alternative (facts/assumestack.py), so it widens the
    verdict, named."""
    return frozen_hold_shape(run) and named_release_holds(run)


# DeepSpeed #8189 (617061d6b, 2026-07-31, first tagged in v0.19.4) installs the ZeRO-3 linear wrapper for a model
# handed to deepspeed.initialize that was built outside zero.Init
LINEAR_WRAP_FOR_BUILT_MODEL_FROM = (0, 19, 4)
LINEAR_WRAP_ABSENT_RELEASE = "0.19.3"    # the release before it that the doctor weighs when none is named


def linear_weights_retained(run: Run) -> bool:
    """Whether autograd keeps every decoder linear's gathered weight from its forward to its backward, so that the
    whole (non-persistent) decoder is gathered at the loss: ZeRO-3 without ``torch.nn.functional.linear`` replaced
    by DeepSpeed's ``zero3_linear_wrap``, in a forward that saves for backward (no activation checkpointing), for
    a model whose linears call ``F.linear`` (not bitsandbytes' 4/8-bit layers).

    Why: torch's own ``F.linear`` records ``weight.t()``, a view of the gathered storage, among the tensors it saves
    for backward; DeepSpeed's release (``param.data`` swapped for an empty tensor) then cannot free the gathered
    buffer until that linear's backward. ``LinearFunctionForZeroStage3`` (runtime/zero/linear.py:51 at v0.14.2,
    ``ctx.save_for_backward(input, weight, bias)``) saves the parameter itself, whose storage the release does
    free. The wrapper is installed only (a) when ``zero_optimization.memory_efficient_linear`` is true (the
    default; partition_parameters.py:548-553 at v0.14.2, :495-500 at v0.11.1: ``if self.mem_efficient_linear``)
    and (b) in ``patch_init_and_builtins``, i.e. on entering a ``zero.Init`` context, and it is never restored,
    so any model built under zero.Init trains with it. A model built outside it and converted by
    ``deepspeed.initialize`` → ``Init(module=...)`` (:998-1000 at v0.14.2) gets no wrapper before DeepSpeed
    #8189 (first in v0.19.4), whose description says the standard Linear "can retain the gathered weight storage
    until backward completes". With reentrant checkpointing the first forward runs without grad and saves
    nothing; with non-reentrant checkpointing the saved tensors are dropped by its pack hook; in both the
    recomputed layer is gathered for its own backward anyway (`zero3_live`).

    A DeepSpeed the inputs do not name is taken as the newest behaviour the doctor knows (0.19.8, as facts/assume.py's
    ``deepspeed-version`` assumption states), so a model built outside zero.Init keeps nothing here; that assumption
    then weighs 0.19.3 (``LINEAR_WRAP_ABSENT_RELEASE``) as its alternative."""
    if not (run.deepspeed and run.zero_stage == 3) or run.gradient_checkpointing or run.quantization_bit is not None:
        return False
    if not run.ds_memory_efficient_linear:
        return True
    if run.zero3_init:
        return False
    found = named_deepspeed(run)
    v = parse_version(found[0]) if found else None
    return v is not None and (tuple(v) + (0, 0, 0))[:3] < LINEAR_WRAP_FOR_BUILT_MODEL_FROM


def sub_group_half_flat_bytes(run: Run, trainable: float) -> float:
    """Bytes of the half-precision flat copy ZeRO-3 makes of one sub-group's gradient partition at the optimizer
    step, before casting it to fp32: ``_prepare_fp32_grad_for_sub_group`` (stage3.py:1850-1851 at v0.14.2,
    :1729-1730 at v0.11.1, :1898-1899 at v0.16.4) evaluates ``self.flatten(self.averaged_gradients[i]).to(fp32)``,
    so the flat copy (torch.cat of the partition views, in the gradient-accumulation dtype: the model's half
    dtype under ZeRO, engine.py:898-902 at v0.14.2) and the fp32 gradient exist together until the statement
    ends. It is freed before the optimizer's own update runs, so it is the larger of it and the optimizer's
    temporaries that counts (`weights._zero_states`). Elements: this rank's partition, at most ``sub_group_size``
    (DeepSpeed's default 1e9). 0 outside ZeRO-3 or with the optimizer offloaded (the flat gradient is on the host,
    stage3.py:333 at 0.19.8), and 0 when DeepSpeed runs without fp16/bf16 (`ds_model_bytes` 4): the flat copy is
    then already fp32 and ``Tensor.to`` returns the tensor itself when dtype and device match, so it *is* the fp32
    gradient `grads_step` counts (0.19.8 stage3.py:2686-2687)."""
    if not (run.deepspeed and run.zero_stage == 3) or run.offload_optimizer is not None or ds_model_bytes(run) == 4.0:
        return 0.0
    part = trainable / max(run.world_size, 1)
    return ds_model_bytes(run) * min(part, run.ds_buckets.get("sub_group_size", 1e9))


def all_layers_gathered_bytes(run: Run) -> float:
    """Bytes of every decoder layer's non-persistent parameters gathered at once (the half dtype, quantized
    storage kept), as `_modules` counts one layer."""
    return sum(b for i in range(run.arch.num_layers) for _n, b in _modules(run, i))


def quantized_load_bytes(run: Run, c: ParamCounts) -> float:
    """Bytes a ZeRO-3 run with on-the-fly bitsandbytes quantization holds on every rank while the model loads:
    the whole quantized model, unpartitioned; 0 otherwise.

    Why (read at transformers 5.6.0, the version docs/ARCHITECTURE.md "Sources" names):

    * ``zero.Init`` is entered only for a model that is not quantized (``modeling_utils.py:1525``,
      ``needs_zero3_init = is_deepspeed_zero3_enabled() and not _is_quantized and ...``), so no parameter is
      partitioned while a bitsandbytes model is built and loaded;
    * LLaMA-Factory passes no ``device_map`` under ZeRO-3 (LF ``model/model_utils/quantization.py:194-203`` at the
      oracle snapshot: "Do not assign device map if deepspeed zero3 or fsdp"), and the bitsandbytes quantizer then
      puts the whole model on the rank's current device (``quantizers/quantizer_bnb_4bit.py:102-111``
      ``update_device_map``: ``{"": torch.cuda.current_device()}``, ``npu:<current>`` on an Ascend host). An
      earlier, CUDA-only form of the same quantizer method (seen in a public copy; its release not pinned) sets the
      same default, and ZeRO-3 + QLoRA needs bitsandbytes >= 0.43 (``bnb_4bit_quant_storage``; LF
      quantization.py:201), so no stack that runs it is known to differ: applied without an assumption;
    * DeepSpeed partitions these parameters only when ``deepspeed.initialize`` builds the stage-3 engine
      (0.19.8 ``runtime/zero/parameter_offload.py:180``, ``:258-263`` ``_convert_to_zero_parameters``: parameters
      that are not yet ZeRO parameters are converted and partitioned), after which the whole tensors are freed.

    The freed blocks stay in the caching allocator's pool (nothing empties it between load and training), so the
    reserved memory and nvidia-smi of each rank never fall below this (it is the `init_floor` of terms.py), and
    the load itself must fit the card (the "model load" moment). ``max_memory_allocated`` read since start-up
    would also show it; the doctor's ``peak_allocated`` is the training step's. Bytes: decoder linears in their
    packed storage (``linear_weight_bytes``, quantization state included), every other base parameter
    (embeddings, output layer, norms) in the checkpoint dtype, or the compute dtype for an fp32 checkpoint, as
    weights.py stores them; adapters do not exist yet (peft wraps the model after the load).
    """
    if not (run.deepspeed and run.zero_stage == 3 and run.quantization_bit is not None
            and (run.quantization_method or "bnb") == "bnb"):
        return 0.0

    a = run.arch
    wq = _stored_bytes(run)
    linear = sum(n * sum(lin.params for lin in a.kind_linears(k)) for k, n in a.layer_groups())
    other = max(float(c.base) - linear, 0.0)
    return linear * wq + other * dtype_bytes(a.dtype if a.dtype != "float32" else run.compute_dtype)


def unpartitioned_load_bytes(run: Run, c: ParamCounts) -> float:
    """Bytes a ZeRO-3 rank holds while a model built outside ``deepspeed.zero.Init`` loads (``Run.zero3_init``
    False, run/engines.py `_zero3_init` says when): every base parameter, whole, in LLaMA-Factory's load dtype
    (``torch_dtype`` = the compute dtype when ZeRO-3 is not seen at load, LF 0.9.0 model/patcher.py:97-100); 0
    otherwise, and 0 for a quantized model (`quantized_load_bytes` sizes that load).

    DeepSpeed partitions such a model only when ``deepspeed.initialize`` builds the stage-3 engine (0.19.8
    runtime/zero/parameter_offload.py:180 → :258-279 ``_convert_to_zero_parameters``: ``Init(module=...)`` on the
    existing module, each parameter partitioned by partition_parameters.py ``_partition_param`` :1778-1870, its
    partition allocated while the whole tensor lives, then the whole freed). The freed whole tensors stay in the
    caching allocator's pool; replayed through probes/allocator.py (benchmarks/zero3_init_reserve.py), a rank keeps
    the unpartitioned size reserved (Qwen2.5-7B on 2 ranks: 14.86 GiB for a 14.19 GiB model) where a model built
    under zero.Init keeps its partitions and one embedding-sized block (8.38 GiB). So, like the bitsandbytes case,
    this is the `init_floor` of terms.py and the "model load" moment."""
    if not (run.deepspeed and run.zero_stage == 3 and not run.zero3_init) or run.quantization_bit is not None:
        return 0.0
    return float(c.base) * dtype_bytes(run.compute_dtype)


def largest_trainable_elements(run: Run, counts: ParamCounts) -> float:
    """Elements of the largest single tensor that trains: the embedding or untied output layer when it trains
    (full fine-tuning, ``additional_target``, ``resize_vocab``), else the largest decoder linear (full, freeze) or
    the largest LoRA matrix (``lora_rank`` × the wider side of a linear)."""
    a = run.arch
    linears = [lin for kind, _n in a.layer_groups() for lin in a.kind_linears(kind)]
    widest = max((lin.in_features * lin.out_features for lin in linears), default=0)
    vocab = float(max(a.embedding_params(), a.lm_head_params()))
    if run.finetuning_type in ("lora", "oft"):
        lora = max((run.lora_rank * max(lin.in_features, lin.out_features) for lin in linears), default=0)
        return max(float(lora), vocab if counts.trainable_base else 0.0)
    if run.finetuning_type == "full" or run.resize_vocab:
        return max(float(widest), vocab)
    return float(widest)


def reduce_scatter_bytes(run: Run, trainable: float, largest: float = 0.0) -> float:
    """What ZeRO-3's gradient reduction holds beside the IPG bucket during backward, bytes in the half dtype
    (`ds_model_bytes`: fp32 without fp16/bf16); 0
    outside ZeRO-3. The larger of:

    * the flat copy of a bucket: ``__avg_scatter_grads`` (stage3.py:1912-1931) hands the bucket's full gradients to
      ``reduce_scatter_coalesced``, which concatenates their per-rank chunks, padded, into one flat tensor
      (``runtime/comm/coalesced_collectives.py:100-122``, ``torch.cat`` at :122) and reduce-scatters into views of
      it: at most ``reduce_bucket_size`` elements (fewer when fewer parameters train);
    * the whole gradient of a parameter larger than the bucket (`largest`, elements): ``__add_grad_to_ipg_bucket``
      copies a gradient into the contiguous IPG buffer only when it fits (stage3.py:1626), else the parameter
      joins the bucket with its own full-size ``param.grad`` (:1642), which lives until the next parameter's hook
      reduces the bucket (:1583-1585). With ``"auto"`` buckets (hidden², transformers) every MLP weight and the
      vocabulary-sized embedding and output layer of a full fine-tuning are such parameters; the output layer's
      gradient is made while the loss's gradient still exists. One such tensor is counted (a single tensor whose
      size divides by the ranks is reduced in place, coalesced_collectives.py:102-105)."""
    if not (run.deepspeed and run.zero_stage == 3):
        return 0.0
    return ds_model_bytes(run) * max(min(setting(run, "reduce_bucket_size"), trainable), largest)
