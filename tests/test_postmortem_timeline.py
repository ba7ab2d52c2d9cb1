"""The timeline analyzer on constructed runs: robust spikes, loss-scale trajectories, hidden NaN, constant grad
norm, OOM size matching, restarts across event files, LR blamed at warm-up end.

Runs are written as files by the real writers (LF's json.dumps records, transformers' TrainerState, torch's
SummaryWriter) into a temporary run directory and diagnosed through the pipeline, so every assertion also
covers discovery, reading and the rule files.
"""

from __future__ import annotations

import json
import math
import random

from finetune_doctor.analyzers.postmortem.timeline import analyze, spikes, build_curves
from finetune_doctor.pipeline import postmortem as pm
from pmhelp import diagnose_dir as diagnose


def lf_line(step, total, **kw):
    d = {"current_steps": step, "total_steps": total, **kw}
    return json.dumps(d) + "\n"


def run_dir(tmp_path, name="run"):
    d = tmp_path / name
    d.mkdir()
    return d


def test_gaussian_noise_has_no_spike_and_an_injected_one_is_found(tmp_path):
    rng = random.Random(7)
    d = run_dir(tmp_path)
    vals = [2.0 - i * 2e-4 + rng.gauss(0, 0.02) for i in range(1, 2001)]
    vals[1499] = 3.4          # +70 %, ~70 σ
    with open(d / "trainer_log.jsonl", "w") as fh:
        for i, v in enumerate(vals, 1):
            fh.write(lf_line(i, 2000, loss=v, lr=1e-5, epoch=i / 2000))
    ev = pm.collect(str(d), [])
    c = build_curves(ev)["loss"]
    found = spikes(c, 6.0, 1.5)
    assert [(s["step"], s["value"]) for s in found] == [(1500, 3.4)]
    assert 60 < found[0]["score"] < 90     # (3.4 - ~1.7) / (1.4826 * MAD ≈ 0.02)
    r = diagnose(d)
    assert [f.name for f in r.findings] == ["loss-spike"]
    assert "step 1500" in r.findings[0].message


def test_grad_norm_explosion_vs_clipping_noise(tmp_path):
    from transformers import TrainerState

    rng = random.Random(3)
    hist = []
    for s in range(1, 401):
        g = abs(rng.gauss(1.0, 0.3)) * (2.5 if s % 37 == 0 else 1.0)   # clipping-range bumps stay quiet
        if s == 300:
            g = 45.0
        hist.append({"epoch": s / 400, "grad_norm": g, "learning_rate": 2e-5, "loss": 1.2, "step": s})
    d = run_dir(tmp_path)
    TrainerState(log_history=hist, global_step=400).save_to_json(str(d / "trainer_state.json"))
    r = diagnose(d)
    assert [f.name for f in r.findings] == ["grad-norm-explosion"]
    assert "step 300" in r.findings[0].message
    assert (300, "grad_norm_spike") in [(e.step, e.kind) for e in r.timeline]


def _overflow_log(scales, start_step=1, abort=False):
    lines = []
    step = start_step
    for a, b in scales:
        lines.append(f"  0%|          | {step - 1}/1000 [00:04<1:21:07,  4.16s/it][2024-06-21 10:12:03,118] [INFO] "
                     f"[loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                     f"scale: {a}, reducing to {b}")
        step += 1
    if abort:
        lines.append("[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                     "Exiting run.")
    return "\n".join(lines) + "\n"


def test_loss_scale_calibration_recovery_and_collapse(tmp_path):
    # calibration: 4 halvings in the first steps, nothing after
    d = run_dir(tmp_path, "calib")
    (d / "train.log").write_text(_overflow_log([(65536, 32768), (32768, 16384), (16384, 8192), (8192, 4096)]))
    r = diagnose(d)
    assert [f.name for f in r.findings if f.code.startswith("FD3")] == ["fp16-overflow-benign"]
    # collapse: still being cut below 1024 after step 20
    d = run_dir(tmp_path, "late")
    (d / "train.log").write_text(_overflow_log([(2048, 1024), (1024, 512)], start_step=200))
    r = diagnose(d)
    assert r.findings[0].name == "loss-scale-collapse" and "fell to 512" in r.findings[0].message
    # abort at the minimum
    d = run_dir(tmp_path, "abort")
    (d / "train.log").write_text(_overflow_log([(4, 2), (2, 1)], start_step=50, abort=True))
    r = diagnose(d)
    assert r.findings[0].name == "loss-scale-collapse" and "aborted" in r.findings[0].message
    assert "run-crashed" not in [f.name for f in r.findings]   # the abort explains the exception


def test_hidden_nan_merges_trainer_log_and_trainer_state(tmp_path):
    """LF's trainer_log.jsonl has the loss (0.0) but no grad_norm; the checkpoint's trainer_state.json has the NaN."""
    from transformers import TrainerState

    d = run_dir(tmp_path)
    with open(d / "trainer_log.jsonl", "w") as fh:
        for s in range(10, 210, 10):
            fh.write(lf_line(s, 1000, loss=1.5 if s < 120 else 0.0, lr=1e-4, epoch=s / 1000))
    ck = d / "checkpoint-200"
    ck.mkdir()
    TrainerState(log_history=[{"epoch": s / 1000, "grad_norm": 0.9 + s / 1e4 if s < 120 else float("nan"),
                               "learning_rate": 1e-4, "loss": 1.5 if s < 120 else 0.0, "step": s}
                              for s in range(10, 210, 10)], global_step=200).save_to_json(str(ck / "trainer_state.json"))
    r = diagnose(d)
    assert r.findings[0].name == "nan-loss"
    assert "step 120" in r.findings[0].message and "loss 0.0 with grad_norm nan" in r.findings[0].message
    assert "after 11 healthy log(s)" in r.findings[0].message
    zero = next(f for f in r.findings if f.name == "loss-stuck-zero")
    assert "from step 120 (9 log(s), to the end of the log)" in zero.message


def test_fp16_gradscaler_skips_are_benign(tmp_path):
    """HF AMP fp16: isolated grad_norm nan with a finite loss, training goes on (case 055's pattern)."""
    d = run_dir(tmp_path)
    lines = []
    for s in range(1, 41):
        g = "nan" if s in (7, 23) else f"{0.164 + s * 1e-4!r}"
        lines.append(f"{{'loss': {0.9 - s * 0.001:.4f}, 'grad_norm': {g}, 'learning_rate': 0.0002, 'epoch': {s / 400:.2f}}}")
    (d / "train.log").write_text("\n".join(lines) + "\n")
    cfg = d / "config.yaml"
    cfg.write_text("stage: sft\nfinetuning_type: lora\nfp16: true\nlogging_steps: 10\n")
    r = diagnose(d, config=cfg)
    assert [f.name for f in r.findings if f.code.startswith("FD3")] == ["fp16-overflow-benign"]
    assert "skipped 2 step(s)" in r.findings[0].message


def test_divergence_as_warmup_ends_blames_the_learning_rate(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    d = run_dir(tmp_path)
    w = SummaryWriter(log_dir=str(d / "runs" / "Jan01_00-00-00_node"))
    for s in range(1, 121):
        lr = 2e-4 * min(1.0, s / 50)
        loss = 2.0 - s * 0.005 if s < 52 else float("nan")
        w.add_scalar("train/loss", loss, s)
        w.add_scalar("train/learning_rate", lr, s)
        w.add_scalar("train/grad_norm", 1.0 if s < 52 else float("nan"), s)
    w.close()
    cfg = d / "config.yaml"
    cfg.write_text("stage: sft\nfinetuning_type: full\nlearning_rate: 2.0e-4\nwarmup_steps: 50\n")
    r = diagnose(d, config=cfg)
    assert r.findings[0].name == "learning-rate-too-high-confirmed"
    assert "as warm-up ends at step 50" in r.findings[0].message
    assert r.findings[0].fix.edits[0].key == "learning_rate" and r.findings[0].fix.edits[0].value == 1e-5
    assert (50, "warmup_end") in [(e.step, e.kind) for e in r.timeline]


def test_restart_across_event_files(tmp_path):
    """Two launches: 1-300, then a resume from checkpoint-200; each event file is read on its own."""
    from torch.utils.tensorboard import SummaryWriter

    d = run_dir(tmp_path)
    for name, rng in (("Jan01_00-00-00_node", range(1, 301)), ("Jan01_05-00-00_node", range(200, 401))):
        w = SummaryWriter(log_dir=str(d / "runs" / name))
        for s in rng:
            w.add_scalar("train/loss", 2.0 - s / 1000, s)
        w.close()
    ev = pm.collect(str(d), [])
    tl = analyze(ev)
    assert [(r["step"], r["kind"]) for r in tl.facts["restarts"]] == [(200, "resume")]
    assert len(tl.curves["loss"]) == 300 + 201    # every point of both launches kept
    assert "200-300" in tl.facts["restarts"][0]["detail"]


def test_oom_match_uses_world_size_from_the_log(tmp_path):
    """No --gpu: N = 8 comes from LLaMA-Factory's "world size: 8" line, P from the catalog via the config."""
    d = run_dir(tmp_path)
    (d / "train.log").write_text(
        "[INFO|2026-08-18 12:00:01] llamafactory.hparams.parser:651 >> Process rank: 0, world size: 8, device: "
        "cuda:0, distributed training: True, compute dtype: torch.bfloat16\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.55 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in "
        "use. Of the allocated memory 75.31 GiB is allocated by PyTorch, and 1.38 GiB is reserved by PyTorch but "
        "unallocated.\n")
    cfg = d / "config.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-7B\nstage: sft\nfinetuning_type: full\nbf16: true\n")
    r = diagnose(d, config=cfg)
    f = r.findings[0]
    assert f.name == "cuda-oom"
    # Qwen2.5-7B has 7,615,616,512 parameters: 4·P/8 = 3.546 GiB
    assert "4·P/N = 3.55 GiB" in f.message and "N = 8" in f.message
    assert r.hardware is not None and r.hardware.capacity_gib == 79.15


def test_fragmentation_is_flagged_with_its_fix(tmp_path):
    d = run_dir(tmp_path)
    (d / "err.log").write_text(
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has a total capacity "
        "of 139.81 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 138.74 GiB memory "
        "in use. Of the allocated memory 131.20 GiB is allocated by PyTorch, and 5.87 GiB is reserved by PyTorch but "
        "unallocated.\n")
    r = diagnose(d)
    frag = next(f for f in r.findings if f.name == "fragmentation")
    assert "5.87 GiB reserved but unallocated" in frag.message
    assert "expandable_segments:True" in frag.fix.title
    assert "foreign-memory-on-gpu" not in [f.name for f in r.findings]


def test_host_oom_kill_with_offload_estimate(tmp_path):
    d = run_dir(tmp_path)
    (d / "launcher.log").write_text(
        "[2024-07-02 14:21:07,411] [INFO] [utils.py:781:see_memory_usage] After initializing optimizer states\n"
        "[2024-07-02 14:21:07,412] [INFO] [utils.py:782:see_memory_usage] MA 12.09 GB         Max_MA 15.54 GB         "
        "CA 15.56 GB         Max_CA 16 GB \n"
        "[2024-07-02 14:21:07,412] [INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 498.1 GB, "
        "percent = 98.7%\n"
        " 12%|█▏        | 41/340 [10:01<1:13:05, 14.67s/it]"
        "E0112 09:41:55.123000 140231 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: -9) local_rank: 3 (pid: 93043) of binary: /usr/bin/python\n")
    r = diagnose(d)
    f = r.findings[0]
    assert f.name == "host-oom-killed"
    assert "local rank 3 was killed by SIGKILL (exit code -9) during step 42" in f.message
    assert "498 GB used (99 %)" in f.message


def test_nccl_startup_timeout_suggests_ddp_timeout(tmp_path):
    d = run_dir(tmp_path)
    (d / "train.log").write_text(
        "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 "
        "milliseconds before timing out.\n")
    cfg = d / "config.yaml"
    cfg.write_text("stage: sft\nfinetuning_type: lora\n")
    r = diagnose(d, config=cfg)
    f = r.findings[0]
    assert f.name == "nccl-timeout" and "600 s: torch's default NCCL timeout" in f.message
    assert "preprocessing" in f.message
    assert [(e.key, e.value) for e in f.fix.edits] == [("ddp_timeout", 180000000)]


def test_constant_grad_norm_needs_repeats_not_coincidence(tmp_path):
    d = run_dir(tmp_path)
    (d / "a.log").write_text("{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-4, 'epoch': 0.1}\n"
                             "{'loss': 1.1, 'grad_norm': 0.51, 'learning_rate': 1e-4, 'epoch': 0.2}\n")
    r = diagnose(d)
    assert r.findings == ()
    tl = analyze(pm.collect(str(d), []))
    assert tl.facts["grad_const"] is None and math.isclose(tl.facts["grad_norm"]["max"], 0.51)


def test_two_equal_neighbours_by_chance_are_not_a_constant_norm(tmp_path):
    """float32 norms (7 digits) repeat by chance about once per million logs; only √k or 3+ in a row count."""
    d = run_dir(tmp_path)
    (d / "a.log").write_text("{'loss': 1.2, 'grad_norm': 0.8123456, 'learning_rate': 1e-4, 'epoch': 0.1}\n"
                             "{'loss': 1.1, 'grad_norm': 0.8123456, 'learning_rate': 1e-4, 'epoch': 0.2}\n"
                             "{'loss': 1.0, 'grad_norm': 0.7, 'learning_rate': 1e-4, 'epoch': 0.3}\n")
    assert analyze(pm.collect(str(d), [])).facts["grad_const"] is None
    (d / "a.log").write_text("".join(f"{{'loss': {1.2 - i / 10}, 'grad_norm': 0.8123456, 'learning_rate': 1e-4, "
                                     f"'epoch': {i / 10}}}\n" for i in range(3)))
    gc = analyze(pm.collect(str(d), [])).facts["grad_const"]
    assert gc["count"] == 3 and gc["sqrt_k"] is None and gc["loss_varies"]


def test_the_nan_event_quotes_the_learning_rate_of_its_own_dict(tmp_path):
    """LLaMA-Factory #7388's paste: two printed dicts that land at one estimated step; the NaN's learning rate is
    the one printed beside it (8e-06, line 3), not the next dict's (1.6e-05, line 4)."""
    d = run_dir(tmp_path)
    (d / "train.log").write_text(
        "UserWarning: cuDNN SDPA backward got grad_output.strides() != output.strides(), attempting to materialize "
        "a grad_output with matching strides... (Triggered internally at ../aten/src/ATen/native/cudnn/MHA.cpp:674.)\n"
        "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass\n"
        "  0%|▏                                     | 1/249 [00:26<1:47:45, 26.07s/it]{'loss': 60.5735, "
        "'grad_norm': nan, 'learning_rate': 8.000000000000001e-06, 'epoch': 0.12}\n"
        "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1.6000000000000003e-05, 'epoch': 0.24}\n"
        "  8%|███                                  | 21/249 [07:23<1:17:48, 20.48s/it]\n", encoding="utf-8")
    rep = diagnose(d)
    nan = [e for e in rep.timeline if e.kind == "nan"]
    assert len(nan) == 1 and nan[0].detail.endswith("(lr 8e-06)") and nan[0].source.endswith("train.log:3")


def test_a_segfault_is_a_native_crash_not_nothing_to_diagnose(tmp_path):
    """LLaMA-Factory #9210: a merge whose log ends in bash's "Segmentation fault (core dumped)" line. It is FD340
    native-crash (a fault in compiled code: no traceback, not the host's OOM killer), placed on that line."""
    d = run_dir(tmp_path)
    (d / "export.log").write_text(
        "[INFO|modeling_utils.py:2167] 2025-09-28 14:25:47,437 >> Instantiating Qwen2ForCausalLM model under "
        "default dtype torch.bfloat16.\n"
        "/bin/bash: line 1:   263 Segmentation fault      (core dumped) llamafactory-cli export --template "
        "deepseekr1 --model_name_or_path /models --adapter_name_or_path /adapters --export_dir /output\n",
        encoding="utf-8")
    rep = diagnose(d)
    codes = [f.code for f in rep.findings]
    assert codes[0] == "FD340" and "FD315" not in codes and "FD318" not in codes
    # bash's job line names the signal, not the status (128 + 11): no exit code is stated (trial 15, as trial 12
    # decided for a bare `Killed`)
    assert rep.findings[0].location.line == 2 and "crashed with SIGSEGV:" in rep.findings[0].message
    assert "139" not in rep.findings[0].message
    assert any(e.detail == "pid 263 crashed with SIGSEGV" for e in rep.timeline)
