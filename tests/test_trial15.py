"""New-user trial 15 (issue #21, honest verdicts): four LLaMA-Factory configs ray-project/ray publishes as training on
4 x L40S / 4 x L4 (fixtures/trial15/SOURCE.md), checked on a machine without llamafactory, as the trial ran them.

What the trial found, each kind pinned here:
1. the verdict was ``fits`` while the "Assumed" list marked an assumption ``!`` (transformers 4.48.3, which the
   keys' LF 0.9.3-0.9.4 admit: 14.5 GiB, at-risk on the L4): the ``!`` and the verdict are one computation now
   (facts/assumebase.py `opens_verdict`, `settled`; facts/assume.py `fold`);
2. an alternative the keys rule out (LF before 0.8.0, DataParallel) was offered after the Ray keys narrowed the
   release to 0.9.3-0.9.4; a Ray launch was named torchrun (facts/launchray.py);
3. lint said "torchrun, DDP" for a ZeRO-3 config that check called "DeepSpeed as the YAML names it";
4. without --gpu the header said "world size 4" (ray_num_workers) while the note and the ``gpus`` assumption said one
   GPU was assumed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.facts.kinds import DATA_PARALLEL
from finetune_doctor.readers.config import lfrelease
from finetune_doctor.readers.config.lfrelease import INSTALLED_HERE_NOTE

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "trial15"


@pytest.fixture(autouse=True)
def no_lf_here(monkeypatch):
    """The trial ran where llamafactory is not installed (the test venv carries 0.9.5 for the oracle tests)."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: None)
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)
    for k in ("FORCE_TORCHRUN", "NNODES"):
        monkeypatch.delenv(k, raising=False)


def _run(*args: str) -> dict:
    r = CliRunner().invoke(main, [*args, "--offline", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _asm(report: dict, name: str) -> dict | None:
    return next((a for a in report["assumptions"] if a["name"] == name), None)


def test_case06_verdict_and_its_bang_are_one_computation():
    d = _run("check", str(FIX / "dpo_qlora.yaml"), "--gpu", "4xL4")
    tf = _asm(d, "transformers-version")
    # the keys narrow LF to 0.9.3-0.9.4; 0.9.3 admits transformers 4.48.3 (>=4.45.0,<=4.52.4), whose fp32 copy of
    # the shifted logits takes the QLoRA DPO peak from 13.2 to 14.5 GiB on the L4's 22.17 GiB
    assert _asm(d, "lf-version")["value"] == "any release 0.9.3-0.9.4"
    assert tf["effect"]["total_gib"]["transformers 4.48.3"] == pytest.approx(14.5, abs=0.1)
    assert d["memory"]["per_gpu_gib"]["total"] == pytest.approx(13.2, abs=0.1)
    # the ! is the verdict's own computation: it moves the verdict exactly when its alternative's verdict differs
    # from the reported one (which verdict the table gives at 13.2 GiB moves with each refit: session 14's table puts
    # the assumed case at 5.1 %, at-risk, where session 13's said fits and the older transformers opened it)
    alt = tf["effect"]["verdict"]["transformers 4.48.3"]
    assert tf["moves_verdict"] is (alt != d["memory"]["verdict"])
    if (d["memory"].get("deciding_assumption") or {}).get("name") == "transformers-version":
        assert tf["moves_verdict"] and d["memory"]["verdict"] == "at-risk"


def test_bang_and_verdict_agree_on_every_trial_case():
    """For each config and card: some assumption is marked ``!`` exactly when an at-risk verdict names one."""
    for name, gpu in (("cpt_deepspeed.yaml", "4xL40S"), ("sft_lora_deepspeed.yaml", "4xL40S"),
                      ("dpo_qlora.yaml", "4xL4"), ("kto_lora.yaml", "4xL40S"), ("dpo_qlora.yaml", "4xT4"),
                      ("sft_lora_deepspeed.yaml", "4xL4")):
        d = _run("check", str(FIX / name), "--gpu", gpu)
        movers = [a["name"] for a in d["assumptions"] if a["moves_verdict"]]
        deciding = (d["memory"].get("deciding_assumption") or {}).get("name")
        if d["memory"]["verdict"] in ("fits", "oom"):
            assert movers == [], (name, gpu, movers)
        if deciding is not None:
            assert deciding in movers, (name, gpu)
        if movers and d["memory"]["verdict"] != "at-risk":
            pytest.fail(f"{name} on {gpu}: {movers} marked ! beside {d['memory']['verdict']}")


def test_stated_old_release_keeps_the_old_transformers_deciding():
    """Stated LF 0.9.3 (transformers <= 4.52.4): the older transformers is plausible and weighed, its ! the verdict's
    own computation; stated 0.9.4 (>= 4.51.0) rules it out: no alternative, nothing marked."""
    old = _run("check", str(FIX / "dpo_qlora.yaml"), "--gpu", "4xL4", "--llamafactory", "0.9.3")
    tf_old = _asm(old, "transformers-version")
    assert tf_old["effect"]["total_gib"]["transformers 4.48.3"] == pytest.approx(14.5, abs=0.1)
    assert tf_old["moves_verdict"] is (tf_old["effect"]["verdict"]["transformers 4.48.3"] != old["memory"]["verdict"])
    new = _run("check", str(FIX / "dpo_qlora.yaml"), "--gpu", "4xL4", "--llamafactory", "0.9.4")
    tf = _asm(new, "transformers-version")
    assert tf is not None and not tf["moves_verdict"] and "transformers 4.48.3" not in tf["effect"]["total_gib"]
    assert new["memory"]["per_gpu_gib"]["total"] == pytest.approx(13.2, abs=0.1)


def test_case07_no_pre_torchrun_alternative_once_the_keys_narrow_the_release():
    d = _run("check", str(FIX / "kto_lora.yaml"), "--gpu", "4xL40S")
    launcher = _asm(d, "launcher")
    assert DATA_PARALLEL not in launcher["alternatives"]
    assert not any("before 0.8.0" in k for k in launcher["effect"]["total_gib"])


def test_case07_without_ray_keys_the_other_keys_still_rule_out_the_old_launch(tmp_path):
    """Without the Ray block the config's keys still narrow LF to 0.9.2 and later (enable_liger_kernel,
    trust_remote_code...): torchrun's DDP, and no release before 0.8.0 among the alternatives."""
    text = (FIX / "kto_lora.yaml").read_text(encoding="utf-8").split("### ray")[0]
    cfg = tmp_path / "kto_lora.yaml"
    cfg.write_text(text, encoding="utf-8")
    d = _run("check", str(cfg), "--gpu", "4xL40S")
    assert _asm(d, "lf-version")["value"].startswith("any release 0.9.2-")
    launcher = _asm(d, "launcher")
    assert launcher["value"] == "llamafactory-cli train (torchrun, DDP, expandable segments on)"
    assert DATA_PARALLEL not in launcher["alternatives"]


def test_ray_launch_is_named_as_ray_in_check_and_lint():
    d = _run("check", str(FIX / "kto_lora.yaml"), "--gpu", "4xL40S")
    launcher = _asm(d, "launcher")
    assert launcher["value"] == ("USE_RAY=1 llamafactory-cli train (Ray, 4 workers of one GPU each, DDP, allocator "
                                 "default)")
    alt = launcher["alternatives"]
    assert alt == ["llamafactory-cli train without USE_RAY=1 (torchrun over the visible GPUs, expandable segments "
                   "on)"]
    # torchrun's expandable segments only lower the reserve: the Ray launch is the larger of the two
    assert launcher["effect"]["total_gib"][alt[0]] <= d["memory"]["per_gpu_gib"]["total"]
    lint = _run("lint", str(FIX / "kto_lora.yaml"))
    assert _asm(lint, "launcher")["value"] == launcher["value"]


def test_lint_and_check_describe_a_deepspeed_launch_alike(tmp_path):
    """Trial 15 case 04: one description of the launch for a ZeRO-3 config whose file is not on this machine,
    with Ray and, without its block, over the GPUs given."""
    ray = (FIX / "cpt_deepspeed.yaml")
    lint = _asm(_run("lint", str(ray)), "launcher")["value"]
    check = _asm(_run("check", str(ray), "--gpu", "4xL40S"), "launcher")["value"]
    assert lint == check and "DeepSpeed as the YAML names it" in check and "DDP" not in check
    plain = tmp_path / "cpt_deepspeed.yaml"
    plain.write_text(ray.read_text(encoding="utf-8").split("### ray")[0], encoding="utf-8")
    lint2 = _asm(_run("lint", str(plain), "--gpu", "4xL40S"), "launcher")
    check2 = _asm(_run("check", str(plain), "--gpu", "4xL40S"), "launcher")
    assert lint2["value"] == check2["value"] == ("llamafactory-cli train (torchrun, DeepSpeed as the YAML names it, "
                                                 "expandable segments on)")
    assert lint2["alternatives"] == check2["alternatives"]


def test_case05_world_size_without_gpu_is_one_answer():
    d = _run("check", str(FIX / "sft_lora_deepspeed.yaml"))
    assert d["run"]["world_size"] == 4
    gpus = _asm(d, "gpus")
    assert gpus["value"] == "unknown: 4 GPUs, no capacity"
    assert "world size is 4, Ray's ray_num_workers" in gpus["source"]
    r = CliRunner().invoke(main, ["check", str(FIX / "sft_lora_deepspeed.yaml"), "--offline"])
    flat = " ".join(r.output.split())
    assert "world size 4" in flat and "the world size is 4, Ray's ray_num_workers" in flat
    assert "one GPU is assumed" not in flat


def test_one_gpu_note_stays_for_a_one_rank_run(tmp_path):
    cfg = tmp_path / "one.yaml"
    cfg.write_text((FIX / "kto_lora.yaml").read_text(encoding="utf-8").split("### ray")[0], encoding="utf-8")
    d = _run("check", str(cfg))
    assert d["run"]["world_size"] == 1
    assert _asm(d, "gpus")["value"] == "unknown: one GPU, no capacity"
    r = CliRunner().invoke(main, ["check", str(cfg), "--offline"])
    assert "one GPU is assumed for the world size" in " ".join(r.output.split())


def test_fixtures_are_the_published_files():
    assert "ray-project/ray/pull/58511" in (FIX / "SOURCE.md").read_text(encoding="utf-8")
    for name in ("cpt_deepspeed.yaml", "sft_lora_deepspeed.yaml", "dpo_qlora.yaml", "kto_lora.yaml"):
        assert "ray_num_workers: 4" in (FIX / name).read_text(encoding="utf-8")


# -- 5. the interval beside the probabilities (trial 15 case 04) ---------------------------------------------------

def test_case04_the_report_says_what_the_interval_and_p_oom_are_each_of():
    """[6.6, 64.4] GiB on the L40S's 44.39 GiB beside p_oom_model 0.03 and `fits` (before session 14): now one
    distribution gives both (issue #21), so with the card inside the interval p_oom_model is over 5 % and the
    verdict at-risk; the interval's share above the budget in shown terms is p_oom_model, and both say so."""
    d = _run("check", str(FIX / "cpt_deepspeed.yaml"), "--gpu", "4xL40S")
    m, card = d["memory"], d["hardware"]["capacity_gib"]
    lo, hi = m["interval_gib"]
    thr = m["oom_threshold_gib"]
    assert lo < card < hi and card == pytest.approx(44.39)
    # the threshold is the budget times total / need (the reserve the run shows over what it needs)
    assert thr == pytest.approx(card * m["per_gpu_gib"]["total"] / m["need_gib"], rel=2e-3)   # no memory in use
    assert lo < thr < hi
    assert 0.05 < m["p_oom_model"] < 0.5 and m["verdict"] == "at-risk"
    assert m["interval_share_above_card"] == pytest.approx(m["p_oom_model"], abs=1e-3)   # 3 decimals in the JSON
    assert "memory.per_gpu_gib.total" in m["interval_of"] and "needs" in m["p_oom_of"]
    assert f"{m['need_gib']:.2f} GiB" in m["p_oom_of"]
    text = " ".join(CliRunner().invoke(main, ["check", str(FIX / "cpt_deepspeed.yaml"), "--gpu", "4xL40S",
                                               "--offline"]).output.split())
    assert (f"the interval is of the peak nvidia-smi shows ({m['per_gpu_gib']['total']:.2f} GiB predicted), "
            f"{round(100 * m['interval_share_above_card'])} % of it above {thr:.2f} GiB") in text


def _where(share: float, lo: float, hi: float, card: float, tol: float = 0.002) -> None:
    if card >= hi:
        assert share <= 0.05 + tol, (share, lo, hi, card)
    elif card <= lo:
        assert share >= 0.95 - tol, (share, lo, hi, card)
    else:
        assert 0.05 - tol <= share <= 0.95 + tol, (share, lo, hi, card)


def test_share_above_agrees_with_where_the_card_sits_in_the_interval():
    """Property, over random mixtures, error models and widths: the interval's share above a card is 5 % at its
    upper end and 95 % at its lower end, monotone between (facts/bands.py `share_above`)."""
    import math

    from mixkit import random_mixtures

    from finetune_doctor.analyzers.memory import uncertainty
    from finetune_doctor.analyzers.memory.predictive import mixture_interval
    from finetune_doctor.facts.bands import share_above

    dists = [uncertainty.error_dist(m, s) for m in ("analytic", "simulated") for s in ("dense", "moe", "qlora")]
    for rng, comps in random_mixtures(15, 300):
        dist = rng.choice(dists)
        lo, hi = mixture_interval(comps, dist)
        final = (lo * math.exp(-rng.uniform(-0.3, 0.8)), hi * math.exp(rng.uniform(-0.3, 0.8)))
        if final[0] >= final[1]:
            continue   # widths never cross the ends (analyzers/memory/bands.py `widen`)
        assert share_above(comps, dist, final, final[1]) == pytest.approx(0.05, abs=0.002)
        assert share_above(comps, dist, final, final[0]) == pytest.approx(0.95, abs=0.002)
        cards = sorted(rng.uniform(0.5, 150) for _ in range(5))
        shares = [share_above(comps, dist, final, c) for c in cards]
        # non-increasing in the card, to the rounding of 1 − CDF (2e-16 where the CDF is 1 within a bit)
        assert all(a >= b - 1e-12 for a, b in zip(shares, shares[1:])), shares
        for c, s in zip(cards, shares):
            _where(s, *final, c)


@pytest.mark.parametrize("seed", range(6))
def test_reported_share_agrees_with_the_reported_interval_for_random_runs(tmp_path, seed):
    """Property on whole checks: random LF configs (model, method, cutoff, batch, ZeRO stage) on random cards; the
    reported interval_share_above_card sits where the card sits in the reported interval."""
    import random

    rng = random.Random(seed)
    model = rng.choice(["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Meta-Llama-3-8B-Instruct", "google/gemma-3-4b-pt",
                        "Qwen/Qwen2.5-32B-Instruct"])
    ft = rng.choice(["lora", "full"])
    lines = [f"model_name_or_path: {model}", "stage: sft", "do_train: true", f"finetuning_type: {ft}",
             "dataset: alpaca_en_demo", "template: qwen", f"cutoff_len: {rng.choice([512, 1024, 2048, 4096])}",
             f"per_device_train_batch_size: {rng.choice([1, 2, 4])}", "gradient_accumulation_steps: 2",
             "bf16: true", "output_dir: saves/x"]
    if rng.random() < 0.5:
        lines.append("quantization_bit: 4" if ft == "lora" and rng.random() < 0.5 else "")
    gpu = rng.choice(["4xL40S", "4xL4", "2xA100-80GB", "8xH100-80GB", "4090"])
    cfg = tmp_path / "run.yaml"
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    d = _run("check", str(cfg), "--gpu", gpu, "--no-data")
    m = d["memory"]
    lo, hi = m["interval_gib"]
    card = d["hardware"]["capacity_gib"]
    assert m["interval_share_above_card"] is not None
    # the share is above the budget in shown terms (oom_threshold_gib), where the card sits for the run's peak
    _where(m["interval_share_above_card"], lo, hi, m["oom_threshold_gib"], tol=0.006)   # ends rounded to 0.01 GiB


def test_a_differing_alternative_that_never_decides_says_so():
    """An FSDP launch no input names is weighed but never opens the verdict (facts/assumebase.py UNNAMED): where its
    verdict differs from the report's, the line says why it carries no `!`; a deciding one carries `!` instead."""
    from finetune_doctor.facts.kinds import ACCELERATE_FSDP, BY_HAND
    from finetune_doctor.reporters.sections.assumed import assumption_lines
    from finetune_doctor.types import Assumption

    a = Assumption(name="launcher", value="llamafactory-cli train (torchrun, DDP, expandable segments on)",
                   source="s", alternatives=(BY_HAND, ACCELERATE_FSDP),
                   effect_gib={BY_HAND: 30.1, ACCELERATE_FSDP: 17.4},
                   effect_verdict={BY_HAND: "oom", ACCELERATE_FSDP: "fits"}, resolve_with="--launch FILE")
    (line, moves), = assumption_lines([a], "oom")
    assert not moves and line.startswith("- launcher")
    assert f"{ACCELERATE_FSDP}: 17.4 GiB fits (weighed, not deciding: no input names it)" in line
    assert f"{BY_HAND}: 30.1 GiB oom;" in line
    (same, _), = assumption_lines([a], "fits")
    assert "not deciding" not in same.split(ACCELERATE_FSDP)[1]


def test_installed_release_does_not_reopen_what_the_keys_rule_out(monkeypatch, tmp_path):
    """With llamafactory 0.9.5 installed here (taken as the training machine's, not narrowed by the keys) the
    config's own keys still rule out a release before 0.8.0: no DataParallel alternative for the trial's DDP
    config without its Ray block, while LF 0.7.1's example (keys every catalogued release declares) keeps it."""
    monkeypatch.setattr(lfrelease, "installed_version", lambda: "0.9.5")
    cfg = tmp_path / "kto_lora.yaml"
    cfg.write_text((FIX / "kto_lora.yaml").read_text(encoding="utf-8").split("### ray")[0], encoding="utf-8")
    d = _run("check", str(cfg), "--gpu", "4xL40S")
    assert _asm(d, "lf-version")["value"] == f"0.9.5 ({INSTALLED_HERE_NOTE})"
    assert DATA_PARALLEL not in _asm(d, "launcher")["alternatives"]
    from test_dataparallel import EXAMPLE_071

    old = tmp_path / "llama3_lora_sft.yaml"
    old.write_text(EXAMPLE_071, encoding="utf-8")
    assert DATA_PARALLEL in _asm(_run("check", str(old), "--gpu", "2xRTX4090"), "launcher")["alternatives"]
