"""Whether the training machine's stack refuses ``bf16: true`` on a card without bf16 units (compute capability < 8).

transformers' TrainingArguments.__post_init__ raises "Your setup doesn't support bf16/gpu" when
``is_torch_bf16_gpu_available()`` is False (training_args.py; LLaMA-Factory's ``pure_bf16`` check in
hparams/parser.py:498-500 asks the same function). What that function answers on a pre-Ampere card changed twice:

* transformers < 4.35 tested the card itself: compute capability < 8 or CUDA < 11 -> False (utils/import_utils.py
  as of huggingface/transformers#17734, 2022), so it refuses on V100/T4/2080 Ti whatever the torch.
* transformers >= 4.35 returns ``torch.cuda.is_bf16_supported()`` (huggingface/transformers#25879, merged for 4.35;
  the 4.45.0 copy in .lf-releases/0.9.0 reads ``torch.cuda.is_available() and torch.cuda.is_bf16_supported()``).
* torch < 2.3 answers False below compute capability 8 (it tested the capability and CUDA >= 11); torch >= 2.3
  falls back to creating a bf16 tensor on the card (pytorch/pytorch#115924, merged 2024-01-01, first in 2.3.0), which
  Turing and Volta do by emulation, so it answers True (torch 2.13 torch/cuda/__init__.py ``is_bf16_supported``,
  ``including_emulation=True`` by default) and the run starts, emulating bf16 in fp32 at a large cost in speed.

So the refusal is certain only when transformers < 4.35 or torch < 2.3 is known; with transformers >= 4.35 and
torch >= 2.3 known the run starts; otherwise it depends on versions the inputs do not give (hiyouga/LlamaFactory#6687:
bf16 on a 2080 Ti with torch 2.5 and transformers 4.45 trained until the host killed it).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.numbers import parse_version

TRANSFORMERS_ASKS_TORCH = (4, 35)
TORCH_EMULATES = (2, 3)


def _v(text: str | None) -> tuple[int, ...] | None:
    """(major, minor) of a version as read, by numbers.py's one version reader; None without both."""
    v = parse_version(str(text)) if text else None
    return v[:2] if v and len(v) >= 2 else None


def bf16_refusal(torch_version: str | None, transformers_version: str | None) -> dict[str, Any]:
    """``bf16_refused`` (True: this stack raises at start-up on a card without bf16; False: it starts, emulating
    bf16; None: the versions that decide are not known) and ``bf16_stack`` (True: the versions it was decided on, a
    noun phrase; False/None: a clause saying what lets it start or would decide it), for `torch_version` / `transformers_version` as read ("2.5.0+cu121", "4.45.2"; None: not read)."""
    tv, fv = _v(torch_version), _v(transformers_version)
    if fv is not None and fv < TRANSFORMERS_ASKS_TORCH:
        return {"bf16_refused": True, "bf16_stack": f"transformers {transformers_version} (< 4.35 tests the card)"}
    if tv is not None and tv < TORCH_EMULATES:
        return {"bf16_refused": True, "bf16_stack": f"torch {torch_version} (< 2.3 answers no below compute "
                                                    f"capability 8)"}
    if tv is not None and fv is not None:
        return {"bf16_refused": False, "bf16_stack": f"torch {torch_version} and transformers {transformers_version}"
                                                     " let it start (>= 2.3 and >= 4.35 accept an emulated bf16)"}
    missing = " and ".join(n for n, v in (("torch", tv), ("transformers", fv)) if v is None)
    return {"bf16_refused": None, "bf16_stack": f"the training machine's {missing} (not given) decide whether it "
                                                f"starts: transformers < 4.35 or torch < 2.3 refuse it at start-up, "
                                                f"newer ones start with bf16 emulated"}


def stack_versions(opts: Any, env_report: Any, hw: Any) -> tuple[str | None, str | None]:
    """(torch, transformers) of the training machine: --torch/--transformers, then --env, then the packages
    installed here when the GPUs were read here (NVML: this is the training machine)."""
    env = getattr(env_report, "versions", None) or {}
    tv = getattr(opts, "torch_version", None) or env.get("torch")
    fv = getattr(opts, "transformers_version", None) or env.get("transformers")
    if hw is not None and getattr(hw, "source", None) == "nvml":
        from finetune_doctor.readers.dists import installed_version

        tv = tv or installed_version("torch")
        fv = fv or installed_version("transformers")
    return tv, fv
