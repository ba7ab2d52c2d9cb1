"""The gpu probe: a few real training steps of the configured run on the local GPU(s), in a subprocess.

Random weights are built from the model config (no checkpoint is read) and set up exactly as the simulate probe
sets them up (build.prepare: LF's precision, LoRA, checkpointing, optimizer). Several ranks are launched with
``torchrun`` (or the ``deepspeed`` launcher when the run uses DeepSpeed and it is installed), so ZeRO partitioning
and per-rank memory are real. Each rank reports ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
per segment of the step (simulate's segment hooks, with the CUDA peak counters reset at each segment boundary),
the device-level usage (``torch.cuda.mem_get_info``: total − free, i.e. what nvidia-smi shows, context and other
processes included), and every step's loss and gradient norm, which must be finite.

When the full model would not fit on the card, the probe runs depth-reduced (k and k+1 layers) and extrapolates
each segment's peak to the model's depth, as simulate does. Every probe runs in its own process group with a
timeout, so an OOM or a hang never takes the doctor down. GPUs that other processes are using are refused unless
``force`` (their memory would be counted and their work disturbed).

The worker is this module run as a script: ``python -m finetune_doctor.probes.gpu --worker SPEC.json OUT_DIR``.
With ``--device cpu`` it runs the same steps on the CPU and measures with the live-bytes tracker (tests use it to
exercise the launcher, the timeout and the result files without a GPU).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finetune_doctor.probes.spec import ProbeSpec

GIB = float(1 << 30)
# A card counts as busy when a process we did not start has a context on it, or (process list hidden) when more
# than this much memory is used: an idle card shows only the driver's own reservation (< 0.5 GiB).
BUSY_USED_BYTES = 1 << 30


class ProbeRefused(Exception):
    """The probe will not run here (no GPU, busy GPUs without --force); the message says why."""


@dataclass(frozen=True)
class RankResult:
    """What one rank measured (bytes). `segments` maps a segment label to (allocated, reserved) peaks."""

    rank: int
    peak_allocated: int
    peak_reserved: int
    device_used: int | None
    device_total: int | None
    losses: tuple[float, ...]
    grad_norms: tuple[float | None, ...]
    segments: dict[str, tuple[int, int]] = field(default_factory=dict)
    oom: bool = False
    error: str | None = None


@dataclass(frozen=True)
class GpuResult:
    """Measured peaks per rank (bytes), extrapolated to the full depth when the probe ran depth-reduced."""

    peak_allocated: tuple[int, ...]
    peak_reserved: tuple[int, ...]
    device_used: tuple[int | None, ...]
    finite: bool
    steps: int
    nan_free_steps: int
    depth: tuple[int, ...]
    num_layers: int
    world_size: int
    launcher: str
    wall_s: float
    notes: tuple[str, ...] = ()
    oom: bool = False
    error: str | None = None
    losses: tuple[float, ...] = ()

    @property
    def peak_allocated_gib(self) -> float:
        return max(self.peak_allocated, default=0) / GIB

    @property
    def peak_reserved_gib(self) -> float:
        return max(self.peak_reserved, default=0) / GIB

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": "measured",
            "peak_allocated_gib": [round(x / GIB, 3) for x in self.peak_allocated],
            "peak_reserved_gib": [round(x / GIB, 3) for x in self.peak_reserved],
            "device_used_gib": [None if x is None else round(x / GIB, 3) for x in self.device_used],
            "finite": self.finite, "steps": self.steps, "nan_free_steps": self.nan_free_steps,
            "losses": [round(x, 4) if math.isfinite(x) else str(x) for x in self.losses],
            "depth": list(self.depth), "num_layers": self.num_layers, "extrapolated": len(self.depth) == 2,
            "world_size": self.world_size, "launcher": self.launcher, "wall_s": round(self.wall_s, 1),
            "oom": self.oom, "error": self.error, "notes": list(self.notes),
        }


# ---- which GPUs ------------------------------------------------------------------------------------------

def free_gpus(adapter: Any = None, env: dict[str, str] | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Cards nobody else is using, and (card, who uses it) for each busy card. Cards are named as
    ``CUDA_VISIBLE_DEVICES`` takes them: the UUID when NVML gives one, else the index.

    `adapter` is a hardware.nvml GpuSource (hardware/fake.py in tests); None opens NVML. Raises ProbeRefused when
    NVML is unavailable or no card is visible.
    """
    from finetune_doctor.hardware.nvml import NVMLUnavailable, open_adapter, visible_cards

    try:
        ad = adapter if adapter is not None else open_adapter()
    except NVMLUnavailable as err:
        raise ProbeRefused(f"no NVIDIA driver: {err}") from None
    try:
        snap = ad.snapshot()
    except NVMLUnavailable as err:
        raise ProbeRefused(f"no NVIDIA driver: {err}") from None
    finally:
        if adapter is None:
            ad.close()
    cards = visible_cards(snap, env)
    if not cards:
        raise ProbeRefused("no GPU is visible (CUDA_VISIBLE_DEVICES or no card)")
    me = os.getpid()
    free: list[str] = []
    busy: list[tuple[str, str]] = []
    for c in cards:
        ident = c.uuid or str(c.index)
        others = [p for p in (c.processes or ()) if p.pid != me]
        if others:
            who = ", ".join(f"pid {p.pid}" + (f" ({p.name})" if p.name else "") +
                            (f" {p.used_bytes / GIB:.1f} GiB" if p.used_bytes else "") for p in others[:3])
            busy.append((ident, f"GPU {c.index}: in use by {who}"))
        elif c.processes is None and (c.used_bytes or 0) > BUSY_USED_BYTES:
            busy.append((ident, f"GPU {c.index}: {c.used_bytes / GIB:.1f} GiB used by processes NVML does not "
                                "list"))
        else:
            free.append(ident)
    return free, busy


# ---- launcher --------------------------------------------------------------------------------------------

def _launch_cmd(spec: ProbeSpec, nproc: int, spec_path: Path, out: Path, device: str) -> tuple[list[str], str]:
    worker = [sys.executable, "-m", "finetune_doctor.probes.gpu", "--worker", str(spec_path), str(out),
              "--device", device]
    if nproc <= 1 and not (spec.deepspeed and device == "cuda"):
        return worker, "python"
    if spec.deepspeed and device == "cuda":
        # DeepSpeed's launcher sets RANK/LOCAL_RANK/WORLD_SIZE; deepspeed.initialize starts NCCL itself
        return ["deepspeed", "--num_gpus", str(nproc), "--module", "finetune_doctor.probes.gpu", "--worker",
                str(spec_path), str(out), "--device", device], "deepspeed"
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "finetune_doctor.probes.gpu", "--worker", str(spec_path), str(out), "--device", device], "torchrun"


def _run_once(spec: ProbeSpec, n_layers: int, steps: int, nproc: int, timeout_s: float, device: str,
              gpus: list[str] | None) -> tuple[list[RankResult], str, str | None]:
    """Launch the worker for one depth; returns (per-rank results, launcher, error)."""
    with tempfile.TemporaryDirectory(prefix="doctor-probe-") as tmp:
        d = Path(tmp)
        spec_path = d / "spec.json"
        spec_path.write_text(json.dumps({"spec": spec.as_dict(), "n_layers": n_layers, "steps": steps}))
        cmd, launcher = _launch_cmd(spec, nproc, spec_path, d, device)
        env = dict(os.environ)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus[:nproc])
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True" if nproc > 1 else "")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, text=True)
        try:
            log, _ = proc.communicate(timeout=timeout_s)
            error = None if proc.returncode == 0 else f"exit {proc.returncode}: {_tail(log)}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            error = f"timed out after {timeout_s:.0f} s"
        results = []
        for r in range(nproc):
            f = d / f"rank{r}.json"
            if f.exists():
                data = json.loads(f.read_text())
                data["segments"] = {k: tuple(v) for k, v in data.get("segments", {}).items()}
                data["losses"] = tuple(data.get("losses", ()))
                data["grad_norms"] = tuple(data.get("grad_norms", ()))
                results.append(RankResult(**data))
        if any(r.oom for r in results):
            error = "CUDA out of memory: " + next(r.error for r in results if r.oom)
        return results, launcher, error


def _tail(text: str, n: int = 400) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-3:])[-n:]


def _extrapolate(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]], k: int, L: int) -> tuple[int, int]:
    """Peak (allocated, reserved) at depth L from the per-segment peaks at depths k and k+1 (simulate's rule)."""
    best_a = best_r = 0
    for key in a.keys() & b.keys():
        ea = a[key][0] + (L - k) * (b[key][0] - a[key][0])
        er = a[key][1] + (L - k) * (b[key][1] - a[key][1])
        best_a, best_r = max(best_a, ea), max(best_r, er)
    return int(best_a), int(best_r)


def run_gpu(spec: ProbeSpec, steps: int = 3, *, force: bool = False, timeout_s: float = 900.0,
            depth: str | tuple[int, ...] = "auto", predicted_gib: float | None = None, adapter: Any = None,
            device: str = "cuda") -> GpuResult:
    """Run `steps` real steps of `spec` on the local GPUs and return the measured peaks per rank.

    Ranks: ``min(spec.world_size, free GPUs)``; when fewer GPUs than the run's world size are here, ZeRO
    partitions are over fewer ranks than in the run (per-rank memory is then an upper bound) and a note says so.
    `predicted_gib` (the estimator's or simulate's peak) decides whether the full depth fits; when it does not,
    the probe runs k and k+1 layers and extrapolates. Raises ProbeRefused (no GPU, busy GPUs without `force`).
    `device="cpu"` runs the worker on the CPU (tests).
    """
    t0 = time.perf_counter()
    notes: list[str] = []
    gpus: list[str] | None = None
    capacity = None
    if device == "cuda":
        if spec.deepspeed and not (_has_deepspeed() and shutil.which("deepspeed")):
            raise ProbeRefused("the gpu probe of a DeepSpeed run needs deepspeed installed (pip install deepspeed); "
                               "use --mode simulate")
        try:
            free, busy = free_gpus(adapter)
        except ProbeRefused:
            # no NVML (a container without the management library): nobody can be seen using the cards, so only
            # --force proceeds, on every card CUDA shows (counted in a child: the doctor never creates a context)
            if not force:
                raise
            free, busy = [str(i) for i in range(_cuda_count())], []
            notes.append("NVML unavailable: other processes on the GPUs could not be checked (--force)")
        if busy and not force:
            raise ProbeRefused("GPUs in use by other processes (pass --force to probe anyway): "
                               + "; ".join(msg for _, msg in busy))
        gpus = free + ([] if not force else [ident for ident, _ in busy])
        if not gpus:
            raise ProbeRefused("no free GPU")
        nproc = min(max(spec.world_size, 1), len(gpus))
        if busy and force:
            notes.append("probed on busy GPUs (--force): their other processes' memory shows in device usage")
    else:
        nproc = 1
    if nproc < spec.world_size:
        notes.append(f"the run has {spec.world_size} ranks; {nproc} were available here, so sharded states are "
                     f"split {nproc} ways instead of {spec.world_size} (per-rank memory is an upper bound)")
    from finetune_doctor.probes.depth import choose_depth

    if depth == "auto":
        full = (spec.num_layers,)
        if predicted_gib is not None and capacity is None:
            capacity = _capacity_gib(adapter) if device == "cuda" else None
        depths = full if (predicted_gib is None or capacity is None or predicted_gib < 0.9 * capacity) \
            else choose_depth(spec, max_full=0)
    elif depth == "full":
        depths = (spec.num_layers,)
    else:
        depths = tuple(depth)
    per_depth = []
    launcher = "python"
    error = None
    for n in depths:
        res, launcher, err = _run_once(spec, n, steps, nproc, timeout_s, device, gpus)
        per_depth.append(res)
        if err:
            error = err
            break
    L = spec.num_layers
    oom = error is not None and "out of memory" in error
    if error or not per_depth or not per_depth[-1]:
        return GpuResult((), (), (), False, steps, 0, depths, L, nproc, launcher, time.perf_counter() - t0,
                         tuple(notes), oom, error or "no rank reported")
    last = per_depth[-1]
    if len(depths) == 2:
        k = depths[0]
        alloc, resv = [], []
        for ra, rb in zip(per_depth[0], per_depth[1]):
            a, r = _extrapolate(ra.segments, rb.segments, k, L)
            alloc.append(a)
            resv.append(r)
        notes.append(f"ran {depths[0]} and {depths[1]} layers and extrapolated each segment's peak to {L} layers "
                     "(the full model would not fit)")
        used: list[int | None] = [None] * len(alloc)
    else:
        alloc = [r.peak_allocated for r in last]
        resv = [r.peak_reserved for r in last]
        used = [r.device_used for r in last]
    losses = list(last[0].losses)
    norms = list(last[0].grad_norms)
    finite_steps = 0
    for i, x in enumerate(losses):
        g = norms[i] if i < len(norms) else None
        if math.isfinite(x) and (g is None or math.isfinite(g)):
            finite_steps += 1
        else:
            break
    finite = finite_steps == len(losses) and all(
        all(math.isfinite(x) for x in r.losses) for rs in per_depth for r in rs)
    notes.append("random weights built from the config: memory is real, loss values are not meaningful")
    return GpuResult(tuple(alloc), tuple(resv), tuple(used), finite, steps, finite_steps, depths, L, nproc,
                     launcher, time.perf_counter() - t0, tuple(notes), False, None, tuple(losses))


def _cuda_count() -> int:
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return 0


def _capacity_gib(adapter: Any) -> float | None:
    try:
        from finetune_doctor.hardware.nvml import detect

        hw = detect(adapter)
    except Exception:  # no NVML: the worker will find out
        return None
    return hw.capacity_gib if hw else None


# ---- worker ----------------------------------------------------------------------------------------------

class _CudaSegments:
    """Tracker interface over the CUDA allocator's peak counters: each segment's peak, reset at every boundary."""

    default_category = "temp"

    def __init__(self, torch: Any, dev: Any):
        self.torch, self.dev = torch, dev
        self.segment: tuple = ("setup",)
        self.segments: dict[str, list[int]] = {}

    def track(self, tensors: Any, category: str) -> None:
        pass

    def _close(self) -> None:
        c = self.torch.cuda
        key = "/".join(str(x) for x in self.segment)
        a, r = c.max_memory_allocated(self.dev), c.max_memory_reserved(self.dev)
        old = self.segments.get(key, [0, 0])
        self.segments[key] = [max(old[0], a), max(old[1], r)]

    def set_segment(self, *label: Any) -> None:
        self._close()
        self.torch.cuda.reset_peak_memory_stats(self.dev)
        self.segment = tuple(label)


def _ds_config(spec: ProbeSpec, world: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": spec.micro_batch,
        "gradient_accumulation_steps": min(max(spec.grad_accum, 1), 2),
        "train_batch_size": spec.micro_batch * min(max(spec.grad_accum, 1), 2) * world,
        "zero_optimization": {"stage": spec.zero_stage},
        "gradient_clipping": spec.max_grad_norm or 0.0,
    }
    if spec.autocast == "bfloat16" or spec.compute_dtype == "bfloat16":
        cfg["bf16"] = {"enabled": True}
    elif spec.autocast == "float16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if spec.offload_optimizer:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": spec.offload_optimizer, "pin_memory": True}
    if spec.offload_param and spec.zero_stage == 3:
        cfg["zero_optimization"]["offload_param"] = {"device": spec.offload_param, "pin_memory": True}
    return cfg


def worker(spec_file: str, out_dir: str, device: str = "cuda") -> int:
    """One rank: build, train `steps` steps, write ``rank{RANK}.json``. Exit 0, or 3 on CUDA OOM."""
    import torch

    from finetune_doctor.probes.build import prepare
    from finetune_doctor.probes.fakemode import fake_patches
    from finetune_doctor.probes.step import train_steps
    from finetune_doctor.probes.tracker import LiveBytesTracker

    payload = json.loads(Path(spec_file).read_text())
    spec = ProbeSpec.from_dict(payload["spec"])
    n_layers, steps = int(payload["n_layers"]), int(payload["steps"])
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    out = Path(out_dir) / f"rank{rank}.json"
    losses: list[float] = []
    norms: list[float | None] = []
    result: dict[str, Any] = {"rank": rank, "peak_allocated": 0, "peak_reserved": 0, "device_used": None,
                              "device_total": None, "losses": losses, "grad_norms": norms, "segments": {}}
    use_ds = spec.deepspeed and device == "cuda"
    # the local run: sharded/DeepSpeed semantics are real here, so nothing is added analytically
    local_spec = spec.with_(world_size=world)
    if not use_ds:
        local_spec = local_spec.with_(deepspeed=False)
    try:
        if device == "cuda":
            torch.cuda.set_device(local)
            dev = torch.device("cuda", local)
        else:
            dev = torch.device("cpu")
        mesh = None
        if world > 1 and not use_ds and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo")
        if world > 1 and local_spec.sharded and not use_ds:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(dev.type, (world,))
        torch.manual_seed(1234 + rank)
        notes: list[str] = []
        with fake_patches(None):
            prep = prepare(local_spec, n_layers, notes, mesh=mesh, device=str(dev))
        if world > 1 and mesh is None and not use_ds:
            prep.model = torch.nn.parallel.DistributedDataParallel(prep.model, device_ids=[local] if device == "cuda" else None)
        seg = _CudaSegments(torch, dev) if device == "cuda" else LiveBytesTracker(1)

        def on_step(step: int, loss: float, norm: float | None) -> None:
            losses.append(loss)
            norms.append(norm)

        if device == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        if use_ds:
            _train_deepspeed(prep, local_spec, steps, seg, world, on_step)
        elif device == "cuda":
            train_steps(prep, local_spec, steps, seg, device_type="cuda", on_step=on_step)
        else:
            with seg:
                train_steps(prep, local_spec, steps, seg, device_type="cpu", on_step=on_step)
        if device == "cuda":
            torch.cuda.synchronize(dev)
            seg.set_segment("end")
            result["segments"] = {k: v for k, v in seg.segments.items() if k != "setup"}
            result["peak_allocated"] = max(v[0] for v in seg.segments.values())
            result["peak_reserved"] = max(v[1] for v in seg.segments.values())
            free_b, total_b = torch.cuda.mem_get_info(dev)
            result["device_used"], result["device_total"] = int(total_b - free_b), int(total_b)
        else:
            result["segments"] = {"/".join(str(x) for x in k): [p.total, p.total]
                                  for k, p in seg.segment_peaks.items() if k[0] != "setup"}
            result["peak_allocated"] = result["peak_reserved"] = seg.peak.total
        code = 0
    except torch.cuda.OutOfMemoryError as err:
        result["oom"] = True
        result["error"] = str(err).splitlines()[0][:300]
        code = 3
    out.write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return code


def _has_deepspeed() -> bool:
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return False
    return True


def _train_deepspeed(prep: Any, spec: ProbeSpec, steps: int, seg: Any, world: int, on_step: Any) -> None:
    """The HF Trainer's DeepSpeed path: the trainer's AdamW handed to ``deepspeed.initialize``; DeepSpeed casts
    the module to half precision and keeps fp32 masters and states in its ZeRO optimizer."""
    import deepspeed
    import torch

    from finetune_doctor.probes.step import install_segment_hooks

    opt = torch.optim.AdamW(prep.trainable, lr=1e-5)
    engine, _, _, _ = deepspeed.initialize(model=prep.model, optimizer=opt, config=_ds_config(spec, world))
    st = prep.state
    handles = install_segment_hooks(engine.module, seg, st, prep.trainable)
    micro = min(max(spec.grad_accum, 1), 2)
    try:
        for step in range(1, steps + 1):
            st.step = step
            total = 0.0
            for m in range(micro):
                st.micro = m
                ids = torch.randint(0, prep.vocab, (spec.batch, spec.seq_len), device=engine.device)
                st.phase = "fwd"
                seg.set_segment(step, m, "fwd", "embed")
                loss = engine(input_ids=ids, labels=ids).loss
                st.phase = "bwd"
                seg.set_segment(step, m, "bwd", "logits")
                engine.backward(loss)
                total += float(loss.detach())
                seg.set_segment(step, m, "bwd", "end")
                st.phase = "opt"
                seg.set_segment(step, 0, "opt")
                engine.step()
            norm = engine.get_global_grad_norm()
            on_step(step, total, None if norm is None else float(norm))
    finally:
        for h in handles:
            h.remove()


def _main(argv: list[str]) -> int:
    # the deepspeed launcher adds --local_rank=N to the module's arguments
    for a in [a for a in argv if a.startswith("--local_rank")]:
        os.environ.setdefault("LOCAL_RANK", a.split("=", 1)[-1])
        argv.remove(a)
    if len(argv) >= 3 and argv[0] == "--worker":
        device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
        return worker(argv[1], argv[2], device)
    print("usage: python -m finetune_doctor.probes.gpu --worker SPEC.json OUT_DIR [--device cuda|cpu]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
