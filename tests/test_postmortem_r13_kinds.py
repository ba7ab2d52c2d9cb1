"""Rounds 3-9's dev misses by kind (issue #25, session 13, wt/pmfix13b): other wordings and other pastes of each
kind, modelled on how users paste them, never the rounds' own texts. A finding read from words alone is at most a
warning.

- a traceback cut inside a trainer frame that does one set-up job (analyzers/postmortem/framecause.py): the
  Trainer's FSDP + PEFT set-up (transformers trainer.py ``_fsdp_qlora_plugin_updates``, accelerate#2761),
  accelerate's ``prepare``, a resume's ``_load_from_checkpoint``, ``Auto*.from_pretrained``: the likely kinds are
  named and the lines after the cut asked for; a frame that does many things names none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options


def first(tmp_path: Path, text: str):
    (tmp_path / "train.log").write_text(text + "\n", encoding="utf-8")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert r.findings, "no finding"
    return r.findings[0]


# -- a traceback cut inside a trainer frame -------------------------------------------------------------------------

_HEAD = """Traceback (most recent call last):
  File "/workspace/sft_qlora.py", line 142, in <module>
    trainer.train()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1885, in train
    return inner_training_loop(
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2033, in _inner_training_loop
"""

CUT_FSDP = {
    "cut mid-name": _HEAD + "    self._fsdp_qlo",
    "the whole call": _HEAD + "    self._fsdp_qlora_plugin_updates()",
    "rank-prefixed, inside the function": "\n".join(
        "[rank1]: " + ln for ln in (_HEAD + """    self._fsdp_qlora_plugin_updates()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 4778, in _fsdp_qlora_plugin_updates
    fsdp_plugin.set_mixed_precision(""").splitlines()),
}


@pytest.mark.parametrize("case", sorted(CUT_FSDP))
def test_a_cut_in_the_fsdp_peft_set_up_names_the_releases_out_of_step(tmp_path, case):
    f = first(tmp_path, CUT_FSDP[case])
    assert f.name == "run-crashed"
    assert "the paste is cut inside the Trainer's FSDP set-up for a PEFT model" in f.message
    assert "accelerate" in f.message and "pip show transformers accelerate peft bitsandbytes" in f.message
    assert "give the lines after the cut" in f.message


def test_a_cut_in_accelerates_prepare_names_the_wrap(tmp_path):
    f = first(tmp_path, _HEAD + """    self.model = self.accelerator.prepare(self.model)
  File "/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py", line 1292, in prepare
    result = tuple(""")
    assert f.name == "run-crashed"
    assert "the paste is cut inside accelerate's wrap of the model" in f.message


def test_a_cut_in_a_resume_names_the_checkpoint_kinds(tmp_path):
    f = first(tmp_path, _HEAD + """    self._load_from_checkpoint(resume_from_checkpoint)
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2592, in _load_from_checkpoint
    state_dict = torch.load(""")
    assert f.name == "run-crashed"
    assert "a resume from a checkpoint" in f.message and "weights_only" in f.message


def test_a_cut_in_a_processor_load_names_an_unknown_model_type(tmp_path):
    f = first(tmp_path, """Traceback (most recent call last):
  File "/home/u/finetune.py", line 31, in <module>
    tokenizer = AutoTokenizer.from_pretrained(args.model_path, trust_remote_code=True)""")
    assert f.name == "run-crashed"
    assert "a model type the installed transformers does not know" in f.message


def test_a_cut_in_the_training_step_names_no_kind(tmp_path):
    """The training step does everything (forward, loss, backward): no kind is named from it."""
    f = first(tmp_path, _HEAD + "    tr_loss_step = self.training_step(model, inputs)")
    assert f.name == "run-crashed"
    assert "the paste is cut inside" not in f.message
