"""PyTorch's "Expected all tensors to be on the same device" read with the setting that most often puts a second
device into one operation (issue #25).

The dispatcher raises it when one operator gets tensors on two devices (aten's ``TensorIterator`` / the device
check of a generated wrapper: "Expected all tensors to be on the same device, but found at least two devices,
cuda:3 and cuda:0! (when checking argument for argument index in method wrapper_CUDA__index_select)"). Which
setting put the second device there is what the words beside the line decide:

- a Ray launch (``USE_RAY=1`` with ``ray_num_workers`` / ``resources_per_worker``): LLaMA-Factory runs
  ``ray_num_workers`` training workers of ``resources_per_worker`` each (RayArguments: 1 worker, ``{"GPU": 1}``;
  hparams/training_args.py), so a worker given several GPUs is one process that sees them all (LlamaFactory#7084:
  ``ray_num_workers: 1`` with ``GPU: 4``; the answer: one GPU per worker, as many workers as GPUs);
- an RL run (GRPO, PPO, vLLM generation): a model beside the policy on a card of its own, the generation engine
  most often (TRL before 0.18 ran vLLM on a device of its own, ``vllm_device``, "auto" taking a card after the
  training processes'; huggingface.co/docs/trl vllm_integration; QunBB/DeepLearning#6: "auto" failed where
  "cuda:0" ran), or a reward/reference model loaded with its own device map;
- otherwise one process spread over several GPUs (``device_map: auto``, a plain ``python`` launch that sees several
  GPUs), crashcause.py's general reading.

Each lead says it is the likely one and names the input that decides.
"""

from __future__ import annotations

import re

SAME_DEVICE = re.compile(r"Expected all tensors to be on the same device")
RAY_SAID = re.compile(r"\bUSE_RAY\s*=\s*(?:1|true)\b|\bray_num_workers\b|\bresources_per_worker\b", re.I | re.A)
# vLLM as an installed package's line ("- vLLM version: 0.8.4" of `llamafactory-cli env`, which LLaMA-Factory's issue
# template asks for; "vllm==0.8.4" / "vllm 0.8.4" of pip) says it is installed, not that the run generates with it
RL_SAID = re.compile(r"\b(?:grpo|ppo|rlhf|vllm(?![ \t]*(?:version\b|==|\d))|rollouts?|online[ _-]?dpo)(?:_\w+)?\b",
                     re.I | re.A)


def two_devices(msg: str, words: str) -> str | None:
    """The likely setting behind the same-device error `msg` from `words` (the user's words, the line and the short
    file beside it; module docstring), or None when the message is another or the words name no such setting (the
    general reading of crashcause.py `_environment` applies then)."""
    if not SAME_DEVICE.search(msg):
        return None
    if RAY_SAID.search(words):
        return ("most likely a Ray worker given several GPUs: under USE_RAY=1 LLaMA-Factory starts ray_num_workers "
                "training workers with resources_per_worker each (default one GPU), so a worker with more is one "
                "process that sees several cards and one operation meets tensors on two of them; set "
                "ray_num_workers to the number of GPUs and resources_per_worker to {GPU: 1}. The input that "
                "decides: ray_num_workers and resources_per_worker in the YAML against the GPUs given")
    m = RL_SAID.search(words)
    if m:
        return (f"most likely a model beside the policy sits on another card (the words name {m.group(0)}): the "
                "generation engine (vLLM on a device of its own: TRL's vllm_device, whose \"auto\" takes a card "
                "after the training processes') or a reward/reference model loaded with its own device map, whose "
                "outputs meet the policy's tensors; pin it to the card the trainer expects (an explicit "
                "vllm_device such as cuda:0 where the trainer's scripts say so) or turn vLLM off to confirm. The "
                "input that decides: the device each model is put on (vllm_device or the vLLM mode, the reward "
                "model's device map) against the cards the training processes use")
    return None
