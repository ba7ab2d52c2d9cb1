"""A version clash visible only in the frame paths (issue #25, pasted output): the innermost frame is a model's own
code from the Hugging Face modules cache (``.../modules/transformers_modules/<repo>/...``, transformers
dynamic_module_utils.py), and the exception says the installed transformers lacks what it calls
(analyzers/postmortem/remotecode.py). The pastes are written for this test in the shapes CPython 3.10-3.12 prints
(3.11+ adds the ``^^^^`` lines; torchrun's ``[rankN]:`` prefix), none a case of fixtures/postmortem/real_threads."""

from __future__ import annotations

from pmhelp import first_of_text

TYPE_CLASH = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/data/LLaMA-Factory/src/llamafactory/train/sft/trainer.py", line 131, in prediction_step
[rank0]:     loss, generated_tokens, _ = super().prediction_step(
[rank0]:                                 ^^^^^^^^^^^^^^^^^^^^^^^^
[rank0]:   File "/opt/conda/lib/python3.11/site-packages/transformers/generation/utils.py", line 2465, in generate
[rank0]:     result = self._sample(
[rank0]:              ^^^^^^^^^^^^^
[rank0]:   File "/opt/conda/lib/python3.11/site-packages/transformers/generation/utils.py", line 3476, in _sample
[rank0]:     model_kwargs = self._update_model_kwargs_for_generation(
[rank0]:                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank0]:   File "/root/.cache/huggingface/modules/transformers_modules/glm-4-9b-chat/modeling_chatglm.py", line 929, in _update_model_kwargs_for_generation
[rank0]:     cache_name, cache = self._extract_past_from_model_output(
[rank0]:                         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank0]: TypeError: GenerationMixin._extract_past_from_model_output() got an unexpected keyword argument 'standardize_cache_format'"""

IMPORT_CLASH = """\
Traceback (most recent call last):
  File "/home/u/miniconda3/envs/lf/lib/python3.10/site-packages/transformers/dynamic_module_utils.py", line 553, in get_class_from_dynamic_module
    return get_class_in_module(class_name, final_module, force_reload=force_download)
  File "/home/u/.cache/huggingface/modules/transformers_modules/deepseek-ai/DeepSeek-V2-Lite/604d5664dddd88a0433dbae533b7fe9472482de0/modeling_deepseek.py", line 44, in <module>
    from transformers.pytorch_utils import (
ImportError: cannot import name 'is_torch_greater_or_equal_than_1_13' from 'transformers.pytorch_utils' (/home/u/miniconda3/envs/lf/lib/python3.10/site-packages/transformers/pytorch_utils.py)"""

LIBRARY_CLASH = """\
Traceback (most recent call last):
  File "/root/.cache/huggingface/modules/transformers_modules/glm-4-9b-chat/modeling_chatglm.py", line 880, in forward
    hidden_states = self.transformer(input_ids)
  File "/opt/conda/lib/python3.11/site-packages/peft/tuners/lora/layer.py", line 557, in forward
    result = self.base_layer(x, *args, **kwargs)
TypeError: Linear.forward() got an unexpected keyword argument 'adapter_names'"""


def test_a_keyword_the_installed_transformers_dropped_is_the_model_code_s_clash(tmp_path):
    f = first_of_text(tmp_path, TYPE_CLASH)
    assert f.name == "run-crashed"
    assert "the model's own code (glm-4-9b-chat/modeling_chatglm.py, _update_model_kwargs_for_generation" in f.message
    assert "Install the transformers release the model card names" in f.message


def test_an_import_at_load_from_the_hub_layout_names_the_repository_without_its_commit(tmp_path):
    f = first_of_text(tmp_path, IMPORT_CLASH)
    assert f.name == "run-crashed"
    assert "(deepseek-ai/DeepSeek-V2-Lite/modeling_deepseek.py, <module>," in f.message


def test_a_remote_frame_that_is_not_the_innermost_is_not_blamed(tmp_path):
    f = first_of_text(tmp_path, LIBRARY_CLASH)
    assert "the model's own code" not in f.message
