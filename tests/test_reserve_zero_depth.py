"""probes/zerotrace.py `full_depth`: DeepSpeed's events put into the replica's trace synthesized at full depth from
the probe's k and k+1 traces replay as they do in a trace simulated at full depth (benchmarks/derive_zero_reserve.py
relies on it; reserve_derivation.md records the same check on Qwen2.5-0.5B)."""

from __future__ import annotations

import json

import pytest

from lazyskip import importorskip_when_run  # noqa: E402

_needs_torch = importorskip_when_run("torch", "transformers")   # at the first test (lazyskip.py)

_needs_peft = importorskip_when_run("peft")

from finetune_doctor.probes.allocconf import parse_alloc_conf  # noqa: E402
from finetune_doctor.probes.replay import replay  # noqa: E402
from finetune_doctor.probes.simulate import run_depth  # noqa: E402
from finetune_doctor.probes.spec import ProbeSpec  # noqa: E402
from finetune_doctor.probes.zerotrace import full_depth, layout_from_arch, zero_trace  # noqa: E402
from finetune_doctor.readers.model.modelcfg import load_arch  # noqa: E402

SMALL = dict(model_type="qwen2", hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
             intermediate_size=1536, vocab_size=32000, tie_word_embeddings=False, torch_dtype="bfloat16")


@pytest.mark.slow
def test_full_depth_zero_trace_replays_as_the_simulated_full_depth(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL))
    arch = load_arch(str(tmp_path))[0]
    s = ProbeSpec(model_type="qwen2", model_config_json=json.dumps(SMALL), num_layers=6, finetuning_type="lora",
                  micro_batch=1, seq_len=1024, gradient_checkpointing=True, deepspeed=True, zero_stage=2,
                  world_size=2, autocast=None, trainable_dtype="bfloat16")
    a, b, full = (run_depth(s, n, 2, trace=True)["trace"] for n in (2, 3, 6))
    made = full_depth(a, b, 6)
    assert sum(1 for e in made.events if e[0] == "m" and e[1][2:3] == ("fwd",) and len(e[1]) > 4
               and e[1][3] in ("b", "t")) == 2 * 6          # a marker per layer in each step's forward
    for stage, zero in ((2, {"reduce_bucket_size": 2e6}), (3, {"sub_group_size": 4e6})):
        for trained in (False, True):
            lay = layout_from_arch(arch, stage, 2, 6, trained, adapter=0 if trained else 100_000, zero=zero)
            for conf in (None, parse_alloc_conf("expandable_segments:True")):
                r_made, r_full = replay(zero_trace(made, lay), conf), replay(zero_trace(full, lay), conf)
                assert r_made.peak_allocated == pytest.approx(r_full.peak_allocated, rel=0.01)
                assert r_made.peak_reserved == pytest.approx(r_full.peak_reserved, rel=0.02)
