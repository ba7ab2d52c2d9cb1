"""Step lines of trainers that print neither HF's dict nor LLaMA-Factory's JSON (readers/runlogs/logparse.py
`_step_line`, logpatterns.py `STEP_LINE_*`), and the divergence they can show (rule loss-diverged, FD328).
The lines are as the trainers print them: paiml/entrenar#274's table of its own ``step=N loss=X gnorm=Y`` lines,
gpt-neox/Megatron's ``iteration  N/ M | ... | lm_loss: X |`` line (EleutherAI/gpt-neox#947), torchtune's
``Step N | loss:X``-style line is not matched (no separator before the value) and a loss named in prose is not a
point."""

from __future__ import annotations

from pathlib import Path

from finetune_doctor.readers.runlogs.logs import parse_text
from pmhelp import diagnose_dir

ENTRENAR = """step=1    loss=15.50  gnorm=42.7
step=55   loss=13.00  gnorm=14.0
step=110  loss=3.80   gnorm=24.4
step=165  loss=2.39   gnorm=7.1
step=220  loss=1.43   gnorm=7.7    \u2190 BEST
step=275  loss=5.82   gnorm=15.6   \u2190 diverging
step=330  loss=7.05   gnorm=15.3
step=385  loss=10.03  gnorm=70.7   \u2190 near random baseline
"""

NEOX = (" samples/sec: 1.702 | iteration        1/   55000 | elapsed time per iteration (ms): 18806.7 | learning "
        "rate: 1.212E-09 | approx flops per GPU: 5.7TFLOPS | lm_loss: 2.275809E+00 | number of skipped iterations:"
        "   0 | number of nan iterations:   0 |\n")


def _series(text: str) -> dict:
    fe = parse_text("train.log", text.encode())
    return {s.name: (list(s.steps), list(s.values)) for s in fe.series}


def test_step_lines_become_points_at_their_own_steps():
    s = _series(ENTRENAR)
    assert s["loss"] == ([1, 55, 110, 165, 220, 275, 330, 385], [15.5, 13.0, 3.8, 2.39, 1.43, 5.82, 7.05, 10.03])
    assert s["grad_norm"][1][-1] == 70.7
    n = _series(NEOX)
    assert n["loss"] == ([1], [2.275809])
    assert n["learning_rate"] == ([1], [1.212e-09])


def test_a_loss_in_prose_or_without_a_step_is_not_a_point():
    s = _series("we saw loss: 3.2 yesterday\nloss: 0.2606 (0.2654)  time: 3.0808\n")
    assert "loss" not in s


def test_epoch_and_iteration_lines_are_points_at_the_global_iteration():
    """DETR/DeiT/MAE's MetricLogger (epochs from 0) and mmengine's LoggerHook (epochs from 1, or Iter(train))."""
    s = _series("Epoch: [8]  [ 200/2293]  eta: 1:52:52  lr: 0.000004  loss: 0.2606 (0.2654)  time: 3.0808\n")
    assert s["loss"] == ([8 * 2293 + 200], [0.2606]) and s["learning_rate"] == ([8 * 2293 + 200], [4e-06])
    s = _series("12/09 06:40:01 - mmengine - INFO - Epoch(train)  [14][ 50/7330]  lr: 1.0000e-03  eta: 3 days, "
                "0:04:13  time: 0.3671  data_time: 0.0070  memory: 9571  loss: 64.8291  loss_cls: 21.2033\n"
                "12/09 06:40:21 - mmengine - INFO - Iter(train) [  100/90000]  lr: 2.0000e-02  eta: 9:01:09  "
                "loss: nan  loss_cls: nan\n")
    assert s["loss"][0] == [13 * 7330 + 50, 100] and s["loss"][1][0] == 64.8291


def test_a_diverged_custom_trainer_run_is_named(tmp_path: Path):
    (tmp_path / "train.log").write_text(ENTRENAR, encoding="utf-8")
    f = diagnose_dir(tmp_path).findings
    assert f[0].name == "loss-diverged"
    assert "to 1.43 at step 220, then climbed back to 10.03 by step 385" in f[0].message
    assert "grad norm 7.7 -> 70.7" in f[0].message and f[0].location.line == 5
