"""Detectors over the curves and the loss-scale records: spikes, the first non-finite value, a loss stuck at 0,
a constant grad norm, AMP skips, the learning-rate schedule, the first loss, DeepSpeed's loss-scale trajectory,
and the launch/resume boundaries.

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
"""

from __future__ import annotations

import bisect
import math
from dataclasses import replace
from typing import Any, Iterable

from finetune_doctor.analyzers.postmortem.curves import (
    Curve, exact_at, fmt, get_path, location_of, robust, sfmt, short_path,
)
from finetune_doctor.analyzers.postmortem.runctx import RunContext
from finetune_doctor.evidence import Evidence, OverflowRecord, src

BASELINE = 64
MIN_BASELINE = 8
LOSS_SPIKE_Z = 6.0
LOSS_SPIKE_RATIO = 1.5
GRAD_SPIKE_Z = 6.0
GRAD_SPIKE_RATIO = 10.0
CALIBRATION_STEPS = 20
SCALE_LOW = 1024.0
SCALE_COLLAPSE = 16.0
FIRST_LOSS_FACTOR = 2.0
DEFAULT_VOCAB_CEILING = 262_144     # the largest common LLM vocabulary (Gemma-3); ln = 12.48
CONST_REL_TOL = 5e-8


# sparse curves (fewer than MIN_BASELINE logs before a point): a jump between two consecutive logged points is a
# spike when it is at least JUMP_RATIO[metric]x the previous point and the median so far, and its log-ratio is at
# least JUMP_VS_HISTORY x the largest jump seen between earlier consecutive points (with >= 2 earlier jumps).
# Loss 4x: a cross-entropy that quadruples between two logs has left any training curve (the largest rise of a
# healthy LLM loss between logs is a few tens of percent); grad norm 10x as GRAD_SPIKE_RATIO.
JUMP_RATIO = {"loss": 4.0, "grad_norm": 10.0}
JUMP_VS_HISTORY = 3.0


def curve_spikes(c: Curve, metric: str) -> list[dict[str, Any]]:
    """Spikes of one curve: the robust detector (`spikes`) where enough logs came before a point, the jump
    detector (`sparse_jumps`) where not; each spike says how many steps lie between it and the log before it
    (``gap_steps``), however far apart the logged points are."""
    z, ratio = (LOSS_SPIKE_Z, LOSS_SPIKE_RATIO) if metric == "loss" else (GRAD_SPIKE_Z, GRAD_SPIKE_RATIO)
    found = sparse_jumps(c, JUMP_RATIO.get(metric, 4.0)) + (spikes(c, z, ratio) if len(c) > MIN_BASELINE else [])
    found.sort(key=lambda s: s["index"])
    for s in found:
        i = s["index"]
        s["gap_steps"] = (c.steps[i] - c.steps[i - 1]) if i > 0 else None
        s["prev_step"] = c.steps[i - 1] if i > 0 else None
        s["prev_value"] = c.values[i - 1] if i > 0 else None
    return found


def sparse_jumps(c: Curve, ratio: float) -> list[dict[str, Any]]:
    """Jumps between consecutive finite logged points before the robust baseline exists (fewer than
    MIN_BASELINE finite points before them): see JUMP_RATIO. O(n) over the first MIN_BASELINE points."""
    out: list[dict[str, Any]] = []
    fin: list[float] = []
    jumps: list[float] = []
    prev = None
    for i, v in enumerate(c.values):
        if not math.isfinite(v):
            continue
        if len(fin) >= MIN_BASELINE:
            break
        if prev is not None and prev > 0 and v > 0:
            lj = math.log(v) - math.log(prev)   # not log(v / prev): the quotient of 1e-300 and 4e23 underflows to 0
            med = sorted(fin)[len(fin) // 2]
            history_ok = len(jumps) < 2 or lj >= JUMP_VS_HISTORY * max(abs(j) for j in jumps)
            # med > 0 as in `spikes`: a median of zeros (grad norms of 0.0 logged while nothing trains) gives no
            # scale to judge a jump against
            if med > 0 and v >= ratio * prev and v >= ratio * med and history_ok:
                out.append({"index": i, "step": c.steps[i], "value": v, "baseline": med, "sigma": None,
                            "score": lj / max(max((abs(j) for j in jumps), default=0.0), 1e-12) if jumps else None,
                            "ratio": v / med, "count": 1, "peak": v, "peak_step": c.steps[i], "method": "jump",
                            "location": c.location(i), "source": c.source(i)})
                prev = v
                continue   # a spike does not enter the history it is judged against
            jumps.append(lj)
        fin.append(v)
        prev = v
    return out


def spike_text(s: dict[str, Any], metric: str) -> str:
    """The timeline detail of one spike."""
    name = "loss" if metric == "loss" else "grad_norm"
    gap = s.get("gap_steps")
    between = (f", {gap} step(s) after the previous log ({fmt(s['prev_value'])} at step {s['prev_step']})"
               if gap is not None and s.get("prev_value") is not None else "")
    if s.get("method") == "jump":
        return f"{name} {fmt(s['value'])} jumped {s['value'] / s['prev_value']:.1f}× from {fmt(s['prev_value'])}" \
               + between
    how = f"{s['score']:.0f} robust σ" if metric == "loss" else f"{s['ratio']:.0f}×"
    more = f", {s['count']} logs" if s["count"] > 1 else ""
    return f"{name} {fmt(s['value'])} vs median {fmt(s['baseline'])} ({how}{more}){between}"


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
                med, sig = robust(window)
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
                                "method": "robust",
                                "score": score, "ratio": v / med, "count": 1, "peak": v, "peak_step": c.steps[i],
                                "location": c.location(i), "source": c.source(i)})
                last_spike = i
                continue   # a spike does not enter its own baseline
        window.append(v)
        since += 1
        if len(window) > BASELINE:
            del window[0]
    return out





def restarts_of(ev: Evidence) -> list[dict[str, Any]]:
    out = []
    for f in ev.files:
        for r in f.restarts:
            out.append({"step": r.step, "kind": r.kind, "detail": r.detail, "location": location_of(r.file, r.line)})
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
                            f"{first}-{plast} of the previous launch ({short_path(pf)}) were run again",
                            "location": location_of(f.read.path, 1)})
            else:
                out.append({"step": first, "kind": "relaunch", "detail": f"new launch continues at step {first} "
                            f"(previous launch ended at {plast})", "location": location_of(f.read.path, 1)})
        if last is not None:
            prev = (f.read.path, last)
    return out




def lr_facts(lr: Curve | None) -> dict[str, Any] | None:
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


def first_loss_facts(loss: Curve | None, cx: RunContext) -> dict[str, Any] | None:
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


def clipped_unfelt(spike: dict[str, Any], loss: Curve | None, max_grad_norm: Any) -> dict[str, Any] | None:
    """A grad-norm spike that clipping absorbed: HF's Trainer (and DeepSpeed) log the total norm *before*
    clipping (transformers/trainer.py: ``_grad_norm = self.accelerator.clip_grad_norm_(...)`` returns the
    pre-clip norm), so with ``max_grad_norm`` > 0 below the spike the applied update was scaled down to it. It
    was unfelt when the loss at the spike and at the next 2 logs stays within 10 % of the median of the 5 logs
    before it. None otherwise (no loss curve, clipping off, or the loss moved)."""
    if loss is None or not isinstance(max_grad_norm, (int, float)) or max_grad_norm <= 0 \
            or spike["value"] <= max_grad_norm:
        return None
    st = spike["step"]
    before = [v for i, v in enumerate(loss.values) if loss.steps[i] < st and math.isfinite(v)][-5:]
    after = [v for i, v in enumerate(loss.values) if loss.steps[i] >= st][:3]
    if len(before) < 3 or len(after) < 2:
        return None
    med = sorted(before)[len(before) // 2]
    if not all(math.isfinite(v) and abs(v - med) <= 0.1 * abs(med) for v in after):
        return None
    return {"max_grad_norm": max_grad_norm, "loss_median": med, "loss_after": after}


def grad_nan_only(nan: dict[str, Any] | None, loss: Curve | None) -> dict[str, Any] | None:
    """A non-finite grad_norm that the loss never felt: every loss logged from that step on is finite and not
    0.0 (not a NaN hidden by ``logging_nan_inf_filter``), at least 2 logs follow, and the last is no higher than
    the one at the NaN. Then the training did not go non-finite — the logged norm did (a skipped step, or a norm
    computed over a partition that held an inf) — and "training went non-finite" would overstate it."""
    if nan is None or nan["metric"] != "grad_norm" or loss is None or nan["step"] is None:
        return None
    after = [loss.values[i] for i in range(len(loss)) if loss.steps[i] >= nan["step"]]
    if len(after) < 3 or not all(math.isfinite(v) and v != 0.0 for v in after) or after[-1] > after[0]:
        return None
    return {"step": nan["step"], "count": nan["count"], "location": nan["location"],
            "loss_from": after[0], "loss_to": after[-1],
            "detail": f"grad_norm {fmt(nan['value'])} at {nan['count']} log(s) from step {nan['step']}, while the "
                      f"loss stayed finite and went {fmt(after[0])} → {fmt(after[-1])}: the logged norm, not the "
                      "training, went non-finite"}


def first_nonfinite(loss: Curve | None, gn: Curve | None) -> dict[str, Any] | None:
    best = None
    for name, c in (("loss", loss), ("grad_norm", gn)):
        if c is None:
            continue
        for i, v in enumerate(c.values):
            if not math.isfinite(v):
                cand = {"metric": name, "index": i, "step": c.steps[i], "value": v, "location": c.location(i),
                        "basis": c.basis,
                        "count": sum(1 for x in c.values if not math.isfinite(x)), "curve_len": len(c)}
                # at the same step, the curve with more logs before it is the better witness of how long the run
                # was healthy (verl's console line carries a grad norm every step, a policy loss only when non-finite)
                if best is None or cand["step"] < best["step"] or (
                        cand["step"] == best["step"] and cand["index"] > best["index"]):
                    best = cand
                break
    if best is None:
        return None
    st = best["step"]
    best["loss"] = exact_at(loss, st)
    best["grad_norm"] = exact_at(gn, st)
    main = loss if best["metric"] == "loss" else gn
    assert main is not None
    best["first_logged"] = best["index"] == 0
    best["healthy_before"] = sum(1 for v in list(main.values)[:best["index"]] if math.isfinite(v) and v != 0.0)
    # the onset lies between the last finite log before it and this one, however far apart they are
    i = best["index"]
    prev = next((k for k in range(i - 1, -1, -1) if math.isfinite(main.values[k])), None)
    best["prev_finite_step"] = main.steps[prev] if prev is not None else None
    best["gap_steps"] = (st - main.steps[prev]) if prev is not None and st is not None else None
    return best




def amp_skips(loss: Curve | None, gn: Curve | None, fp16: bool, unstated: bool = False) -> dict[str, Any] | None:
    """HF AMP (torch GradScaler) skips: fp16, grad_norm NaN/Inf at isolated logs, the loss finite and non-zero
    there, and finite grad norms after them (case 055: 'occasional grad_norm nan').

    `unstated`: the files say neither fp16 nor another precision. A NaN grad norm with the loss finite at that log
    and finite norms after it is then still a skipped step: an optimizer step on a NaN gradient makes the weights
    NaN and every later loss NaN, so only a dynamic loss scaler (torch/amp/grad_scaler.py ``GradScaler.step`` skips
    the step when found_inf; mmcv's Fp16OptimizerHook and apex do the same) lets the run go on; but the loss must
    also fall across the logs after it. A NaN at the first log of a short log is allowed (the scaler starts high,
    2**16 in torch, and overflows at the first steps): mmocr's first log line at iteration 100, TableMASTER-mmocr#32.
    Returns {count, steps, location, stated} or None."""
    if not (fp16 or unstated) or gn is None or loss is None or len(gn) < 2:
        return None
    bad = [i for i, v in enumerate(gn.values) if not math.isfinite(v)]
    if not bad:
        return None
    first_only = bad == [0]
    if (len(gn) < 3 or len(bad) > 0.2 * len(gn)) and not first_only:
        return None
    for i in bad:
        lv = exact_at(loss, gn.steps[i])
        if lv is None or not math.isfinite(lv) or lv == 0.0:
            return None
    if not any(math.isfinite(v) for v in list(gn.values)[bad[-1] + 1:]):
        return None
    if not fp16 or len(gn) < 3:
        after = [loss.values[i] for i in range(len(loss)) if loss.steps[i] >= gn.steps[bad[-1]]]
        if len(after) < 2 or not all(math.isfinite(v) and v != 0.0 for v in after) or after[-1] >= after[0]:
            return None
    return {"count": len(bad), "steps": [gn.steps[i] for i in bad], "location": gn.location(bad[0]),
            "stated": bool(fp16)}


def loss_zero_facts(loss: Curve | None, gn: Curve | None) -> dict[str, Any] | None:
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
            g = exact_at(gn, loss.steps[i]) if gn is not None else None
            with_nan = g is not None and not math.isfinite(g)
            if j - i >= 2 or with_nan:
                gf = g if g is not None and math.isfinite(g) else None
                if with_nan:
                    meaning = ("With grad_norm nan this is NaN, not a perfect fit: every micro-step loss of those "
                               "windows was NaN/Inf and transformers' logging_nan_inf_filter (on by default) logged "
                               "the window as 0.0.")
                elif gf == 0.0 and (p := _trained_before(loss, gn, i)) is not None:
                    # an earlier log trained (a real loss, a gradient): "every label is masked or nothing requires
                    # grad" is then one possibility among others, not the cause (trial 11, LlamaFactory#8137)
                    meaning = (f"With grad_norm 0 no gradient reaches the optimizer, yet step {p[0]} logged loss "
                               f"{fmt(p[1])} with grad_norm {fmt(p[2])}: the run trained at first, so parameters do "
                               "require grad. Possible causes: the later batches have every label masked (-100: "
                               "prompts longer than cutoff_len, a template that masks the answer); the distributed "
                               "setup zeroing the reduced gradients and loss (reported for DeepSpeed ZeRO-2 across "
                               "nodes while ZeRO-3 trained, hiyouga/LlamaFactory#8137). The same data on one node "
                               "or under ZeRO-3 tells them apart.")
                elif gf == 0.0:
                    meaning = ("With grad_norm 0 nothing is being trained: every label is masked (-100: prompts "
                               "longer than cutoff_len, or a template that masks the answer) or no parameter "
                               "requires grad.")
                elif gf is not None:
                    meaning = (f"A zero loss with grad_norm {fmt(gf)} is not a real loss: the logged values are "
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


def _trained_before(loss: Curve, gn: Curve | None, i: int) -> tuple[Any, float, float] | None:
    """(step, loss, grad_norm) of the last log before index `i` of `loss` with a finite non-zero loss and a finite
    non-zero grad_norm at the same step: the run trained there. None when no log before `i` shows that."""
    for k in range(i - 1, -1, -1):
        lv = loss.values[k]
        g = exact_at(gn, loss.steps[k]) if gn is not None else None
        if math.isfinite(lv) and lv != 0.0 and g is not None and math.isfinite(g) and g != 0.0:
            return loss.steps[k], lv, g
    return None


def grad_const_facts(gn: Curve | None, loss: Curve | None) -> dict[str, Any] | None:
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
    lvals = [exact_at(loss, gn.steps[x]) for x in range(i, j)] if loss is not None else []
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


def scale_facts(overflows: list[OverflowRecord], aborts: list[Any], cx: RunContext) -> dict[str, Any] | None:
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
    min_scale = min_scale_of(cx)
    loc_rec = abort if abort is not None and traj == "abort" else (reductions[-1] if reductions and traj != "benign"
                                                                   else first)
    still = bool(reductions) and reductions[-1] is scaled[-1] and not incr
    nover = sum(1 for o in overflows if o.kind != "increase")
    if traj == "abort" and "Minimum loss scale reached" in (abort.text or ""):
        # fairseq's DynamicLossScaler raises it when the scale would go below --min-loss-scale
        text = ("the trainer stopped the run: the fp16 loss scale reached its minimum"
                + (f" ({sfmt(min_scale)})" if min_scale is not None else "")
                + " (\"Minimum loss scale reached\")")
    elif traj == "abort":
        text = ("DeepSpeed aborted the run: the fp16 loss scale was already at its minimum"
                + (f" ({sfmt(min_scale_of(cx))})" if min_scale_of(cx) is not None else "")
                + " when another overflow came (\"Current loss scale already at minimum\")")
    elif traj == "collapse" and not reductions:
        # only a printed scale, already at or below 1 the first time the log shows it (kind "reported")
        text = f"the fp16 loss scale was already {sfmt(smin)} the first time the log printed it"
    elif traj == "collapse":
        text = (f"the fp16 loss scale fell to {sfmt(smin)}"
                + (f" with {len(after)} overflow(s) after the first {CALIBRATION_STEPS} steps" if after else ""))
    else:
        text = f"the fp16 loss scale went from {sfmt(initial)} down to {sfmt(smin)}"
    if scaled and traj != "abort" and reductions:
        text += f" ({nover} overflow(s) from {sfmt(initial)})"
    elif scaled and traj == "abort":
        text += f"; {nover} overflow line(s) logged, scale {sfmt(initial)} → {sfmt(smin)}"
    return {"text": text, "initial": initial, "min": smin, "last": last, "overflows": nover,
            "reductions": len(reductions), "after_calibration": len(after), "increases": len(incr),
            "trajectory": traj, "abort": {"location": location_of(abort.file, abort.line), "step": abort.step}
            if abort else None, "still_falling": still,
            "first_step": first.step if first else (abort.step if abort else None),
            "last_step": overflows[-1].step if overflows else (abort.step if abort else None),
            "min_loss_scale": min_scale,
            "location": location_of(loc_rec.file, loc_rec.line) if loc_rec is not None else None}


def min_scale_of(cx: RunContext) -> float | None:
    v = cx.log.get("min_loss_scale")
    if v is None:
        v = get_path(cx.ds, "fp16", "min_loss_scale")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def abort_step(abort: Any, overflows: Iterable[OverflowRecord]) -> Any:
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


def scale_events(overflows: list[OverflowRecord], aborts: list[Any]) -> Iterable[tuple]:
    """One timeline event per burst of consecutive overflow lines, plus the abort."""
    burst: list[OverflowRecord] = []

    def flush() -> tuple | None:
        if not burst:
            return None
        a, b = burst[0], burst[-1]
        scales = [o for o in burst if o.attempted is not None]
        if scales:
            lo = min(o.new_scale or o.attempted for o in scales)
            detail = f"{len(burst)} overflow(s): loss scale {sfmt(scales[0].attempted)} → {sfmt(lo)}"
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


def diverged(loss: Curve | None, gn: Curve | None, lr: Curve | None) -> dict[str, Any] | None:
    """A training loss that fell, then climbed back (rule loss-diverged): at least 4 finite logs, the lowest at
    least 2 logs before the last, and the last log at least half of the way back from the lowest to the first and
    at least twice the lowest. Returns {first, first_step, low, low_step, last, last_step, back_pct, gn_text,
    lr, lr_text, location} or None. The grad norm and learning rate are read at the lowest loss's step and at the
    last (nearest log at or before it). Source: the divergence pattern of paiml/entrenar#274 (loss 1.43 at step
    220 back to 10.03 by step 385, grad norm 7.7 -> 70.7) and the usual reading of such a curve: a step size too
    large for the curvature reached once warm-up ends."""
    if loss is None or len(loss) < 4:
        return None
    pts = [(i, v) for i, v in enumerate(loss.values) if math.isfinite(v)]
    if len(pts) < 4:
        return None
    (i0, first), (il, last) = pts[0], pts[-1]
    ik, low = min(pts, key=lambda t: t[1])
    if low <= 0 or first <= low or sum(1 for i, _ in pts if i > ik) < 2:
        return None
    back = (last - low) / (first - low)
    if back < 0.5 or last < 2 * low:
        return None

    def at(c: Curve | None, step: int | None) -> float | None:
        if c is None or step is None or not len(c):
            return None
        k = bisect.bisect_right(list(c.steps), step) - 1
        v = c.values[k] if k >= 0 else None
        return v if v is not None and math.isfinite(v) else None

    s_low, s_last = loss.steps[ik], loss.steps[il]
    g0, g1 = at(gn, s_low), at(gn, s_last)
    rate = at(lr, s_low)
    return {"first": first, "first_step": loss.steps[i0], "low": low, "low_step": s_low, "last": last,
            "last_step": s_last, "back_pct": round(100 * back), "location": loss.location(ik),
            "source": loss.source(ik),
            "gn_text": f", grad norm {g0:.4g} -> {g1:.4g}" if g0 is not None and g1 is not None else "",
            "lr": rate, "lr_text": f"{rate:.3g} at the lowest loss" if rate is not None else
            "the log names no learning rate"}
