"""Run.with_ builds the object dataclasses.replace builds (it copies the fields instead of re-running __init__)."""

from __future__ import annotations

import dataclasses

import pytest

from finetune_doctor.facts.config import assemble_config
from finetune_doctor.run.model import Run
from finetune_doctor.settings import Options
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "examples" / "train_lora" / \
    "qwen3_lora_sft.yaml"


def test_run_has_nothing_that_copying_fields_would_skip():
    assert not hasattr(Run, "__post_init__")
    assert all(f.init for f in dataclasses.fields(Run))


def test_with_equals_replace_on_a_real_run():
    asm = assemble_config(str(EXAMPLE), (), Options.from_cli(command="lint", paths=[str(EXAMPLE)]), "lint")
    run = asm.run
    assert isinstance(run, Run)
    for kw in ({"micro_batch": 7}, {"seq_len": 123, "world_size": 3}, {}):
        got, want = run.with_(**kw), dataclasses.replace(run, **kw)
        assert got == want and type(got) is Run and got is not run
        assert got.facts() == want.facts()
    with pytest.raises(TypeError):
        run.with_(no_such_field=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.with_(micro_batch=2).micro_batch = 3
