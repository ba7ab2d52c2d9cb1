"""Readers of `doctor postmortem`: captured logs, trainer logs, event files — exact values, and damage tolerance.

Expected values are read off the reference texts themselves (reference/deepspeed/log_examples,
reference/llamafactory/log_examples): e.g. "Tried to allocate 12.55 GiB" must come back as 12.55 * 2^30 bytes.
Event files are written with torch's SummaryWriter and tensorboardX, and checked against TensorBoard's own
EventAccumulator with every scalar kept.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random

import pytest

from finetune_doctor.readers.runlogs.logs import read_text_log, size_bytes, sniff
from finetune_doctor.readers.runlogs.tbevents import read_event_file
from finetune_doctor.readers.runlogs.trainer_log import read_results, read_trainer_log, read_trainer_state

REF = "/work/shared/reference"
DS_LOGS = f"{REF}/deepspeed/log_examples"
LF_LOGS = f"{REF}/llamafactory/log_examples"
GIB = float(1 << 30)
MIB = float(1 << 20)

needs_ref = pytest.mark.skipif(not os.path.isdir(REF), reason="shared reference material not mounted")


def write(tmp_path, name: str, text: str | bytes) -> str:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return str(p)


# -- text logs: exact message formats --------------------------------------------------------------------------

@needs_ref
def test_torch_oom_messages_of_every_version():
    legacy = read_text_log(f"{DS_LOGS}/torch_cuda_oom_legacy_1.x.log")
    full = [o for o in legacy.ooms if o.format == "legacy"]
    assert len(full) == 4
    a, b, c, d = full
    assert (a.requested, a.gpu, a.total, a.allocated, a.free, a.reserved) == (
        20 * MIB, 4, 31.75 * GIB, 30.29 * GIB, 3.75 * MIB, 30.40 * GIB)
    assert a.exc == "RuntimeError"
    assert c.exc == "torch.cuda.OutOfMemoryError" and c.requested == 12.55 * GIB and c.gpu == 1
    # the traceback line above the message names the DeepSpeed ZeRO-1/2 gradient bucket
    assert any("reduce_independent_p_g_buckets_and_remove_grads" in f for f in c.frames)
    assert d.allowed == 40.0 * GIB

    v2 = read_text_log(f"{DS_LOGS}/torch_cuda_oom_2.x.log")
    new = [o for o in v2.ooms if o.format == "v2"]
    assert len(new) == 5
    typo, cap, pools, z3, nofree = new
    # torch 2.1 ("capacty"): every process listed, no "this process" entry
    assert typo.procs == ((175080, 1.46 * GIB), (175356, 77.26 * GIB)) and typo.this_process is None
    assert typo.reserved_unallocated == 3.78 * GIB
    assert cap.rank == 3 and cap.this_process == 77.93 * GIB
    assert pools.private_pools == 1.38 * MIB and pools.procs == ((7478, 4.08 * GIB),)
    assert z3.rank == 5 and z3.total == 139.81 * GIB
    assert any("partition_grads" in f for f in z3.frames)
    assert nofree.free == 0.0
    runtime = [o for o in v2.ooms if o.format == "runtime"]
    assert len(runtime) == 2     # "CUDA error: out of memory" and CUBLAS_STATUS_ALLOC_FAILED


@needs_ref
def test_deepspeed_overflow_lines_and_min_scale_abort():
    ev = read_text_log(f"{DS_LOGS}/ds_fp16_overflow_ds0.14.log")
    kinds = [(o.kind, o.attempted, o.new_scale) for o in ev.overflows]
    assert kinds[:4] == [("hysteresis", 65536.0, 65536.0), ("reduce", 65536.0, 32768.0),
                         ("reduce", 32768.0, 16384.0), ("reduce", 16384.0, 8192.0)]
    # the first OVERFLOW follows the "1/1170" bar: it belongs to step 2, the one in progress
    assert ev.overflows[0].step == 2 and ev.overflows[3].step == 5
    assert len(ev.aborts) == 1 and ev.aborts[0].kind == "min-loss-scale"
    legacy = read_text_log(f"{DS_LOGS}/ds_fp16_overflow_legacy.log")
    vals = [(o.attempted, o.new_scale) for o in legacy.overflows if o.kind == "reduce"]
    assert (65536.0, 32768.0) in vals and (134217728.0, 67108864.0) in vals and (536870912.0, 268435456.0) in vals
    assert any(o.rank == 6 for o in legacy.overflows)


BAR = "{n}/2724 [13:58:09<86:18:35, 132.44s/it]"
OVF = ("[2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] OVERFLOW! Rank 0 "
       "Skipping step. Attempted loss scale: {a}, reducing to {b}")


def test_step_of_a_dict_after_an_in_step_overflow_is_decided_from_the_text(tmp_path):
    """Case 065's paste: bar 379 + OVERFLOW (printed during step 380), then the dict. The dict cannot be step
    379's (on_log of 379 runs before step 380's engine.step), so it is step 380's; an overflow completes its
    step, so the last step reached is 383, one past the last bar (382)."""
    lines = [" 14%|#4        | " + BAR.format(n=n) + OVF.format(a=2 ** (6 - i), b=2 ** (5 - i))
             for i, n in enumerate(range(378, 383))]
    lines.insert(2, "{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}")
    ev = read_text_log(write(tmp_path, "paste.txt", "\n".join(lines) + "\n"))
    assert [o.step for o in ev.overflows] == [379, 380, 381, 382, 383]
    loss = next(s for s in ev.series if s.name == "loss")
    assert list(loss.steps) == [380]
    assert ev.last_step == 383
    # a captured file keeps every bar (\r): bar 380 is drawn before the dict, same answer
    raw = ("\r 14%| | " + BAR.format(n=379) + OVF.format(a=32, b=16) + "\n\r 14%| | " + BAR.format(n=380)
           + "\r    \r{'loss': 2.0491, 'learning_rate': 0.0002, 'epoch': 0.28}\n\r 14%| | " + BAR.format(n=380))
    ev = read_text_log(write(tmp_path, "raw.txt", raw))
    assert list(next(s for s in ev.series if s.name == "loss").steps) == [380] and ev.last_step == 380
    # no in-step line between bar and dict: the dict is the bar's step
    ev = read_text_log(write(tmp_path, "plain.txt", " 14%| | " + BAR.format(n=379)
                             + "\n{'loss': 2.0491, 'learning_rate': 0.0002, 'epoch': 0.28}\n"))
    assert list(next(s for s in ev.series if s.name == "loss").steps) == [379] and ev.last_step == 379


@needs_ref
def test_nccl_watchdog_lines_of_every_version():
    ev = read_text_log(f"{DS_LOGS}/nccl_watchdog_timeout.log")
    t = [r for r in ev.nccl if r.kind == "timeout"]
    # one record per (rank, SeqNum): the repeats in "watchdog thread terminated" / "what():" are not new timeouts
    assert [(r.rank, r.seq, r.op) for r in t] == [(1, 3385, "ALLREDUCE"), (7, 202558, "_ALLGATHER_BASE"),
                                                  (0, 1580, "ALLREDUCE"), (6, 2, "ALLREDUCE"),
                                                  (1, 1522789, "_ALLGATHER_BASE")]
    assert t[0].timeout_ms == 1800000 and t[0].ran_ms == 1800660 and t[0].numel_in is None
    assert (t[1].numel_in, t[1].numel_out) == (2359296, 18874368)
    last = [(r.rank, r.work, r.last_enqueued, r.last_completed) for r in ev.nccl if r.kind == "last_work"]
    assert (0, 1580, 1582, 1579) in last and (7, 1, 1, 3452013982) in last and (6, 2, 2, 1) in last
    assert any(r.kind == "heartbeat" and r.rank == 2 and r.ran_ms == 480000 for r in ev.nccl)


@needs_ref
def test_process_death_signatures():
    ev = read_text_log(f"{DS_LOGS}/cpu_oom_killer.log")
    kinds = {k.kind for k in ev.kills}
    assert {"kernel-oom", "cgroup-oom", "shell-killed", "slurm-oom", "torchrun-exit", "launcher-exit",
            "cpu-alloc"} <= kinds
    k = next(k for k in ev.kills if k.kind == "kernel-oom")
    assert k.pid == 48213 and k.bytes == 251234567 * 1024
    assert next(k for k in ev.kills if k.kind == "cpu-alloc").bytes == 67108864000
    assert all(k.exitcode == -9 for k in ev.kills if k.kind in ("torchrun-exit", "launcher-exit"))

    cf = read_text_log(f"{DS_LOGS}/torchrun_childfailederror_sigkill.log")
    roots = [k for k in cf.kills if k.kind == "child-failed-root"]
    # the root cause is rank 1 (SIGKILL), not the SIGTERM'd rank listed first under "Failures:"
    assert (roots[0].rank, roots[0].exitcode, roots[0].signal, roots[0].pid) == (1, -9, "SIGKILL", 12742)
    assert (roots[1].rank, roots[1].exitcode, roots[1].host) == (0, -9, "gpu-node-017")
    exc = read_text_log(f"{DS_LOGS}/torchrun_childfailederror_exception.log")
    root = next(k for k in exc.kills if k.kind == "child-failed-root")
    assert root.exitcode == 1 and root.rank == 0


@needs_ref
def test_see_memory_usage_in_both_formats():
    old = read_text_log(f"{DS_LOGS}/ds_see_memory_usage_logger_ds0.14.log")
    rec = next(m for m in old.memory if m.label == "After initializing optimizer states")
    assert (rec.ma, rec.max_ma, rec.ca, rec.max_ca, rec.cpu_used, rec.cpu_percent) == (12.09, 15.54, 15.56, 16.0,
                                                                                      112.61, 11.2)
    new = read_text_log(f"{DS_LOGS}/ds_see_memory_usage_print_ds0.19.log")
    labels = [m.label for m in new.memory]
    assert labels[:3] == ["DeepSpeed Engine: After args sanity test", "DeepSpeed Engine: Before configure distributed model",
                          "Engine before forward"]
    assert new.memory[2].ma == 0.37 and new.memory[2].cpu_percent == 4.1


@needs_ref
def test_hf_trainer_dicts_4x_and_5x_and_lf_lines():
    ev = read_text_log(f"{DS_LOGS}/hf_trainer_loss_lines.log")
    s = {x.name: x for x in ev.series}
    loss = list(s["loss"].values)
    # 4.x floats, a bare nan grad norm, 5.x '.4g' strings; the LF jsonl line; the LF web-UI line is kept apart
    assert loss[:5] == [1.6747, 0.9225, 1.4401, 2.1874, 0.0] and 1.44 in loss and 2.187 in loss
    gn = list(s["grad_norm"].values)
    assert gn[0] == 4.737301826477051 and math.isnan(gn[1]) and "4.737" not in gn
    assert 4.737 in gn
    assert list(s["lf_loss"].values) == [1.2034]
    assert s["eval_loss"].values[0] == 1.0213
    # the jsonl line carries its own step; the tqdm-prefixed dict takes the bar's 117
    assert (10, 1.2034) in list(zip(s["loss"].steps, s["loss"].values))
    assert (117, 1.2034) in list(zip(s["loss"].steps, s["loss"].values))
    assert any(n.kind == "train-summary" for n in ev.notices)


@needs_ref
def test_llamafactory_stdout_and_run_facts():
    ev = read_text_log(f"{LF_LOGS}/stdout_v4.txt")
    facts = {f.name: f.value for f in ev.facts}
    assert facts["trainable_params"] == 16515072 and facts["all_params"] == 4038983168
    assert facts["world_size"] == 1 and facts["compute_dtype"] == "bfloat16"
    assert any(n.kind == "warning" and "mixed precision" in n.text for n in ev.notices)
    z3 = read_text_log(f"{DS_LOGS}/llamafactory_zero3_init_ds0.14_torch2.3.log")
    f3 = {f.name: f.value for f in z3.facts}
    assert f3["zero_stage"] == 3 and f3["ds_version"] == "0.14.4" and f3["total_steps"] == 1218
    assert f3["world_size"] == 8 and f3["ds_params_elems"] == "8.03B" and f3["bf16_enabled"] is True


def test_size_units():
    assert size_bytes("12.94 GiB") == 12.94 * GIB
    assert size_bytes("398.00 MiB") == 398 * MIB
    assert size_bytes("44.32GiB") == 44.32 * GIB
    assert size_bytes("0 bytes") == 0.0
    assert size_bytes("many") is None


# -- text logs: damage and scale -------------------------------------------------------------------------------

def test_interleaved_ranks_tqdm_and_ansi(tmp_path):
    text = (" 10%|█         | 117/1170 [06:12<55:51,  3.18s/it]\r 10%|█         | 118/1170 [06:15<55:48,  3.18s/it]"
            "\x1b[31m[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
            "capacity of 79.15 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB "
            "memory in use. Of the allocated memory 74.02 GiB is allocated by PyTorch, and 2.41 GiB is reserved by "
            "PyTorch but unallocated.\x1b[0m\n"
            "[rank1]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600060 milliseconds before timing out.\n")
    ev = read_text_log(write(tmp_path, "train.log", text))
    (oom,) = ev.ooms
    assert (oom.rank, oom.step, oom.requested, oom.gpu) == (3, 119, 2 * GIB, 3)
    (t,) = ev.nccl
    assert (t.rank, t.seq, t.timeout_ms, t.line) == (1, 7, 600000, 2)


def test_eval_bars_do_not_move_the_training_step(tmp_path):
    text = ("Total optimization steps = 300\n"
            " 33%|███▎      | 100/300 [01:00<02:00,  1.20s/it]\n"
            " 40%|████      | 20/50 [00:03<00:04,  6.01it/s]\n"
            "{'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 1.0}\n")
    ev = read_text_log(write(tmp_path, "log.txt", text))
    (loss,) = [s for s in ev.series if s.name == "loss"]
    assert list(loss.steps) == [100]


def test_binary_junk_nul_bytes_and_truncation(tmp_path):
    good = "{'loss': 2.5, 'grad_norm': 1.0, 'learning_rate': 1e-4, 'epoch': 0.1}\n"
    junk = bytes(range(256)) * 4
    data = good.encode() * 20 + junk + b"\n" + b"\x00" * 100 + good.replace("2.5", "2.25").encode()[:-30]
    ev = read_text_log(write(tmp_path, "mixed.log", data))
    (loss,) = [s for s in ev.series if s.name == "loss"]
    # the junk costs nothing; the cut last line still carries its loss
    assert list(loss.values) == [2.5] * 20 + [2.25]
    assert [s for s in ev.series if s.name == "learning_rate"][0].values.tolist() == [1e-4] * 20
    assert any("NUL" in p for p in ev.read.problems)
    # a file that is binary from the start is skipped with a reason, not parsed
    ev2 = read_text_log(write(tmp_path, "blob.out", random.Random(11).randbytes(4096)))   # seeded: reproducible
    assert ev2.read.kind == "unknown" and not ev2.read.complete


def test_utf16_and_gzip_logs(tmp_path):
    line = "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.05, 'epoch': 0.01}\n"
    p16 = write(tmp_path, "ps.log", line.encode("utf-16"))
    ev = read_text_log(p16)
    assert [s.name for s in ev.series if s.name == "grad_norm"] and math.isnan(
        next(s for s in ev.series if s.name == "grad_norm").values[0])
    pgz = tmp_path / "train.log.gz"
    with gzip.open(pgz, "wt", encoding="utf-8") as fh:
        fh.write(line * 3)
    ev = read_text_log(str(pgz))
    assert len(next(s for s in ev.series if s.name == "loss")) == 3


def test_line_numbers_across_chunks_and_a_line_without_newlines(tmp_path, monkeypatch):
    import finetune_doctor.readers.runlogs.logs as logs

    monkeypatch.setattr(logs, "CHUNK", 4096)
    monkeypatch.setattr(logs, "LOOKAHEAD", 512)
    lines = [f"step {i} ok" for i in range(5000)]
    lines[3210] = "Traceback (most recent call last):"
    lines[3211] = '  File "x.py", line 3, in step'
    lines[3212] = "    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)"
    lines[3213] = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.14 GiB (GPU 5; 31.75 GiB "
                   "total capacity; 28.28 GiB already allocated; 1.95 GiB free; 28.28 GiB reserved in total by PyTorch)")
    p = write(tmp_path, "long.log", "\n".join(lines) + "\n" + "x" * 20000 + "{'loss': 1.5, 'epoch': 1}")
    ev = read_text_log(p)
    (oom,) = ev.ooms
    assert oom.line == 3214 and oom.frames[0].startswith("denom = (exp_avg_sq") and "step (x.py)" in oom.frames
    (loss,) = [s for s in ev.series if s.name == "loss"]
    assert list(loss.lines) == [5001] and ev.read.lines == 5001


def test_sniffing(tmp_path):
    assert sniff(write(tmp_path, "a.log", '{"current_steps": 1, "total_steps": 2}\n')) == "trainer-log"
    assert sniff(write(tmp_path, "b.txt", "timestamp, index, name, memory.used [MiB], memory.total [MiB]\n")) == "gpu-record"
    assert sniff(write(tmp_path, "c.txt", "hello\n")) == "text-log"
    import random

    # seeded: unseeded random bytes occasionally look like text to the sniffer and made this test flaky
    assert sniff(write(tmp_path, "d.bin", random.Random(7).randbytes(2000))) == "unknown"


# -- trainer logs ----------------------------------------------------------------------------------------------

@needs_ref
def test_lf_trainer_log_and_hf_trainer_state_examples():
    tl = read_trainer_log(f"{LF_LOGS}/trainer_log.jsonl")
    s = {x.name: x for x in tl.series}
    assert list(zip(s["loss"].steps, s["loss"].values)) == [(10, 1.4123), (20, 1.0487), (30, 0.0)]
    assert list(s["eval_loss"].values) == [1.1021] and "grad_norm" not in s
    assert tl.total_steps == 30 and any(n.kind == "train-end" for n in tl.notices)
    st = read_trainer_state(f"{LF_LOGS}/trainer_state.json")
    g = {x.name: x for x in st.series}["grad_norm"]
    assert list(g.steps) == [10, 20, 30] and math.isnan(g.values[2]) and g.values[0] == 0.8731
    facts = {f.name: f.value for f in st.facts}
    assert facts["global_step"] == 30 and facts["logging_steps"] == 10 and facts["train_batch_size"] == 1
    assert st.results["train_loss"] == 0.8203
    res = read_results(f"{LF_LOGS}/all_results.json")
    assert res.results["eval_loss"] == 1.0876


def test_trainer_log_nan_truncation_and_resume(tmp_path):
    lines = [json.dumps({"current_steps": s, "total_steps": 40, "loss": v, "lr": 1e-4, "epoch": s / 40})
             for s, v in ((10, 1.5), (20, float("nan")), (10, 1.4), (20, 1.3))]
    assert "NaN" in lines[1]     # Python's json writes the bare token, as LF's LogCallback does
    p = write(tmp_path, "trainer_log.jsonl", "\n".join(lines) + "\n" + lines[0][:25])
    tl = read_trainer_log(p)
    loss = next(s for s in tl.series if s.name == "loss")
    assert len(loss) == 4 and math.isnan(loss.values[1])
    assert not tl.read.complete and "cut off" in tl.read.problems[0]
    assert [(r.step, r.kind) for r in tl.restarts] == [(10, "resume")]


def test_trainer_state_streamed_and_cut(tmp_path):
    from transformers import TrainerState

    hist = [{"epoch": i / 100, "grad_norm": 1.0 + i, "learning_rate": 1e-5, "loss": 2.0 - i / 1000, "step": i}
            for i in range(1, 3001)]
    hist[1500]["grad_norm"] = float("nan")
    TrainerState(log_history=hist, global_step=3000, max_steps=3000, logging_steps=1).save_to_json(
        str(tmp_path / "trainer_state.json"))
    full = read_trainer_state(str(tmp_path / "trainer_state.json"))
    g = next(s for s in full.series if s.name == "grad_norm")
    assert len(g) == 3000 and math.isnan(g.values[1500]) and full.read.complete
    assert {f.name: f.value for f in full.facts}["max_steps"] == 3000
    raw = (tmp_path / "trainer_state.json").read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    part = read_trainer_state(str(cut))
    n = len(next(s for s in part.series if s.name == "loss"))
    assert 1000 < n < 3000 and not part.read.complete


# -- event files -------------------------------------------------------------------------------------------------

def _write_torch(logdir, n, start=1, tags=("train/loss", "train/grad_norm")):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(logdir))
    for s in range(start, start + n):
        for t in tags:
            w.add_scalar(t, 1.0 / s if t == "train/loss" else float(s % 7), s)
    w.close()
    return next(str(p) for p in logdir.iterdir() if "tfevents" in p.name)


@pytest.mark.slow
def test_every_scalar_is_kept_and_matches_eventaccumulator(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    path = _write_torch(tmp_path / "run", 12000)
    ours = {s.name: s for s in read_event_file(path).series}
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0}, purge_orphaned_data=False)
    acc.Reload()
    for tag in ("train/loss", "train/grad_norm"):
        ref = acc.Scalars(tag)
        assert len(ours[tag]) == len(ref) == 12000
        assert list(ours[tag].steps) == [e.step for e in ref]
        assert list(ours[tag].values) == [e.value for e in ref]
    default = ea.EventAccumulator(path)
    default.Reload()
    assert len(default.Scalars("train/loss")) == 10000   # what a default reader would silently drop


def test_tensorboardx_and_new_style_tensor_scalars(tmp_path):
    from tensorboardX import SummaryWriter as XWriter
    from torch.utils.tensorboard import SummaryWriter

    w = XWriter(logdir=str(tmp_path / "x"))
    for s in range(1, 6):
        w.add_scalar("train/loss", 3.0 - s * 0.1, s)
    w.close()
    px = next(str(p) for p in (tmp_path / "x").iterdir())
    loss = read_event_file(px).series[0]
    assert list(loss.steps) == [1, 2, 3, 4, 5] and abs(loss.values[0] - 2.9) < 1e-6
    w = SummaryWriter(log_dir=str(tmp_path / "t"))
    w.add_scalar("train/loss", 1.25, 3, new_style=True)
    w.close()
    pt = next(str(p) for p in (tmp_path / "t").iterdir())
    (s,) = read_event_file(pt).series
    assert list(s.values) == [1.25] and list(s.steps) == [3]


def test_truncated_last_record_and_bad_crc(tmp_path):
    path = _write_torch(tmp_path / "run", 500)
    data = open(path, "rb").read()
    cut = tmp_path / "events.out.tfevents.cut"
    cut.write_bytes(data[:-7])
    ev = read_event_file(str(cut))
    assert not ev.read.complete and "cut off" in ev.read.problems[0]
    assert sum(len(s) for s in ev.series) == 999
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    pb = tmp_path / "events.out.tfevents.bad"
    pb.write_bytes(bytes(bad))
    ev = read_event_file(str(pb))
    # one damaged record skipped, every record after it read
    assert sum(len(s) for s in ev.series) == 999 and "CRC" in ev.read.problems[0]
    junk = tmp_path / "events.out.tfevents.junk"
    junk.write_bytes(data[: len(data) // 3] + random.Random(12).randbytes(777) + data[len(data) // 3:])
    ev = read_event_file(str(junk))
    assert 997 <= sum(len(s) for s in ev.series) <= 999


def test_not_an_event_file(tmp_path):
    p = write(tmp_path, "events.out.tfevents.0.x", b"hello world, not a record" * 10)
    ev = read_event_file(p)
    assert ev.read.records == 0 and not ev.read.complete
