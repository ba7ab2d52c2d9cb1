"""The calibrated error model (finetune_doctor/analyzers/memory/uncertainty_table.json, fitted by benchmarks/calibrate.py on
the dev half of benchmarks/data/calibration_rows.yaml) and the held-out data it was fitted on.

References: the committed data file and rows file (no test-half row may be in the fit; a committed split never
moves), the t-distribution arithmetic of analyzers/memory/uncertainty.py evaluated on the live table, and two rows of
the dev half whose outcome the source states (a run that ran out, a run far below its card).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

from finetune_doctor.analyzers.memory import uncertainty as u
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import calib_data  # noqa: E402
import parsecache  # noqa: E402

# The calibration rows, read when the first test here runs rather than at import: every pytest-xdist worker collects
# (imports) this file, one runs it, and parsing the rows' YAML costs ~1.8 CPU s (2026-12-07, load 4-5).
ROWS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def _rows():
    """Parse the rows once for the whole module. `calib_data.load_rows()` (and `calibrate.load_rows`, the same
    function imported by name) then hands out deep copies of that parse: four tests here reach it again (directly
    or through `calibrate.run`), and each parse of the five row files with ruamel's pure-Python loader cost 3-4 CPU s
    (2026-12-07, load 3-4; 13 of this file's 17 CPU s). Same files, same rows; a `path` argument still parses."""
    import copy

    import calibrate

    real = calib_data.load_rows
    ROWS[:] = parsecache.calibration_rows(calib_data)   # the same parse, kept between processes (parsecache.py)
    parsed = copy.deepcopy(ROWS)

    def load_rows(path=None):
        return real(path) if path is not None else copy.deepcopy(parsed)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calib_data, "load_rows", load_rows)
        mp.setattr(calibrate, "load_rows", load_rows)
        yield


def test_every_row_names_its_source_and_a_committed_half():
    for r in ROWS:
        assert r["source"].startswith("https://") and r["split"] in ("dev", "test"), r["id"]
        assert r["source_type"] in ("framework-doc", "vendor-doc", "issue-thread"), r["id"]
        assert r.get("measured") or r.get("outcome"), f"{r['id']} has neither a measurement nor an outcome"
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    # whole sources in one half, and the rule reproduces the committed split (it never moves)
    by_source: dict[str, set[str]] = {}
    for r in ROWS:
        by_source.setdefault(r["source"], set()).add(r["split"])
    assert all(len(v) == 1 for v in by_source.values())
    committed = {s: next(iter(v)) for s, v in by_source.items()}
    assert calib_data.assign_split(ROWS) == committed                # a committed split never moves
    # every scored round is dev now (each informed a choice); a row of the newest round without a split is dealt
    # to test, a round-1 row without one by the hash rule
    held = calib_data.HELD_OUT_ROUND
    assert all(r["split"] == "dev" for r in ROWS if int(r.get("round") or 1) < held)
    assert all(r["split"] == "test" for r in ROWS if int(r.get("round") or 1) >= held)
    fresh = [{"source": "https://example.org/new", "source_type": "issue-thread", "round": held}]
    assert calib_data.assign_split(ROWS + fresh)["https://example.org/new"] == "test"
    old = [{"source": "https://example.org/old", "source_type": "issue-thread"}]
    assert calib_data.assign_split(ROWS + old)["https://example.org/old"] in ("dev", "test")
    # a source whose rows disagree is refused
    with pytest.raises(ValueError):
        calib_data.assign_split([{"source": "a", "split": "dev"}, {"source": "a", "split": "test"}])


def test_units_of_the_measurements():
    litgpt = next(r for r in ROWS if r["id"] == "litgpt-hub-llama-2-7b-lora")
    assert calib_data.measured_gib(litgpt) == pytest.approx(19.77e9 / 2**30, abs=1e-9)   # litgpt prints 1e9 bytes
    smi = next(r for r in ROWS if r["id"] == "lf-4772-qlora")
    assert calib_data.measured_gib(smi) == 72.0
    boundary = next(r for r in ROWS if r["id"] == "unsloth-hf-fa2-llama31-8b-24gb")
    assert calib_data.measured_gib(boundary, 23.64) == 23.64 and calib_data.measured_gib(boundary) is None


def test_no_test_row_is_in_the_fit():
    table = u.table()
    assert table["fitted_on"]["rows"].endswith("split dev")
    test_ids = {r["id"] for r in ROWS if r["split"] == "test"}
    dev_measured = {r["id"] for r in ROWS if r["split"] == "dev" and r.get("measured")}
    with open(ROOT / "benchmarks" / "results" / "uncertainty_rows.csv", encoding="utf-8") as fh:
        fitted = [r for r in csv.DictReader(fh) if r["source"] == "calibration-dev"]
    ids = {r["id"] for r in fitted}
    assert ids and not ids & test_ids
    assert ids <= dev_measured and table["fitted_on"]["dev_rows"] == len(fitted)
    # the analytic method of the table is exactly the analytic rows of the rows file
    with open(ROOT / "benchmarks" / "results" / "uncertainty_rows.csv", encoding="utf-8") as fh:
        analytic = [r for r in csv.DictReader(fh) if r["method"] == "analytic"]
    assert table["methods"]["analytic"]["pooled"]["n"] == len(analytic)


# the error classes a run can have (uncertainty.error_class: shape class × weight storage), whatever the table keys by
CLASSES = [u.error_class(shape, q) for shape in ("default", "zero", "long_sequence", "large_vocab_logits", "moe",
                                                 "a class with no rows") for q in (False, True)]


@pytest.mark.parametrize("shape", CLASSES)
def test_probability_and_interval_are_sane_for_every_class(shape):
    budget = 79.15
    # the memory model's own probability (p_oom_model, which the verdict reads); the all-cause p_oom is the same
    # with the unexplained share q: (1 − q)·p_oom_model + q/2 (README 'Two probabilities')
    both = [u.assess(t, budget, "analytic", shape) for t in (5, 20, 40, 60, 75, 79, 85, 120, 400)]
    q = u.unexplained_share()
    assert all(a.p_oom == pytest.approx(u.all_cause(a.p_oom_model, q), abs=1e-9) for a in both)
    ps = [a.p_oom_model for a in both]
    assert all(0.0 <= p <= 1.0 for p in ps)
    assert all(a <= b for a, b in zip(ps, ps[1:])), ps           # more predicted memory, more risk
    assert ps[0] < 0.05 and ps[-1] > 0.95                           # far below / far above the card
    a_small, a_big = u.assess(40, 40.0, "analytic", shape), u.assess(40, 80.0, "analytic", shape)
    assert a_big.p_oom_model < a_small.p_oom_model                   # a bigger card, less risk
    ratios = []
    for total in (1.0, 23.5, 70.0):
        lo, hi = u.assess(total, None, "analytic", shape).interval_gib
        assert 0 < lo <= total <= hi, (shape, lo, total, hi)         # the interval holds the point estimate
        ratios.append(hi / lo)
    assert ratios[0] == pytest.approx(ratios[1]) == pytest.approx(ratios[2])   # an error in shares of the total
    assert ratios[0] > 1.05                                         # never claims to know the peak within 5 %


def test_fewer_rows_give_a_wider_interval():
    methods = u.table()["methods"]
    k0, nu0 = u.prior()
    pooled_var = methods["analytic"]["pooled"]["var"]
    for cls, stats in methods["analytic"]["classes"].items():
        # fewer rows shrink a class further towards the pooled spread: wider only for a class no wider than that
        if stats["n"] < 3 or stats["var"] > pooled_var:
            continue
        known = u.dist_from(methods, "analytic", cls, k0, nu0)
        thin = {**methods, "analytic": {**methods["analytic"],
                                        "classes": {**methods["analytic"]["classes"], cls: {**stats, "n": 2}}}}
        less = u.dist_from(thin, "analytic", cls, k0, nu0)
        width = lambda d: d.quantile(0.95) - d.quantile(0.05)  # noqa: E731
        assert width(less) > width(known), cls
    # a class the table has no rows of is the pooled rows' own predictive, at least as wide as the pooled data
    pooled = methods["analytic"]["pooled"]
    unknown = u.dist_from(methods, "analytic", "a class with no rows", k0, nu0)
    assert unknown.n == 0 and unknown.scale >= math.sqrt(pooled["var"]) - 1e-12


@pytest.mark.parametrize("row_id,low,high", [
    ("litgpt-hub-gemma-7b-lora-oom", 0.5, 1.0),      # the table reports OOM on the A10G
    ("litgpt-hub-llama-3.2-1b-lora", 0.0, 0.05),     # 4.2 GB allocated on a 24 GB card
])
def test_dev_outcomes_through_the_estimate_path(row_id, low, high):
    from calibrate import predict

    row = next(r for r in ROWS if r["id"] == row_id)
    assert row["split"] == "dev"
    pred = predict(row)
    # the bounds are on the memory model's own probability: the all-cause p_oom less the unexplained share q
    q = u.unexplained_share()
    assert "error" not in pred and low <= (pred["p_oom"] - q / 2) / (1 - q) <= high, pred


def test_each_counter_is_compared_with_its_own_prediction():
    from calibrate import compare

    pred = {"total": 20.0, "peak_allocated": 16.0, "runtime": 1.5, "interval": (18.0, 24.0), "capacity": 22.19}
    row = {"measured": {"value": 17.0, "unit": "GiB", "kind": "allocated"}}
    c = compare(row, pred)
    assert c["predicted"] == 16.0 and c["eps"] == pytest.approx(math.log(17 / 16))
    assert c["inside"] is True                                      # 17 within [18, 24] x 16/20 = [14.4, 19.2]
    c = compare({"measured": {"value": 17.0, "unit": "GiB", "kind": "reserved"}}, pred)
    assert c["predicted"] == 18.5 and c["inside"] is True
    c = compare({"measured": {"value": 25.0, "unit": "GiB", "kind": "nvidia-smi"}}, pred)
    assert c["predicted"] == 20.0 and c["inside"] is False and c["rel_err"] == pytest.approx(-0.2)
    c = compare({"measured": {"value": 24, "unit": "GB-class", "kind": "boundary"}}, pred)
    assert c["measured"] == 22.19 and c["predicted"] == 20.0
    assert compare({"measured": None}, pred) is None


def test_npu_smi_reading_carries_the_firmware_share_torch_npu_does_not_see():
    from calibrate import compare, npu_smi_offset_gib

    # catalogue: Ascend-910B-64GB, npu-smi total 65536 MiB, torch_npu capacity 60.97 GiB
    assert npu_smi_offset_gib("8xAscend-910B-64GB") == pytest.approx(64.0 - 60.97)
    assert npu_smi_offset_gib("910B3") == pytest.approx(3.03)
    assert npu_smi_offset_gib("8xA100-80GB") == 0.0 and npu_smi_offset_gib(None) == 0.0
    pred = {"total": 20.0, "peak_allocated": 16.0, "runtime": 1.5, "interval": None, "capacity": 60.97}
    smi = {"gpu": "4xAscend-910B-64GB", "measured": {"value": 25.0, "unit": "GiB", "kind": "nvidia-smi"}}
    assert compare(smi, pred)["predicted"] == pytest.approx(23.03)
    # only the npu-smi reading: torch_npu's own counters and an unknown counter are compared as before
    for kind, p in (("reserved", 18.5), ("allocated", 16.0), ("unknown", 20.0)):
        assert compare({**smi, "measured": {**smi["measured"], "kind": kind}}, pred)["predicted"] == p
    assert compare({**smi, "gpu": "4xA100-80GB"}, pred)["predicted"] == 20.0


def test_classes_follow_the_tables_class_by(monkeypatch):
    rows = [{"method": "analytic", "shape": k, "eps": e} for k, e in
            (("quantized", 0.3), ("quantized", 0.35), ("quantized", 0.25), ("unquantized", 0.0), ("unquantized", 0.05),
             ("unquantized", -0.05))]
    keyed = {"prior": {"kappa0": 1.0, "nu0": 1}, "class_by": {"analytic": ["weights"]}, "methods": u.derive(rows)}
    monkeypatch.setattr(u, "table", lambda: keyed)
    u.error_dist.cache_clear()
    try:
        q = u.error_dist("analytic", u.error_class("default", True))
        f = u.error_dist("analytic", u.error_class("zero", False))
        assert (q.shape, q.n, f.shape, f.n) == ("quantized", 3, "unquantized", 3)
        assert q.mu > 0.2 > 0.1 > f.mu                       # a quantized run's bias is its own class's
        # a table without class_by keys by the shape class alone: the weight part is dropped
        monkeypatch.setattr(u, "table", lambda: {**keyed, "class_by": None})
        assert u.class_key("analytic", "zero/quantized") == "zero"
    finally:
        u.error_dist.cache_clear()


def test_p_oom_spread_and_the_interval(monkeypatch):
    d = u.ErrorDist("analytic", "default", 0.0, 0.2, 5, 10)
    assert u.widened(d, 0.0, 1.0) is d
    assert u.widened(d, 0.15, 1.0).scale == pytest.approx(0.25)          # √(0.2² + 0.15²)
    assert u.widened(d, 0.0, 0.5).scale == pytest.approx(0.1)
    base = {"prior": {"kappa0": 1.0, "nu0": 1}, "methods": {"analytic": {
        "pooled": {"n": 10, "mean": 0.0, "var": 0.04}, "classes": {"default": {"n": 10, "mean": 0.0, "var": 0.04}}}}}
    sharp = {**base, "p_oom_scale_factor": 0.5, "p_oom_extra_scale": 0.0}
    out = {}
    for name, t in (("base", base), ("sharp", sharp)):
        monkeypatch.setattr(u, "table", lambda t=t: t)
        u.error_dist.cache_clear()
        out[name] = (u.assess(18.0, 20.0, "analytic", "default"), u.assess(22.0, 20.0, "analytic", "default"))
    u.error_dist.cache_clear()
    # λ < 1 sharpens p_oom on both sides of the budget and leaves the 90 % interval as it is
    assert out["sharp"][0].p_oom < out["base"][0].p_oom and out["sharp"][1].p_oom > out["base"][1].p_oom
    assert out["sharp"][0].interval_gib == pytest.approx(out["base"][0].interval_gib)
    assert out["sharp"][0].safe_total_gib > out["base"][0].safe_total_gib


def test_loso_scores_a_measurement_as_the_doctor_reports_it():
    # benchmarks/calib_loso.py "Scored as reported": a measurement is scored by the mixture over the row's open
    # assumptions; with one component that is the class's own t, with two the weighted sum of both shifted t's
    import calib_loso

    d = u.ErrorDist("analytic", "default", 0.1, 0.2, 5, 10)
    one = calib_loso.mixture_logpdf(12.0, [(1.0, 10.0, None)], d)
    assert one == pytest.approx(u.t_logpdf((math.log(1.2) - 0.1) / 0.2, 5) - math.log(0.2))
    two = calib_loso.mixture_logpdf(12.0, [(0.5, 10.0, None), (0.5, 24.0, None)], d)
    other = u.t_logpdf((math.log(0.5) - 0.1) / 0.2, 5) - math.log(0.2)
    assert two == pytest.approx(math.log(0.5 * math.exp(one) + 0.5 * math.exp(other)))
    # the counter a source measured (allocated: 6 of a predicted 8 GiB) on the total's scale (10 GiB predicted);
    # the reported total's counter, not the typical point's (5 GiB) of a row whose sample lengths are unsized
    s = {"cmp": {"measured": 6.0, "predicted": 5.0, "predicted_full": 8.0}, "pred": {"total": 10.0}}
    assert calib_loso.measured_on_total(s) == pytest.approx(7.5)


def test_litgpt_rows_are_sized_as_the_bf16_copy_litgpt_trains():
    from calibrate import predict

    row = next(r for r in ROWS if r["id"] == "litgpt-hub-gemma-2b-lora")
    cfg = calib_data.model_config_for(row)
    assert cfg["torch_dtype"] == "bfloat16" and cfg["vocab_size"] == 256000
    assert calib_data.model_config_for(next(r for r in ROWS if r["framework"] == "LLaMA-Factory")) is None
    as_litgpt = predict(row)
    # the same row read as an fp32 checkpoint (what LF loads when config.json says float32): 2.51 B params at 2
    # bytes instead of 4 is 4.7 GiB less, and without autocast (pure_bf16 alone) the activations follow the
    # weights' dtype, so they halve too: more than the weights' 4.7 GiB in all
    fp32 = dict(cfg, torch_dtype="float32")
    import calibrate
    orig = calibrate.model_config_for
    try:
        calibrate.model_config_for = lambda r: fp32 if r is row else orig(r)
        as_fp32 = predict(row)
    finally:
        calibrate.model_config_for = orig
    assert as_fp32["total"] - as_litgpt["total"] > 4.68


def test_dev_only_never_assembles_a_test_row(monkeypatch):
    import calibrate

    seen = []
    monkeypatch.setattr(calibrate, "predict", lambda r: seen.append(r["split"]) or {"error": "not assembled"})
    monkeypatch.setattr(calibrate.calib_loso, "loso", lambda scored, kept: [
        {"class_by": ["shape"], "factor": 1.0, "tau": 0.0, "max_dof": None, "brier": 0.1, "coverage": 0.9,
         "log_score": -1.0}])
    before = calibrate.TABLE.read_bytes(), calibrate.UNC_ROWS.read_bytes()
    try:
        calibrate.run(calibrate.argparse.Namespace(dev_only=True, no_write=False, with_legacy=False))
    finally:
        calibrate.uninstall()
    assert seen and set(seen) == {"dev"}
    assert (calibrate.TABLE.read_bytes(), calibrate.UNC_ROWS.read_bytes()) == before   # dev-only writes nothing


def test_the_fit_runs_on_a_copy_and_never_writes_the_package_table(monkeypatch, tmp_path):
    # calibrate.py used to write each candidate table over the package's while it ran, so a check or a test of the
    # same tree read a half-fitted table; now the doctor is pointed at a private copy and only --write-table ships
    import calibrate

    read_from = []

    def predict(r):
        read_from.append(u.TABLE)   # the table file the doctor would read while assembling this row
        return {"error": "not assembled"}

    monkeypatch.setattr(calibrate, "predict", predict)
    monkeypatch.setattr(calibrate.calib_loso, "loso", lambda scored, kept: [
        {"class_by": ["shape"], "factor": 1.0, "tau": 0.0, "max_dof": None, "brier": 0.1, "coverage": 0.9,
         "log_score": -1.0, "log_meas": -1.0, "log_outc": 0.0, "brier_se": 0.01, "n_outcomes": 0, "n_meas": 0,
         "sure_oom_but_trained": [], "sure_fits_but_oom": []}])
    package = u.TABLE
    before = calibrate.TABLE.read_bytes(), calibrate.UNC_ROWS.read_bytes()
    page = tmp_path / "dev.md"
    try:
        assert calibrate.main(["--dev-only", "--page", str(page)]) == 0
    finally:
        calibrate.uninstall()
    assert read_from and package not in read_from and calibrate.TABLE not in read_from
    assert u.TABLE == package   # pointed back after the run
    assert (calibrate.TABLE.read_bytes(), calibrate.UNC_ROWS.read_bytes()) == before
    assert page.read_text(encoding="utf-8").startswith("# Calibration")
    assert json.loads(calibrate.work_table().read_text(encoding="utf-8"))["fitted_on"]["dev_rows"] == 0
    with pytest.raises(SystemExit):
        calibrate.main(["--dev-only", "--write-table"])


def test_write_table_ships_the_fitted_copy(monkeypatch, tmp_path):
    # only --write-table copies the working table and its rows file over the package's (here stand-ins in tmp)
    import calibrate

    monkeypatch.setattr(calibrate, "predict", lambda r: {"error": "not assembled"})
    monkeypatch.setattr(calibrate.calib_loso, "loso", lambda scored, kept: [
        {"class_by": ["shape"], "factor": 1.0, "tau": 0.0, "max_dof": None, "brier": 0.1, "coverage": 0.9,
         "log_score": -1.0, "log_meas": -1.0, "log_outc": 0.0, "brier_se": 0.01, "n_outcomes": 0, "n_meas": 0,
         "sure_oom_but_trained": [], "sure_fits_but_oom": [], "contamination": [0.2, 0.75], "unexplained": 0.025}])
    rows_before = calibrate.UNC_ROWS.read_bytes()
    for name in ("TABLE", "UNC_ROWS", "DOC", "ROWS_CSV"):
        monkeypatch.setattr(calibrate, name, tmp_path / name)
    (tmp_path / "UNC_ROWS").write_bytes(rows_before)   # kept_rows() reads the simulated/measured rows from it
    monkeypatch.setattr(calibrate, "ROOT", tmp_path)
    try:
        assert calibrate.main(["--write-table"]) == 0
    finally:
        calibrate.uninstall()
    shipped = json.loads((tmp_path / "TABLE").read_text(encoding="utf-8"))
    assert shipped == json.loads(calibrate.work_table().read_text(encoding="utf-8"))
    assert shipped["contamination"] == {"weight": 0.2, "scale": 0.75} and shipped["p_oom_unexplained"] == 0.025
    assert (tmp_path / "UNC_ROWS").read_bytes() == calibrate.work_rows().read_bytes()
    assert (tmp_path / "DOC").read_text(encoding="utf-8").startswith("# Calibration")


def test_litgpt_rows_carry_an_untied_output_layer():
    # litgpt never ties lm_head to the embedding (model.py:25 at 00af8b0d): gemma-2b's 256000 x 2048 output layer
    # is one more bf16 weight than the tied HF model, 0.98 GiB on the allocated counter
    from calibrate import predict

    row = next(r for r in ROWS if r["id"] == "litgpt-hub-gemma-2b-lora")
    cfg = calib_data.model_config_for(row)
    assert cfg["tie_word_embeddings"] is False
    import calibrate
    orig = calibrate.model_config_for
    try:
        calibrate.model_config_for = lambda r: dict(cfg, tie_word_embeddings=True) if r is row else orig(r)
        tied = predict(row)
    finally:
        calibrate.model_config_for = orig
    untied = predict(row)
    assert untied["peak_allocated"] - tied["peak_allocated"] == pytest.approx(256000 * 2048 * 2 / 2**30, rel=0.02)


def test_dated_pins_follow_the_release_boundaries():
    # a Trainer framework's row dated before a boundary release runs a version below it; after it, nothing is
    # pinned; frameworks without the Trainer are never dated; the row's own stack and the framework's pins win
    row = {"framework": "LLaMA-Factory", "date": "2024-07-11"}
    assert calib_data.dated_pins(row) == {"torch": "2.7.1", "transformers": "4.48.3", "bitsandbytes": "0.43.1"}
    assert calib_data.dated_pins({**row, "date": "2024-10-01"}) == {"torch": "2.7.1", "transformers": "4.48.3"}
    assert calib_data.dated_pins({**row, "date": "2025-08-06"}) == {}
    # before transformers 4.36.0 (SDPA by default, run/attention.py auto_kernel) the older pin wins; a framework
    # whose name says it runs the transformers Trainer is dated too (FastChat, Firefly, alpaca-lora, Qwen, axolotl)
    assert calib_data.dated_pins({**row, "date": "2023-12-10"})["transformers"] == "4.35.2"
    assert calib_data.dated_pins({**row, "date": "2023-12-11"})["transformers"] == "4.48.3"
    fastchat = {"framework": "FastChat train_lora.py (transformers Trainer + PEFT)", "date": "2023-10-13"}
    assert calib_data.dated_pins(fastchat) == {"torch": "2.7.1", "transformers": "4.35.2", "bitsandbytes": "0.43.1"}
    assert calib_data.dated_pins({"framework": "litgpt", "date": "2024-09-27"}) == {}
    assert calib_data.pins_for({"framework": "litgpt", "date": "2024-09-27"}) == {"bitsandbytes": "0.42.0"}
    own = {**row, "stack": {"torch": "2.5.1"}}
    assert calib_data.pins_for(own)["torch"] == "2.5.1" and calib_data.pins_for(own)["bitsandbytes"] == "0.43.1"
    # a run through unsloth cannot use a release newer than its date (UNSLOTH_BOUNDS: the RoPE tables change in
    # 2024.8, committed 2024-07-18; the loss at 2024.11.8, released 2024-11-21)
    uns = {"framework": "unsloth", "date": "2024-05-05", "config": {"use_unsloth": True}}
    assert calib_data.dated_pins(uns) == {"unsloth": "2024.7"}
    assert calib_data.dated_pins({**uns, "date": "2024-10-01"}) == {"unsloth": "2024.11.7"}
    assert calib_data.dated_pins({**uns, "date": "2024-11-21"}) == {}
    assert calib_data.dated_pins({**uns, "config": {}}) == {}


def test_peft_sft_example_loads_unquantized_models_in_float32():
    # examples/sft/utils.py:134 (5d602fdbf): float32 unless a floating 4-bit storage dtype is given
    lora = next(r for r in ROWS if r["id"] == "peft-fsdp-lora-70b")
    assert calib_data.model_config_for(lora)["torch_dtype"] == "float32"
    qlora = next(r for r in ROWS if r["id"] == "peft-fsdp-qlora-70b-offload")
    assert calib_data.model_config_for(qlora) is None


def test_samples_field_and_the_mixture_a_row_is_scored_with():
    import calibrate
    from finetune_doctor.types import Assumption, Hardware

    # default by source type: a documentation table runs at its stated length, a thread's data is unknown
    assert calib_data.samples_fill({"source_type": "framework-doc"})
    assert not calib_data.samples_fill({"source_type": "issue-thread"})
    assert not calib_data.samples_fill({"source_type": "framework-doc", "samples": "dataset"})
    hw = Hardware(gpu="A100-80GB", num_gpus=1, capacity_gib=79.15, bf16=True, source="flag")
    sl = Assumption(name="sample-lengths", value="every sample fills cutoff_len", source="test",
                    alternatives=("samples of 512 tokens",), effect_gib={"samples of 512 tokens": 20.0},
                    effect_verdict={"samples of 512 tokens": "fits"}, moves_verdict=True)
    pred = {"mix": (70.0, hw, [sl], None), "cls": u.error_class("default", False), "method": "analytic",
            "p_oom": 0.4, "interval": (50.0, 90.0)}
    half = {"sample-lengths": 0.5, "default": 1.0}
    # scored as the doctor reports since session 14 (facts/bands.py `final_interval`, `one_distribution`): the
    # interval with the class's widths and its upper end at cutoff_len, p_oom read on that one distribution
    from finetune_doctor.analyzers.memory import predictive
    from finetune_doctor.facts.bands import final_interval

    d = u.core_dist("analytic", pred["cls"])
    q = u.unexplained_share("analytic")
    comps = [(0.5, 70.0, 79.15), (0.5, 20.0, 79.15)]
    iv = final_interval(comps, [(1.0, 70.0, 79.15)], d, None)
    dataset = calibrate.reweigh({"source_type": "issue-thread"}, pred, half)
    assert dataset["interval"] == pytest.approx(iv, rel=1e-9)
    assert dataset["p_oom"] == pytest.approx(u.all_cause(predictive.build(comps, d, iv).share_above(79.15), q))
    # samples that reach cutoff_len close the assumption, as the data on the training machine would
    fill = calibrate.reweigh({"source_type": "framework-doc"}, pred, half)
    one = [(1.0, 70.0, 79.15)]
    assert fill["p_oom"] == pytest.approx(
        u.all_cause(predictive.build(one, d, final_interval(one, None, d, None)).share_above(79.15), q))
    # unknown lengths widen the interval downward only: the upper end is the full-length case's (bands.py)
    assert dataset["interval"][1] == pytest.approx(fill["interval"][1], rel=1e-9)
    assert fill["interval"][0] > dataset["interval"][0]
    assert calibrate.reweigh({}, {"error": "refused"}, half) == {"error": "refused"}


def test_an_offload_block_on_device_none_is_not_offload():
    """ms-swift's stock ZeRO-3 file writes ``offload_optimizer``/``offload_param`` with ``device: none``; such a run
    keeps everything on the GPU and is grouped with the ZeRO-3 runs, not the offload ones (issue 23's by-engine
    figures)."""
    from calibrate import engine_of

    none = {"device": "none"}
    row = {"deepspeed": {"zero_optimization": {"stage": 3, "offload_optimizer": none, "offload_param": none}}}
    assert engine_of(row) == "ZeRO-3"
    row["deepspeed"]["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    assert engine_of(row) == "ZeRO-3+offload"
    row = {"deepspeed": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}}}
    assert engine_of(row) == "ZeRO-2+offload"


def test_a_short_dataset_bounds_the_cutoff_the_doctor_is_given():
    """ms-swift's examples train swift/self-cognition (short identity Q&A) at max_length = the model's 32768: the
    doctor is given the dataset's bound, never a longer cutoff than the row's, and nothing for a dataset without one."""
    from calib_data import DATASET_LONGEST, config_for, load_rows

    row = {"config": {"cutoff_len": 32768, "finetuning_type": "lora"}, "datasets": ["swift/self-cognition#1000"]}
    assert config_for(row)["cutoff_len"] == DATASET_LONGEST["swift/self-cognition"][0] == 512
    assert config_for({**row, "config": {"cutoff_len": 256}})["cutoff_len"] == 256
    mixed = {**row, "datasets": ["swift/self-cognition#500", "AI-ModelScope/alpaca-gpt4-data-en#500"]}
    assert config_for(mixed)["cutoff_len"] == 32768
    assert config_for({**row, "datasets": None})["cutoff_len"] == 32768
    named = {r["id"] for r in load_rows() if r.get("datasets")}
    assert "r3m-swift-lorap-qwen2-7b-lora" in named and "swift-ddp-lora-qwen25-7b" in named


def test_a_dataset_length_counted_with_one_tokenizer_bounds_only_models_that_use_it():
    """ms-swift's dataset table counts blossom-math-v2 at most 563 tokens with Qwen's tokenizer: a Qwen row trained
    on it alone is given that cutoff, a Llama row (another tokenizer) keeps its own, and the 1.x/2.x name is the
    same set."""
    from calib_data import DATASET_LONGEST, config_for, load_rows

    row = {"model": "Qwen/Qwen2-7B-Instruct", "config": {"cutoff_len": 32768, "finetuning_type": "lora"},
           "datasets": ["AI-ModelScope/blossom-math-v2"]}
    assert config_for(row)["cutoff_len"] == DATASET_LONGEST["AI-ModelScope/blossom-math-v2"][0] == 563
    assert config_for({**row, "datasets": ["blossom-math-zh"]})["cutoff_len"] == 563
    assert config_for({**row, "model": "meta-llama/Meta-Llama-3-8B-Instruct"})["cutoff_len"] == 32768
    assert config_for({**row, "config": {"cutoff_len": 512}})["cutoff_len"] == 512
    named = {r["id"]: r for r in load_rows() if int(r.get("round") or 1) <= 3 and r.get("datasets")}
    assert config_for(named["swift-npu-qwen2-7b-lora-4-ddp"])["cutoff_len"] == 563
    assert config_for(named["r3m-swiftnpu-qwen15-7b-lora-z3-4x910b3"])["cutoff_len"] == 563


def test_the_stock_swift_mix_is_bounded_by_its_longest_set_and_packing_by_nothing():
    """ms-swift's stock trio (alpaca-gpt4 zh/en, self-cognition) is bounded by its longest member (856, the larger
    of ms-swift's two counts for the Chinese set); a packed run fills its cutoff whatever the samples are."""
    from calib_data import config_for

    row = {"model": "Qwen/Qwen2.5-7B-Instruct", "config": {"cutoff_len": 2048, "finetuning_type": "lora"},
           "datasets": ["AI-ModelScope/alpaca-gpt4-data-zh#500", "AI-ModelScope/alpaca-gpt4-data-en#500",
                        "swift/self-cognition#500"]}
    assert config_for(row)["cutoff_len"] == 856
    assert config_for({**row, "config": {**row["config"], "packing": True}})["cutoff_len"] == 2048
    assert config_for({**row, "model": "openai/gpt-oss-20b"})["cutoff_len"] == 2048


def test_stanford_alpaca_and_alignment_handbook_rows_run_the_2023_trainer():
    # both run transformers' Trainer (Stanford Alpaca train.py; TRL's DPOTrainer in alignment-handbook), dated 2023:
    # below every DATE_BOUNDS release; Stanford Alpaca's LLaMA computes attention eagerly (no SDPA class before
    # transformers 4.36.0), LLaMA-Factory rows keep their own flash_attn
    alpaca = next(r for r in ROWS if r["id"] == "r4r-alpaca278-tf431dev-b4")
    assert calib_data.config_for(alpaca)["flash_attn"] == "disabled"
    assert calib_data.pins_for(alpaca) == {"torch": "2.7.1", "transformers": "4.31.0.dev0", "bitsandbytes": "0.43.1"}
    ahb = next(r for r in ROWS if r["id"] == "r4r-ahb22")   # 2023-11: before transformers 4.36.0 (2023-12-11)
    # alignment-handbook's row runs DeepSpeed: a 2023 run predates DeepSpeed 0.19.3 (calib_data.DEEPSPEED_BOUND)
    assert calib_data.dated_pins(ahb) == {"torch": "2.7.1", "transformers": "4.35.2", "bitsandbytes": "0.43.1",
                                          "deepspeed": "0.19.2"}
    lf = next(r for r in ROWS if r["framework"] == "LLaMA-Factory" and "flash_attn" not in r["config"])
    assert "flash_attn" not in calib_data.config_for(lf)


def test_torchtune_fsdp_rows_keep_their_bf16_flat_parameters(tmp_path):
    """torchtune wraps its bf16 model in torch FSDP with ``mixed_precision=None`` (recipes/full_finetune_distributed.py:249
    at f6f6855da): the accelerate config the row is given says ``no``, and 7B full fine-tuning on 4 ranks holds
    6,738,415,616 params x 2 bytes / 4 = 3.14 GiB of weights and as much gradient per GPU, half of what the
    upcast flat parameters of accelerate's bf16 mixed precision hold."""
    import calibrate
    from memory_dev_terms import score_with_terms

    row = next(r for r in ROWS if r["id"] == "r7m-tt-a-llama2-7b-full-fsdp-4x4090")
    _, acc = calibrate.write_row(row, tmp_path)
    assert "mixed_precision: no" in acc.read_text(encoding="utf-8")
    hand = 6_738_415_616 * 2 / 4 / 2**30
    tt = score_with_terms(row)
    assert tt["terms"]["weights"] == pytest.approx(hand, rel=0.02)
    assert tt["terms"]["gradients"] == pytest.approx(hand, rel=0.02)
    assert tt["terms"]["optimizer"] >= 2 * hand * 0.98           # two bf16 AdamW states, no fp32 master copy
    upcast = score_with_terms({**row, "framework": "accelerate FSDP (bf16 mixed precision)"})
    assert upcast["terms"]["weights"] == pytest.approx(2 * hand, rel=0.02)
    assert tt["predicted_gib"] < 24 * 0.93 < upcast["predicted_gib"]   # the 4090 runs that trained fit only without the upcast


def test_gsm8k_bounds_a_qwen_rows_cutoff_at_msswifts_count():
    """ms-swift's dataset table: modelscope/gsm8k main, max=241 tokens with Qwen2.5's tokenizer and template."""
    from calib_data import DATASET_LONGEST, config_for

    row = next(r for r in ROWS if r["id"] == "r7m-swift3-cce-off-qwen25-05b-lora-b64-a10")
    assert row["datasets"] == ["gsm8k"] and row["config"]["cutoff_len"] == 1024
    assert config_for(row)["cutoff_len"] == DATASET_LONGEST["gsm8k"][0] == 241
    assert config_for({**row, "model": "meta-llama/Llama-2-7b-hf"})["cutoff_len"] == 1024


def test_the_refit_fits_the_widths_on_the_one_distributions_core(monkeypatch):
    """benchmarks/calibrate.py `interval_widths` with the core calibrate.py ships (ONE_CORE, "outcome": p_oom's
    spread, uncertainty.py `core_dist`): the residuals are taken against intervals of the widened t,
    √((λ·s)² + τ²) (uncertainty.py `widened`), so the widths fit the interval the doctor then reports, floored at
    0; with the measurements' core the rows' distribution and the signed widths are left as they are."""
    import calib_classes
    import calib_widths
    import calibrate

    d = u.ErrorDist("analytic", "default", 0.02, 0.2, 8, 30)
    monkeypatch.setattr(calib_classes, "loso_rows", lambda dev, v: [{"dist": d, "id": "r"}])
    seen: list = []
    monkeypatch.setattr(calib_widths, "residuals", lambda rows: seen.extend(rows))
    floors: list = []
    monkeypatch.setattr(calib_widths, "derive_widths",
                        lambda rows, floor=None: floors.append(floor) or {"pooled": {"below": 0.0, "above": 0.0}})
    chosen = {"class_by": ["shape"], "robust": True, "contamination": [0.3, 0.5], "factor": 0.5, "tau": 0.1,
              "unexplained": 0.2}
    calibrate.interval_widths([], {**chosen, "core": calibrate.ONE_CORE})
    assert seen[0]["dist"].scale == pytest.approx(math.hypot(0.5 * 0.2, 0.1), rel=1e-12)   # 0.1414
    assert floors == [0.0]   # widths that only widen (calibrate.ONE_WIDTH_FLOOR)
    seen.clear()
    calibrate.interval_widths([], chosen)
    assert seen[0]["dist"].scale == pytest.approx(0.2) and floors == [0.0, None]


def test_a_row_on_unsized_data_is_compared_at_the_typical_point_not_the_worst_case():
    from calibrate import compare

    pred = {"total": 40.0, "peak_allocated": 32.0, "runtime": 1.0, "interval": (20.0, 50.0), "capacity": 79.0,
            "point": {"total": 20.0, "peak_allocated": 15.0, "runtime": 1.0, "tokens": 2048}}
    c = compare({"measured": {"value": 16.0, "unit": "GiB", "kind": "allocated"}}, pred)
    # the error is the point's (15 against 16); eps and the interval stay the reported total's (32 on this counter)
    assert c["predicted"] == 15.0 and c["rel_err"] == pytest.approx(15 / 16 - 1) and c["point_tokens"] == 2048
    assert c["predicted_full"] == 32.0 and c["eps"] == pytest.approx(math.log(16 / 32))
    assert c["inside"] is True                                      # 16 within [20, 50] x 32/40 = [16, 40]
    c = compare({"measured": {"value": 18.0, "unit": "GiB", "kind": "reserved"}}, pred)
    assert c["predicted"] == 19.0 and c["predicted_full"] == 39.0


def test_predict_takes_the_typical_point_only_where_the_row_does_not_size_its_samples():
    from calibrate import predict

    vl = next(r for r in ROWS if r["id"] == "r11m-selfllm-qwen25vl-3b-lora-r128-1xh20")   # cutoff 8192, dataset
    p = predict(vl)
    assert p["point"]["tokens"] == 2048 and p["point"]["total"] < 0.5 * p["total"]
    filled = predict({**vl, "samples": "fill"})                    # a benchmark at its cutoff: the total is the point
    assert filled["point"]["tokens"] is None and filled["point"]["total"] == filled["total"] == p["total"]
