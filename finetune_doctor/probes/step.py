"""The training step of the probes: forward, loss, backward and optimizer step as the HF/LF trainer runs them,
with hooks that name each segment of the step for the tracker (simulate) or the CUDA peak counters (gpu probe)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from finetune_doctor.probes.build import Prepared, StepState, decoder_layers
from finetune_doctor.probes.fakemode import dtype_of, load_torch
from finetune_doctor.probes.spec import ProbeSpec


def _layer_key(i: int, n: int) -> tuple:
    """Anchor layer `i` of `n` to the nearer end of the stack, so that keys match across depths k and k+1."""
    return ("b", i) if i < n // 2 else ("t", n - 1 - i)


def install_segment_hooks(model: Any, tracker: Any, st: StepState, trainable: list) -> list:
    """Hooks that name the segment of the step the tracker is in, and keep gradients categorised.

    Forward: a pre-hook per decoder layer; backward: a gradient hook on each layer's output as autograd sees it
    (it fires before that layer's backward and before its recomputation under checkpointing). Where the module
    hooks run depends on how transformers checkpoints the layer: 5.24 checkpoints ``forward`` inside the module
    call, so the hooks run outside the checkpoint; 5.6 checkpoints the whole module call
    (``GradientCheckpointingLayer.__call__`` hands ``partial(super().__call__)`` to the checkpointing function,
    transformers 5.6.0 ``modeling_layers.py:92``), so the forward hook runs inside it — under the reentrant
    checkpoint in ``no_grad`` (its output there does not require grad, and the tensor autograd sees is the one
    ``CheckpointFunction`` returns). A layer whose forward hook ran inside a checkpoint therefore gets its gradient
    hook when the checkpointing function returns (``StepState.on_checkpoint_exit``, build.py `_gc_func`).
    Gradients: ``register_post_accumulate_grad_hook`` on plain parameters; FSDP2 assigns sharded gradients
    directly, so every backward segment change also sweeps ``param.grad``.
    """
    torch = load_torch()
    layers = decoder_layers(model)
    n = len(layers)
    handles = []

    def seg(*pos):
        if st.phase == "bwd":
            tracker.track([p.grad for p in trainable if p.grad is not None], "gradients")
        tracker.set_segment(st.step, st.micro, *pos)

    for p in trainable:
        if not hasattr(p, "_local_tensor"):
            handles.append(p.register_post_accumulate_grad_hook(
                lambda q: tracker.track([q.grad], "gradients")))

    keys = {id(layer): _layer_key(i, n) for i, layer in enumerate(layers)}
    pending: set[int] = set()   # layers whose forward hook ran inside a checkpoint: hooked when it returns

    def hook_output(out, key):
        t = out[0] if isinstance(out, (tuple, list)) else out
        if torch.is_tensor(t) and t.requires_grad:
            t.register_hook(lambda g, key=key: (seg("bwd", *key), None)[1])

    chained = st.on_checkpoint_exit   # a reference model's hooks come second: keep the policy's

    def on_checkpoint_exit(mod, out):
        if id(mod) in pending:
            pending.discard(id(mod))
            hook_output(out, keys[id(mod)])
        elif chained is not None:
            chained(mod, out)

    st.on_checkpoint_exit = on_checkpoint_exit
    for i, layer in enumerate(layers):
        key = keys[id(layer)]

        def pre(mod, args, key=key):
            if st.phase in ("fwd", "ref"):
                seg(st.phase, *key)

        def post(mod, args, out, key=key, i=i):
            if st.phase == "ref" and i == n - 1:
                seg("ref", "head")
            if st.phase != "fwd":
                return
            if st.checkpointing:
                pending.add(id(mod))
            else:
                hook_output(out, key)
            if i == 0 and args and torch.is_tensor(args[0]) and args[0].requires_grad:
                args[0].register_hook(lambda g: (seg("bwd", "embed"), None)[1])
            if i == n - 1:
                seg(st.phase, "head")

        handles.append(layer.register_forward_pre_hook(pre))
        handles.append(layer.register_forward_hook(post))

    head = getattr(model, "module", model).get_output_embeddings()   # DDP wraps the model in .module
    if head is not None:
        def head_pre(mod, args):
            if st.phase in ("fwd", "ref"):
                seg(st.phase, "logits")
                tracker.default_category = "logits"
        handles.append(head.register_forward_pre_hook(head_pre))
    return handles


def _batch(spec: ProbeSpec, vocab: int):
    torch = load_torch()
    ids = torch.randint(0, vocab, (spec.batch, spec.seq_len), dtype=torch.long)
    return ids


def _loss(model: Any, ids: Any, spec: ProbeSpec, ref: Any, st: StepState | None = None,
          mark: Callable[..., None] | None = None):
    """Forward + loss as the LF trainer of `spec.stage` computes it."""
    torch = load_torch()
    if spec.stage in ("dpo", "kto", "orpo", "simpo"):
        # LF CustomDPOTrainer.concatenated_forward: logits.to(float32), log_softmax gathered at the labels; the
        # reference forward runs after the policy forward, under no_grad (get_batch_loss_metrics).
        logits = model(input_ids=ids).logits.to(torch.float32)
        logps = torch.gather(logits[:, :-1].log_softmax(-1), 2, ids[:, 1:].unsqueeze(2)).squeeze(2).sum(-1)
        ref_logps = None
        if ref is not None or spec.finetuning_type in ("lora", "oft"):
            # the reference forward is its own part of the step (segments keep its peak apart from the policy's)
            if st is not None:
                st.phase = "ref"
            if mark is not None:
                mark("ref", "embed")
            with torch.no_grad():
                if ref is not None:
                    rl = ref(input_ids=ids).logits.to(torch.float32)
                else:
                    with getattr(model, "module", model).disable_adapter():
                        rl = model(input_ids=ids).logits.to(torch.float32)
                ref_logps = torch.gather(rl[:, :-1].log_softmax(-1), 2, ids[:, 1:].unsqueeze(2)).squeeze(2).sum(-1)
                del rl
            if st is not None:
                st.phase = "fwd"
            if mark is not None:
                mark("fwd", "loss")
        half = logps.shape[0] // 2 if spec.pairwise else logps.shape[0]
        diff = logps[:half] - logps[half:] if spec.pairwise else logps
        if ref_logps is not None:
            diff = diff - ((ref_logps[:half] - ref_logps[half:]) if spec.pairwise else ref_logps)
        return -torch.nn.functional.logsigmoid(0.1 * diff).mean()
    return model(input_ids=ids, labels=ids).loss


class NoBooks:
    """Tracker interface for runs that measure elsewhere (MemTracker, CUDA counters): segment names only."""

    default_category = "temp"

    def track(self, tensors: Any, category: str) -> None:
        pass

    def set_segment(self, *label: Any) -> None:
        pass


def train_steps(prep: Prepared, spec: ProbeSpec, steps: int, tracker: Any, *, device_type: str = "cpu",
                on_step: Callable[[int, float, float | None], None] | None = None,
                between_steps: Callable[[], None] | None = None,
                on_micro: Callable[[int, int, int], None] | None = None) -> None:
    """Run `steps` optimizer steps of ``min(grad_accum, 2)`` micro-batches on `prep` as the HF/LF trainer does,
    naming segments on `tracker` (see `install_segment_hooks`). `on_step(step, loss, grad_norm)` receives each
    step's loss and (when clipping runs) the total gradient norm as Python floats (real tensors only);
    `on_micro(step, micro, micro_steps)` is called as each micro-batch starts (progress, fake tensors too)."""
    torch = load_torch()
    model, ref, trainable, opt, st = prep.model, prep.ref, prep.trainable, prep.opt, prep.state
    handles = install_segment_hooks(model, tracker, st, trainable)
    if ref is not None:
        handles += install_segment_hooks(ref, tracker, st, [])
    tracker.track(list(model.parameters()), "weights")
    tracker.track(list(model.buffers()), "buffers")
    if ref is not None:
        tracker.track(list(ref.parameters()), "weights")
        tracker.track(list(ref.buffers()), "buffers")
    autocast = None if spec.deepspeed else spec.autocast   # accelerate runs no AMP under DeepSpeed
    micro_steps = min(max(spec.grad_accum, 1), 2)
    dev = next(iter(model.parameters())).device
    try:
        for step in range(1, steps + 1):
            if between_steps is not None and step > 1:
                between_steps()
            st.step = step
            losses = []
            for micro in range(micro_steps):
                st.micro = micro
                if on_micro is not None:
                    on_micro(step, micro, micro_steps)
                with torch.device(dev):
                    ids = _batch(spec, prep.vocab)
                tracker.track([ids], "inputs")
                st.phase = "fwd"
                tracker.default_category = "activations"
                tracker.set_segment(step, micro, "fwd", "embed")
                ctx = (torch.autocast(device_type, dtype=dtype_of(autocast)) if autocast else contextlib.nullcontext())
                with ctx:
                    loss = _loss(model, ids, spec, ref, st,
                                 lambda *pos: tracker.set_segment(st.step, st.micro, *pos))
                if spec.gradient_checkpointing and st.gc_calls == 0:
                    raise RuntimeError("gradient checkpointing is on in the spec but the model never called the "
                                       "checkpointing function: this transformers version wires it differently")
                # the trainer keeps only the loss: model outputs (logits) die when compute_loss returns
                # (transformers Trainer.compute_loss / LF get_batch_loss_metrics)
                st.phase = "bwd"
                tracker.default_category = "temp"
                tracker.set_segment(step, micro, "bwd", "logits")
                (loss / micro_steps if micro_steps > 1 else loss).backward()
                if on_step is not None:
                    losses.append(loss.detach())
                del loss, ids
                tracker.track([p.grad for p in trainable], "gradients")
                tracker.set_segment(step, micro, "bwd", "end")
            st.phase = "opt"
            tracker.set_segment(step, 0, "opt")
            norm = None
            if spec.max_grad_norm and not spec.deepspeed:
                norm = torch.nn.utils.clip_grad_norm_(trainable, spec.max_grad_norm)
            if opt is not None:
                opt.step()
                for state in opt.state.values():
                    tracker.track([v for v in state.values() if torch.is_tensor(v)], "optimizer")
            tracker.set_segment(step, 0, "zero")
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            else:
                for p in trainable:
                    p.grad = None
            if on_step is not None:
                total = float(sum(float(x) for x in losses))
                on_step(step, total, None if norm is None else float(getattr(norm, "full_tensor", lambda: norm)()))
    finally:
        for h in handles:
            h.remove()
        st.on_checkpoint_exit = None
