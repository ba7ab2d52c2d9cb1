"""The story of a run from its leftovers: one ordered timeline, and the ``ev`` facts the postmortem rules judge.

Input: the `Evidence` of the readers and, when the run's config is known, the fact namespaces of
``pipeline.check.build_context`` (cfg, run, model, hw, mem, ds). Output: a `Timeline` with
`TimelineEvent` values (``source`` = ``file:line``; for event files the number is the record) and the ``ev``
namespace (shape in `analyze`).

Methods, and why:

* **Metric curves.** Per metric the source with the most points wins (trainer_state > trainer_log >
  event files > captured stdout on ties); event files are concatenated per launch. HF's printed dicts carry
  no step: the step is the training bar's, else it is extrapolated from the logged steps around it, else
  from ``logging_steps``, else the dict's ordinal (the timeline then says "log #N").
* **Spikes** use robust statistics, not thresholds on raw values: each point is compared with the median and
  the MAD (scaled by 1.4826 to estimate σ for Gaussian noise; Rousseeuw & Croux 1993) of the up to 64
  preceding finite points (at least 8). A loss spike is ≥ 6 robust σ *and* ≥ 1.5× the median; a grad-norm
  explosion ≥ 6 robust σ and ≥ 10× the median (gradient norms are heavy-tailed, clipping makes 2-3× common).
* **Loss scale** (DeepSpeed fp16, loss_scaler.py; log_patterns.md §2): halvings while the scale searches down
  from its initial value are normal calibration. The run is *collapsing* when the scaler aborts at
  ``min_loss_scale``, when the scale falls to ≤ 16 (within 4 halvings of DeepSpeed's default minimum 1), or
  when it is below 1024 and still being cut after the first 20 optimizer steps.
* **Hidden NaN**: transformers' ``logging_nan_inf_filter`` (default True) logs a window whose every micro-step
  loss was NaN/Inf as ``loss 0.0`` while ``grad_norm`` stays NaN (LF_FACTS.md §8): loss 0 + grad_norm NaN is
  read as NaN, and the first such step is the first non-finite step.
* **Constant grad norm**: the same grad_norm to 7 significant digits at ≥ 3 consecutive logs while the loss changes
  is not a gradient norm (two equal neighbours occur by chance about once per million float32 logs); a √k value
  (1.4142135 = √2, 1.7320508 = √3), the signature of LF issues #8261 and #9567, is enough at 2.
* **OOM**: the failed allocation is compared with sizes the model implies when params P, trainable params T
  and data-parallel ranks N are known: 4·P/N (one fp32 optimizer-state partition under ZeRO-1/2/3: master
  weights, exp_avg or exp_avg_sq), 12·P/N, 2·P/N, 2·P, 4·P and the fp32 logits b·s·V·4, within 2 % (the message
  prints two decimals). Phase comes from the traceback frames around the message, else the last DeepSpeed
  see_memory_usage label, else the size match.
"""

from __future__ import annotations

import math
import statistics
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from finetune_doctor.evidence import (
    Evidence, FileEvidence, FileRead, KillRecord, NcclRecord, OomRecord, OverflowRecord, Series, src,
)
from finetune_doctor.types import GIB, TimelineEvent

# -- thresholds (see the module docstring for where each comes from) ------------------------------------------
BASELINE = 64
MIN_BASELINE = 8
LOSS_SPIKE_Z = 6.0
LOSS_SPIKE_RATIO = 1.5
GRAD_SPIKE_Z = 6.0
GRAD_SPIKE_RATIO = 10.0
CALIBRATION_STEPS = 20
SCALE_LOW = 1024.0
SCALE_COLLAPSE = 16.0
SIZE_MATCH_TOL = 0.02
FIRST_LOSS_FACTOR = 2.0
DEFAULT_VOCAB_CEILING = 262_144     # the largest common LLM vocabulary (Gemma-3); ln = 12.48
LATE_EPOCH = 0.05
LATE_STEP = 50
CONST_REL_TOL = 5e-8
TIMELINE_CAP = 200
# learning rates beyond which a divergence is blamed on the rate itself (LLaMA-Factory's examples use 1e-4 for
# LoRA and 1e-5 for full fine-tuning; these are 50x those)
LR_HIGH = {"lora": 5e-3, "oft": 5e-3, "freeze": 1e-3, "full": 5e-4}
LR_TYPICAL = {"lora": 1e-4, "oft": 1e-4, "freeze": 1e-5, "full": 1e-5}
# families pre-trained in bf16 even where config.json says float16 (Llama 2; Meta's model card), as the static
# fp16-on-bf16-model rule (rules/fp16-on-bf16-model.yaml) counts them
BF16_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
                 "gemma3_text", "deepseek_v2", "phi3", "glm4", "chatglm", "internlm2")

# canonical metric names for TensorBoard tags written by transformers' TensorBoardCallback (rewrite_logs)
TB_TAGS = {"train/loss": "loss", "train/grad_norm": "grad_norm", "train/learning_rate": "learning_rate",
           "train/epoch": "epoch", "eval/loss": "eval_loss", "train/loss_scale": "loss_scale"}
SOURCE_PRIORITY = {"trainer-state": 0, "trainer-log": 1, "event-file": 2, "text-log": 3}
EXTRA_KINDS = ("first_loss", "loss_zero", "grad_norm_constant", "exception", "warning", "warmup_end", "finished")
"""Timeline kinds beyond DESIGN.md's eight: an abnormal first loss, the start of a loss stuck at 0, a constant
grad norm, a crash with a Python exception, a framework warning that matters, the end of LR warm-up, and a
normal end of training."""


@dataclass(frozen=True)
class Curve:
    """One metric over the run: parallel arrays, plus which file each stretch came from.

    `basis` says how steps were obtained: global_step | estimated | logging_steps | ordinal.
    """

    name: str
    steps: array
    values: array
    lines: array
    segments: tuple[tuple[int, str], ...]      # (first index, file)
    basis: str = "global_step"

    def __len__(self) -> int:
        return len(self.values)

    def file_at(self, i: int) -> str:
        starts = [s for s, _ in self.segments]
        return self.segments[max(0, bisect_right(starts, i) - 1)][1]

    def source(self, i: int) -> str | None:
        return src(self.file_at(i), self.lines[i])

    def location(self, i: int) -> dict[str, Any]:
        return {"file": self.file_at(i), "line": self.lines[i], "column": None, "key": None}


@dataclass(frozen=True)
class Timeline:
    """What `analyze` returns: ordered events, the ``ev`` facts and the merged curves (for plots)."""

    events: tuple[TimelineEvent, ...]
    facts: dict[str, Any]
    curves: dict[str, Curve] = field(default_factory=dict)
    reads: tuple[FileRead, ...] = ()


# -- small helpers ------------------------------------------------------------------------------------------------

def gib_text(b: float | None) -> str:
    """Bytes as PyTorch prints sizes: GiB with two decimals, MiB below 1 GiB."""
    if b is None:
        return "?"
    if abs(b) >= GIB:
        return f"{b / GIB:.2f} GiB"
    return f"{b / (1 << 20):.2f} MiB"


def _fmt(v: float | None) -> str:
    if v is None:
        return "?"
    if not math.isfinite(v):
        return str(v).lower()
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def _sfmt(v: float | None) -> str:
    """A loss scale as DeepSpeed prints it: an integer when it is one."""
    if v is None:
        return "?"
    return str(int(v)) if math.isfinite(v) and float(v).is_integer() else _fmt(v)


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _robust(vals: list[float]) -> tuple[float, float]:
    med = statistics.median(vals)
    mad = statistics.median([abs(v - med) for v in vals])
    return med, 1.4826 * mad


# -- curves -------------------------------------------------------------------------------------------------------

def _canon(name: str) -> str:
    return TB_TAGS.get(name, name)


def _candidates(ev: Evidence) -> dict[str, list[tuple[int, int, list[Series]]]]:
    """metric -> [(points, priority, [series...])]; event files of one run directory are one candidate."""
    out: dict[str, list[tuple[int, int, list[Series]]]] = {}
    tb: dict[str, list[Series]] = {}
    for f in ev.files:
        kind = f.read.kind
        for s in f.series:
            name = _canon(s.name)
            if kind == "event-file":
                tb.setdefault(name, []).append(s)
                continue
            if kind == "text-log" and name.startswith("lf_"):
                name = name[3:]
                prio = SOURCE_PRIORITY["text-log"] + 1   # LF's duplicate callback lines: only if nothing else
            else:
                prio = SOURCE_PRIORITY.get(kind, 5)
            out.setdefault(name, []).append((len(s), prio, [s]))
    for name, lst in tb.items():
        out.setdefault(name, []).append((sum(len(s) for s in lst), SOURCE_PRIORITY["event-file"], lst))
    return out


def _fill_steps(steps: array, logging_steps: int | None) -> tuple[array, str]:
    if all(s >= 0 for s in steps):
        return steps, "global_step"
    known = [(i, s) for i, s in enumerate(steps) if s >= 0]
    out = array("q", steps)
    if not known:
        k = logging_steps or 1
        for i in range(len(out)):
            out[i] = (i + 1) * k
        return out, "logging_steps" if logging_steps else "ordinal"
    if len(known) >= 2:
        ratios = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(known, known[1:]) if b[0] > a[0]]
        spacing = statistics.median(ratios) if ratios else (logging_steps or 1)
    else:
        i0, s0 = known[0]
        spacing = logging_steps or (s0 / (i0 + 1) if s0 > 0 else 1)
    spacing = max(spacing, 1)
    ki = [i for i, _ in known]
    for i in range(len(out)):
        if out[i] >= 0:
            continue
        j = bisect_right(ki, i)
        if j > 0:
            a_i, a_s = known[j - 1]
            out[i] = int(round(a_s + (i - a_i) * spacing))
        else:
            b_i, b_s = known[0]
            out[i] = max(1, int(round(b_s - (b_i - i) * spacing)))
    return out, "estimated"


def _fill_nearest(steps: array) -> array:
    out = array("q", steps)
    nxt = -1
    for i in range(len(out) - 1, -1, -1):
        if out[i] >= 0:
            nxt = out[i]
        elif nxt >= 0:
            out[i] = nxt
    prev = -1
    for i in range(len(out)):
        if out[i] >= 0:
            prev = out[i]
        else:
            out[i] = max(prev, 0)
    return out


def build_curves(ev: Evidence, logging_steps: int | None = None) -> dict[str, Curve]:
    """One `Curve` per metric, from the best source (module docstring)."""
    curves: dict[str, Curve] = {}
    for name, cands in _candidates(ev).items():
        cands.sort(key=lambda c: (-c[0], c[1]))
        n, _, parts = cands[0]
        if n == 0:
            continue
        if len(parts) == 1:
            s = parts[0]
            if name == "loss_scale":   # overflow lines before the first progress bar: the next known step
                steps, basis = _fill_nearest(s.steps), "global_step"
            else:
                steps, basis = _fill_steps(s.steps, logging_steps)
            curves[name] = Curve(name, steps, s.values, s.lines, ((0, s.file),), basis)
            continue
        steps, values, lines = array("q"), array("d"), array("q")
        segs = []
        for s in parts:
            segs.append((len(values), s.file))
            steps.extend(s.steps)
            values.extend(s.values)
            lines.extend(s.lines)
        curves[name] = Curve(name, steps, values, lines, tuple(segs))
    return curves


def _value_at(c: Curve | None, step: int | None) -> float | None:
    """The curve's value at the last logged step <= `step` (the learning rate in effect)."""
    if c is None or step is None or not len(c):
        return None
    best = None
    for s, v in zip(c.steps, c.values):
        if s <= step:
            best = v
        else:
            break
    return best if best is not None else c.values[0]


def _summary(c: Curve | None) -> dict[str, Any] | None:
    if c is None or not len(c):
        return None
    fin = [v for v in c.values if math.isfinite(v)]
    return {"n": len(c), "first": c.values[0], "first_step": c.steps[0], "last": c.values[-1], "last_step": c.steps[-1],
            "min": min(fin) if fin else None, "max": max(fin) if fin else None,
            "median": statistics.median(fin) if fin else None, "nonfinite": len(c) - len(fin),
            "zeros": sum(1 for v in c.values if v == 0.0), "basis": c.basis, "file": c.file_at(0)}


def spikes(c: Curve, z: float, ratio: float) -> list[dict[str, Any]]:
    """Points ≥ `z` robust σ above the median of the ≤ BASELINE finite points before them and ≥ `ratio`× that
    median; runs of adjacent spikes are merged (first point, count, peak). O(n) amortised: the baseline is
    recomputed every BASELINE/2 points."""
    vals = c.values
    out: list[dict[str, Any]] = []
    window: list[float] = []
    med = sig = None
    since = BASELINE
    last_spike = -10
    for i, v in enumerate(vals):
        if not math.isfinite(v):
            continue
        if len(window) >= MIN_BASELINE:
            if since >= BASELINE // 2 or len(window) < BASELINE:
                med, sig = _robust(window)
                since = 0
            assert med is not None and sig is not None
            floor = max(sig, 1e-12, abs(med) * 1e-3)
            score = (v - med) / floor
            if score >= z and v >= ratio * med and med > 0:
                if out and i - last_spike <= 2:
                    cur = out[-1]
                    cur["count"] += 1
                    if v > cur["peak"]:
                        cur["peak"], cur["peak_step"] = v, c.steps[i]
                else:
                    out.append({"index": i, "step": c.steps[i], "value": v, "baseline": med, "sigma": sig,
                                "score": score, "ratio": v / med, "count": 1, "peak": v, "peak_step": c.steps[i],
                                "location": c.location(i), "source": c.source(i)})
                last_spike = i
                continue   # a spike does not enter its own baseline
        window.append(v)
        since += 1
        if len(window) > BASELINE:
            del window[0]
    return out


# -- the analysis -------------------------------------------------------------------------------------------------

class _Ctx:
    """What the config side says (fact namespaces of build_context), with log facts as fallback."""

    def __init__(self, facts: dict[str, Any] | None, ev: Evidence):
        f = facts or {}
        self.cfg = f.get("cfg") or {}
        self.run = f.get("run") or {}
        self.model = f.get("model") or {}
        self.hw = f.get("hw") or {}
        self.mem = f.get("mem") or {}
        self.ds = f.get("ds") or {}
        self.log: dict[str, Any] = {}
        self.log_at: dict[str, dict[str, Any]] = {}
        for fe in ev.files:
            for fact in fe.facts:
                if fact.name not in self.log:
                    self.log[fact.name] = fact.value
                    self.log_at[fact.name] = {"file": fact.file, "line": fact.line, "column": None, "key": None}

    def finetuning_type(self) -> str:
        return str(self.run.get("finetuning_type") or self.cfg.get("finetuning_type") or "lora")

    def fp16(self) -> tuple[bool, str | None]:
        if self.cfg.get("fp16") is True:
            return True, "config (fp16: true)"
        if self.run.get("compute_dtype") == "float16":
            return True, "resolved run (fp16 compute)"
        if self.log.get("compute_dtype") == "float16":
            return True, "log (compute dtype: torch.float16)"
        if self.log.get("fp16_enabled") is True or self.ds.get("fp16_enabled") is True:
            return True, "DeepSpeed fp16 enabled"
        return False, None

    def world(self) -> tuple[int | None, str | None]:
        if isinstance(self.log.get("world_size"), int) and self.log["world_size"] > 0:
            return self.log["world_size"], "log"
        if self.hw.get("num_gpus"):
            return int(self.hw["num_gpus"]), "--gpu/NVML"
        return None, None

    def zero_stage(self) -> int | None:
        for v in (self.log.get("zero_stage"), self.ds.get("zero_stage"), self.run.get("zero_stage") if
                  self.run.get("deepspeed") else None):
            if isinstance(v, int):
                return v
        return None

    def overlap_comm(self) -> bool | None:
        if isinstance(self.log.get("overlap_comm"), bool):
            return self.log["overlap_comm"]
        if isinstance(self.ds.get("overlap_comm"), bool):
            return self.ds["overlap_comm"]
        return None

    def params(self) -> tuple[float | None, str | None]:
        if self.model.get("params"):
            return float(self.model["params"]), f"model {self.model.get('name')}"
        if self.log.get("all_params"):
            return float(self.log["all_params"]), "log (all params)"
        e = self.log.get("ds_params_elems")
        if isinstance(e, str) and e:
            mult = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(e[-1], 1)
            try:
                return float(e.rstrip("KMBT")) * mult, "log (zero.Init num_elems)"
            except ValueError:
                pass
        return None, None

    def trainable(self) -> float | None:
        for v in (self.model.get("trainable_params"), self.log.get("trainable_params")):
            if v:
                return float(v)
        return None

    def vocab(self) -> int | None:
        v = self.model.get("vocab_size")
        return int(v) if v else None

    def model_bf16(self) -> tuple[bool | None, str | None]:
        dt, mt = self.model.get("dtype"), self.model.get("model_type")
        name = self.model.get("name")
        given = self.cfg.get("model_name_or_path")
        if isinstance(given, str) and given and given != name:
            name = f"{given} ({name})"   # as the config names it; the catalog entry it was matched to in brackets
        if dt == "bfloat16":
            return True, f"{name} is stored in bf16"
        if mt in BF16_FAMILIES:
            return True, f"{name} ({mt}) belongs to a family pre-trained in bf16"
        if dt in ("float16", "float32"):
            return False, None
        return None, None

    def logging_steps(self) -> int | None:
        v = self.cfg.get("logging_steps") or self.log.get("logging_steps")
        return int(v) if isinstance(v, (int, float)) and v > 0 else None


def analyze(ev: Evidence, facts: dict[str, Any] | None = None) -> Timeline:
    """Build the timeline and the ``ev`` facts (their shape: finetune_doctor/evidence.py, "The ``ev`` fact
    namespace"). `facts` are the namespaces of ``pipeline.check.build_context`` (cfg, run, model, hw, mem, ds), or
    None when the run's config is unknown; log statements (world size, DeepSpeed stage, parameter counts) fill in.
    """
    cx = _Ctx(facts, ev)
    curves = build_curves(ev, cx.logging_steps())
    loss, gn, lr = curves.get("loss"), curves.get("grad_norm"), curves.get("learning_rate")
    epoch = curves.get("epoch")
    events: list[tuple[float, int, TimelineEvent]] = []
    order = 0

    def add(step: int | None, kind: str, detail: str, source: str | None, when: float | None = None) -> None:
        nonlocal order
        key = float(step) if step is not None else (when if when is not None else math.inf)
        events.append((key, order, TimelineEvent(step, kind, detail, source)))
        order += 1

    out: dict[str, Any] = {}
    reads = [f.read for f in ev.files] + list(ev.skipped)
    out["files"] = len(reads)
    out["readable"] = sum(1 for f in ev.files if f.read.items or f.read.records or f.series)
    out["unread"] = [r.path for r in reads if not r.complete or r.problems]
    out["loss"] = _summary(loss)
    out["grad_norm"] = _summary(gn)
    steps_seen = [c.steps[-1] for c in (loss, gn, lr) if c is not None and len(c)]
    last_step = max([s for s in [f.last_step for f in ev.files] if s is not None] + steps_seen, default=None)
    total = next((f.total_steps for f in ev.files if f.total_steps), None) or cx.log.get("total_steps")
    out["steps"] = {"first": loss.steps[0] if loss is not None and len(loss) else None, "last": last_step,
                    "total": total, "logged": len(loss) if loss is not None else 0}
    trained = bool(steps_seen) or last_step is not None

    # model / world facts
    P, psrc = cx.params()
    world, wsrc = cx.world()
    out["model"] = {"params": P, "params_source": psrc, "trainable": cx.trainable(), "vocab": cx.vocab(),
                    "name": cx.model.get("name") or cx.cfg.get("model_name_or_path")}
    out["world"] = {"value": world, "source": wsrc}
    out["zero_stage"] = cx.zero_stage()
    out["overlap_comm"] = cx.overlap_comm()

    # restarts
    restarts = _restarts(ev)
    out["restarts"] = restarts
    for r in restarts:
        add(r["step"], "restart", r["detail"], src(r["location"]["file"], r["location"]["line"]))

    # learning rate schedule
    out["lr"] = _lr_facts(lr)
    if out["lr"] and out["lr"].get("warmup_end_step") is not None:
        add(out["lr"]["warmup_end_step"], "warmup_end",
            f"learning rate reaches its peak {_fmt(out['lr']['peak'])}", lr.source(out["lr"]["peak_index"]))

    # first loss
    out["first_loss"] = _first_loss(loss, cx)
    if out["first_loss"] and out["first_loss"]["abnormal"]:
        fl = out["first_loss"]
        add(fl["step"], "first_loss", f"first loss {_fmt(fl['value'])} is {fl['ratio']:.0f}× ln(vocab)={fl['ln_vocab']:.2f}",
            src(fl["location"]["file"], fl["location"]["line"]))

    # loss scale / overflows
    fp16_on, fp16_src = cx.fp16()
    overflows = [o for f in ev.files for o in f.overflows]
    aborts = [_abort_step(a, f.overflows) for f in ev.files for a in f.aborts]
    out["scale"] = _scale(overflows, aborts, cx)
    for e in _scale_events(overflows, aborts):
        add(*e)

    # non-finite values, hidden NaN, AMP skips
    nan = _first_nonfinite(loss, gn)
    amp = _amp_skips(loss, gn, fp16_on)
    out["amp_skips"] = amp
    if amp:
        add(amp["steps"][0], "loss_scale_drop", f"{amp['count']} step(s) skipped by the fp16 GradScaler "
            "(grad_norm nan, loss finite, training went on)", src(amp["location"]["file"], amp["location"]["line"]))
    out["loss_zero"] = _loss_zero(loss, gn)
    lz = out["loss_zero"]
    out["grad_const"] = _grad_const(gn, loss)
    gc = out["grad_const"]
    out["loss_spikes"] = 0
    out["loss_spike"] = None
    out["grad_spike"] = None
    if loss is not None and len(loss) >= MIN_BASELINE + 1:
        sp = spikes(loss, LOSS_SPIKE_Z, LOSS_SPIKE_RATIO)
        out["loss_spikes"] = len(sp)
        out["loss_spike"] = sp[0] if sp else None
        for s in sp[:20]:
            add(s["step"], "loss_spike", f"loss {_fmt(s['value'])} vs median {_fmt(s['baseline'])} "
                f"({s['score']:.0f} robust σ{', ' + str(s['count']) + ' logs' if s['count'] > 1 else ''})", s["source"])
    if gn is not None and len(gn) >= MIN_BASELINE + 1 and not gc:
        sp = spikes(gn, GRAD_SPIKE_Z, GRAD_SPIKE_RATIO)
        out["grad_spikes"] = len(sp)
        out["grad_spike"] = sp[0] if sp else None
        for s in sp[:20]:
            add(s["step"], "grad_norm_spike", f"grad_norm {_fmt(s['value'])} vs median {_fmt(s['baseline'])} "
                f"({s['ratio']:.0f}×)", s["source"])

    # attention implementation warning
    out["attention_warning"] = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "attention-warning" and out["attention_warning"] is None:
                out["attention_warning"] = {**(n.value or {}), "location": _loc(n.file, n.line), "text": n.text}
                add(n.step, "warning", n.text[:160], src(n.file, n.line), when=-1 if not trained else None)

    # learning rate blamed?
    out["lr_high"] = _lr_high(cx, lr, nan, out, lz, epoch)

    # NaN with its likely cause
    out["nan"] = None
    if nan is not None and not (amp and nan["metric"] == "grad_norm" and nan["step"] in amp["steps"]
                                and not (lz and lz["with_grad_nan"])):
        out["nan"] = _nan_cause(nan, out, cx, fp16_on, lr, epoch)
        n = out["nan"]
        add(n["step"], "nan", n["detail"], src(n["location"]["file"], n["location"]["line"]))
    if lz:
        add(lz["start_step"], "loss_zero", f"loss 0.0 for {lz['count']} log(s)"
            + (" with grad_norm nan (NaN hidden by logging_nan_inf_filter)" if lz["with_grad_nan"] else
               f" with grad_norm {_fmt(lz['grad_norm'])}" if lz["grad_norm"] is not None else ""),
            src(lz["location"]["file"], lz["location"]["line"]))
    if gc:
        add(gc["first_step"], "grad_norm_constant", f"grad_norm = {gc['value']!r}"
            + (f" = √{gc['sqrt_k']}" if gc["sqrt_k"] else "") + f" at {gc['count']} logs",
            src(gc["location"]["file"], gc["location"]["line"]))

    # fp16 confirmation
    out["fp16"] = _fp16(cx, fp16_on, fp16_src, out)
    out["benign_overflow"] = _benign(out)

    # OOM
    ooms = [o for f in ev.files for o in f.ooms]
    out["oom"] = _oom(ooms, cx, P, world, trained, ev) if ooms else None
    if out["oom"]:
        o = out["oom"]
        add(o["step"], "oom", o["timeline_text"], src(o["location"]["file"], o["location"]["line"]),
            when=-1 if o["step"] is None and not trained else None)

    # NCCL
    nccl = [n for f in ev.files for n in f.nccl]
    out["nccl"] = _nccl(nccl, cx, out) if nccl else None
    if out["nccl"]:
        n = out["nccl"]
        add(n["step"], "nccl_timeout", n["timeline_text"], src(n["location"]["file"], n["location"]["line"]))

    # process death
    kills = [k for f in ev.files for k in f.kills]
    mems = [m for f in ev.files for m in f.memory]
    out["killed"] = _killed(kills, cx, mems, out) if kills else None
    if out["killed"]:
        k = out["killed"]
        add(k["step"], "killed", k["timeline_text"], src(k["location"]["file"], k["location"]["line"]))

    # GPU recordings (nvidia-smi logs, doctor gpus --record, pasted per-card summaries)
    cards = [g for f in ev.files for g in f.gpus]
    out["gpus"] = None
    if cards:
        peaks = [{"index": g.index, "name": g.name, "peak_gib": g.max_used_mib / 1024, "samples": g.samples,
                  "total_gib": None if g.total_mib is None else g.total_mib / 1024, "location": _loc(g.file, g.max_line)}
                 for g in cards]
        hi = max(peaks, key=lambda x: x["peak_gib"])
        lo = min(peaks, key=lambda x: x["peak_gib"])
        out["gpus"] = {"cards": peaks, "busiest": hi, "lightest": lo, "spread_gib": hi["peak_gib"] - lo["peak_gib"]}

    # completion and crash
    out["completed"] = _completed(ev)
    out["crash"] = _crash(ev, out)
    if out["crash"] and not (out["crash"]["explained"] and out["crash"]["kind"] == "traceback-only"):
        c = out["crash"]
        add(c["step"], "exception", c["text"], src(c["location"]["file"], c["location"]["line"]))
    if out["completed"]:
        add(last_step, "finished", "the training loop finished (final metrics were logged)", out["completed"]["source"])

    events.sort(key=lambda e: (e[0], e[1]))
    tl = tuple(e[2] for e in events[:TIMELINE_CAP])
    out["events"] = [e.as_dict() for e in tl]
    out["has_metrics"] = bool(loss is not None and len(loss))
    return Timeline(tl, out, curves, tuple(reads))


def _loc(file: str, line: int | None) -> dict[str, Any]:
    return {"file": file, "line": line, "column": None, "key": None}


def _restarts(ev: Evidence) -> list[dict[str, Any]]:
    out = []
    for f in ev.files:
        for r in f.restarts:
            out.append({"step": r.step, "kind": r.kind, "detail": r.detail, "location": _loc(r.file, r.line)})
    # event files: one per launch; a later file starting at or before the previous one's last step is a resume
    prev = None
    for f in ev.files:
        if f.read.kind != "event-file" or not f.series:
            continue
        first = min((s.steps[0] for s in f.series if len(s)), default=None)
        last = max((s.steps[-1] for s in f.series if len(s)), default=None)
        if prev is not None and first is not None:
            pf, plast = prev
            if first <= plast:
                out.append({"step": first, "kind": "resume", "detail": f"new launch resumes at step {first}; steps "
                            f"{first}-{plast} of the previous launch ({_short(pf)}) were run again",
                            "location": _loc(f.read.path, 1)})
            else:
                out.append({"step": first, "kind": "relaunch", "detail": f"new launch continues at step {first} "
                            f"(previous launch ended at {plast})", "location": _loc(f.read.path, 1)})
        if last is not None:
            prev = (f.read.path, last)
    return out


def _short(path: str) -> str:
    import os

    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


def _lr_facts(lr: Curve | None) -> dict[str, Any] | None:
    if lr is None or not len(lr):
        return None
    vals = list(lr.values)
    peak = max(vals)
    pi = vals.index(peak)
    warm = None
    # a warm-up: the rate rose over at least two logs before its peak, and the peak is not the last log
    if pi >= 2 and vals[0] < peak * 0.9 and pi < len(vals) - 1:
        warm = lr.steps[pi]
    sched = "warmup" if warm is not None else ("constant" if max(vals) - min(vals) <= 1e-12 + 1e-6 * peak else "decay")
    return {"first": vals[0], "peak": peak, "peak_step": lr.steps[pi], "peak_index": pi, "warmup_end_step": warm,
            "last": vals[-1], "schedule": sched}


def _first_loss(loss: Curve | None, cx: _Ctx) -> dict[str, Any] | None:
    if loss is None or not len(loss):
        return None
    for i, v in enumerate(loss.values):
        if math.isfinite(v) and v != 0.0:
            vocab = cx.vocab()
            ln_v = math.log(vocab) if vocab else math.log(DEFAULT_VOCAB_CEILING)
            thr = FIRST_LOSS_FACTOR * ln_v
            return {"value": v, "step": loss.steps[i], "vocab": vocab, "ln_vocab": ln_v, "threshold": thr,
                    "ratio": v / ln_v, "abnormal": v > thr and i < 3, "index": i, "location": loss.location(i),
                    "vocab_known": vocab is not None}
    return None


def _first_nonfinite(loss: Curve | None, gn: Curve | None) -> dict[str, Any] | None:
    best = None
    for name, c in (("loss", loss), ("grad_norm", gn)):
        if c is None:
            continue
        for i, v in enumerate(c.values):
            if not math.isfinite(v):
                cand = {"metric": name, "index": i, "step": c.steps[i], "value": v, "location": c.location(i),
                        "basis": c.basis,
                        "count": sum(1 for x in c.values if not math.isfinite(x)), "curve_len": len(c)}
                if best is None or cand["step"] < best["step"]:
                    best = cand
                break
    if best is None:
        return None
    st = best["step"]
    best["loss"] = _exact(loss, st)
    best["grad_norm"] = _exact(gn, st)
    main = loss if best["metric"] == "loss" else gn
    assert main is not None
    best["first_logged"] = best["index"] == 0
    best["healthy_before"] = sum(1 for v in list(main.values)[:best["index"]] if math.isfinite(v) and v != 0.0)
    return best


def _exact(c: Curve | None, step: int) -> float | None:
    if c is None:
        return None
    for s, v in zip(c.steps, c.values):
        if s == step:
            return v
    return None


def _amp_skips(loss: Curve | None, gn: Curve | None, fp16: bool) -> dict[str, Any] | None:
    """HF AMP (torch GradScaler) skips: fp16, grad_norm NaN/Inf at isolated logs, the loss finite and non-zero
    there, and finite grad norms after them (case 055: 'occasional grad_norm nan')."""
    if not fp16 or gn is None or loss is None or len(gn) < 3:
        return None
    bad = [i for i, v in enumerate(gn.values) if not math.isfinite(v)]
    if not bad or len(bad) > 0.2 * len(gn):
        return None
    for i in bad:
        lv = _exact(loss, gn.steps[i])
        if lv is None or not math.isfinite(lv) or lv == 0.0:
            return None
    if not any(math.isfinite(v) for v in list(gn.values)[bad[-1] + 1:]):
        return None
    return {"count": len(bad), "steps": [gn.steps[i] for i in bad], "location": gn.location(bad[0])}


def _loss_zero(loss: Curve | None, gn: Curve | None) -> dict[str, Any] | None:
    if loss is None or not len(loss):
        return None
    vals = loss.values
    n = len(vals)
    i = 0
    while i < n:
        if vals[i] == 0.0:
            j = i
            while j < n and vals[j] == 0.0:
                j += 1
            g = _exact(gn, loss.steps[i]) if gn is not None else None
            with_nan = g is not None and not math.isfinite(g)
            if j - i >= 2 or with_nan:
                gf = g if g is not None and math.isfinite(g) else None
                if with_nan:
                    meaning = ("With grad_norm nan this is NaN, not a perfect fit: every micro-step loss of those "
                               "windows was NaN/Inf and transformers' logging_nan_inf_filter (on by default) logged "
                               "the window as 0.0.")
                elif gf == 0.0:
                    meaning = ("With grad_norm 0 nothing is being trained: every label is masked (-100: prompts "
                               "longer than cutoff_len, or a template that masks the answer) or no parameter "
                               "requires grad.")
                elif gf is not None:
                    meaning = (f"A zero loss with grad_norm {_fmt(gf)} is not a real loss: the logged values are "
                               "degenerate (see the grad-norm findings).")
                else:
                    meaning = ("A loss of exactly 0.0 is not a real loss: set logging_nan_inf_filter: false to see "
                               "whether it is NaN hidden by the logging filter.")
                return {"start_step": loss.steps[i], "count": j - i, "until_end": j == n, "with_grad_nan": with_nan,
                        "grad_norm": gf, "meaning": meaning, "location": loss.location(i), "index": i}
            i = j
        else:
            i += 1
    return None


def _grad_const(gn: Curve | None, loss: Curve | None) -> dict[str, Any] | None:
    if gn is None or len(gn) < 2:
        return None
    vals = list(gn.values)
    best = None
    i = 0
    while i < len(vals):
        v = vals[i]
        if not math.isfinite(v) or v == 0.0:
            i += 1
            continue
        j = i + 1
        while j < len(vals) and math.isfinite(vals[j]) and abs(vals[j] - v) <= CONST_REL_TOL * abs(v):
            j += 1
        if j - i >= 2 and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
        i = j
    if best is None:
        return None
    i, j = best
    v = vals[i]
    k = round(v * v)
    sqrt_k = k if k >= 2 and abs(math.sqrt(k) - v) <= 1e-6 * v else None
    lvals = [_exact(loss, gn.steps[x]) for x in range(i, j)] if loss is not None else []
    lvals = [x for x in lvals if x is not None]
    varies = len(set(lvals)) > 1
    # two equal neighbours happen by chance in long runs (a float32 norm has ~7 digits: about one pair per
    # million logs), three do not; a √k value is signature enough at two
    if j - i < (2 if sqrt_k is not None else 3):
        return None
    if not varies and sqrt_k is None and (j - i) < 5:
        return None
    return {"value": v, "value_text": repr(v), "count": j - i, "first_step": gn.steps[i], "last_step": gn.steps[j - 1],
            "sqrt_k": sqrt_k,
            "loss_varies": varies, "location": gn.location(i)}


def _scale(overflows: list[OverflowRecord], aborts: list[Any], cx: _Ctx) -> dict[str, Any] | None:
    scaled = [o for o in overflows if o.attempted is not None]
    if not overflows and not aborts:
        return None
    initial = scaled[0].attempted if scaled else None
    news = [o.new_scale for o in scaled if o.new_scale is not None]
    mins = [x for x in news + [o.attempted for o in scaled] if x is not None]
    smin = min(mins) if mins else None
    last = news[-1] if news else None
    reductions = [o for o in scaled if o.kind == "reduce"]
    incr = [o for o in scaled if o.kind == "increase"]
    after = [o for o in overflows if o.kind != "increase" and o.step is not None and o.step > CALIBRATION_STEPS]
    abort = aborts[0] if aborts else None
    if abort is not None:
        traj = "abort"
    elif smin is not None and (smin <= SCALE_COLLAPSE or (smin < SCALE_LOW and after)):
        traj = "collapse"
    else:
        traj = "benign"
    first = overflows[0] if overflows else None
    loc_rec = abort if abort is not None and traj == "abort" else (reductions[-1] if reductions and traj != "benign"
                                                                   else first)
    still = bool(reductions) and reductions[-1] is scaled[-1] and not incr
    min_scale = min_scale_of(cx)
    nover = sum(1 for o in overflows if o.kind != "increase")
    if traj == "abort":
        text = ("DeepSpeed aborted the run: the fp16 loss scale was already at its minimum"
                + (f" ({_sfmt(min_scale_of(cx))})" if min_scale_of(cx) is not None else "")
                + " when another overflow came (\"Current loss scale already at minimum\")")
    elif traj == "collapse":
        text = (f"the fp16 loss scale fell to {_sfmt(smin)}"
                + (f" with {len(after)} overflow(s) after the first {CALIBRATION_STEPS} steps" if after else ""))
    else:
        text = f"the fp16 loss scale went from {_sfmt(initial)} down to {_sfmt(smin)}"
    if scaled and traj != "abort":
        text += f" ({nover} overflow(s) from {_sfmt(initial)})"
    elif scaled:
        text += f"; {nover} overflow line(s) logged, scale {_sfmt(initial)} → {_sfmt(smin)}"
    return {"text": text, "initial": initial, "min": smin, "last": last, "overflows": nover,
            "reductions": len(reductions), "after_calibration": len(after), "increases": len(incr),
            "trajectory": traj, "abort": {"location": _loc(abort.file, abort.line), "step": abort.step}
            if abort else None, "still_falling": still,
            "first_step": first.step if first else (abort.step if abort else None),
            "last_step": overflows[-1].step if overflows else (abort.step if abort else None),
            "min_loss_scale": min_scale,
            "location": _loc(loc_rec.file, loc_rec.line) if loc_rec is not None else None}


def min_scale_of(cx: _Ctx) -> float | None:
    v = cx.log.get("min_loss_scale")
    if v is None:
        v = _get(cx.ds, "fp16", "min_loss_scale")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _abort_step(abort: Any, overflows: Iterable[OverflowRecord]) -> Any:
    """The step of DeepSpeed's minimum-loss-scale abort. DeepSpeed's ``DynamicLossScaler.update_scale``
    either logs a reduction ("OVERFLOW! ... reducing to") *or* raises "Current loss scale already at minimum",
    never both in one step; so when the abort line's step (the step in progress per the bar) is one whose
    overflow was already logged as a reduction -- no bar between them, as in a pasted excerpt -- the abort
    came at a later step, and the earliest it can be is the one after that overflow's step."""
    if abort.step is None:
        return abort
    done = [o.step for o in overflows if o.step is not None and o.line <= abort.line
            and o.kind in ("reduce", "hysteresis", "bare")]
    if done and max(done) >= abort.step:
        return replace(abort, step=max(done) + 1)
    return abort


def _scale_events(overflows: list[OverflowRecord], aborts: list[Any]) -> Iterable[tuple]:
    """One timeline event per burst of consecutive overflow lines, plus the abort."""
    burst: list[OverflowRecord] = []

    def flush() -> tuple | None:
        if not burst:
            return None
        a, b = burst[0], burst[-1]
        scales = [o for o in burst if o.attempted is not None]
        if scales:
            lo = min(o.new_scale or o.attempted for o in scales)
            detail = f"{len(burst)} overflow(s): loss scale {_sfmt(scales[0].attempted)} → {_sfmt(lo)}"
        else:
            detail = f"{len(burst)} overflow(s) (bf16 check_grad_overflow, no scale printed)"
        known = [o.step for o in burst if o.step is not None]
        if known and known[-1] != known[0]:
            detail += f" over steps {known[0]}-{known[-1]}"
        return (known[0] if known else None, "loss_scale_drop", detail, src(a.file, a.line))

    out = []
    for o in overflows:
        if o.kind == "increase":
            continue
        known = [b.step for b in burst if b.step is not None]
        if burst and o.step is not None and known and o.step - known[-1] > 2:
            e = flush()
            if e:
                out.append(e)
            burst = []
        burst.append(o)
    e = flush()
    if e:
        out.append(e)
    for a in aborts[:1]:
        # its own kind: the abort ends the run, a drop does not (DESIGN.md timeline kinds + loss_scale_abort)
        last = max((o.step for o in overflows if o.step is not None and o.line <= a.line
                    and o.kind != "increase"), default=None)
        detail = "DeepSpeed aborted the run: loss scale already at its minimum"
        if last is not None and a.step is not None and a.step == last + 1:
            detail += f" (at an overflow after step {last}'s)"
        out.append((a.step, "loss_scale_abort", detail, src(a.file, a.line)))
    return out[:30]


def _lr_high(cx: _Ctx, lr: Curve | None, nan: dict | None, out: dict[str, Any], lz: dict | None,
             epoch: Curve | None) -> dict[str, Any] | None:
    """The learning rate is blamed when an instability happens at a rate far above the usual one for the
    finetuning type, or right as warm-up ends (within ±50 % of the warm-up length) after healthy logs."""
    cands = []
    if nan:
        cands.append((nan["step"], nan["location"], "non-finite " + nan["metric"]))
    if lz:
        cands.append((lz["start_step"], lz["location"], "loss stuck at 0"))
    if out.get("loss_spike"):
        cands.append((out["loss_spike"]["step"], out["loss_spike"]["location"], "loss spike"))
    if out.get("grad_spike"):
        cands.append((out["grad_spike"]["step"], out["grad_spike"]["location"], "grad-norm explosion"))
    sc = out.get("scale")
    if sc and sc["trajectory"] in ("collapse", "abort") and sc.get("location"):
        cands.append((sc["first_step"] if sc["first_step"] is not None else 10 ** 9, sc["location"], "loss-scale collapse"))
    if not cands:
        return None
    step, loc, what = min(cands, key=lambda c: c[0] if c[0] is not None else 10 ** 9)
    rate = _value_at(lr, step)
    if rate is None or rate == 0:
        rate = cx.cfg.get("learning_rate") if isinstance(cx.cfg.get("learning_rate"), (int, float)) else None
    ft = cx.finetuning_type()
    thr = LR_HIGH.get(ft, LR_HIGH["lora"])
    typical = LR_TYPICAL.get(ft, 1e-4)
    if rate is None:
        return None
    suggested = typical if rate > 3 * typical else rate / 3
    info = out.get("lr") or {}
    if rate >= thr:
        return {"lr": rate, "threshold": thr, "step": step, "what": what, "location": loc, "suggested": suggested,
                "finetuning_type": ft, "reason": f"{what} at learning rate {_fmt(rate)}, ≥ {_fmt(thr)} "
                f"({rate / typical:.0f}× the usual {_fmt(typical)} for {ft})"}
    w = info.get("warmup_end_step")
    healthy = (nan or {}).get("healthy_before", 3 if not nan else 0)
    if w and step is not None and 0.5 * w <= step <= 1.5 * w and rate >= 0.5 * info["peak"] and healthy >= 3:
        return {"lr": rate, "threshold": thr, "step": step, "what": what, "location": loc, "suggested": suggested,
                "finetuning_type": ft, "reason": f"{what} at step {step}, as warm-up ends at step {w} "
                f"(learning rate {_fmt(rate)}, peak {_fmt(info['peak'])})"}
    return None


def _epoch_at(epoch: Curve | None, step: int | None) -> float | None:
    return _value_at(epoch, step) if epoch is not None else None


def _nan_cause(nan: dict[str, Any], out: dict[str, Any], cx: _Ctx, fp16: bool, lr: Curve | None,
               epoch: Curve | None) -> dict[str, Any]:
    st = nan["step"]
    rate = _value_at(lr, st)
    ep = _epoch_at(epoch, st)
    n = dict(nan)
    n["lr"] = rate
    n["epoch"] = ep
    lz = out.get("loss_zero")
    n["hidden"] = bool(nan["metric"] == "grad_norm" and nan.get("loss") == 0.0)
    sc = out.get("scale")
    fl = out.get("first_loss")
    late = (ep is not None and ep >= LATE_EPOCH) or (st is not None and st >= LATE_STEP and nan["healthy_before"] >= 3) \
        or nan["healthy_before"] >= 10
    ds = bool(cx.cfg.get("deepspeed") or cx.zero_stage() is not None)
    if out.get("lr_high"):
        cause, text, fix = "learning-rate", (f"the learning rate ({out['lr_high']['reason']}; see "
                                             "learning-rate-too-high-confirmed)"), "lower the learning rate"
    elif fl and fl["abnormal"]:
        cause, text, fix = "environment", ("the first loss was already impossible for a working forward pass "
                                           "(see first-step-loss-abnormal): a broken kernel or environment"), \
            "switch the attention kernel / rebuild the environment"
    elif fp16 and sc and sc["trajectory"] in ("collapse", "abort"):
        cause, text, fix = "fp16-range", "fp16 overflow: the loss scale collapsed before it", "train in bf16"
    elif cx.overlap_comm() is True and cx.zero_stage() in (1, 2) and not late:
        cause, text, fix = "overlap-comm", ("DeepSpeed ZeRO-2 with overlap_comm can corrupt reduced gradients "
                                            "(DeepSpeed#5347; Qwen-VL-Series-Finetune#10 ran fine with overlap_comm false "
                                            "or ZeRO-3)"), "set zero_optimization.overlap_comm to false"
    elif nan["first_logged"] and not late and rate is not None and rate <= 1e-7:
        cause, text, fix = "forward", (f"NaN at the first logged step with learning rate {_fmt(rate)}: no optimizer "
                                       "update can have caused it, so the forward/backward pass itself produced it "
                                       "(attention kernel: #9631 was fixed by flash_attn: fa2; #8088 by "
                                       "flash_attn: disabled)"), "switch the attention kernel"
    elif nan["first_logged"] and not late:
        cause, text, fix = "from-start", ("NaN from the first logged step with ordinary settings: usually the "
                                          "attention kernel or the library stack (LLaMA-Factory #2916, #9631, #7263, #3353), "
                                          "or fp16 on a bf16 model"), "switch the attention kernel"
    elif late:
        where = f"epoch {_fmt(ep)}" if ep is not None else f"step {st}"
        before = (f"after {nan['healthy_before']} healthy logs ({where})" if nan["healthy_before"] else
                  f"at {where}, after training that was healthy before the logs read")
        extra = (" Under DeepSpeed, overlap_comm races (DeepSpeed#5347) and old releases (0.14.0; fixed by 0.14.3 "
                 "in LLaMA-Factory #5627) also produce late NaN." if ds else "")
        cause, text, fix = "late", (f"NaN {before}: a bad sample or batch, "
                                    "or an optimizer-state blow-up; inspect the data around that step, lower the "
                                    "learning rate or tighten max_grad_norm." + extra), "find the bad batch"
    else:
        cause, text, fix = "unknown", "the cause is not visible in the logs read", "inspect the step"
    n["cause"] = cause
    n["cause_text"] = text.rstrip(".")
    n["fix_title"] = fix
    what = ("loss 0.0 with grad_norm nan" if n["hidden"] and nan["metric"] == "grad_norm" else
            f"{nan['metric']} {_fmt(nan['value'])}")
    n["what"] = what
    n["detail"] = f"first non-finite value: {what}" + (f" (lr {_fmt(rate)})" if rate is not None else "")
    basis = nan.get("basis")
    n["step_text"] = (f"log #{nan['index'] + 1} (the printed dicts carry no step)" if basis == "ordinal" else
                      f"about step {st}" if basis in ("estimated", "logging_steps") else
                      f"step {st}" if st is not None else "an unknown step")
    return n


def _fp16(cx: _Ctx, on: bool, source: str | None, out: dict[str, Any]) -> dict[str, Any]:
    sc = out.get("scale")
    if sc and sc["initial"] is not None and not on:
        on, source = True, "DeepSpeed fp16 loss-scale lines"
    mb, mtext = cx.model_bf16()
    evidence = None
    loc = None
    if sc and sc["trajectory"] in ("collapse", "abort"):
        evidence = ("the loss scale collapsed to its minimum and DeepSpeed aborted" if sc["trajectory"] == "abort"
                    else f"the loss scale fell to {_sfmt(sc['min'])} and kept falling after calibration")
        loc = sc["location"] or (sc["abort"] or {}).get("location")
    elif out.get("lr_high") or out.get("grad_const") or (out.get("first_loss") or {}).get("abnormal"):
        pass    # a stronger explanation of the NaN / zero loss exists: not evidence against fp16
    elif out.get("nan") and out["nan"]["cause"] in ("from-start", "unknown", "fp16-range"):
        evidence = f"{out['nan']['what']} at {out['nan']['step_text']}"
        loc = out["nan"]["location"]
    elif out.get("loss_zero") and not out.get("nan"):
        evidence = f"loss stuck at 0 from step {out['loss_zero']['start_step']}"
        loc = out["loss_zero"]["location"]
    confirmed = bool(on and mb and evidence)
    return {"in_use": on, "source": source, "model_bf16": mb, "model_text": mtext, "evidence": evidence,
            "confirmed": confirmed, "location": loc, "hw_bf16": cx.hw.get("bf16")}


def _benign(out: dict[str, Any]) -> dict[str, Any] | None:
    sc, amp = out.get("scale"), out.get("amp_skips")
    if sc and sc["trajectory"] == "benign" and sc["overflows"]:
        text = (f"{sc['overflows']} fp16 overflow(s) skipped step(s) while the loss scale searched down from "
                f"{_sfmt(sc['initial'])} to {_sfmt(sc['min'])}")
        if sc["increases"]:
            text += f", then it grew again ({sc['increases']} increase(s))"
        elif sc["still_falling"]:
            text += "; the log ends before the scale settles, so watch it"
        return {"text": text, "location": sc["location"], "kind": "deepspeed"}
    if amp:
        return {"text": f"the fp16 GradScaler skipped {amp['count']} step(s) (grad_norm nan with a finite loss) "
                        "and training went on", "location": amp["location"], "kind": "amp"}
    return None


# -- OOM ------------------------------------------------------------------------------------------------------------

_PHASES = (
    ("optimizer step", ("exp_avg", "adamw", "_adam", "optimizer.step", "_take_model_step", "_optimizer_step",
                        "unscale_and_clip", "fused_adam", "cpu_adam", "step (stage_1_and_2.py)",
                        "step (stage3.py)", "step (optimizer.py)", "step (adamw.py)", "_update_scale")),
    ("optimizer set-up", ("initialize_optimizer_states", "_create_fp32_partitions", "_setup_for_real_optimizer",
                          "_configure_zero_optimizer", "_configure_optimizer", "create_optimizer",
                          "__init__ (stage_1_and_2.py)", "__init__ (stage3.py)", "Before initializing optimizer",
                          "creating fp32 partitions", "creating fp16 partitions")),
    ("checkpoint save", ("save_model", "_save_checkpoint", "save_checkpoint", "consolidated_16bit", "_save (")),
    ("evaluation", ("evaluate (", "prediction_step", "evaluation_loop", "generate (", "prediction_loop")),
    ("backward", ("backward", "partition_grads", "reduce_independent_p_g_buckets", "average_tensor", "allreduce",
                  "reduce_scatter", "_backward", "run_backward", "reduce_ipg_grads")),
    ("forward", ("forward", "compute_loss", "cross_entropy", "logits", "lm_head", "attention", "self_attn",
                 "scaled_dot_product", "_flash_attention", "mlp (", "loss_function", "ForCausalLMLoss")),
    ("model load", ("from_pretrained", "load_model", "_load_state_dict", "load_state_dict", "_move_model_to_device",
                    "__init__ (trainer.py)", "Trainer(", "PairwiseTrainer", "deepspeed.initialize", "zero.Init",
                    "partition_parameters", "dispatch_model", "load_pretrained_model", "_load_pretrained_model",
                    "DeepSpeedZeRoOffload", "to (module.py)", "_apply (module.py)", "cuda (module.py)")),
)


def _phase(frames: tuple[str, ...], label: str | None) -> tuple[str | None, str | None]:
    text = frames
    for phase, keys in _PHASES:
        for fr in text:
            if any(k in fr for k in keys):
                return phase, fr
    if label:
        for phase, keys in _PHASES:
            if any(k.lower() in label.lower() for k in keys):
                return phase, f"DeepSpeed memory label '{label}'"
    return None, None


def _size_candidates(cx: _Ctx, P: float | None, world: int | None) -> list[tuple[str, str, float, str]]:
    out: list[tuple[str, str, float, str]] = []
    ft = cx.finetuning_type()
    T = cx.trainable()
    opt_params = P if ft in ("full", "freeze") and P else T
    if P:
        out.append(("the whole model in 16-bit", "2·P", 2 * P, "model load"))
        out.append(("the whole model in fp32", "4·P", 4 * P, "model load"))
    if opt_params and world:
        out.append(("one fp32 optimizer-state partition (master weights, exp_avg or exp_avg_sq of 1/N of the "
                    "trainable parameters)", "4·P/N", 4 * opt_params / world, "optimizer"))
        out.append(("the fp32 master weights and both Adam moments of 1/N of the trainable parameters", "12·P/N",
                    12 * opt_params / world, "optimizer set-up"))
        out.append(("a 16-bit gradient partition", "2·P/N", 2 * opt_params / world, "backward"))
    elif opt_params:
        out.append(("one fp32 optimizer state of all trainable parameters", "4·P", 4 * opt_params, "optimizer"))
    b = cx.run.get("micro_batch") or cx.cfg.get("per_device_train_batch_size")
    s = cx.run.get("seq_len") or cx.cfg.get("cutoff_len")
    V = cx.vocab()
    if b and s and V:
        out.append(("the fp32 logits of one micro-batch", "b·s·V·4", float(b) * float(s) * V * 4, "forward"))
        out.append(("the 16-bit logits of one micro-batch", "b·s·V·2", float(b) * float(s) * V * 2, "forward"))
    return out


def _oom(ooms: list[OomRecord], cx: _Ctx, P: float | None, world: int | None, trained: bool,
         ev: Evidence) -> dict[str, Any]:
    first = ooms[0]
    o = first
    # prefer a record with sizes when the first one is a cut paste or a bare runtime error at the same spot
    for cand in ooms:
        if cand.requested is not None:
            o = cand
            break
    g = lambda b: None if b is None else b / GIB  # noqa: E731
    d: dict[str, Any] = {"step": o.step, "gpu": o.gpu, "rank": o.rank, "format": o.format, "exc": o.exc,
                         "requested_gib": g(o.requested), "total_gib": g(o.total), "free_gib": g(o.free),
                         "allocated_gib": g(o.allocated), "reserved_gib": g(o.reserved),
                         "reserved_unallocated_gib": g(o.reserved_unallocated), "this_process_gib": g(o.this_process),
                         "count": len(ooms), "ranks": sorted({x.rank for x in ooms if x.rank is not None}),
                         "location": _loc(o.file, o.line)}
    ru = o.reserved_unallocated
    if ru is None and o.reserved is not None and o.allocated is not None:
        ru = o.reserved - o.allocated
    d["reserved_unallocated_gib"] = g(ru)
    d["fragmented"] = bool(ru is not None and o.requested is not None and ru >= o.requested and ru >= 0.5 * GIB)

    # memory held by other processes on the same GPU
    foreign = None
    if o.total is not None and o.free is not None:
        used = o.total - o.free
        others: list[tuple[int, float]] = []
        self_b = o.this_process
        if o.procs:
            if self_b is None:
                # torch 2.1 lists every process, itself included: itself is the one that holds at least what
                # PyTorch allocated and is closest to it
                mine = (o.allocated or 0) + (o.reserved_unallocated or 0)
                idx = min(range(len(o.procs)), key=lambda i: (o.procs[i][1] < (o.allocated or 0),
                                                              abs(o.procs[i][1] - mine)))
                self_b = o.procs[idx][1]
                others = [p for i, p in enumerate(o.procs) if i != idx]
            else:
                others = list(o.procs)
            held = sum(b for _, b in others)
        elif self_b is not None:
            held = used - self_b
        elif o.reserved is not None:
            held = used - o.reserved - 0.5 * GIB     # minus a CUDA context (~300-500 MiB) of this process
        elif o.allocated is not None:
            held = used - o.allocated - (o.reserved_unallocated or 0) - 0.5 * GIB
        else:
            held = 0.0
        small = [p for p in others if p[1] < GIB]
        kind = None
        if len(small) >= 2:
            kind = "rank-contexts"
        elif held >= max(GIB, 0.05 * o.total):
            kind = "other-process" if others else "unaccounted"
        if kind:
            if kind == "rank-contexts":
                sizes = sorted({gib_text(b) for _, b in small})
                text = (f"{len(small)} other processes hold {', '.join(sizes)} each on GPU {o.gpu}: the CUDA contexts "
                        f"of other ranks, so the ranks are not bound to their own GPU (device not set from "
                        f"LOCAL_RANK), or the model is placed on cuda:0 before ZeRO-3 partitions it")
                if self_b is not None:
                    text += f"; this process holds {gib_text(self_b)}"
            elif kind == "other-process":
                text = (f"other processes hold {gib_text(held)} of GPU {o.gpu} "
                        f"({', '.join(f'pid {p} {gib_text(b)}' for p, b in others[:4])})")
            else:
                text = (f"{gib_text(held)} of GPU {o.gpu} is in use but not by this process "
                        f"({gib_text(o.reserved if o.reserved is not None else (o.allocated or 0))} reserved by "
                        f"PyTorch, {gib_text(o.free)} free of {gib_text(o.total)}): another process or rank holds it")
            fix = ("bind every rank to its own GPU (launch with torchrun/deepspeed or FORCE_TORCHRUN=1 so LOCAL_RANK "
                   "sets the device, and move nothing to cuda:0 before that); with ZeRO-3 check that zero.Init is "
                   "active so the full model never lands on one GPU" if kind == "rank-contexts" else
                   "free the GPU (stop the other process) or keep the job off it with CUDA_VISIBLE_DEVICES")
            foreign = {"gib": held / GIB, "kind": kind, "text": text, "pids": [p for p, _ in others], "fix": fix}
    d["foreign"] = foreign

    # phase
    phase, why = _phase(o.frames, o.memory_label)
    match = None
    for label, formula, size, ph in _size_candidates(cx, P, world):
        if o.requested and size > 0 and abs(o.requested - size) / size <= SIZE_MATCH_TOL:
            match = {"label": label, "formula": formula, "expected_gib": size / GIB, "ratio": o.requested / size,
                     "phase": ph}
            break
    if phase is None and match is not None:
        phase, why = match["phase"], f"the size matches {match['formula']}"

    d["phase"] = phase
    d["phase_evidence"] = why
    d["match"] = match
    d["params"] = P
    d["world"] = world
    if o.step is not None:
        when = f"during step {o.step}"
    elif trained:
        when = "at an unknown step"
    elif phase in ("optimizer step", "optimizer set-up"):
        when = f"in the first {phase} (no training step was logged before it)"
    elif phase == "optimizer":
        when = "while allocating optimizer states (set-up or first step; no training step was logged before it)"
    else:
        when = "before any training step was logged"
    d["when_text"] = when
    s = f"CUDA out of memory {when}"
    if phase and phase not in when and phase != "optimizer":
        s += f" (phase: {phase})"
    if o.requested is not None:
        s += f": tried to allocate {gib_text(o.requested)}"
    if o.gpu is not None and o.total is not None:
        s += f" on GPU {o.gpu} ({gib_text(o.free)} free of {gib_text(o.total)}"
        if o.allocated is not None:
            s += f", {gib_text(o.allocated)} allocated by PyTorch"
        s += ")"
    s += "."
    if match:
        s += (f" {gib_text(o.requested)} is {match['formula']} = {match['expected_gib']:.2f} GiB: "
              f"{match['label']} (P = {P / 1e9:.2f}B params" + (f", N = {world} ranks" if "N" in match["formula"]
                                                                   else "") + ").")
    elif o.requested is not None and P is None:
        s += " The model size is unknown (give --config), so the allocation was not matched against it."
    if d["count"] > 1:
        s += f" {d['count']} OOM messages in the logs" + (f" (ranks {', '.join(map(str, d['ranks']))})"
                                                          if d["ranks"] else "") + "."
    d["summary"] = s
    d["advice"] = _oom_advice(phase, match, cx)
    d["timeline_text"] = (f"OOM{' in the ' + phase if phase and phase != 'optimizer' else ''}"
                          f"{' allocating optimizer states' if phase == 'optimizer' else ''}: "
                          f"tried to allocate {gib_text(o.requested)}"
                          + (f" on GPU {o.gpu}" if o.gpu is not None else "")
                          + (f" (= {match['formula']})" if match else ""))
    d["stage_text"] = ("ZeRO-" + str(cx.zero_stage())) if cx.zero_stage() is not None else None
    return d


def _oom_advice(phase: str | None, match: dict[str, Any] | None, cx: _Ctx) -> str:
    zs = cx.zero_stage()
    formula = (match or {}).get("formula")
    if formula in ("4·P/N", "12·P/N") or phase in ("optimizer step", "optimizer set-up"):
        if zs is not None and zs < 3:
            return ("The optimizer states are what did not fit: ZeRO-3 also shards the 16-bit weights and "
                    "gradients, optimizer offload moves the states to host RAM, and more GPUs shrink each shard.")
        return ("The optimizer states are what did not fit: offload them to host RAM, use more GPUs, or an 8-bit "
                "optimizer.")
    if formula in ("b·s·V·4", "b·s·V·2") or phase == "forward":
        return ("Activations and logits grow with per_device_train_batch_size × cutoff_len: lower them (raise "
                "gradient_accumulation_steps to keep the batch), or use enable_liger_kernel for a fused loss.")
    if phase == "backward":
        return ("Gradients and recomputed activations did not fit: keep gradient checkpointing on, lower the "
                "micro-batch, or shard gradients (ZeRO-2/3).")
    if phase == "model load":
        return "The weights alone did not fit where they were placed: shard them (ZeRO-3), quantize, or use more GPUs."
    if phase == "evaluation":
        return "Evaluation ran out of memory: lower per_device_eval_batch_size or eval_accumulation_steps."
    if phase == "checkpoint save":
        return "Gathering the weights for saving did not fit: stage3_gather_16bit_weights_on_model_save off."
    return ""


# -- NCCL -----------------------------------------------------------------------------------------------------------

def _nccl(recs: list[NcclRecord], cx: _Ctx, out: dict[str, Any]) -> dict[str, Any] | None:
    timeouts = [r for r in recs if r.kind == "timeout"]
    heart = [r for r in recs if r.kind == "heartbeat"]
    main = timeouts[0] if timeouts else (heart[0] if heart else None)
    if main is None:
        return None
    last = [r for r in recs if r.kind == "last_work"]
    stragglers = []
    if last:
        lo = min(r.last_completed for r in last if r.last_completed is not None)
        stragglers = sorted({r.rank for r in last if r.last_completed == lo and r.rank is not None})
    tmo = main.timeout_ms
    tmo_text = None
    if tmo == 1800000:
        tmo_text = "1800 s: transformers' default ddp_timeout"
    elif tmo == 600000:
        tmo_text = "600 s: torch's default NCCL timeout (the framework passed none)"
    elif tmo:
        tmo_text = f"{tmo / 1000:.0f} s as configured (ddp_timeout)"
    op = main.op
    zs = cx.zero_stage()
    early = (main.seq is not None and main.seq <= 2) or (main.step is None and not out["steps"]["last"])
    if out.get("grad_const") or out.get("loss_zero") or out.get("nan"):
        likely = ("the ranks diverged after the non-finite/degenerate steps logged before it (one rank took a "
                  "different code path or died), so the others waited in the collective")
    elif early and op in ("BROADCAST", "ALLREDUCE", None):
        likely = ("a rank never reached the first collective: rank 0 was still preprocessing the dataset or "
                  "loading the model when the others timed out (raise ddp_timeout, or preprocess once beforehand)")
    elif op and ("ALLGATHER" in op) and zs == 3:
        likely = ("ZeRO-3 parameter all-gather hang: the ranks ran different numbers of forward passes (generate "
                  "with different lengths, a rank-0-only evaluation or save, an uneven last batch)")
    elif op in ("ALLREDUCE", "REDUCE_SCATTER", "_REDUCE_SCATTER_BASE"):
        likely = ("gradient synchronisation waited on a slow or stuck rank (data loading, a rank-0-only save or "
                  "evaluation, swapping host memory, or a rank that died)")
    else:
        likely = "one rank stopped participating in collectives (stuck, slow, or dead)"
    if stragglers:
        likely += f"; rank(s) {', '.join(map(str, stragglers))} completed the fewest collectives"
    d = {"rank": main.rank, "op": op, "seq": main.seq, "timeout_ms": tmo, "timeout_text": tmo_text,
         "ran_ms": main.ran_ms, "numel_in": main.numel_in, "numel_out": main.numel_out, "step": main.step,
         "kind": main.kind, "likely": likely, "stragglers": stragglers,
         "ddp_timeout_fix": bool(early and tmo is not None and tmo <= 1800000),
         "count": len(timeouts), "ranks": sorted({r.rank for r in timeouts if r.rank is not None}),
         "location": _loc(main.file, main.line)}
    what = f"{op}" + (f" (SeqNum {main.seq})" if main.seq is not None else "") if op else "a collective"
    d["what"] = what
    d["timeline_text"] = (f"NCCL watchdog timeout on rank {main.rank if main.rank is not None else '?'}: {what}"
                          + (f" after {main.ran_ms / 1000:.0f} s" if main.ran_ms else ""))
    return d


# -- process death ----------------------------------------------------------------------------------------------------

_KILL_PRIORITY = {"child-failed-root": 0, "kernel-oom": 1, "cgroup-oom": 1, "slurm-oom": 1, "torchrun-exit": 2,
                  "launcher-exit": 3, "shell-killed": 4, "signal": 5, "cpu-alloc": 6}


def _killed(kills: list[KillRecord], cx: _Ctx, mems: list[Any], out: dict[str, Any]) -> dict[str, Any] | None:
    # the root cause: torchrun's "first observed failure", else the kernel's own record, else the launcher's
    relevant = [k for k in kills if not (k.kind == "child-failed" or (k.exitcode in (-15, 143) and k.kind != "signal"))]
    if not relevant:
        return None
    k = min(relevant, key=lambda x: (_KILL_PRIORITY.get(x.kind, 9), x.line))
    host_oom = (k.kind in ("kernel-oom", "cgroup-oom", "slurm-oom", "cpu-alloc")
                or k.signal == "SIGKILL" or k.exitcode in (-9, 137))
    if not host_oom and k.exitcode not in (-6, 134):
        # a Python exception (exit code 1) is reported by the crash fact, not as a kill
        if k.exitcode is not None and k.exitcode > 0 and k.kind in ("child-failed-root", "torchrun-exit", "launcher-exit"):
            return None
    step = k.step
    if step is None:
        step = next((x.step for x in kills if x.step is not None), None)
    host = [m for m in mems if m.cpu_percent is not None]
    peak = max(host, key=lambda m: m.cpu_percent) if host else None
    run_off = cx.run.get("offload_optimizer") or cx.run.get("offload_param") or cx.ds.get("offload_optimizer_device") \
        or cx.ds.get("offload_param_device")
    hram = None
    if cx.mem.get("host"):
        hram = (f"this config needs about {cx.mem['host']:.0f} GiB of host RAM per node"
                + (" (DeepSpeed CPU offload pins the fp32 master weights and Adam states there)" if run_off else "")
                + (f", and the node has {cx.hw.get('host_ram_gib'):.0f} GiB" if cx.hw.get("host_ram_gib") else ""))
    elif peak is not None:
        hram = f"DeepSpeed last saw host RAM at {peak.cpu_used:.0f} GB used ({peak.cpu_percent:.0f} %)"
    who = (f"rank {k.rank}" if k.rank is not None else f"local rank {k.local_rank}" if k.local_rank is not None
           else f"pid {k.pid}" if k.pid is not None else "a training process")
    how = {"kernel-oom": "the kernel's OOM killer", "cgroup-oom": "the cgroup (container) memory limit",
           "slurm-oom": "Slurm's memory limit (oom_kill event)", "cpu-alloc": "a failed host allocation"}.get(
        k.kind, f"{k.signal or 'a signal'}" + (f" (exit code {k.exitcode})" if k.exitcode is not None else ""))
    d = {"kind": k.kind, "signal": k.signal, "exitcode": k.exitcode, "rank": k.rank, "local_rank": k.local_rank,
         "pid": k.pid, "host": k.host, "step": step, "host_oom": host_oom, "who": who, "how": how,
         "host_ram_text": hram, "offload": bool(run_off), "location": _loc(k.file, k.line),
         "text": k.text, "count": len(kills)}
    d["timeline_text"] = f"{who} killed by {how}"
    return d


def _completed(ev: Evidence) -> dict[str, Any] | None:
    for f in ev.files:
        for n in f.notices:
            if n.kind in ("train-summary", "train-end"):
                return {"source": src(n.file, n.line), "kind": n.kind}
        if f.read.kind == "results" and any(k.startswith("train_") for k in f.results):
            return {"source": f.read.path, "kind": "results"}
    return None


def _crash(ev: Evidence, out: dict[str, Any]) -> dict[str, Any] | None:
    exc = None
    tb = None
    for f in ev.files:
        for n in f.notices:
            if n.kind == "exception":
                v = n.value or {}
                if "CUDA out of memory" in n.text or "loss scale already at minimum" in n.text:
                    continue
                exc = n        # the last exception is what ended the run
            elif n.kind == "traceback":
                tb = n
    if exc is None and tb is None:
        return None
    if out.get("completed") and exc is None:
        return None
    explained = bool(out.get("oom") or out.get("nccl") or (out.get("killed") and out["killed"]["host_oom"])
                     or (out.get("scale") and out["scale"]["trajectory"] == "abort"))
    if exc is not None:
        v = exc.value or {}
        text = f"{v.get('cls')}: {v.get('msg')}"[:200]
        rec = exc
        kind = "exception"
    else:
        assert tb is not None
        rec = tb
        text = "Traceback without the exception text (the log was cut)"
        kind = "traceback-only"
    total = out["steps"]["total"]
    pct = f" ({100 * rec.step / total:.0f}% of {total})" if rec.step and total else ""
    return {"kind": kind, "cls": (exc.value or {}).get("cls") if exc else None,
            "msg": (exc.value or {}).get("msg") if exc else None, "step": rec.step, "explained": explained,
            "text": text, "where_text": (f"during step {rec.step}{pct}" if rec.step is not None else
                                         "at an unknown step"), "location": _loc(rec.file, rec.line)}


def merge_reads(files: Iterable[FileEvidence]) -> list[FileRead]:
    return [f.read for f in files]
