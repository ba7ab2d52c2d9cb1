"""Vision-language terms (issues #21/#23, session vl12): the tower's video patches at LF's bounds, the release's
default bounds, the image-pixels assumption's video alternative, and what full fine-tuning trains outside the
decoder when ``freeze_vision_tower`` / ``freeze_multi_modal_projector`` are false. Every expected value is computed
by hand in the comments (Qwen2-VL: 14-pixel patches merged 2 × 2; temporal patch 2)."""

from __future__ import annotations

import json
from pathlib import Path

from finetune_doctor.analyzers.memory.params import count_params, frozen_extra
from finetune_doctor.analyzers.memory.vision import max_image_tokens, max_patches_per_image, max_video_patches, \
    vision_terms
from finetune_doctor.hardware.catalog import parse_gpu_spec
from finetune_doctor.readers.model.modelcfg import load_arch
from finetune_doctor.run import resolve_run

CATALOG = Path(__file__).resolve().parent.parent / "finetune_doctor" / "catalog"
QWEN2VL = {"model_name_or_path": "Qwen/Qwen2-VL-7B-Instruct", "stage": "sft", "finetuning_type": "full",
           "template": "qwen2_vl", "bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 2048}


def _run(cfg: dict, gpu: str = "1xA100-80GB"):
    arch, _ = load_arch(cfg["model_name_or_path"])
    return resolve_run(cfg, arch, parse_gpu_spec(gpu), None)


def test_image_tokens_at_the_default_bound_by_hand():
    # 768 x 768 = 589,824 px; 589,824 // 14² = 3,009 patches (196 · 3,009 = 589,764); 3,009 // 2² = 752 tokens
    assert max_patches_per_image(768 * 768) == 3009
    raw = _run(QWEN2VL).arch.raw
    assert max_image_tokens(raw, 768 * 768) == 752
    # the processor's own cap (preprocessor_config.json max_pixels 12,845,056 = 16,384 · 28²) bounds a larger setting
    assert max_image_tokens(raw, 10**9) == 16384


def test_video_patches_by_hand():
    # 256 x 256 = 65,536 px per frame → 65,536 // 196 = 334 patches; 128 frames → ceil(128 / 2) = 64 slices
    assert max_video_patches(65536, 128) == (64 * 334, 334) == (21376, 334)
    # an odd frame count rounds up to the temporal patch: 3 frames → 2 slices
    assert max_video_patches(65536, 3) == (668, 334)
    assert max_video_patches(65536, 0) == (0, 334)


def test_release_defaults_are_the_largest_bounds_the_assumption_offers():
    keys = json.loads((CATALOG / "lf_keys.json").read_text(encoding="utf-8"))["keys"]
    rel = json.loads((CATALOG / "lf_releases.json").read_text(encoding="utf-8"))["keys"]
    run = _run(QWEN2VL)
    # LF 0.9.5 defaults as the catalogue read them from the release
    assert run.image_max_pixels == keys["image_max_pixels"]["default"] == 589824
    assert run.video_max_pixels == keys["video_max_pixels"]["default"] == 65536
    # video_maxlen: 64 in 0.9.0-0.9.1, 128 from 0.9.2; the unknown release takes the larger
    assert run.video_maxlen == max(rel["video_maxlen"]["default"].values()) == 128


def test_video_alternative_is_weighed_by_vision_terms():
    base = _run({**QWEN2VL, "finetuning_type": "lora", "per_device_train_batch_size": 4})
    work_img, _saved, per_image = vision_terms(base)
    work_vid, _saved2, _ = vision_terms(base.with_(video_frames=base.video_maxlen))
    assert per_image == 3009
    # Qwen2-VL-7B tower: width 1280, QuickGELU MLP 5120 (2 matrices): per patch max(attn, ffn) with e = 2 bytes:
    # attn (5·2 + 24)·1280 = 43,520; ffn 2·2·1280 + 3·2·5120 = 35,840 → 43,520; plus rotary tables 2·4·80 = 640
    # and pixel values 3·2·196·4 = 4,704 → 48,864 bytes per patch (sdpa: no score matrix)
    per_patch = 43520 + 640 + 4704
    assert work_img == 4 * 3009 * per_patch
    assert work_vid == 4 * 21376 * per_patch


def test_assumption_offers_the_video_alternative():
    from finetune_doctor.analyzers.memory.assumed import video_alternative

    run = _run(QWEN2VL)
    assert video_alternative(run) == ("one video per sample: 128 frames at video_max_pixels=65536 "
                                      "(21376 patches)")


def test_full_tuning_trains_the_tower_only_when_unfrozen():
    llava = {**QWEN2VL, "model_name_or_path": "llava-hf/llava-1.5-7b-hf", "template": "llava"}
    run = _run(llava)
    parts = dict(run.arch.extra_parts)
    # CLIP ViT-L/14-336 tower 303,507,456 and the 2-layer projector 1024·4096 + 4096 + 4096·4096 + 4096 = 20,979,712
    tower, proj = parts["vision_tower"], parts["projector"]
    assert (tower, proj) == (303507456, 1024 * 4096 + 4096 + 4096 * 4096 + 4096)
    frozen = count_params(run)
    assert frozen_extra(run) == run.arch.extra_params
    # LF model_utils/visual.py:173-193: vision keys under freeze_vision_tower, projector keys under
    # freeze_multi_modal_projector; the rest of the model upcast and trained (adapter.py:48-54)
    assert count_params(_run({**llava, "freeze_multi_modal_projector": False})).trainable - frozen.trainable == proj
    vt = count_params(_run({**llava, "freeze_vision_tower": False}))
    assert vt.trainable - frozen.trainable == tower
    both = count_params(_run({**llava, "freeze_vision_tower": False, "freeze_multi_modal_projector": False}))
    assert both.trainable - frozen.trainable == tower + proj
    # Qwen2-VL: one part (the merger inside `visual`) follows freeze_vision_tower here
    q = _run({**QWEN2VL, "freeze_vision_tower": False})
    assert count_params(q).trainable - count_params(_run(QWEN2VL)).trainable == q.arch.extra_params == 675759104
    # LoRA is untouched by the flags
    lora = {**QWEN2VL, "finetuning_type": "lora", "lora_target": "all"}
    assert count_params(_run(lora)).trainable == count_params(_run({**lora, "freeze_vision_tower": False})).trainable


def test_release_defaults_of_older_releases():
    from finetune_doctor.run.resolve import media_knobs

    # LF 0.9.0 hparams/model_args.py:59-74: image_resolution 512 (a side: at most 512² = 262,144 px), video 128 px
    # (128² = 16,384), video_maxlen 64; no freeze_multi_modal_projector (the projector trains under full tuning)
    old = media_knobs({}, (0, 9, 0))
    assert (old["image_max_pixels"], old["video_max_pixels"], old["video_maxlen"],
            old["freeze_multi_modal_projector"]) == (262144, 16384, 64, False)
    new = media_knobs({}, (0, 9, 5))
    assert (new["image_max_pixels"], new["video_max_pixels"], new["video_maxlen"],
            new["freeze_multi_modal_projector"]) == (589824, 65536, 128, True)
    # unknown release: the largest bounds; a YAML value wins over any default
    assert media_knobs({}, None) == new
    assert media_knobs({"image_max_pixels": 1000, "video_maxlen": 8}, (0, 9, 0))["image_max_pixels"] == 1000
    # through resolve_run: the stated release reaches the run
    arch, _ = load_arch(QWEN2VL["model_name_or_path"])
    run = resolve_run(QWEN2VL, arch, parse_gpu_spec("1xA100-80GB"), None, stack={"llamafactory": "0.9.0"},
                      stack_sources=(("llamafactory", "0.9.0", "--llamafactory"),))
    assert (run.image_max_pixels, run.video_maxlen) == (262144, 64)


def test_llava_clip_tower_by_hand():
    from finetune_doctor.analyzers.memory.clipvision import clip_image_tokens, clip_terms

    llava = {**QWEN2VL, "model_name_or_path": "llava-hf/llava-1.5-7b-hf", "template": "llava",
             "per_device_train_batch_size": 16}
    run = _run(llava)
    # 336 px / 14 px = 24 → 576 patches + the class token = 577; 576 tokens (vision_feature_select_strategy default)
    assert clip_image_tokens(run.arch.raw) == 576
    # CLIP ViT-L: 24 layers, D 1024, M 4096, e 2: per patch 25·2·1024 = 51,200 hidden-state bytes + max(2·1024 +
    # 4·2·4096, 5·2·1024) = 34,816 → 86,016 bytes; 16 images · 577 patches
    work, saved, patches = vision_terms(run)
    assert (patches, work, saved) == (577, 16 * 577 * 86016, 0.0)
    # a trained tower keeps each layer's input: 24 · 1024 · 2 bytes per patch
    assert vision_terms(_run({**llava, "freeze_vision_tower": False}))[1] == 16 * 577 * 24 * 1024 * 2
    assert clip_terms({"model_type": "qwen2_vl"}, 1, False) == (0.0, 0.0, 0)


def test_llava_lists_images_per_sample_not_pixels():
    from finetune_doctor.analyzers.memory.assumed import term_assumptions
    from finetune_doctor.analyzers.memory.terms import compute_terms

    run = _run({**QWEN2VL, "model_name_or_path": "llava-hf/llava-1.5-7b-hf", "template": "llava"})
    names = {a.name: a for a in term_assumptions(run, None, compute_terms(run))}
    assert "image-pixels" not in names and names["images-per-sample"].value == 1
    assert "576 tokens each" in names["images-per-sample"].source
