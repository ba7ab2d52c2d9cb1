"""The simulate probe's progress and its two depths in parallel.

1. Progress reaches the caller through a callback (probes never touch the terminal); the status line is drawn only
   on a terminal, with untrusted text escaped, and nothing is written anywhere else.
2. The depths simulated side by side (a forked child for k+1 layers) give exactly the books of the sequential run:
   the same peak, the same segments, the same allocation traces.
"""

from __future__ import annotations

import io
import json

import pytest

from finetune_doctor.reporters.sections.probe import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_writes_nothing_when_the_stream_is_not_a_terminal():
    out = io.StringIO()
    with progress(out) as say:
        assert say is None
    assert out.getvalue() == ""


def test_progress_shows_each_message_on_a_terminal_with_control_characters_escaped():
    out = _Tty()
    with progress(out) as say:
        say("simulating 2 of 28 layers")
        say("model \x1b]0;pwned\x07 qwen2")
    text = out.getvalue()
    assert "probe: simulating 2 of 28 layers" in text
    assert "\\x1b]0;pwned\\x07" in text and "\x1b]0;pwned" not in text


from lazyskip import importorskip_when_run  # noqa: E402

torch = None
_needs_torch = importorskip_when_run("torch", "transformers", bind=globals())   # at the first test (lazyskip.py)
from finetune_doctor.probes import forked  # noqa: E402
from finetune_doctor.probes import simulate as sim  # noqa: E402
from finetune_doctor.probes.spec import ProbeSpec  # noqa: E402

TINY = dict(model_type="qwen2", hidden_size=64, num_hidden_layers=7, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=512, tie_word_embeddings=False)


def _spec(**kw) -> ProbeSpec:
    # full fine-tuning, not LoRA: what these tests check (the progress messages, the forked depth's books equal to
    # the sequential ones) does not depend on the adapter, and LoRA costs peft's import and its adapters' extra ops
    # (per simulation 4.5 CPU s with LoRA, 2.5 s full, load ~2.3, 2026-12-07). LoRA's books are the slow lane's
    # (test_probe_simulate.py).
    base = dict(model_type="qwen2", model_config_json=json.dumps(TINY), num_layers=7, seq_len=64, micro_batch=2,
                finetuning_type="full", gradient_checkpointing=True, grad_accum=2)
    base.update(kw)
    return ProbeSpec(**base)


@pytest.fixture(scope="module")
def sequential():
    """One sequential simulation with its trace and its progress messages, shared by the two tests below (each
    simulation costs seconds of FakeTensor dispatch; `progress` only listens, so the books are the same with or
    without it)."""
    heard: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(forked, "worthwhile", lambda: False)   # the same messages either way; keep them in order
        result = sim.simulate(_spec(), trace=True, progress=heard.append)
    return heard, result


def test_simulate_reports_the_build_and_every_micro_batch(sequential):
    heard, _ = sequential
    steps = [m for m in heard if "micro-batch" in m and m.startswith("simulating 2 of 7 layers")]
    assert [m.split(": ")[1].split(" (")[0] for m in steps] == [
        "step 1/2, micro-batch 1/2", "step 1/2, micro-batch 2/2", "step 2/2, micro-batch 1/2",
        "step 2/2, micro-batch 2/2"]
    assert any("building the model" in m for m in heard)


@pytest.mark.skipif(not forked.usable(), reason="fork needs Linux and more than one CPU")
def test_depths_in_a_forked_child_give_the_sequential_books(monkeypatch, sequential):
    monkeypatch.setattr(forked, "worthwhile", lambda: True)     # fork whatever the machine's load
    par = sim.simulate(_spec(), trace=True)
    _, seq = sequential
    assert par.peak_bytes == seq.peak_bytes and par.segment == seq.segment
    assert par.segments == seq.segments and par.by_category == seq.by_category
    # the allocations in order; the frees as a set (a burst of frees — an autograd graph released — comes in an
    # order that varies between two sequential runs as well)
    for a, b in zip(par.traces, seq.traces, strict=True):
        assert [e for e in a.events if e[0] != "f"] == [e for e in b.events if e[0] != "f"]
        assert sorted(e for e in a.events if e[0] == "f") == sorted(e for e in b.events if e[0] == "f")
    assert par.notes == seq.notes


@pytest.mark.skipif(not forked.usable(), reason="fork needs Linux and more than one CPU")
def test_a_failing_child_is_rerun_here_and_raises_its_own_error():
    def boom():
        raise ValueError("child")

    assert forked.start(boom).result() is None           # the child's failure comes back as "run it yourself"
    assert forked.start(lambda: {"a": (1, 2)}).result() == {"a": (1, 2)}
