"""What the upstream-derived terms (zero3, qlora, ddp, npu, vision, hostsave) used without reading it from the
user's inputs, as `Assumption` values (docs/DESIGN.md "Honest verdicts"). `estimate` puts them in
``details["assumptions"]``; the pipeline that builds `Report.assumptions` can lift them from there. Effects are left
empty here: evaluating each alternative is the verdict module's work."""

from __future__ import annotations

from typing import Any

from finetune_doctor.analyzers.memory.clipvision import clip_image_tokens
from finetune_doctor.analyzers.memory.npu import HCCL_BUFFSIZE_MB, is_npu
from finetune_doctor.analyzers.memory.qlora import BNB_OLD, BNB_READ, bnb_version, is_bnb4
from finetune_doctor.analyzers.memory.vision import max_patches_per_image, max_video_patches
from finetune_doctor.run import Run
from finetune_doctor.types import Assumption, Hardware


VIDEO_ALT = "one video per sample: {frames} frames at video_max_pixels={px} ({patches} patches)"


def video_alternative(run: Run) -> str:
    """The image-pixels assumption's video alternative: a sample holding one video at LF's bounds, the most a
    sample of a video-capable Qwen-VL tower can bring (``video_maxlen`` frames, each at ``video_max_pixels``;
    vision.py `max_video_patches`). facts/assume.py `_terms` evaluates it with ``Run.video_frames``."""
    patches, _chunk = max_video_patches(run.video_max_pixels, run.video_maxlen)
    return VIDEO_ALT.format(frames=run.video_maxlen, px=run.video_max_pixels, patches=patches)


def term_assumptions(run: Run, hw: Hardware | None, t: Any) -> list[Assumption]:
    """The assumptions behind `t` (analyzers.memory.terms.Terms) for `run` on `hw`."""
    out: list[Assumption] = []
    if getattr(t, "vision", 0.0) and clip_image_tokens(run.arch.raw) is not None:
        # LLaVA-1.5: every image becomes 336 x 336 px (clipvision.py), so only how many a sample holds is unknown
        out.append(Assumption(
            "images-per-sample", 1,
            f"the dataset was not read: one image per sample assumed ({clip_image_tokens(run.arch.raw)} tokens each, "
            "whatever its size: the CLIP processor resizes it to the tower's image_size); samples may hold 2 or 4, "
            "or none in a text-only dataset",
            alternatives=(2, 4), resolve_with="doctor data CONFIG.yaml on the training machine (or --context)"))
    elif getattr(t, "vision", 0.0):
        # one assumption, not two: the data was not read here (data read here with no media leaves no vision term,
        # facts/config.py `text_only`), so how many images a sample holds (2, 4, or none in a text-only dataset) is
        # the same unknown as their size; a user read two image lines for a text-only dataset as a claim (trial 11
        # case 01, LlamaFactory#10219)
        out.append(Assumption(
            "image-pixels", run.image_max_pixels,
            f"the dataset was not read: one image per sample assumed, at the image_max_pixels bound, the largest "
            f"size LF lets through ({max_patches_per_image(run.image_max_pixels)} patches); samples may hold 2 or "
            f"4, or none in a text-only dataset (no vision term); or a video (video_maxlen frames at "
            f"video_max_pixels each, weighed as an alternative)",
            alternatives=(run.image_min_pixels, video_alternative(run)),
            resolve_with="doctor data CONFIG.yaml on the training machine (or --context), image_max_pixels in the "
                         "YAML"))
    if is_npu(hw) and run.world_size > 1:
        out.append(Assumption(
            "hccl-buffsize", f"{HCCL_BUFFSIZE_MB:.0f} MB", "CANN default (HCCL_BUFFSIZE unset or not read)",
            alternatives=("50 MB", "512 MB"), resolve_with="HCCL_BUFFSIZE in the launch environment"))
    if is_npu(hw):
        out.append(Assumption(
            "npu-runtime", "the CUDA context constant", "no torch_npu/CANN source states the runtime's own usage",
            resolve_with="npu-smi on the training machine (doctor context)"))
    if getattr(t, "host_save", 0.0) and run.finetuning_type in ("lora", "oft") and not any(
            p == "transformers" for p, _v, _s in run.stack_sources):
        # the alternative changes host RAM, not the GPU total the effects are measured in: say its size in it
        extra = max(getattr(t, "host_save_whole", 0.0) - t.host_save, 0.0) / 2**30
        out.append(Assumption(
            "save-gathers-adapter-only", True, "transformers >= 5 assumed: it gathers only the adapter of a PEFT "
                                               "model at a ZeRO-3 save (hostsave.py)",
            alternatives=(f"False (transformers < 5 gathers the whole model: +{extra:,.0f} GiB of host RAM on "
                          "rank 0's node at each save)",),
            resolve_with="--transformers VERSION, or --context from the training machine"))
    # FSDP and Megatron size their activations elsewhere (fsdp.py, megatron.py), without this term
    own_engine = (run.engine == "fsdp" and not run.deepspeed) or run.engine == "megatron"
    if is_bnb4(run) and not run.use_unsloth and not own_engine and bnb_version(run) is None:
        out.append(Assumption(
            "bitsandbytes-version", BNB_READ,
            "not read: the release the QLoRA terms were read from (its 4-bit matmul keeps no input for backward); "
            "releases before 0.43.2 keep every 4-bit linear's input",
            alternatives=(BNB_OLD,),
            resolve_with="--context from `doctor context` on the training machine, or --env FILE "
                         "(its pip freeze or `llamafactory-cli env`)"))
    return out
