"""Round 9's misses by kind (issue #25, session 12, wt/pmfix12c): other wordings and other pastes of each kind,
never the round's own texts.

- transformers' staged checkpoint save (analyzers/postmortem/savecause.py): Trainer._save_checkpoint writes
  tmp-checkpoint-N and renames it; 4.36 renamed from every process (huggingface/transformers#27925, trainer.py:2382
  ``os.rename(staging_output_dir, output_dir)``), 4.38.0-4.38.1 removed the staging folder on each node
  (``shutil.rmtree(staging_output_dir)``, #28848, reverted by #29336), 4.49.0.dev0 ``os.renames`` raised
  ``OSError: [Errno 39] Directory not empty`` (#36076). Fixtures: fixtures/postmortem/save_fails/.
- a save said to fail in words ("saving checkpoint fails", "保存checkpoint报错", the final save);
- a title naming a failure with a package release ("broken with X==V", "fails with X V installed") or a named
  API that does not do its job ("`Trainer` does not pass `x`");
- a dataset that yields no sample: LLaMA-Factory's ``next(iter(dataset))`` over an empty dataset (StopIteration;
  0.9.0 data/loader.py:199-207 "Cannot find valid samples ..." / "Cannot find sufficient samples ...");
- 内存 said of the cards (GPU memory), not a card merely counted;
- NaN said to show as a loss of 0, and fp16 with a family pre-trained in bf16 named first.
A finding read from words alone is at most a warning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from finetune_doctor.analyzers.postmortem.savecause import _episode_words
from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.readers.runlogs.userwords import read_words
from finetune_doctor.settings import Options

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "postmortem" / "save_fails"


def first(tmp_path: Path, text: str | None = None, fixture: str | None = None):
    dst = tmp_path / "train.log"
    if fixture:
        shutil.copy(FIX / fixture, dst)
    else:
        dst.write_text(text + "\n", encoding="utf-8")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert r.findings, "no finding"
    return r.findings[0]


# -- transformers' staged checkpoint save -------------------------------------------------------------------------

def test_a_traceback_cut_in_436s_rename_names_the_staged_save_and_the_save_phase(tmp_path):
    f = first(tmp_path, fixture="rename_cut_436.log")
    assert f.name == "run-crashed" and f.severity == "error"
    assert "during the checkpoint save of checkpoint-500" in f.message
    assert "transformers' staged save" in f.message and "#27925" in f.message and "#28364" in f.message
    # no release was logged: every episode is named, and how to tell which is installed, with every episode's fix
    assert "pip show transformers" in f.message
    assert "4.37.0 or later for 4.36's rename, 4.38.2 for 4.38's clean-up, 4.49.0 for the dev build's" in f.message


def test_a_cut_in_4381s_rmtree_with_the_logged_release_names_that_episode_only(tmp_path):
    f = first(tmp_path, fixture="rmtree_cut_4381.log")
    assert f.name == "run-crashed"
    assert "in the checkpoint save" in f.message
    assert "transformers 4.38.1 (read at" in f.message and "is in the affected releases" in f.message
    assert "#29336" in f.message and "#27925" not in f.message and "#36076" not in f.message
    # issue #25: the fix is that episode's only, not every episode's
    assert "the fix: upgrade transformers to 4.38.2 or later (or go back to 4.37.2); until then save from one " \
        "writer" in f.message
    assert "4.37.0 or later for 4.36" not in f.message and "4.49.0" not in f.message


def test_errno39_from_the_dev_builds_renames_without_its_paths(tmp_path):
    f = first(tmp_path, fixture="renames_errno39_dev.log")
    assert f.name == "run-crashed"
    assert "OSError: [Errno 39] Directory not empty" in f.message and "#36076" in f.message
    # the dev build's own code line (os.renames of the staging folder) picks its episode alone
    assert 'transformers 4.49.0.dev0 (a build of main: "os.renames(output_dir, checkpoint_dir)")' in f.message
    assert "#27925" not in f.message
    assert "the fix: install the transformers 4.49.0 release or later instead of that build of main; until then" \
        in f.message and "4.38.2" not in f.message
    # the marker named tmp-checkpoint-<random>: no step is invented
    assert "during a checkpoint save" in f.message and "checkpoint-None" not in f.message


def test_the_episode_follows_the_release_and_a_release_outside_every_episode_says_so():
    assert "4.36 renamed" in _episode_words({"transformers": ("4.36.2", "env")})
    assert "4.49.0.dev0 (main" in _episode_words({}, {"transformers": "4.49.0.dev0"})
    out = _episode_words({"transformers": ("4.40.0", "train.log:3")})
    assert out.startswith("transformers 4.40.0 (read at train.log:3) is in none of them, so another writer is likelier")
    assert "pip show" not in out
    # words that say main was built: the dev build's episode; a release read outranks them
    assert "(a build of main: \"main branch\") is in the affected releases" in _episode_words({}, None, "on the main branch")
    assert "4.38.1" in _episode_words({"transformers": ("4.38.1", "env")}, None, "main branch")


def test_errno39_alone_outside_a_save_is_no_staged_save(tmp_path):
    f = first(tmp_path, "OSError: [Errno 39] Directory not empty: '/data/cache/shards'")
    assert f.name == "run-crashed" and "staged save" not in f.message


@pytest.mark.parametrize("text, which", [
    ("Saving checkpoint fails with FileNotFoundError on tmp-checkpoint-1000 under DDP", "staged"),
    ("多卡训练时保存checkpoint报错，单卡正常", "save_steps"),
    ("Training finished but the final save crashes, the intermediate checkpoints were fine", "final"),
])
def test_a_save_said_to_fail_is_a_crash_in_the_save_phase(tmp_path, text, which):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    want = {"staged": "transformers' staged save", "save_steps": "a checkpoint save at save_steps",
            "final": "it was the final save"}[which]
    assert want in f.message


# -- a title naming a failure -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, pkg", [
    ("DPO training breaks after upgrading to trl 0.9.2", "trl 0.9.2"),
    ("sft fails with deepspeed 0.15.1 installed", "deepspeed 0.15.1"),
    ("LoRA merge is broken with peft==0.13.0", "peft==0.13.0"),
])
def test_a_title_naming_a_release_it_fails_with_is_a_version_conflict(tmp_path, text, pkg):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert f.message.startswith("You describe a version conflict") and pkg in f.message


def test_a_title_saying_a_named_api_does_not_do_its_job_is_an_error_said(tmp_path):
    f = first(tmp_path, "`DataCollatorForSeq2Seq` does not pad `pixel_values` for Qwen2-VL batches")
    assert f.name == "run-crashed" and f.message.startswith("You describe an error") and "pixel_values" in f.message
    assert read_words("the loss does not decrease") is None   # no failure named: still nothing


# -- a dataset that yields no sample ------------------------------------------------------------------------------

def test_stopiteration_at_the_first_processed_sample_is_an_empty_dataset(tmp_path):
    # the data rule leads since wt/pmfix17 (LLaMA-Factory's own no-sample check is the cause); the traceback follows
    f = first(tmp_path, fixture="stopiteration_llmtuner.log")
    assert f.name == "no-valid-samples" and "(StopIteration;" in f.message
    assert "the dataset came out of preprocessing empty" in f.message and "dataset_info.json" in f.message
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert [g.name for g in r.findings[:2]] == ["no-valid-samples", "run-crashed"]
    assert r.findings[1].message.startswith("The run ended at an unknown step with StopIteration")


@pytest.mark.parametrize("text", [
    "StopIteration when I train on my own jsonl dataset",
    "pt stage: the dataset is too small, training stops before step 1",
    "自定义数据集为空，训练直接报错",
    "RM training says no valid samples after the template",
])
def test_a_dataset_said_to_give_no_sample_is_no_valid_samples_as_a_warning(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "no-valid-samples" and f.severity == "warning"
    assert f.message.startswith("You describe a dataset that gives no sample")
    assert "Cannot find sufficient samples" in f.message


# -- 内存 of the cards ---------------------------------------------------------------------------------------------

def test_memory_said_of_the_cards_is_the_gpus_and_a_counted_card_is_not():
    got = read_words("4张3090并行训练，每张卡的内存都占满了，报错内存不足")
    assert (got["symptom"], got["memory"]) == ("oom", "gpu")
    assert read_words("多卡训练内存不足")["symptom"] == "host-oom"
    assert read_words("数据预处理时内存不足被kill")["symptom"] == "host-oom"


# -- fp16, NaN and a loss of 0 ------------------------------------------------------------------------------------

def test_nan_said_to_show_as_a_loss_of_0_names_fp16_and_the_bf16_family_first(tmp_path):
    f = first(tmp_path, "用 fp16 训练 Qwen2.5-7B，部分样本出现 nan，日志里 loss 变成 0")
    assert f.name == "loss-stuck-zero" and f.severity == "warning"
    assert "First: the words name fp16 and qwen2, a family pre-trained in bf16" in f.message


def test_nan_with_fp16_and_no_loss_of_0_stays_nan_with_fp16_first(tmp_path):
    f = first(tmp_path, "llama3 fp16 full sft: loss becomes nan after 300 steps")
    assert f.name == "nan-loss"
    assert "First: the words name fp16 and llama, a family pre-trained in bf16" in f.message
    g = first(tmp_path, "loss becomes nan after 300 steps with bf16")
    assert "First:" not in g.message


@pytest.mark.parametrize("text", [
    "DDP on 4 GPUs: each GPU holds the whole model, so more GPUs did not help with the OOM",
    "4张卡并行训练，每张卡都加载了完整模型，加卡也没用，还是显存不足",
])
def test_oom_said_of_several_cards_names_the_replicated_copy_as_a_warning(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"
    assert f.message.startswith("You describe running out of GPU memory")
    assert "every card holds a whole copy of the model" in f.message and "ZeRO-3" in f.message


def test_oom_on_one_card_gets_no_replicated_copy(tmp_path):
    f = first(tmp_path, "CUDA out of memory on a single 4090 with Qwen2.5-7B full sft")
    assert f.name == "cuda-oom" and "whole copy" not in f.message


def test_a_missing_checkpoint_file_at_resume_is_no_staged_save(tmp_path):
    f = first(tmp_path, "FileNotFoundError: [Errno 2] No such file or directory: "
                        "'saves/qwen/lora/checkpoint-1000/trainer_state.json'")
    assert f.name == "run-crashed" and "staged save" not in f.message


# -- cuDNN's failed descriptor finalize ---------------------------------------------------------------------------

def test_cudnn_finalize_with_its_status_is_the_cudnn_torch_loads(tmp_path):
    f = first(tmp_path, fixture="cudnn_finalize_conv2d.log")
    assert f.name == "cuda-error" and "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED" in f.message
    assert "the cuDNN frontend's failed descriptor finalize" in f.message and "nvidia-cudnn-cu12" in f.message


def test_cudnn_finalize_cut_to_its_check_is_still_read(tmp_path):
    f = first(tmp_path, "[rank3]:     return F.conv3d(\n[rank3]: RuntimeError: ptrDesc->finalize()")
    assert f.name == "run-crashed" and "cuDNN could not finalize a descriptor" in f.message
    g = first(tmp_path, "RuntimeError: shape '[2, -1]' is invalid for input of size 3")
    assert "cuDNN" not in g.message


def test_the_leads_stay_quiet_where_the_words_rule_them_out(tmp_path):
    f = first(tmp_path, "ZeRO-3 on 8 GPUs still OOM: each GPU holds the whole model?")
    assert f.name == "cuda-oom" and "whole copy" not in f.message
    g = first(tmp_path, "qwen2 loss becomes nan with fp16 and with bf16 alike")
    assert g.name == "nan-loss" and "First:" not in g.message


def test_the_staged_save_episodes_take_their_releases_from_the_catalogue_of_regressions(monkeypatch):
    """One home: the releases of 4.36's rename and 4.38's clean-up are the rows of catalog/known_regressions.json
    marked `save_episode` (savecause.py keeps only its words for them); a row marked without words, or words
    without a row, fails here."""
    from finetune_doctor.analyzers.postmortem import knownbugs, savecause

    marked = [r for r in knownbugs.rows() if r.get("save_episode")]
    assert sorted(r["save_episode"] for r in marked) == sorted(savecause._WORDS)
    eps, fix_all = savecause._episodes()
    assert [(e[0], e[1]) for e in eps] == [("4.36.0.dev0", "4.36.2"), ("4.38.0", "4.38.1"),
                                           ("4.49.0.dev0", "4.49.0.dev0")]
    assert eps[1][3] == "upgrade transformers to 4.38.2 or later (or go back to 4.37.2)"
    assert "4.37.0 or later for 4.36's rename, 4.38.2 for 4.38's clean-up, 4.49.0 for the dev build's" in fix_all
    assert not hasattr(savecause, "_EPISODES")
    # a catalogue row moved (its last release and its fix) moves savecause's reading with it
    moved = tuple({**r, "last": "4.36.3", "fixed_in": "4.36.4"} if r.get("save_episode") == "rename" else r
                  for r in knownbugs.rows())
    monkeypatch.setattr(knownbugs, "rows", lambda: moved)
    savecause._episodes.cache_clear()
    try:
        assert "is in the affected releases" in _episode_words({"transformers": ("4.36.3", "env")})
        assert "4.36.4 renames on the main process only" in _episode_words({"transformers": ("4.36.3", "env")})
    finally:
        savecause._episodes.cache_clear()
