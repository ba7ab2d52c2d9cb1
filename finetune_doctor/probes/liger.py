"""Stand-ins for liger-kernel's fused ops in the simulate probe.

liger-kernel is Triton code: it needs a GPU to run, and a FakeTensor has no memory for a Triton kernel to read, so
the probe cannot run it. What matters for memory is which tensors each op allocates, keeps for backward and frees,
and that is written out in liger's Python wrappers around the kernels. The autograd functions below reproduce that,
op for op, with torch operations that compute the same values (so a real CPU run of them is a correct step) and
allocate nothing the kernel does not, except row-chunked temporaries of at most 1/16 of an output (the kernel
keeps those in registers). Read from liger-kernel v0.8.2 (LF requires >= 0.6.3, requirements/liger-kernel.txt):

* fused linear cross-entropy, ``ops/fused_linear_cross_entropy.py:21-336``: ``grad_input``/``grad_weight``
  zero-filled up front, an fp32 ``loss_1d``, the ``target != ignore_index`` mask, then per chunk of
  ``next_power_of_2(ceil(BT / ceil(V / H)))`` rows the chunk's logits, whose loss gradient the kernel writes in
  place, the ``chunk × H`` product copied into ``grad_input`` and the ``grad_weight`` update (an in-place fp32
  ``addmm`` on torch >= 2.8, else ``mm(...).float()``); both gradients are saved for a backward that only scales
  them. The patched forward skips ``lm_head`` in training with labels (``transformers/model/qwen2.py:87-105``) and
  shifts the labels by padding (``transformers/model/loss_utils.py:84-94``);
* RMSNorm, ``ops/rms_norm.py:436-460`` and ``:513-560``: Y in X's dtype, an fp32 rstd per row, ``save_for_backward(X,
  W, RSTD)`` (:657), dX written into dY (``in_place=True``, ``transformers/rms_norm.py``), dW from fp32 partial
  sums;
* SwiGLU, ``ops/swiglu.py:149-227``: ``c = empty_like(a)``, ``save_for_backward(a, b)`` (:262), the gradients of a
  and b written into a and b.

RoPE is left as transformers runs it: liger's version rotates q and k in place, and transformers' keeps only cos
and sin for backward too, so the saved tensors are the same (only a forward temporary differs).
"""

from __future__ import annotations

import types
from typing import Any

from finetune_doctor.probes.fakemode import load_torch

_ROW_SPLIT = 16   # row chunks of the stand-ins' elementwise temporaries (the kernels keep them in registers)


def _rows(n: int) -> list[tuple[int, int]]:
    step = max(-(-n // _ROW_SPLIT), 1)
    return [(i, min(i + step, n)) for i in range(0, n, step)]


def _functions():
    torch = load_torch()
    F = torch.nn.functional
    from finetune_doctor.analyzers.memory.logits import flce_chunk_tokens

    class FusedLinearCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, target, addmm_out_dtype):
            BT, H = x.shape
            V = weight.shape[0]
            grad_input = torch.zeros_like(x)
            grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
            loss_1d = torch.zeros(BT, dtype=torch.float32, device=x.device)
            mask = target != -100
            n = mask.sum().clamp(min=1)
            chunk = flce_chunk_tokens(BT, H, V)
            for s in range(0, BT, chunk):
                e = min(s + chunk, BT)
                xc, tc = x[s:e], target[s:e]
                logits = xc @ weight.t()
                _ce_grad_in_place(torch, logits, tc, mask[s:e], n, loss_1d[s:e])
                grad_input[s:e] = logits @ weight
                if grad_weight is not None:
                    _accumulate_grad_weight(torch, grad_weight, logits, xc, addmm_out_dtype)
                del logits
            ctx.save_for_backward(grad_input, grad_weight)
            return loss_1d.sum()

        @staticmethod
        def backward(ctx, grad_output):
            grad_input, grad_weight = ctx.saved_tensors
            grad_input.mul_(grad_output.to(grad_input.dtype))
            if grad_weight is not None:
                grad_weight.mul_(grad_output.to(grad_weight.dtype))
            return grad_input, grad_weight, None, None

    class RMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps, offset):
            shape = x.shape
            x2 = x.reshape(-1, shape[-1])
            y = torch.empty_like(x2)
            rstd = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
            w = weight.float() + offset
            for s, e in _rows(x2.shape[0]):
                xf = x2[s:e].float()
                rstd[s:e] = torch.rsqrt(xf.pow(2).mean(-1) + eps)
                y[s:e] = (xf * rstd[s:e, None]).to(x.dtype) * w.to(x.dtype)
            ctx.save_for_backward(x2, weight, rstd)
            ctx.offset, ctx.shape = offset, shape
            return y.view(shape)

        @staticmethod
        def backward(ctx, dy):
            x2, weight, rstd = ctx.saved_tensors
            # a training step hands a dense gradient (contiguous() is a no-op); a broadcast one gets its own copy
            dy2 = dy.contiguous().reshape(-1, x2.shape[-1])
            w = weight.float() + ctx.offset
            dw = torch.zeros(x2.shape[-1], dtype=torch.float32, device=x2.device) if weight.requires_grad else None
            for s, e in _rows(x2.shape[0]):
                xhat = x2[s:e].float() * rstd[s:e, None]
                g = dy2[s:e].float()
                if dw is not None:
                    dw += (g * xhat).sum(0)
                gw = g * w
                dx = rstd[s:e, None] * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
                dy2[s:e] = dx.to(dy2.dtype)     # dX is written into dY (in_place=True)
            return dy2.view(ctx.shape), (dw.to(weight.dtype) if dw is not None else None), None, None

    class SiLUMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            c = torch.empty_like(a)
            a2, b2, c2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), c.view(-1, c.shape[-1])
            for s, e in _rows(a2.shape[0]):
                c2[s:e] = F.silu(a2[s:e]) * b2[s:e]
            ctx.save_for_backward(a, b)
            return c

        @staticmethod
        def backward(ctx, dc):
            a, b = ctx.saved_tensors
            a2, b2, d2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), dc.reshape(-1, dc.shape[-1])
            for s, e in _rows(a2.shape[0]):
                sig = torch.sigmoid(a2[s:e].float())
                af, bf, df = a2[s:e].float(), b2[s:e].float(), d2[s:e].float()
                db = df * af * sig
                da = df * bf * sig * (1 + af * (1 - sig))
                a2[s:e] = da.to(a2.dtype)        # written into a and b, as the kernel does
                b2[s:e] = db.to(b2.dtype)
            return a, b

    return FusedLinearCrossEntropy, RMSNorm, SiLUMul


def _ce_grad_in_place(torch: Any, logits: Any, target: Any, valid: Any, n: Any, loss_out: Any) -> None:
    """Per-row cross-entropy and its gradient ``(softmax - onehot) / n`` written into `logits` (mean reduction
    over the `n` non-ignored tokens), with only per-row temporaries."""
    t = target.clamp(min=0).unsqueeze(1)
    m = logits.amax(-1, keepdim=True)
    logits.sub_(m)
    tgt = logits.gather(1, t).float()
    logits.exp_()
    s = logits.sum(-1, keepdim=True, dtype=torch.float32)
    loss_out.copy_(((s.log() - tgt).squeeze(1) * valid) / n)
    logits.div_(s.to(logits.dtype))
    logits.scatter_add_(1, t, torch.full_like(t, -1, dtype=logits.dtype))
    logits.mul_((valid.to(logits.dtype) / n.to(logits.dtype)).unsqueeze(1))


def _accumulate_grad_weight(torch: Any, grad_weight: Any, grad_logits: Any, x: Any, addmm_out_dtype: bool) -> None:
    """``grad_weight += grad_logitsᵀ x``: liger's in-place fp32 ``addmm`` (fused_linear_cross_entropy.py:235-255)
    is mimicked in vocabulary blocks of 1/16; otherwise ``mm(...).float()`` as at :257."""
    V = grad_weight.shape[0]
    if addmm_out_dtype and grad_weight.dtype == torch.float32 and grad_logits.dtype != torch.float32:
        for s, e in _rows(V):
            grad_weight[s:e].add_(torch.mm(grad_logits[:, s:e].t(), x.to(grad_logits.dtype)).float())
    else:
        grad_weight.add_(torch.mm(grad_logits.t(), x.to(grad_logits.dtype)).float())


def _is_rmsnorm(mod: Any) -> bool:
    return type(mod).__name__.endswith("RMSNorm") and getattr(mod, "weight", None) is not None


def apply_liger(model: Any, spec: Any, notes: list[str]) -> None:
    """Patch `model` (the transformers causal LM, before peft wraps it) as liger's ``apply_liger_kernel_to_*``
    does, with the stand-ins of this module: RMSNorm modules (`spec.liger_rms_norm`), gated MLPs
    (`spec.liger_swiglu`), and the causal LM's forward for the fused loss (`spec.liger_flce`)."""
    torch = load_torch()
    FLCE, RMS, SILU = _functions()
    patched = []
    if spec.liger_rms_norm:
        for mod in model.modules():
            if _is_rmsnorm(mod):
                eps = float(getattr(mod, "variance_epsilon", getattr(mod, "eps", 1e-6)))
                # Gemma's norm scales by (1 + weight): liger's offset=1.0 (monkey_patch.py, gemma patches)
                offset = 1.0 if "Gemma" in type(mod).__name__ else 0.0
                mod.forward = types.MethodType(lambda self, x, eps=eps, off=offset: RMS.apply(x, self.weight, eps, off),
                                               mod)
        patched.append("RMSNorm")
    if spec.liger_swiglu:
        for mod in model.modules():
            if all(hasattr(mod, k) for k in ("gate_proj", "up_proj", "down_proj", "act_fn")):
                mod.forward = types.MethodType(
                    lambda self, x: self.down_proj(SILU.apply(self.gate_proj(x), self.up_proj(x))), mod)
        patched.append("SwiGLU")
    if spec.liger_flce:
        _patch_loss(torch, model, FLCE, bool(spec.flce_addmm_out_dtype))
        patched.append("fused linear cross-entropy")
    if patched:
        notes.append("liger-kernel simulated by stand-ins that allocate and save what its kernels do ("
                     + ", ".join(patched) + "; probes/liger.py): Triton cannot run on fake tensors")


def _patch_loss(torch: Any, model: Any, flce: Any, addmm_out_dtype: bool) -> None:
    """The causal LM's forward as liger's ``lce_forward``: in training with labels the decoder's last hidden
    states go straight into the fused loss and lm_head is never called."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    original = model.forward
    F = torch.nn.functional

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                **kwargs):
        if labels is None or not self.training:
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            inputs_embeds=inputs_embeds, labels=labels, **kwargs)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         inputs_embeds=inputs_embeds)
        hidden = out.last_hidden_state
        head = self.get_output_embeddings()
        for hook in list(head._forward_pre_hooks.values()):   # the probe's segment marker for the loss
            hook(head, (hidden,))
        shift = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        H = hidden.shape[-1]
        loss = flce.apply(hidden.reshape(-1, H), head.weight, shift.view(-1), addmm_out_dtype)
        return CausalLMOutputWithPast(loss=loss, logits=None)

    model.forward = types.MethodType(forward, model)
