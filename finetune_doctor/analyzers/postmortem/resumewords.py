"""An error said of a resume, with no error text read (issue #25, words).

HF's Trainer resumes from the folder ``resume_from_checkpoint`` names: the weights and ``trainer_state.json`` by
``Trainer._load_from_checkpoint`` ("Can't find a valid checkpoint at P" when none of the weight files is there), and
under DeepSpeed the engine's partitioned states from the ``global_stepN`` folder the ``latest`` file names
(integrations/deepspeed.py ``deepspeed_load_checkpoint``); the optimizer state must match this run's parameter
groups (torch/optim/optimizer.py ``load_state_dict``) and DeepSpeed's partitions this run's world size and ZeRO stage.
So when a resume fails and the words give no error text, the folder the key names comes first (LlamaFactory#8794:
a resume added to the YAML failed, and the answer was the checkpoint path), then what changed since the save.
"""

from __future__ import annotations

from typing import Any


def resume_error_lead(said: dict[str, Any]) -> str | None:
    """The lead for an error said in the resume phase (`said["phase"] == "resume"`, userwords_vocab PHASES) with no
    error text read (`said["reading"]` empty); None otherwise."""
    if said.get("symptom") != "error" or said.get("phase") != "resume" or said.get("reading"):
        return None
    return ("The words place the error in a resume: most often the folder resume_from_checkpoint names is not one the "
            "run can resume from (it must be one checkpoint-N folder with trainer_state.json and the weights, and "
            "under DeepSpeed its global_stepN folder and the `latest` file; a checkpoint saved with save_only_model "
            "has no optimizer state), else the run changed since the save (another number of GPUs or ZeRO stage for "
            "DeepSpeed's partitioned states, another set of trainable parameters for the optimizer). The input that "
            "decides: what that folder holds (`ls` it) against the run's GPUs and config at the save.")
