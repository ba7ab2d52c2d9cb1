#!/usr/bin/env python
"""Measure the engine terms of issue 23 on a real GPU: ZeRO-3 (with and without offload), QLoRA with real
bitsandbytes, DDP and FSDP1, on small real model shapes built from their config.json with random weights.

Each case runs in its own process (``deepspeed``/``torchrun`` launcher for several ranks), trains 3 steps on
random tokens, and records per rank ``max_memory_allocated`` and ``max_memory_reserved`` of steps 2-3, the device
usage (``mem_get_info``) and a summary of the caching allocator's segments (``torch.cuda.memory_snapshot()``:
segment count, bytes and allocated bytes per stream and pool). The parent writes them beside the doctor's
prediction for the same LLaMA-Factory config (analyzers/memory ``estimate``) to ``$OUT/gpu_engines.md`` and
``gpu_engines.json``.

The training code stands in for LLaMA-Factory's with the same settings: bf16 weights, LoRA r8 on all linears with
fp32 adapters (LF upcasts trainable parameters), gradient checkpointing on, AdamW; DeepSpeed with the "auto"
values transformers would fill (integrations/deepspeed.py: hidden², 0.9·hidden², 10·hidden); DDP with HF's
arguments (bucket_cap_mb 25, gradient_as_bucket_view False); FSDP1 FULL_SHARD wrapping each decoder layer with
bf16 mixed precision, as accelerate does.

Usage::

    python benchmarks/gpu_engines.py --plan            # CPU: the cases and the doctor's predictions only
    python benchmarks/gpu_engines.py --out-dir $OUT    # GPU machine (benchmarks/gpu_session.sh calls it)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GIB = float(1 << 30)
Q05, Q15 = "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B"
BASE = {"bf16": True, "per_device_train_batch_size": 2, "cutoff_len": 1024}
# name: (model, LF keys, DeepSpeed zero_optimization or None, engine, ranks wanted)
CASES: dict[str, tuple[str, dict, dict | None, str, int]] = {
    "zero3_full": (Q05, {**BASE, "finetuning_type": "full"}, {"stage": 3}, "deepspeed", 2),
    "zero3_offload": (Q05, {**BASE, "finetuning_type": "full"},
                      {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": True},
                       "offload_optimizer": {"device": "cpu", "pin_memory": True}}, "deepspeed", 2),
    "zero3_lora": (Q15, {**BASE, "finetuning_type": "lora"}, {"stage": 3}, "deepspeed", 2),
    "qlora": (Q15, {**BASE, "finetuning_type": "lora", "quantization_bit": 4}, None, "single", 1),
    "lora_bf16": (Q15, {**BASE, "finetuning_type": "lora"}, None, "single", 1),
    "ddp_lora": (Q15, {**BASE, "finetuning_type": "lora"}, None, "ddp", 2),
    "fsdp_full": (Q05, {**BASE, "finetuning_type": "full"}, None, "fsdp", 2),
}


def _zero_config(zo: dict, hidden: int) -> dict:
    """The zero_optimization block with the "auto" values transformers fills for ZeRO-3."""
    from finetune_doctor.readers.deepspeed.dsauto import hf_auto_values

    return {**hf_auto_values(hidden), "overlap_comm": True, "contiguous_gradients": True,
            "stage3_gather_16bit_weights_on_model_save": True, **zo}


def predict(name: str, ranks: int) -> dict:
    """The doctor's estimate for case `name` on `ranks` A100-80GB-sized ranks (GiB)."""
    from finetune_doctor.analyzers.memory import estimate
    from finetune_doctor.hardware.catalog import parse_gpu_spec
    from finetune_doctor.readers.config.accelerate import accelerate_config_from_values
    from finetune_doctor.readers.model.modelcfg import load_arch
    from finetune_doctor.run import resolve_run
    from finetune_doctor.run.engines import LaunchInputs

    model, cfg, zo, engine, _ = CASES[name]
    arch, _ = load_arch(model)
    hw = parse_gpu_spec(f"{ranks}xA100-80GB")
    ds = None
    if zo is not None:
        class _DS:
            resolved = {"zero_optimization": _zero_config(zo, arch.hidden_size)}
            defaults: dict = {}
        ds = _DS()
    launch = None
    if engine == "fsdp":
        acc = accelerate_config_from_values({"distributed_type": "FSDP", "mixed_precision": "bf16",
                                             "num_processes": ranks, "fsdp_config": {
                                                 "fsdp_version": 1, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                                 "fsdp_sharding_strategy": "FULL_SHARD"}}, "acc.yaml")
        launch = LaunchInputs(acc)
    run = resolve_run(dict(cfg), arch, hw, ds, launch=launch)
    est = estimate(run, hw)
    return {"allocated_gib": est.peak_allocated, "total_gib": est.total, "reserve_gib": est.details["reserve_gib"],
            "peak_moment": est.details["peak_moment"], "live_params_gib":
                est.details["terms_bytes"].get("live_params", 0.0) / GIB}


# ---- worker (one rank) ------------------------------------------------------------------------------------------

def _segments() -> dict:
    import torch

    out: dict[str, dict] = {}
    for seg in torch.cuda.memory_snapshot():
        key = f"stream {seg.get('stream', 0)} / {seg.get('segment_type', '?')}"
        d = out.setdefault(key, {"segments": 0, "bytes": 0, "allocated": 0})
        d["segments"] += 1
        d["bytes"] += int(seg.get("total_size", 0))
        d["allocated"] += int(seg.get("allocated_size", 0))
    return out


def _build(name: str, tmp: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from finetune_doctor.readers.model.modelcfg import load_arch

    model_id, cfg, zo, engine, _ = CASES[name]
    raw = {k: v for k, v in load_arch(model_id)[0].raw.items() if not k.startswith("_")}
    conf = AutoConfig.for_model(raw.pop("model_type"), **raw)
    conf.use_cache = False
    if cfg.get("quantization_bit") == 4:
        from transformers import BitsAndBytesConfig

        path = os.path.join(tmp, "model")
        if int(os.environ.get("LOCAL_RANK", 0)) == 0 and not os.path.exists(path):
            AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16).save_pretrained(path)
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(path, quantization_config=bnb, dtype=torch.bfloat16,
                                                     device_map={"": torch.cuda.current_device()})
    else:
        model = AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()
    if cfg["finetuning_type"] == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()          # LF upcasts trainable parameters to fp32
    return model, conf


def worker(name: str, out_dir: str) -> int:
    import torch

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    model_id, cfg, zo, engine, _ = CASES[name]
    tmp = os.environ.get("GPU_ENGINES_TMP", tempfile.gettempdir())
    model, conf = _build(name, tmp)
    mb, seq = cfg["per_device_train_batch_size"], cfg["cutoff_len"]
    params = [p for p in model.parameters() if p.requires_grad]
    if engine == "deepspeed":
        import deepspeed

        ds_cfg = {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": 1,
                  "train_batch_size": mb * world, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
                  "zero_optimization": _zero_config(zo, conf.hidden_size)}
        opt = torch.optim.AdamW(params, lr=1e-5)
        engine_obj, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_cfg)

        def step(x):
            loss = engine_obj(input_ids=x, labels=x).loss
            engine_obj.backward(loss)
            engine_obj.step()
    else:
        if not (cfg.get("quantization_bit")):
            model.cuda()
        if engine in ("ddp", "fsdp") and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl")
        if engine == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local], bucket_cap_mb=25,
                                                              find_unused_parameters=False)
        elif engine == "fsdp":
            import functools

            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

            layer_cls = type(model.model.layers[0])
            model = FSDP(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                                   transformer_layer_cls={layer_cls}),
                         mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                                        buffer_dtype=torch.bfloat16),
                         device_id=local, use_orig_params=True)
            params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, fused=True)

        def step(x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    out: dict = {"rank": rank, "world": world, "steps": []}
    for i in range(3):
        if i == 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        x = torch.randint(0, conf.vocab_size, (mb, seq), device="cuda")
        step(x)
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        out["steps"].append({"allocated": torch.cuda.max_memory_allocated(),
                             "reserved": torch.cuda.max_memory_reserved(), "device_used": total - free})
    out["segments"] = _segments()
    Path(out_dir, f"{name}.rank{rank}.json").write_text(json.dumps(out, indent=1))
    return 0


# ---- parent -----------------------------------------------------------------------------------------------------

def _launch(name: str, ranks: int, out_dir: Path, timeout: int) -> tuple[int, str]:
    engine = CASES[name][3]
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--out-dir", str(out_dir)]
    if engine == "deepspeed" and shutil.which("deepspeed"):
        cmd = ["deepspeed", "--num_gpus", str(ranks), str(Path(__file__).resolve()), "--worker", name,
               "--out-dir", str(out_dir)]
    elif ranks > 1 or engine in ("ddp", "fsdp"):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] + me[1:]
    else:
        cmd = me
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    # llamafactory-cli exports expandable segments for its torchrun launch (LF launcher.py:80-83), which is how
    # the predictions launch the DeepSpeed and DDP cases; FSDP goes through accelerate launch, which does not
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if ranks > 1 and engine in ("deepspeed", "ddp") else ""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        return 124, "timeout"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", action="store_true", help="CPU: print the cases and the predictions only")
    ap.add_argument("--worker")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--case-s", type=float, default=120, help="the most one case may take (process start included)")
    ap.add_argument("--local_rank", type=int, default=None)    # the deepspeed launcher passes it
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.out_dir)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpus = 0
    if not args.plan:
        import torch

        gpus = torch.cuda.device_count()
        if gpus == 0:
            print("no CUDA GPU: nothing measured (use --plan on a CPU machine)")
            return 2
    t0 = time.perf_counter()
    results = []
    for name in args.only.split(","):
        want = CASES[name][4]
        ranks = min(want, gpus) if gpus else want
        pred = predict(name, ranks)
        row = {"case": name, "ranks": ranks, "predicted": pred}
        if not args.plan:
            if time.perf_counter() - t0 > args.budget_s:
                row["error"] = "budget reached"
            else:
                left = args.budget_s - (time.perf_counter() - t0)
                rc, tail = _launch(name, ranks, out_dir, timeout=int(max(30, min(left, args.case_s))))
                row["rc"] = rc
                files = sorted(out_dir.glob(f"{name}.rank*.json"))
                row["measured"] = [json.loads(f.read_text()) for f in files]
                if rc != 0:
                    row["error"] = tail
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "measured"}, default=str)[:600], flush=True)
    (out_dir / "gpu_engines.json").write_text(json.dumps(results, indent=1, default=str))
    lines = ["# Engine terms on a real GPU (benchmarks/gpu_engines.py)", "",
             "| case | ranks | predicted allocated | measured allocated (max over ranks) | predicted total | "
             "measured reserved | error |", "|---|---|---|---|---|---|---|"]
    for r in results:
        m = r.get("measured") or []
        alloc = max((s["steps"][-1]["allocated"] for s in m), default=None)
        res = max((s["steps"][-1]["reserved"] for s in m), default=None)
        p = r["predicted"]
        lines.append(f"| {r['case']} | {r['ranks']} | {p['allocated_gib']:.2f} | "
                     f"{'' if alloc is None else f'{alloc / GIB:.2f}'} | {p['total_gib']:.2f} | "
                     f"{'' if res is None else f'{res / GIB:.2f}'} | {(r.get('error') or '')[:80]} |")
    (out_dir / "gpu_engines.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
