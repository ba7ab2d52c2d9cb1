"""run-crashed names the cause an exception's text establishes (analyzers/postmortem/crashcause.py), and only
then: one fixture per kind in fixtures/postmortem/crash_causes/ (FIXTURE.md names the upstream line of each)."""

from __future__ import annotations

import pytest

from pmhelp import FIXTURES, diagnose, diagnose_report

from finetune_doctor.analyzers.postmortem.crashcause import _mismatch_words
from finetune_doctor.readers.runlogs.logs import read_text_log

FIX = "crash_causes"


def crashed(tmp_path, name: str, **opts) -> str:
    found = diagnose(tmp_path, f"{FIX}/{name}", **opts)
    assert found and found[0].name == "run-crashed", [f.name for f in found]
    return found[0].message


def test_the_traceback_keeps_the_packages_its_frames_run_in():
    tbs = [n for n in read_text_log(str(FIXTURES / FIX / "qwen25vl_rotary_dtype.log")).notices if n.kind == "traceback"]
    pkgs = tbs[0].value["pkgs"]
    assert pkgs[0] == ("llamafactory", "<module>", "launcher.py")
    assert pkgs[-1] == ("flash_attn", "apply_rotary", "rotary.py")
    assert ("transformers", "apply_rotary_pos_emb_flashatt", "modeling_qwen2_5_vl.py") in pkgs


def test_an_error_inside_a_library_names_the_library_frame_and_the_given_version(tmp_path):
    msg = crashed(tmp_path, "qwen25vl_rotary_dtype.log", transformers_version="4.49.0")
    assert "raised inside flash_attn, in apply_rotary of rotary.py" in msg
    assert "called from transformers 4.49.0 (--transformers), in apply_rotary_pos_emb_flashatt" in msg
    assert "another transformers version" in msg


def test_without_the_version_it_asks_for_it(tmp_path):
    msg = crashed(tmp_path, "qwen25vl_rotary_dtype.log")
    assert "transformers 4.49.0" not in msg and "give --transformers VERSION" in msg


def test_a_deliberate_check_in_a_library_is_not_called_a_version_bug(tmp_path):
    msg = crashed(tmp_path, "check_in_library.log")
    head, _, cause = msg.partition(" — ")
    assert head.endswith("cuda>=11.0")
    # the check's own meaning (launchcause.py BF16_SETUP: bf16 needs compute capability 8.0+), never a release blamed
    assert "compute capability 8.0" in cause and "release" not in cause and "version" not in cause


@pytest.mark.parametrize("name, words", [
    ("state_dict_flat_embedding.log", ["525336576 = 128256 × 4096", "flattened", "without gathering",
                                       "not a vocabulary change", "(1 more size mismatch(es) listed)"]),
    ("state_dict_zero3_empty.log", ["shape [0]", "placeholder ZeRO-3 leaves", "stage3_gather_16bit_weights_on_model_save"]),
    ("state_dict_vocab_change.log", ["32002 rows against 32000 (2 fewer in the model)", "resize_vocab"]),
    ("lora_rank_mismatch.log", ["trained with LoRA rank 16 and the model was built with rank 8", "lora_rank: 16"]),
])
def test_size_mismatches_are_decomposed(tmp_path, name, words):
    msg = crashed(tmp_path, name)
    for w in words:
        assert w in msg, w


def test_the_model_shape_names_the_factors_when_known():
    words = _mismatch_words("model.embed_tokens.weight", (525336576,), (128256, 4096),
                            {"vocab_size": 128256, "hidden_size": 4096, "name": "Llama-3-8B"})
    assert "128256 × 4096 (vocab_size × hidden_size of Llama-3-8B)" in words
    # a flat vector of another row count: flattened and a vocabulary change
    words = _mismatch_words("model.embed_tokens.weight", (32000 * 4096,), (128256, 4096), {})
    assert "131072000 = 32000 × 4096" in words and "96256 more in the model" in words
    # one dimension an exact quarter of the other: a tensor-parallel shard
    words = _mismatch_words("model.layers.0.mlp.down_proj.weight", (4096, 3584), (4096, 14336), {})
    assert "exactly 1/4" in words
    assert _mismatch_words("x.weight", (3, 3), (3, 3), {}) is None


@pytest.mark.parametrize("name, words", [
    ("flash_attn_undefined_symbol.log", ["flash-attn is a compiled extension built against another torch"]),
    ("flash_attn_not_installed.log", ["flash_attn is not installed", "pip install flash-attn --no-build-isolation"]),
    ("module_not_found.log", ["bitsandbytes is not installed", "pip install bitsandbytes"]),
    ("bnb_requires.log", ["an import check failed", "pip install -U bitsandbytes>=0.46.1"]),
    ("cannot_import_name.log", ["the installed transformers has no 'is_liger_kernel_available'",
                                # the importing frame's package names the other half of the pair
                                "trl (in dpo_trainer.py) imports it, so trl and transformers come from releases "
                                "that do not go together"]),
])
def test_import_errors_name_the_package_and_the_install(tmp_path, name, words):
    msg = crashed(tmp_path, name)
    for w in words:
        assert w in msg, w


@pytest.mark.parametrize("name, mtype", [("model_type_keyerror.log", "gemma2"), ("model_type_valueerror.log", "qwen3")])
def test_a_model_type_transformers_does_not_know_is_an_old_transformers(tmp_path, name, mtype):
    msg = crashed(tmp_path, name)
    assert f"transformers does not know the model type '{mtype}'" in msg and "upgrade transformers" in msg


def test_a_keyerror_outside_the_config_mapping_is_not_a_model_type(tmp_path):
    log = tmp_path / "k.log"
    log.write_text('Traceback (most recent call last):\n  File "/w/prep.py", line 9, in <module>\n'
                   '    row["gemma2"]\nKeyError: \'gemma2\'\n')
    found = diagnose(tmp_path, log)
    assert found[0].name == "run-crashed" and "model type" not in found[0].message
    # only where it was raised, which the traceback shows (crashcause.raised_at)
    assert found[0].message.endswith("KeyError: 'gemma2' — raised in <module> (prep.py, not under site-packages).")


def test_a_loss_without_grad_names_frozen_inputs_under_checkpointing(tmp_path):
    msg = crashed(tmp_path, "no_grad_fn.log")
    assert "enable_input_require_grads" in msg and "use_reentrant=False" in msg


def test_a_missing_processor_names_the_folder_and_remote_code(tmp_path):
    msg = crashed(tmp_path, "processor_not_found.log")
    assert "preprocessor_config.json" in msg and "trust_remote_code: true" in msg
    assert "InternVL" not in msg
    cfg = "model_name_or_path: OpenGVLab/InternVL3-8B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n" \
          "template: intern_vl\noutput_dir: out\n"
    rep = diagnose_report(tmp_path / "b", f"{FIX}/processor_not_found.log", config=cfg)
    first = next(f for f in rep.findings if f.name == "run-crashed")
    # the config's InternVL name without -hf: the original checkpoint first, the -hf repositories as the remedy
    # (session 16: newermodel.internvl_original)
    assert "most likely the model is InternVL's original remote-code checkpoint: it is named `InternVL3-8B`" in first.message
    assert "from the \"-hf\" conversions" in first.message


@pytest.mark.parametrize("name, words", [
    ("module_has_no_attribute.log", ["the installed torch has no torch.float8_e4m3fn", "give --torch VERSION"]),
    ("unexpected_keyword.log", ["transformers (in training_step of trainer.py) calls DPOTrainer.compute_loss() with "
                                "the keyword 'num_items_in_batch'", "releases that go together"]),
])
def test_two_packages_from_releases_that_do_not_go_together(tmp_path, name, words):
    msg = crashed(tmp_path, name)
    for w in words:
        assert w in msg, w


def test_an_error_raised_by_the_users_own_code_under_a_library_blames_no_library(tmp_path):
    msg = crashed(tmp_path, "user_callback_error.log")
    assert msg.endswith("RuntimeError: loss went above 10.0 — raised in on_step_end (callbacks.py, not under "
                        "site-packages), called from call_event (trainer_callback.py, transformers).")
    assert "incompatibility" not in msg and "release" not in msg


@pytest.mark.parametrize("name, words", [
    ("safetensors_incomplete.log", ["shorter than its own header says", "did not finish"]),
    ("safetensors_lfs_pointer.log", ["not a safetensors file", "Git LFS pointer"]),
    ("zip_central_directory.log", ["is cut short", "save or download it again"]),
])
def test_checkpoint_files_that_are_not_what_their_name_says(tmp_path, name, words):
    msg = crashed(tmp_path, name)
    for w in words:
        assert w in msg, w


def test_a_start_up_version_check_names_the_range_and_what_was_found(tmp_path):
    msg = crashed(tmp_path, "version_check.log")
    assert "outside transformers>=4.49.0,<=4.56.2,!=4.52.0 (found transformers==4.57.1);" in msg
    assert "DISABLE_VERSION_CHECK=1" in msg


def test_an_errno_names_what_the_system_said(tmp_path):
    msg = crashed(tmp_path, "errno_eio.log")
    assert "input/output error (EIO)" in msg and "dmesg" in msg


@pytest.mark.parametrize("name, words", [
    ("op_build_failed.log", ["the op 'fused_adam' is compiled at first use", "CUDA toolkit"]),
    ("two_devices.log", ["cuda:0 and cuda:1: the model is spread over several GPUs in one process",
                         "FORCE_TORCHRUN=1"]),
])
def test_build_and_placement_causes_the_message_establishes(tmp_path, name, words):
    msg = crashed(tmp_path, name)
    for w in words:
        assert w in msg, w
    assert "raised inside" not in msg


def test_the_processor_failure_lf_logged_is_quoted(tmp_path):
    msg = crashed(tmp_path, "processor_failed_logged.log")
    assert "\"Failed to load processor: Unrecognized processing class in /data/models/InternVL3-8B." in msg
    # the folder's InternVL name without -hf: the original checkpoint leads (session 16: newermodel.internvl_original)
    assert "processor_failed_logged.log:2)" in msg and "it is named `InternVL3-8B`, with no \"-hf\" suffix" in msg


def test_the_version_a_log_prints_is_used_and_a_flag_outranks_it(tmp_path):
    body = (FIXTURES / FIX / "qwen25vl_rotary_dtype.log").read_text()
    log = tmp_path / "train.log"
    log.write_text("- `llamafactory` version: 0.9.2.dev0\n- Transformers version: 4.49.0.dev0\n" + body)
    msg = diagnose(tmp_path / "a", log)[0].message
    assert "called from transformers 4.49.0.dev0 (" in msg and "train.log:2), in apply_rotary_pos_emb" in msg
    msg = diagnose(tmp_path / "b", log, transformers_version="4.50.0")[0].message
    assert "transformers 4.50.0 (--transformers)" in msg


def test_keys_the_argument_parser_did_not_use_are_read_against_lfs_schema(tmp_path):
    msg = crashed(tmp_path / "a", "unused_keys_training.log")
    assert "every key the line shows is a training argument (bf16, do_train, gradient_accumulation_steps, " \
           "learning_rate, ...)" in msg and "llamafactory-cli train" in msg
    msg = crashed(tmp_path / "b", "unused_keys_typo.log")
    assert "lora_rnak is not an argument of any LLaMA-Factory release" in msg


def test_a_shape_mismatch_inside_a_library_names_the_input_length_too(tmp_path):
    msg = crashed(tmp_path, "size_of_tensor_in_library.log")
    assert "raised inside transformers, in forward of modeling_gpt2.py" in msg
    assert "max_position_embeddings" in msg and "most often a bug" not in msg


def test_a_keyerror_line_alone_on_a_known_model_type_is_an_old_transformers(tmp_path):
    msg = crashed(tmp_path, "model_type_keyerror_alone.log")
    assert "transformers does not know the model type 'qwen2_5_vl'" in msg


def test_a_missing_submodule_is_a_release_mismatch_of_its_package():
    from finetune_doctor.analyzers.postmortem.crashcause import _import

    got = _import("ModuleNotFoundError", "No module named 'transformers.models.qwen3'", {})
    assert got.startswith("the installed transformers has no module transformers.models.qwen3")
    got = _import("ModuleNotFoundError", "No module named 'llamafactory.extras.packages'",
                  {"llamafactory": ("0.9.1", "train.log:1")})
    assert "the installed llamafactory 0.9.1 (train.log:1) has no module" in got


def test_an_earlier_exception_is_named_beside_the_last(tmp_path):
    """Issue #25: a paste of two attempts (an unknown model type, then LF's version check after an upgrade) keeps
    the last exception as the end of the run and names the earlier one as evidence, with its line."""
    f = diagnose(tmp_path, "crash_causes/two_attempts.log")[0]
    assert f.name == "run-crashed" and "ImportError: transformers>=4.49.0,<=4.55.0" in f.message
    assert "; earlier in the logs: ValueError: The checkpoint you are trying to load has model type `glm4v_moe`" in f.message
    assert "(two_attempts.log:4)" in f.message
