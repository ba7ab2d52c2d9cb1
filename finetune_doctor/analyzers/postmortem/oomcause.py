"""A CUDA out-of-memory error explained: which phase of the step, which size the model implies, memory held by
other processes, fragmentation, and what to change.

The failed allocation is compared with sizes the model implies when params P, trainable params T and
data-parallel ranks N are known: 4·P/N (one fp32 optimizer-state partition under ZeRO-1/2/3: master weights,
exp_avg or exp_avg_sq), 12·P/N, 2·P/N, 2·P, 4·P and the fp32 logits b·s·V·4, within 2 % (the message prints two
decimals). Phase comes from the traceback frames around the message, else the last DeepSpeed see_memory_usage
label, else the size match.
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.postmortem.curves import gib_text, location_of
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence, OomRecord
from finetune_doctor.types import GIB

SIZE_MATCH_TOL = 0.02
HUGE_REQUEST = 0.25


PHASES = (
    ("optimizer step", ("exp_avg", "adamw", "_adam", "optimizer.step", "_take_model_step", "_optimizer_step",
                        "unscale_and_clip", "fused_adam", "cpu_adam", "step (stage_1_and_2.py)",
                        "step (stage3.py)", "step (optimizer.py)", "step (adamw.py)", "_update_scale")),
    ("optimizer set-up", ("initialize_optimizer_states", "_create_fp32_partitions", "_setup_for_real_optimizer",
                          "_configure_zero_optimizer", "_configure_optimizer", "create_optimizer",
                          "__init__ (stage_1_and_2.py)", "__init__ (stage3.py)", "Before initializing optimizer",
                          "creating fp32 partitions", "creating fp16 partitions")),
    ("checkpoint save", ("save_model", "_save_checkpoint", "save_checkpoint", "consolidated_16bit", "_save (")),
    ("evaluation", ("evaluate (", "prediction_step", "evaluation_loop", "generate (", "prediction_loop")),
    ("backward", ("backward", "partition_grads", "reduce_independent_p_g_buckets", "average_tensor", "allreduce",
                  "reduce_scatter", "_backward", "run_backward", "reduce_ipg_grads")),
    ("forward", ("forward", "compute_loss", "cross_entropy", "logits", "lm_head", "attention", "self_attn",
                 "scaled_dot_product", "_flash_attention", "mlp (", "loss_function", "ForCausalLMLoss")),
    ("model load", ("from_pretrained", "load_model", "_load_state_dict", "load_state_dict", "_move_model_to_device",
                    "__init__ (trainer.py)", "Trainer(", "PairwiseTrainer", "deepspeed.initialize", "zero.Init",
                    "partition_parameters", "dispatch_model", "load_pretrained_model", "_load_pretrained_model",
                    "DeepSpeedZeRoOffload", "to (module.py)", "_apply (module.py)", "cuda (module.py)")),
)


def oom_phase(frames: tuple[str, ...], label: str | None) -> tuple[str | None, str | None]:
    text = frames
    for phase, keys in PHASES:
        for fr in text:
            if any(k in fr for k in keys):
                return phase, fr
    if label:
        for phase, keys in PHASES:
            if any(k.lower() in label.lower() for k in keys):
                return phase, f"DeepSpeed memory label '{label}'"
    return None, None


def size_candidates(cx: RunContext, P: float | None, world: int | None) -> list[tuple[str, str, float, str]]:
    out: list[tuple[str, str, float, str]] = []
    ft = cx.finetuning_type()
    T = cx.trainable()
    opt_params = P if ft in ("full", "freeze") and P else T
    if P:
        out.append(("the whole model in 16-bit", "2·P", 2 * P, "model load"))
        out.append(("the whole model in fp32", "4·P", 4 * P, "model load"))
    if opt_params and world:
        out.append(("one fp32 optimizer-state partition (master weights, exp_avg or exp_avg_sq of 1/N of the "
                    "trainable parameters)", "4·P/N", 4 * opt_params / world, "optimizer"))
        out.append(("the fp32 master weights and both Adam moments of 1/N of the trainable parameters", "12·P/N",
                    12 * opt_params / world, "optimizer set-up"))
        out.append(("a 16-bit gradient partition", "2·P/N", 2 * opt_params / world, "backward"))
    elif opt_params:
        out.append(("one fp32 optimizer state of all trainable parameters", "4·P", 4 * opt_params, "optimizer"))
    b = cx.run.get("micro_batch") or cx.cfg.get("per_device_train_batch_size")
    s = cx.run.get("seq_len") or cx.cfg.get("cutoff_len")
    V = cx.vocab()
    if b and s and V:
        out.append(("the fp32 logits of one micro-batch", "b·s·V·4", float(b) * float(s) * V * 4, "forward"))
        out.append(("the 16-bit logits of one micro-batch", "b·s·V·2", float(b) * float(s) * V * 2, "forward"))
    return out


def foreign_memory(o: OomRecord) -> dict[str, Any] | None:
    """Memory other processes hold on the GPU of an OOM: other ranks' CUDA contexts (the ranks are not bound to
    their own GPU), another process, or memory in use but not by this process. None when nothing notable."""
    if o.total is None or o.free is None:
        return None
    foreign = None
    used = o.total - o.free
    others: list[tuple[int, float]] = []
    self_b = o.this_process
    if o.procs:
        if self_b is None:
            # torch 2.1 lists every process, itself included: itself is the one that holds at least what
            # PyTorch allocated and is closest to it
            mine = (o.allocated or 0) + (o.reserved_unallocated or 0)
            idx = min(range(len(o.procs)), key=lambda i: (o.procs[i][1] < (o.allocated or 0),
                                                          abs(o.procs[i][1] - mine)))
            self_b = o.procs[idx][1]
            others = [p for i, p in enumerate(o.procs) if i != idx]
        else:
            others = list(o.procs)
        held = sum(b for _, b in others)
    elif self_b is not None:
        held = used - self_b
    elif o.reserved is not None:
        held = used - o.reserved - 0.5 * GIB     # minus a CUDA context (~300-500 MiB) of this process
    elif o.allocated is not None:
        held = used - o.allocated - (o.reserved_unallocated or 0) - 0.5 * GIB
    else:
        held = 0.0
    small = [p for p in others if p[1] < GIB]
    kind = None
    if len(small) >= 2:
        kind = "rank-contexts"
    elif held >= max(GIB, 0.05 * o.total):
        kind = "other-process" if others else "unaccounted"
    if kind:
        if kind == "rank-contexts":
            sizes = sorted({gib_text(b) for _, b in small})
            text = (f"{len(small)} other processes hold {', '.join(sizes)} each on GPU {o.gpu}: the CUDA contexts "
                    f"of other ranks, so the ranks are not bound to their own GPU (device not set from "
                    f"LOCAL_RANK), or the model is placed on cuda:0 before ZeRO-3 partitions it")
            if self_b is not None:
                text += f"; this process holds {gib_text(self_b)}"
        elif kind == "other-process":
            text = (f"other processes hold {gib_text(held)} of GPU {o.gpu} "
                    f"({', '.join(f'pid {p} {gib_text(b)}' for p, b in others[:4])})")
        else:
            text = (f"{gib_text(held)} of GPU {o.gpu} is in use but not by this process "
                    f"({gib_text(o.reserved if o.reserved is not None else (o.allocated or 0))} reserved by "
                    f"PyTorch, {gib_text(o.free)} free of {gib_text(o.total)}): another process or rank holds it")
        fix = ("bind every rank to its own GPU (launch with torchrun/deepspeed or FORCE_TORCHRUN=1 so LOCAL_RANK "
               "sets the device, and move nothing to cuda:0 before that); with ZeRO-3 check that zero.Init is "
               "active so the full model never lands on one GPU" if kind == "rank-contexts" else
               "free the GPU (stop the other process) or keep the job off it with CUDA_VISIBLE_DEVICES")
        foreign = {"gib": held / GIB, "kind": kind, "text": text, "pids": [p for p, _ in others], "fix": fix}
    return foreign


OOM_DEVICE = {"mps": "MPS (Apple GPU) out of memory", "npu": "NPU (Ascend) out of memory",
              "npu-runtime": "NPU (Ascend) out of memory"}
"""The device an OOM message names, by its record's format (readers/runlogs/logfailures.py `_oom`, npulines.py):
Apple's Metal backend, torch_npu's allocator and the Ascend runtime; Intel's XPU by its text; CUDA otherwise."""


def oom_facts(ooms: list[OomRecord], cx: RunContext, P: float | None, world: int | None, trained: bool,
         ev: Evidence) -> dict[str, Any]:
    first = ooms[0]
    o = first
    # prefer a record with sizes when the first one is a cut paste or a bare runtime error at the same spot
    for cand in ooms:
        if cand.requested is not None:
            o = cand
            break
    g = lambda b: None if b is None else b / GIB  # noqa: E731
    d: dict[str, Any] = {"step": o.step, "gpu": o.gpu, "rank": o.rank, "format": o.format, "exc": o.exc,
                         "requested_gib": g(o.requested), "total_gib": g(o.total), "free_gib": g(o.free),
                         "allocated_gib": g(o.allocated), "reserved_gib": g(o.reserved),
                         "reserved_unallocated_gib": g(o.reserved_unallocated), "this_process_gib": g(o.this_process),
                         "count": len(ooms), "ranks": sorted({x.rank for x in ooms if x.rank is not None}),
                         "location": location_of(o.file, o.line)}
    ru = o.reserved_unallocated
    if ru is None and o.reserved is not None and o.allocated is not None:
        ru = o.reserved - o.allocated
    d["reserved_unallocated_gib"] = g(ru)
    d["fragmented"] = bool(ru is not None and o.requested is not None and ru >= o.requested and ru >= 0.5 * GIB)

    d["foreign"] = foreign_memory(o)

    # phase
    phase, why = oom_phase(o.frames, o.memory_label)
    match = None
    for label, formula, size, ph in size_candidates(cx, P, world):
        if o.requested and size > 0 and abs(o.requested - size) / size <= SIZE_MATCH_TOL:
            match = {"label": label, "formula": formula, "expected_gib": size / GIB, "ratio": o.requested / size,
                     "phase": ph}
            break
    if phase is None and match is not None:
        phase, why = match["phase"], f"the size matches {match['formula']}"

    d["phase"] = phase
    d["phase_evidence"] = why
    d["match"] = match
    d["params"] = P
    d["world"] = world
    if o.step is not None:
        when = f"during step {o.step}"
    elif trained:
        when = "at an unknown step"
    elif phase in ("optimizer step", "optimizer set-up"):
        when = f"in the first {phase} (no training step was logged before it)"
    elif phase == "optimizer":
        when = "while allocating optimizer states (set-up or first step; no training step was logged before it)"
    else:
        when = "before any training step was logged"
    d["when_text"] = when
    # the device the message names: Apple's Metal backend (its limit is a share of the memory the CPU shares) and
    # Intel's XPU allocator (readers/runlogs/logfailures.py `_oom`) are read as the CUDA allocator's message
    dev = OOM_DEVICE.get(o.format) or ("XPU (Intel GPU) out of memory" if "XPU out of memory" in (o.text or "")
                                       else "CUDA out of memory")
    s = f"{dev} {when}"
    if phase and phase not in when and phase != "optimizer":
        s += f" (phase: {phase})"
    if o.requested is not None:
        s += f": tried to allocate {gib_text(o.requested)}"
    if o.gpu is not None and o.total is not None:
        s += f" on {'NPU' if o.format.startswith('npu') else 'GPU'} {o.gpu} ({gib_text(o.free)} free of {gib_text(o.total)}"
        if o.allocated is not None:
            s += f", {gib_text(o.allocated)} allocated by PyTorch"
        s += ")"
    if o.format == "npu-runtime":
        s += (f" on NPU {o.gpu}" if o.gpu is not None else "") + (
            " (the Ascend runtime's own report, \"Failed to apply for memory\" / EL0004: no allocator figures)")
    if o.format == "mps" and o.total is not None:
        s += (f" (MPS had {gib_text(o.allocated)} allocated of the {gib_text(o.total)} it may use: a share of the "
              f"unified memory, PYTORCH_MPS_HIGH_WATERMARK_RATIO)")
    s += "."
    if match:
        s += (f" {gib_text(o.requested)} is {match['formula']} = {match['expected_gib']:.2f} GiB: "
              f"{match['label']} (P = {P / 1e9:.2f}B params" + (f", N = {world} ranks" if "N" in match["formula"]
                                                                   else "") + ").")
    elif o.requested is not None and P is None:
        s += " The model size is unknown (give --config), so the allocation was not matched against it."
    if d["count"] > 1:
        s += f" {d['count']} OOM messages in the logs" + (f" (ranks {', '.join(map(str, d['ranks']))})"
                                                          if d["ranks"] else "") + "."
    d["sdpa_mask"] = sdpa_mask = explicit_mask_sdpa(o)
    if sdpa_mask:
        s += f" It failed inside scaled_dot_product_attention, {sdpa_mask}."
    d["summary"] = s
    d["advice"] = SDPA_MASK_ADVICE if sdpa_mask else oom_advice(phase, match, cx)
    d["timeline_text"] = (f"OOM{' in the ' + phase if phase and phase != 'optimizer' else ''}"
                          f"{' allocating optimizer states' if phase == 'optimizer' else ''}: "
                          f"tried to allocate {gib_text(o.requested)}"
                          + (f" on {'NPU' if o.format.startswith('npu') else 'GPU'} {o.gpu}" if o.gpu is not None else "")
                          + (f" (= {match['formula']})" if match else ""))
    d["stage_text"] = ("ZeRO-" + str(cx.zero_stage())) if cx.zero_stage() is not None else None
    return d


SDPA_MASK_ADVICE = (
    "With an explicit mask PyTorch cannot pick its flash kernel (torch/nn/attention: the flash backend takes no "
    "attn_mask) and falls back to the memory-efficient or the math kernel; the math kernel materialises the "
    "batch × heads × seq × seq score matrix, and the 4-D mask itself is batch × seq × seq: it grows with the square "
    "of the longest sequence, so a smaller batch does not cure one long sample. Use an attention path without a "
    "materialised mask (flash_attn: fa2, or sdpa without padding: packing), or lower cutoff_len.")


def explicit_mask_sdpa(o: OomRecord) -> str | None:
    """The frame text that shows the OOM inside ``scaled_dot_product_attention`` with an ``attn_mask`` passed
    (transformers/integrations/sdpa_attention.py ``sdpa_attention_forward``: ``attn_mask=attention_mask``; the
    traceback prints the call), or None. A mask of None (``attn_mask=None``) does not count."""
    frames = " | ".join(o.frames) + " " + o.text
    if "scaled_dot_product_attention" not in frames:
        return None
    for key in ("attn_mask=attention_mask", "attn_mask=causal_mask", "attention_mask,", "attn_mask=attn_mask"):
        if key in frames:
            return f"called with an explicit attention mask (the traceback shows `{key.rstrip(',')}`)"
    if o.requested is not None and o.total and o.requested >= HUGE_REQUEST * o.total:
        # the flash and memory-efficient kernels work in tiles and never allocate seq × seq; one request of a
        # quarter of the card inside SDPA is the math kernel's score matrix
        return (f"one request of {gib_text(o.requested)}, {100 * o.requested / o.total:.0f} % of the card: the math "
                "kernel's score matrix, which SDPA falls back to when a mask is passed")
    return None


def oom_advice(phase: str | None, match: dict[str, Any] | None, cx: RunContext) -> str:
    zs = cx.zero_stage()
    formula = (match or {}).get("formula")
    if formula in ("4·P/N", "12·P/N") or phase in ("optimizer step", "optimizer set-up"):
        if zs is not None and zs < 3:
            return ("The optimizer states are what did not fit: ZeRO-3 also shards the 16-bit weights and "
                    "gradients, optimizer offload moves the states to host RAM, and more GPUs shrink each shard.")
        return ("The optimizer states are what did not fit: offload them to host RAM, use more GPUs, or an 8-bit "
                "optimizer.")
    if formula in ("b·s·V·4", "b·s·V·2") or phase == "forward":
        return ("Activations and logits grow with per_device_train_batch_size × cutoff_len: lower them (raise "
                "gradient_accumulation_steps to keep the batch), or use enable_liger_kernel for a fused loss.")
    if phase == "backward":
        return ("Gradients and recomputed activations did not fit: keep gradient checkpointing on, lower the "
                "micro-batch, or shard gradients (ZeRO-2/3).")
    if phase == "model load":
        return "The weights alone did not fit where they were placed: shard them (ZeRO-3), quantize, or use more GPUs."
    if phase == "evaluation":
        return "Evaluation ran out of memory: lower per_device_eval_batch_size or eval_accumulation_steps."
    if phase == "checkpoint save":
        return "Gathering the weights for saving did not fit: stage3_gather_16bit_weights_on_model_save off."
    return ""
