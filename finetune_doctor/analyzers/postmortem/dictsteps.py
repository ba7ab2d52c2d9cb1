"""The step of each printed HF metric dict, from the strongest evidence (issue #25).

HF Trainer prints ``{'loss': …, 'grad_norm': …, 'learning_rate': …, 'epoch': …}`` with no step
(transformers/trainer.py ``_maybe_log_save_evaluate`` builds it, ``log`` adds ``epoch``; ProgressCallback.on_log,
trainer_callback.py:673-690 of transformers 5.6, prints it with ``tqdm.write``). The text reader gives each dict the
training bar's step at its line (readers/runlogs/logparse.py), which is right when stdout and stderr reach the log
in order. They often do not: ``tqdm.write`` writes to ``sys.stdout`` (tqdm/std.py:718-720 of tqdm 4.70) while the
bar goes to ``sys.stderr``, and under ``nohup … > log 2>&1`` stdout is block-buffered, so the dicts arrive in
clumps — at a crash, all after the traceback, every one at the bar's last step.

The evidence, strongest first, for the dict at index i:

* **the learning rate in warmup**: transformers/optimization.py:101-104 (linear) and :326-330 (cosine) give
  lr = peak × step / warmup_steps while step < warmup_steps, and the logged lr is the scheduler's after
  ``global_step`` steps, so step = lr / peak × warmup_steps. Needs the peak (``learning_rate``) and the warmup
  (``warmup_steps``, or ``warmup_ratio`` × total steps rounded up: TrainingArguments.get_warmup_steps);
* **the epoch**: trainer.py:1776 sets ``state.epoch = epoch + (step + 1) / steps_in_epoch``, so step = epoch ×
  steps per epoch, steps per epoch = total steps / ``num_train_epochs`` (the bar's total is
  ``ceil(epochs × steps_per_epoch)``);
* **``logging_steps``**: HF logs when ``global_step % logging_steps == 0`` (DefaultFlowCallback), so an estimate
  is rounded to the nearest multiple.

The bar's step is kept when it agrees with the estimate (within the epoch's print precision) and no two dicts
share it; otherwise the estimate replaces it, unless the placed steps would go back from one dict to the next (the
evidence contradicts itself: nothing is moved). Curves from trainer_state / trainer_log / event files carry real
steps and are not touched. Works on the curves already in memory: no second pass over the log.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import replace
from typing import Any

from finetune_doctor.analyzers.postmortem.curves import Curve
from finetune_doctor.evidence import Evidence

DICT_METRICS = ("loss", "grad_norm", "learning_rate", "epoch")
WARMUP_SCHEDULES = (None, "linear", "cosine", "cosine_with_restarts", "polynomial", "constant_with_warmup",
                    "cosine_with_min_lr", "warmup_stable_decay")
"""Schedules whose warmup is linear from 0 (transformers/optimization.py: every ``*_with_warmup`` lambda)."""

# the most steps a placement may give: far above any run, and within the signed 64-bit steps array
MAX_STEP = 1 << 53


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
    return float(v) if math.isfinite(v) and v > 0 else None


def hints(cfg: dict[str, Any], log: dict[str, Any], total: int | None) -> dict[str, Any]:
    """What the config and the log say about the schedule: peak lr, warmup steps, steps per epoch, logging steps
    (each None when not given). `total` is the run's optimizer steps (the bar's total or "Total optimization
    steps")."""
    peak = _num(cfg.get("learning_rate"))
    sched = cfg.get("lr_scheduler_type")
    warm = _num(cfg.get("warmup_steps"))
    ratio = _num(cfg.get("warmup_ratio"))
    if warm is None and ratio is not None and total:
        warm = float(math.ceil(ratio * total))   # TrainingArguments.get_warmup_steps
    epochs = _num(cfg.get("num_train_epochs")) or _num(log.get("num_train_epochs"))
    max_steps = _num(cfg.get("max_steps"))
    spe = total / epochs if total and epochs and not max_steps else None
    ls = _num(cfg.get("logging_steps")) or _num(log.get("logging_steps"))
    return {"peak": peak if sched in WARMUP_SCHEDULES else None, "warmup": warm, "spe": spe,
            "logging_steps": int(ls) if ls and ls >= 1 else None}


def _estimate(lr: float | None, epoch: float | None, h: dict[str, Any],
              rising: bool) -> tuple[int | None, float, str | None]:
    """(step, tolerance in steps, basis) of one dict; `rising`: the dict comes before the first logged peak of
    the learning rate (a decaying lr below the peak says nothing about warmup)."""
    peak, warm, spe, k = h["peak"], h["warmup"], h["spe"], h["logging_steps"]
    est, tol, basis = None, 0.0, None
    if rising and lr is not None and peak and warm and 0 < lr < peak * (1 - 1e-3):
        est, tol, basis = lr / peak * warm, max(1.0, warm * 1e-3), "warmup-lr"   # 4 significant digits printed
    elif epoch is not None and math.isfinite(epoch) and spe:   # a NaN epoch ('epoch': nan) places nothing
        # printed with 4 significant digits (transformers 5) or 2 decimals (older): the looser of the two
        prec = max(0.005, 10 ** (math.floor(math.log10(epoch)) - 3) / 2 if epoch > 0 else 0.005)
        est, tol, basis = epoch * spe, max(1.0, prec * spe), "epoch"
    if est is None:
        return None, 0.0, None
    if k:
        est = max(k, round(est / k) * k)
        tol = max(tol, k / 2)
    return int(round(est)), tol, basis


def place(curves: dict[str, Curve], ev: Evidence, h: dict[str, Any]) -> dict[str, Any] | None:
    """Re-place the dict curves of a text log (module docstring); returns {basis, moved, first_moved} or None when
    nothing moved. `curves` is updated in place.

    The warmup learning rate is dropped as evidence when a logged rate exceeds the configured peak (the config
    read is not the one the run used: an override, or a paste recreated from an example) or when its placement
    puts two dicts at one step, which HF never logs (trial 7 c03, LLaMA-Factory #7388: epochs 0.12 and 0.24 of
    a 249-step, 3-epoch run both stamped step 20; the epoch alone gives 10 and 20)."""
    texts = {f.read.path for f in ev.files if f.read.kind == "text-log"}
    cs = {n: curves[n] for n in DICT_METRICS if n in curves and len(curves[n].segments) == 1
          and curves[n].segments[0][1] in texts}
    if "loss" not in cs:
        return None
    loss = cs["loss"]
    lr_at = dict(zip(cs["learning_rate"].lines, cs["learning_rate"].values)) if "learning_rate" in cs else {}
    lrs = [lr_at.get(ln) for ln in loss.lines]   # one map for the whole log: a 200k-line log stays linear
    top = max((v for v in lrs if v is not None), default=None)
    use_lr = not (top and h["peak"] and top > h["peak"] * (1 + 1e-3))
    if h["spe"] is None:
        bar = max((f.last_step for f in ev.files if f.read.path in texts and f.last_step), default=None)
        h = dict(h, spe=_anchored_spe(cs, bar))
    got = _placement(cs, h, lrs, use_lr)
    if got is not None and use_lr and _repeats(got[0], loss):
        got = _placement(cs, h, lrs, False)
    if got is None or _repeats(got[0], loss):
        return None
    new, bases = got
    if any(not 0 <= s < MAX_STEP for s in new.values()):
        return None   # an epoch no run reaches (1e16 in a fuzzed dict) places nothing
    for n, c in cs.items():
        steps = array("q", (new.get(ln, s) for ln, s in zip(c.lines, c.steps)))
        curves[n] = replace(c, steps=steps, basis="estimated")
    first = min(new)
    return {"basis": sorted(bases), "moved": len(new), "first_moved": {"line": first, "step": new[first]}}


def _anchored_spe(cs: dict[str, Curve], bar: int | None) -> float | None:
    """Steps per epoch from one dict the progress bar placed, when neither the config nor the log gives
    ``num_train_epochs`` (trainer.py:1776: epoch = steps done / steps per epoch, so steps per epoch = step /
    epoch). The anchor is the dict at the highest step no other dict shares, at or below the bar's last step
    `bar`: curves.py `fill_steps` extrapolates dicts before the first bar backwards and after the last bar
    forwards, and interpolates between bars, so the highest such dict sits on a bar. None without one. Trial 12
    (LF#8830): a dict printed before the first bar was put at half the next dict's step, its epoch 0.31 of 0.32."""
    if "epoch" not in cs or not bar or cs["loss"].basis in ("ordinal", "logging_steps"):
        return None
    loss = cs["loss"]
    epochs = dict(zip(cs["epoch"].lines, cs["epoch"].values))
    seen: dict[int, int] = {}
    for st in loss.steps:
        seen[st] = seen.get(st, 0) + 1
    anchors = [(st, epochs[ln]) for ln, st in zip(loss.lines, loss.steps)
               if 0 < st <= bar and seen[st] == 1 and (epochs.get(ln) or 0) > 0]
    if not anchors:
        return None
    st, ep = max(anchors)
    return st / ep


def _repeats(new: dict[int, int], loss: Curve) -> bool:
    """Whether a moved dict lands on the step of another dict (HF logs once per step). Dicts the estimates
    leave alone may still share the bar's step: that is the buffering this module undoes where it can."""
    count: dict[int, int] = {}
    for ln, s in zip(loss.lines, loss.steps):
        count[new.get(ln, s)] = count.get(new.get(ln, s), 0) + 1
    return any(count[st] > 1 for st in new.values())


def _placement(cs: dict[str, Curve], h: dict[str, Any], lrs: list[float | None],
               use_lr: bool) -> tuple[dict[int, int], set[str]] | None:
    """{line: step} for the dicts whose printed step the estimates replace, and the bases used; None when
    nothing moves or the placed steps would go back from one dict to the next."""
    loss = cs["loss"]
    epochs = dict(zip(cs["epoch"].lines, cs["epoch"].values)) if "epoch" in cs else {}
    seen: dict[int, int] = {}
    for s in loss.steps:
        seen[s] = seen.get(s, 0) + 1
    top = max((v for v in lrs if v is not None), default=None)
    crest = next((i for i, v in enumerate(lrs) if v is not None and top and v >= top * (1 - 1e-3)), len(lrs))
    known = [v for v in lrs if v is not None]
    if top and h["peak"] and top < h["peak"] * (1 - 1e-3) and all(a < b for a, b in zip(known, known[1:])):
        crest = len(lrs)   # rising and the log ends before the configured peak: every dict is still in warm-up
    # without a progress bar the reader numbered the dicts 1, 2, ... (or by logging_steps): no evidence to keep
    guessed = loss.basis in ("ordinal", "logging_steps")
    new: dict[int, int] = {}
    bases: set[str] = set()
    for i, (ln, s) in enumerate(zip(loss.lines, loss.steps)):
        est, tol, basis = _estimate(lrs[i] if use_lr else None, epochs.get(ln), h, i < crest)
        if est is None:
            continue
        if not guessed and s >= 0 and seen[s] == 1 and abs(s - est) <= tol:
            continue
        if s == est:
            continue
        new[ln] = est
        bases.add(basis or "")
    if not new:
        return None
    placed = [new.get(ln, s) for ln, s in zip(loss.lines, loss.steps)]
    if loss.monotone and any(a > b for a, b in zip(placed, placed[1:])):
        # the evidence disagrees with itself (a schedule that is not the one assumed: DeepSpeed's own WarmupLR
        # warms up on a log curve by default): keep what the bar said rather than invent an order
        return None
    return new, bases
