"""Steps of HF's printed metric dicts from the strongest evidence (issue #25).

The fixture is a `nohup llamafactory-cli train … > log 2>&1` run of transformers 5 that hit a CUDA OOM at step 48:
the bar (stderr, tqdm's "\\r"-separated updates on one line) reached 47/200, while the nine dicts of
`logging_steps: 5` (stdout, block-buffered: tqdm.write writes to sys.stdout, tqdm/std.py:718-720; HF formats
floats with "{v:.4g}", transformers/trainer_callback.py:684-686) were flushed only at exit, after the traceback.
The bar at their lines says 47 for all nine; the warmup learning rates (peak 2e-4, warmup_ratio 0.1 of 200 →
20 steps) and the epochs (2 epochs of 100 steps) say 5, 10, …, 45.
"""

from __future__ import annotations

import os

import yaml

from finetune_doctor.analyzers.postmortem import dictsteps
from finetune_doctor.analyzers.postmortem.curves import build_curves
from finetune_doctor.readers.runlogs.runlayout import collect

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "postmortem",
                   "dictsteps")
LOG = os.path.join(FIX, "nohup_buffered_dicts.log")
with open(os.path.join(FIX, "nohup_buffered_dicts.yaml"), encoding="utf-8") as _fh:
    CFG = yaml.safe_load(_fh)


def test_the_bar_alone_puts_every_buffered_dict_at_step_47():
    c = build_curves(collect(LOG, []), 5)
    assert list(c["loss"].steps) == [47] * 9   # what the naive placement gives: the evidence the fix overrides


def test_buffered_dicts_are_placed_by_warmup_lr_and_epoch():
    ev = collect(LOG, [])
    c = build_curves(ev, 5)
    h = dictsteps.hints(CFG, {}, 200)
    assert (h["peak"], h["warmup"], h["spe"], h["logging_steps"]) == (2e-4, 20.0, 100.0, 5)
    moved = dictsteps.place(c, ev, h)
    want = list(range(5, 50, 5))
    for name in ("loss", "grad_norm", "learning_rate", "epoch"):
        assert list(c[name].steps) == want, name
    assert moved["moved"] == 9 and moved["basis"] == ["epoch", "warmup-lr"]
    assert c["loss"].values[0] == 2.0 and c["learning_rate"].values[3] == 2e-4


def test_warmup_alone_without_epochs_and_logging_steps():
    # no num_train_epochs (so no steps per epoch) and no logging_steps: only the four rising learning rates move
    cfg = {k: v for k, v in CFG.items() if k not in ("num_train_epochs", "logging_steps")}
    ev = collect(LOG, [])
    c = build_curves(ev, None)
    dictsteps.place(c, ev, dictsteps.hints(cfg, {}, 200))
    assert list(c["loss"].steps) == [5, 10, 15, 47, 47, 47, 47, 47, 47]


def test_a_bar_that_agrees_is_kept(tmp_path):
    # the same dicts in order, each right after the bar of its step (an unbuffered log): nothing moves
    lines = []
    with open(LOG, encoding="utf-8") as fh:
        dicts = [t for t in fh if t.startswith("{'loss'")]
    for k, d in enumerate(dicts, 1):
        s = 5 * k
        lines.append(f"{s // 2:3d}%|▏         | {s}/200 [00:{s:02d}<09:00,  3.00s/it]")
        lines.append(d.rstrip("\n"))
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ev = collect(str(p), [])
    c = build_curves(ev, 5)
    assert dictsteps.place(c, ev, dictsteps.hints(CFG, {}, 200)) is None
    assert list(c["loss"].steps) == list(range(5, 50, 5))


def test_postmortem_with_config_places_the_dicts_and_keeps_the_crash_step():
    from finetune_doctor.pipeline import postmortem as pm
    from finetune_doctor.settings import Options

    r = pm.run(LOG, [], os.path.join(FIX, "nohup_buffered_dicts.yaml"), Options(command="postmortem"))
    loss = r.sections["postmortem"]["curves"]["loss"]
    assert loss["steps"] == list(range(5, 50, 5)) and loss["basis"] == "estimated"
    assert r.findings[0].name == "cuda-oom" and "during step 48" in r.findings[0].message


def _resumed_no_bar(tmp_path):
    # `disable_tqdm: true` (PrinterCallback prints the dicts, no bar) and a run resumed from checkpoint-100: the
    # dicts are those of steps 105..145, which an ordinal count puts at 5..45
    out = []
    for s in range(105, 150, 5):
        lr = 2e-4 * (200 - s) / 180
        out.append(str({"loss": f"{2.1 - 0.002 * s:.4g}", "grad_norm": "0.9", "learning_rate": f"{lr:.4g}",
                        "epoch": f"{s / 100:.4g}"}))
    p = tmp_path / "train.log"
    p.write_text("\n".join(out) + "\n", encoding="utf-8")
    return str(p)


def test_a_resumed_run_without_bar_is_placed_by_its_epochs(tmp_path):
    p = _resumed_no_bar(tmp_path)
    ev = collect(p, [])
    c = build_curves(ev, 5)
    assert list(c["loss"].steps) == list(range(5, 50, 5)) and c["loss"].basis == "logging_steps"
    dictsteps.place(c, ev, dictsteps.hints(CFG, {}, 200))
    assert list(c["loss"].steps) == list(range(105, 150, 5))


def test_self_contradicting_evidence_moves_nothing(tmp_path):
    # epochs that go back (another run's dicts pasted after): the placed steps would not increase
    p = _resumed_no_bar(tmp_path)
    with open(p, "a", encoding="utf-8") as fh:
        fh.write("{'loss': '1.9', 'grad_norm': '0.9', 'learning_rate': '0.0001', 'epoch': '0.5'}\n")
    ev = collect(p, [])
    c = build_curves(ev, 5)
    assert dictsteps.place(c, ev, dictsteps.hints(CFG, {}, 200)) is None
    assert list(c["loss"].steps) == list(range(5, 55, 5))


def test_a_dict_whose_epoch_is_nan_is_not_placed_by_it():
    # HF prints float('nan') as `nan` inside the dict when the loss went non-finite before the epoch was known
    # (a fuzz case: int(round(nan)) raised); the step comes from the bar instead, nothing raises
    h = {"peak": None, "warmup": None, "spe": 40.0, "logging_steps": 10}
    assert dictsteps._estimate(None, float("nan"), h, False) == (None, 0.0, None)
    assert dictsteps._estimate(None, 0.5, h, False)[0] == 20
