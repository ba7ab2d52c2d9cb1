"""One process driving several GPUs with ``torch.nn.DataParallel``: what its output device (GPU 0) holds beyond a
one-GPU run of the same micro batch.

When it happens. LLaMA-Factory before 0.8.0 started no launcher of its own: ``llamafactory-cli train`` (0.7.x
``cli.py``, ``Command.TRAIN`` calls ``run_exp()`` in this process) and the older ``python src/train_bash.py`` run
one Python process whatever ``CUDA_VISIBLE_DEVICES`` shows. LLaMA-Factory 0.8.0 ``cli.py:75-76`` is the first
release that starts torchrun itself when more than one device is visible. In that one process the HF Trainer sees
no distributed launch and counts every visible card (transformers 4.40.2 ``training_args.py:2074-2083``:
``self._n_gpu = torch.cuda.device_count()`` on ``cuda:0``), and ``Trainer._wrap_model`` wraps the model in
``nn.DataParallel`` when ``n_gpu > 1`` unless it was loaded in 8 bits (``trainer.py:1627-1629``). LLaMA-Factory
0.7.1 loads the model on the current device, ``cuda:0`` (``hparams/parser.py:284``), and logs ``n_gpu: 2,
distributed training: False`` (``parser.py:289-297``).

What GPU 0 holds, per step (torch 2.13 ``nn/parallel/data_parallel.py:172-197``):

* the model, its gradients and the optimizer's states as a one-GPU run has them. The batch is
  ``per_device_train_batch_size × n_gpu`` (transformers ``training_args.py:1969-1970``), scattered along dim 0,
  so each replica runs ``per_device_train_batch_size`` samples: GPU 0's replica has the activations and logits of
  one micro batch, as a one-GPU run. ``replicate`` broadcasts the parameters from GPU 0 to the others (the copy
  for GPU 0 is the module's own tensors: torch/csrc/cuda/comm.cpp ``broadcast_coalesced`` returns its inputs
  for the source device), and the replicas' gradients are summed back into the module's ``.grad``
  on GPU 0; the optimizer runs there only.
* the gathered outputs: ``gather(outputs, output_device)`` (line 197; ``output_device`` is ``device_ids[0]``,
  line 158) concatenates every replica's output into new tensors on GPU 0 (``nn/parallel/comm.py:222-258``). The
  model's output includes the logits of its micro batch, so GPU 0 holds the logits of the whole batch,
  ``n_gpu × per_device × seq_len × vocab`` elements, beside its own replica's. They live until the Trainer's
  ``compute_loss`` returns the loss alone, before the backward (``training_step`` then averages the replicas'
  gathered losses, transformers 4.40.2 ``trainer.py:3140-3141``): a term of the loss moment (and of an
  evaluation's forward).

Not counted (not measured here): the communicator and staging buffers of the broadcast and of the gradient
reduction (``torch.cuda.comm``), and the inputs' scatter (token ids, a few bytes per token).
"""

from __future__ import annotations

from finetune_doctor.analyzers.memory.logits import logit_dtype_bytes
from finetune_doctor.run import Run


def gathered_logit_bytes(run: Run, tokens: int, training: bool = True) -> float:
    """Bytes of the logits `nn.DataParallel` gathers on GPU 0 for a step whose replicas each run `tokens` tokens
    (micro batch × sequence length): ``dp_replicas × tokens × vocab × e``; 0 when the run is not one process over
    several GPUs (``Run.dp_replicas`` <= 1). A reward model returns TRL's value-head tuple ``(lm_logits, loss,
    value)`` with the vocabulary logits upcast to fp32 (logits.py `value_head_bytes` cites the lines), and
    DataParallel's gather takes every tensor of it: ``dp_replicas × tokens × (vocab + 1)`` fp32 values.

    ``e`` is the dtype of the logits the model returns: fp32 with a transformers whose causal-LM forward upcasts
    them (``Run.shifted_logits_copy``, transformers < 4.49; e.g. 4.40.2 ``models/llama/modeling_llama.py:1231``
    ``logits = logits.float()``, the stacks LLaMA-Factory < 0.8.0 ran with), else lm_head's output dtype
    (logits.py `logit_dtype_bytes`). liger's fused loss returns no logits in training (`training`), so nothing is
    gathered then; in evaluation it computes them (logits.py `eval_logit_bytes`)."""
    n = int(run.dp_replicas or 1)
    if n <= 1 or tokens <= 0:
        return 0.0
    if run.stage == "rm":
        return float(n * tokens * (run.arch.vocab_size + 1) * 4)
    if training and run.liger_flce and run.stage in ("pt", "sft"):
        return 0.0
    e = 4.0 if run.shifted_logits_copy else logit_dtype_bytes(run)
    return float(n) * tokens * run.arch.vocab_size * e
