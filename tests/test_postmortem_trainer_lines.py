"""Other trainers' own metric lines (fixtures/postmortem/trainer_lines/, FIXTURE.md names the upstream format): verl's
console line gives the actor's grad norm and learning rate per step; its signed policy loss is kept only when
non-finite, so the supervised curve detectors never judge it."""

from __future__ import annotations

from pmhelp import diagnose


def test_verl_nan_is_placed_after_its_healthy_steps(tmp_path):
    found = diagnose(tmp_path, "trainer_lines/verl_grad_nan.log")
    assert found and found[0].name == "nan-loss", [f.name for f in found]
    msg = found[0].message
    assert "at step 31" in msg and "after 30 healthy log(s)" in msg, msg
    assert "first logged step" not in msg
    # the policy loss is no loss curve: no spike or divergence is judged on it
    assert not any(f.name in ("loss-spike", "loss-diverged", "first-loss-high") for f in found), [f.name for f in found]


def test_a_finite_verl_run_has_no_numeric_finding(tmp_path):
    log = tmp_path / "src.log"
    text = (diagnose.__globals__["FIXTURES"] / "trainer_lines" / "verl_grad_nan.log").read_text()
    log.write_text("".join(x + "\n" for x in text.splitlines() if "nan" not in x))
    names = [f.name for f in diagnose(tmp_path, log)]
    assert "nan-loss" not in names and "grad-norm-spike" not in names, names


def test_lightning_bar_losses_are_steps(tmp_path):
    found = diagnose(tmp_path, "trainer_lines/lightning_nan.log")
    assert found and found[0].name == "nan-loss", [f.name for f in found]
    assert "at step 1350" in found[0].message and "after 26 healthy log(s)" in found[0].message, found[0].message
