"""Every NaN / loss-0 / overflow / OOM / NCCL case of ../shared/cases that has a log.txt, as a run directory
(fixtures/postmortem/case_NNN, built by fixtures/postmortem/make_fixtures.py): `doctor postmortem` must put the
case's known cause first, or the test says why the evidence cannot show it.

The expected causes come from each case.md (resolution and diagnostic notes); numbers asserted here are the
case's own (the OOM message, the logged losses), and model sizes come from the bundled catalog.
"""

from __future__ import annotations

import math
import os

import pytest

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "postmortem")
GIB = float(1 << 30)

# the hardware each case reports (case.md), as a --gpu spec
GPU = {"001": "4xA800-80GB", "002": "8xV100-32GB", "025": "8xA800-80GB", "031": "8xA800-80GB", "035": "8xL40",
       "047": "4xA6000"}


def diagnose(n: str, **kw):
    d = os.path.join(FIX, f"case_{n}")
    opts = Options(command="postmortem", gpu=kw.pop("gpu", GPU.get(n)))
    return pm.run(d, [], os.path.join(d, "config.yaml"), opts, **kw)


def top(report) -> str:
    assert report.findings, "no findings"
    return report.findings[0].name


def names(report) -> list[str]:
    """The postmortem rules' findings (FD3xx), in order; the config-level rules of `check` that also run on the
    run's config (test_postmortem_inputs.py) follow them and are left out here."""
    return [f.name for f in report.findings if f.code.startswith("FD3")]


def kinds(report) -> list[tuple]:
    return [(e.step, e.kind) for e in report.timeline]


# -- OOM -------------------------------------------------------------------------------------------------------

def test_001_optimizer_state_shard_of_a_13b_model_on_4_gpus():
    """Known cause (maintainer): full FT of Baichuan2-13B with ZeRO-2 on 4 GPUs needs ZeRO-3. The failed 12.94 GiB
    is exactly 4·P/N with P = 13,896,668,160 (catalog) and N = 4: one fp32 optimizer-state partition."""
    r = diagnose("001")
    assert top(r) == "cuda-oom"
    f = r.findings[0]
    assert "4·P/N" in f.message and "optimizer-state partition" in f.message
    from finetune_doctor.readers.model.modelcfg import load_arch

    P = load_arch("baichuan-inc/Baichuan2-13B-Chat")[0].total_params()
    assert abs(4 * P / 4 / GIB - 12.94) < 0.005
    # the remedy planner of `doctor check` proposes ZeRO-3, the maintainer's fix
    assert f.fix is not None and any(e.key == "zero_optimization.stage" and e.value == 3 for e in f.fix.edits)


def test_002_adam_temporary_at_the_first_optimizer_step():
    """Known cause: ZeRO-2 with LLaMA-7B on 8 V100-32GB; the OOM is in AdamW's `exp_avg_sq.sqrt()` and 3.14 GiB
    = 4·P/8 for P = 6.74B; ZeRO-3 made it run (reporter)."""
    r = diagnose("002")
    assert top(r) == "cuda-oom"
    msg = r.findings[0].message
    assert "first optimizer step" in msg and "4·P/N = 3.14 GiB" in msg and "N = 8" in msg
    assert any(e.key == "zero_optimization.stage" and e.value == 3 for e in r.findings[0].fix.edits)


def test_011_other_ranks_on_gpu0():
    """Four 398 MiB processes beside a 21.98 GiB one on GPU 0: other ranks' CUDA contexts on cuda:0 while rank 0
    holds an unsharded 13B model (case notes). Phase: trainer init (model placement)."""
    r = diagnose("011")
    assert top(r) == "foreign-memory-on-gpu"
    assert "4 other processes hold 398.00 MiB" in r.findings[0].message
    oom = next(f for f in r.findings if f.name == "cuda-oom")
    assert "phase: model load" in oom.message


def test_025_traceback_without_its_exception():
    """The reported OOM text is not in the excerpt: only the progress bar at 129/882 and 'Traceback (most recent
    call last):'. The evidence shows a crash during step 130 (15 %) and cannot show that it was an OOM."""
    r = diagnose("025")
    assert top(r) == "run-crashed"
    assert "during step 130 (15% of 882)" in r.findings[0].message
    assert "cuda-oom" not in names(r)


def test_031_zero3_without_offload_33b():
    """33B full FT with ZeRO-3 and no offload on 8×80 GB (the states alone are ~66 GB/GPU). The reporter's fix was
    ZeRO-3 *offload*; the 3.50 GiB request matches no model-sized tensor, so the phase is not claimed."""
    r = diagnose("031")
    assert top(r) == "cuda-oom"
    f = r.findings[0]
    assert "tried to allocate 3.50 GiB on GPU 3" in f.message and "·P" not in f.message
    assert f.fix is not None and any("offload_optimizer" in e.key for e in f.fix.edits)


def test_035_memory_held_by_someone_else():
    """9.29 GiB reserved by the process but only 41 MiB free of 44.32 GiB: ~35 GB belongs to other processes."""
    r = diagnose("035")
    assert top(r) == "foreign-memory-on-gpu"
    held = 44.32 - 41.0 / 1024 - 9.29 - 0.5     # minus one CUDA context of this process
    assert f"{held:.2f} GiB of GPU 0 is in use but not by this process" in r.findings[0].message


def test_037_imbalance_is_read_but_judged_by_doctor_gpus():
    """The log is a per-card memory summary (41.73 GB vs 26 GB), no OOM text. The evidence is read (GPU peaks in
    the postmortem section); judging imbalance is the `gpus` rule FD501's job, which does not run here."""
    r = diagnose("037")
    peaks = {g["index"]: g["peak_gib"] for g in r.sections["postmortem"]["gpus"]}
    assert peaks == {6: 41.73, 7: 26.0}
    assert not any(f.severity == "error" for f in r.findings if f.code.startswith("FD3"))


# -- NaN / loss 0 ------------------------------------------------------------------------------------------------

def test_041_learning_rate_5e_2():
    """LoRA at lr 5e-2 (500× usual): loss 0.0 with grad_norm nan from the first log (steps 5, 10, 15)."""
    r = diagnose("041")
    assert top(r) == "learning-rate-too-high-confirmed"
    fix = r.findings[0].fix
    assert [(e.key, e.value) for e in fix.edits] == [("learning_rate", 1e-4)]
    assert {"nan-loss", "loss-stuck-zero"} <= set(names(r))
    assert (5, "nan") in kinds(r)


def test_046_nan_at_step_one_with_zero_learning_rate():
    """grad_norm nan at step 1 with learning_rate 0.0: the optimizer cannot be the cause; the fix that worked was
    the attention kernel (sdpa -> fa2, #9631)."""
    r = diagnose("046")
    assert top(r) == "nan-loss"
    f = r.findings[0]
    assert "step 1" in f.message and "attention kernel" in f.message
    assert [(e.key, e.value) for e in f.fix.edits] == [("flash_attn", "fa2")]
    # the event file (torch SummaryWriter) and trainer_state.json agree; trainer_state is the chosen source
    assert f.location.file.endswith("trainer_state.json")


def test_047_loss_zero_grad_nan_fragment():
    """Only "'loss': 0.000, 'grad_norm': nan" survives; the fix is not in the thread. The evidence shows the
    hidden-NaN signature from the first log; the likely cause (attention kernel / stack) is what is named."""
    r = diagnose("047")
    assert top(r) == "nan-loss"
    assert "first logged step" in r.findings[0].message
    assert "loss-stuck-zero" in names(r)


def test_049_late_nan_not_in_the_excerpt():
    """The NaN came after the excerpt (a collector's note); the four healthy steps 14780-14810 are all the
    evidence shows, so no NaN finding is possible."""
    r = diagnose("049")
    assert not any(f.severity == "error" for f in r.findings if f.code.startswith("FD3"))
    assert r.sections["postmortem"]["curves"]["grad_norm"]["points"] == 4
    assert r.sections["postmortem"]["steps"]["last"] == 14810


def test_050_first_loss_344093():
    """bf16 first loss 344093.2 ≫ ln(151936) = 11.93: a broken environment (Windows + RTX 3090, every model)."""
    r = diagnose("050")
    assert top(r) == "first-step-loss-abnormal"
    assert f"{math.log(151936):.2f}" in r.findings[0].message


def test_053_gemma3_eager_warning():
    """The excerpt holds transformers' "train Gemma3 with eager attention" warning; the loss 0 and the error are
    only in a note. The warning is what the evidence shows."""
    r = diagnose("053")
    assert top(r) == "attention-backend-warning"
    assert [(e.key, e.value) for e in r.findings[0].fix.edits] == [("flash_attn", "disabled")]


def test_055_intermittent_nan_not_in_the_excerpt():
    """Only one healthy dict (its epoch cut off) is in the excerpt; the occasional grad_norm nan is in a note."""
    r = diagnose("055")
    assert not any(f.severity == "error" for f in r.findings if f.code.startswith("FD3"))


def test_056_late_nan_at_epoch_066():
    """NaN at epoch 0.66 after healthy training, then loss 0 (NPU, DeepSpeed 0.14.0; fix per commenter: DeepSpeed
    0.14.3 / overlap_comm). The DeepSpeed JSON was not pasted."""
    r = diagnose("056")
    assert top(r) == "nan-loss"
    msg = r.findings[0].message
    assert "epoch 0.66" in msg and "overlap_comm" in msg and "0.14.3" in msg


def test_058_zero2_overlap_comm():
    """NaN at step 1 with lr 1.5e-8 under ZeRO-2 + overlap_comm true; overlap_comm false (or ZeRO-3) fixed it."""
    r = diagnose("058")
    assert top(r) == "nan-loss"
    f = r.findings[0]
    assert "overlap_comm" in f.message and "DeepSpeed#5347" in f.message
    assert [(e.key, e.value) for e in f.fix.edits] == [("zero_optimization.overlap_comm", False)]
    assert f.fix.edits[0].file.endswith("ds_config.json")


def test_067_sqrt2_grad_norm_then_nccl_timeout():
    """grad_norm = 1.4142135 (√2) at steps 10 and 20 while the loss goes 3.55 -> 0, then rank 5's NCCL watchdog
    fires during step 25 (bar at 24/1752)."""
    r = diagnose("067")
    assert top(r) == "constant-grad-norm"
    assert "= √2" in r.findings[0].message
    nccl = next(f for f in r.findings if f.name == "nccl-timeout")
    assert "rank 5 during step 25" in nccl.message
    assert (25, "nccl_timeout") in kinds(r) and (10, "grad_norm_constant") in kinds(r)
    # the tensorboardX event file carries the same float32 √2
    files = [x["path"] for x in r.sections["read"]["files"] if x["kind"] == "event-file"]
    assert files


def test_068_sqrt3_grad_norm():
    r = diagnose("068")
    assert top(r) == "constant-grad-norm"
    assert "1.7320508075688772" in r.findings[0].message and "√3" in r.findings[0].message


# -- fp16 overflow -------------------------------------------------------------------------------------------------

def test_032_benign_calibration_from_2_pow_27():
    """t5-11b trained fine; three early halvings from 134217728 are the scaler calibrating."""
    r = diagnose("032")
    assert names(r) == ["fp16-overflow-benign"]
    assert "134217728 to 16777216" in r.findings[0].message


def test_059_early_overflows_down_to_2048():
    """Six overflows on the first steps, 65536 -> 2048 (hysteresis 2). The thread's fix is not in the excerpt;
    the scale is still ≥ 1024 and every overflow is within the first 20 steps: calibration, with a warning that
    the log ends before it settles."""
    r = diagnose("059")
    assert top(r) == "fp16-overflow-benign"
    assert "65536 to 2048" in r.findings[0].message and "settles" in r.findings[0].message


@pytest.mark.parametrize("n", ["061", "064"])
def test_061_064_min_scale_abort(n):
    """'Current loss scale already at minimum': both threads' advice was bf16. When the model is known to be a
    bf16 checkpoint (061: WizardCoder-33B = deepseek-coder-33b; 064: Llama-2 family) the confirmed
    fp16-on-bf16 rule comes first; the loss-scale collapse is reported either way."""
    r = diagnose(n)
    assert top(r) in ("fp16-on-bf16-model-confirmed", "loss-scale-collapse")
    assert "loss-scale-collapse" in names(r)
    assert ("bf16", True) in [(e.key, e.value) for e in r.findings[0].fix.edits]
    col = next(f for f in r.findings if f.name == "loss-scale-collapse")
    assert "At the minimum loss scale" in col.message


def test_062_overflow_past_calibration():
    """Baichuan-13B QLoRA fp16, lr 1e-3: the scale is at 512 and still being cut at step 23."""
    r = diagnose("062")
    assert top(r) in ("fp16-on-bf16-model-confirmed", "loss-scale-collapse")
    col = next(f for f in r.findings if f.name == "loss-scale-collapse")
    assert "fell to 512" in col.message
    # at 512 the unscaled values are within a factor 512 of fp16's max, not overflowing unscaled
    assert "a scale of only 512" in col.message and "unscaled)" not in col.message


def test_065_collapse_at_step_380():
    """Scale 64 -> 2 over steps 379-383 after ~380 healthy steps (loss 2.0491), then the abort."""
    r = diagnose("065")
    assert top(r) == "loss-scale-collapse"
    assert "64 → 2" in r.findings[0].message
    assert (379, "loss_scale_drop") in kinds(r)


def test_065_steps_agree_and_the_abort_is_a_crash():
    """One step rule across timeline, summary and JSON: overflows 379-383 (each printed after bars 378-382,
    during the next step), the logged loss at 380 (logging_steps 10), last step 383 (a skipped step still
    counts), the abort after step 383's reduction (DeepSpeed logs a reduction or raises, never both: 384)."""
    r = diagnose("065")
    ev = [e for e in r.timeline if e.kind.startswith("loss_scale")]
    assert [(e.step, e.kind) for e in ev] == [(379, "loss_scale_drop"), (384, "loss_scale_abort")]
    assert "over steps 379-383" in ev[0].detail and "after step 383" in ev[1].detail
    pmd = r.sections["postmortem"]
    assert pmd["steps"]["last"] == 383 and pmd["crashed"] is True
    assert pmd["curves"]["loss_scale"]["steps"] == [379, 380, 381, 382, 383]
    assert {"step": 384, "kind": "loss_scale_abort"} in pmd["marks"]
