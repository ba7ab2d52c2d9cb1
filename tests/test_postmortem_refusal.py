"""LLaMA-Factory's start-up refusal of a config, read from the run's log and reported under the lint rule that owns
the fault (issue #25, wt/pmfix18; analyzers/postmortem/refusal.py): "Undefined dataset X in dataset_info.json."
→ dataset-not-defined, "Some keys are not used by the HfArgumentParser: [...]" with keys another release took →
renamed-key / unknown-key. The lines are those of other threads than the dev cases (LlamaFactory#5341, #735, #7412)
or written in the shapes torchrun's per-rank prefix gives; the negatives are the crash fixtures whose refusal has
another cause (a training config given to chat, a typo) or none.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pmhelp import diagnose_dir
from pmhelp import first_of_text as first

from finetune_doctor.engine.names import check_names, declared_values
from finetune_doctor.facts import namespaces

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "postmortem" / "crash_causes"
REFUSAL_RULES = {"dataset-not-defined", "unknown-key", "renamed-key"}

# LlamaFactory#5341: a file path given as the dataset name, under a pip-installed llamafactory
TB_5341 = """Traceback (most recent call last):
  File "/root/miniconda3/envs/pytorch/bin/llamafactory-cli", line 8, in <module>
    sys.exit(main())
  File "/root/miniconda3/envs/pytorch/lib/python3.9/site-packages/llamafactory/data/loader.py", line 149, in _get_merged_dataset
    for dataset_attr in get_dataset_list(dataset_names, data_args.dataset_dir):
  File "/root/miniconda3/envs/pytorch/lib/python3.9/site-packages/llamafactory/data/parser.py", line 107, in get_dataset_list
    raise ValueError("Undefined dataset {} in {}.".format(name, DATA_CONFIG))
ValueError: Undefined dataset /opt/data/private/LLaMA-Factory/data/train1.json in dataset_info.json."""


def test_a_file_path_given_as_the_dataset_name_is_dataset_not_defined(tmp_path):
    f = first(tmp_path, TB_5341)
    assert f.name == "dataset-not-defined"
    assert "`dataset: /opt/data/private/LLaMA-Factory/data/train1.json`" in f.message
    assert "not by its file name" in f.message
    assert f.location.line == 8      # the exception line of the log, not a config key


def test_the_error_line_under_the_users_words_is_read(tmp_path):
    # LlamaFactory#735 (a later comment): the words, then the one error line
    f = first(tmp_path, "使用alpaca_data_en_52k.json数据， dataset_info.json中有该数据的信息，为什么报错呢？\n"
                        "ValueError: Undefined dataset alpaca_data_en_52k.json in dataset_info.json.")
    assert f.name == "dataset-not-defined"
    assert '"Undefined dataset alpaca_data_en_52k.json in dataset_info.json."' in f.message


def test_the_refusal_under_torchruns_rank_prefix(tmp_path):
    f = first(tmp_path, '[rank0]:   File "/app/LLaMA-Factory/src/llamafactory/data/parser.py", line 129, in '
                        'get_dataset_list\n'
                        '[rank0]:     raise ValueError(f"Undefined dataset {name} in {DATA_CONFIG}.")\n'
                        "[rank0]: ValueError: Undefined dataset my_sft_v2 in dataset_info.json.")
    assert f.name == "dataset-not-defined" and "`dataset: my_sft_v2`" in f.message


def test_a_retired_key_in_the_words_line_is_unknown_key_with_its_replacement(tmp_path):
    # LlamaFactory#7412's title line inside the user's sentence
    f = first(tmp_path, "在对Qwen2.5-VL-3B-Instruct进行 train_full时，出现错误 ValueError: Some keys are not used by "
                        "the HfArgumentParser: ['train_mm_proj_only']，已反复确认安装的包没有问题。")
    assert f.name == "unknown-key"
    assert "`train_mm_proj_only` is not a LLaMA-Factory key (last accepted in v0.9.1)" in f.message
    assert "freeze_vision_tower" in f.message


def test_each_renamed_key_of_the_list_is_a_finding_before_run_crashed(tmp_path):
    (tmp_path / "train.log").write_text(
        '[rank3]:   File "/opt/conda/lib/python3.10/site-packages/transformers/hf_argparser.py", line 396, in '
        'parse_dict\n'
        '[rank3]:     raise ValueError(f"Some keys are not used by the HfArgumentParser: {sorted(unused_keys)}")\n'
        "[rank3]: ValueError: Some keys are not used by the HfArgumentParser: ['dpo_beta', 'sft_packing']\n",
        encoding="utf-8")
    names = [f.name for f in diagnose_dir(tmp_path).findings]
    assert names[:3] == ["renamed-key", "renamed-key", "run-crashed"]
    msgs = [f.message for f in diagnose_dir(tmp_path).findings[:2]]
    assert any("`dpo_beta` was renamed to `pref_beta`" in m for m in msgs)
    assert any("`sft_packing` was renamed to `packing`" in m for m in msgs)


def test_a_key_cut_with_its_line_is_not_judged(tmp_path):
    f = first(tmp_path, "ValueError: Some keys are not used by the HfArgumentParser: ['sft_packing', 'dpo_be")
    assert f.name == "renamed-key" and "`sft_packing`" in f.message
    assert "dpo_be" not in f.message


def test_a_key_given_in_the_config_too_is_one_finding(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("ValueError: Some keys are not used by the HfArgumentParser: ['sft_packing']\n",
                                   encoding="utf-8")
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   "dataset: alpaca_en_demo\ntemplate: qwen\nsft_packing: true\noutput_dir: saves/x\n",
                   encoding="utf-8")
    found = [f for f in diagnose_dir(run, config=cfg).findings if f.name == "renamed-key"]
    assert len(found) == 1 and "`sft_packing`" in found[0].message


# -- what the readings must not take ---------------------------------------------------------------------------------


def _names(tmp_path: Path, fixture: str) -> list[str]:
    (tmp_path / "train.log").write_text((FIX / fixture).read_text(encoding="utf-8"), encoding="utf-8")
    return [f.name for f in diagnose_dir(tmp_path).findings]


def test_a_training_config_given_to_chat_stays_run_crashed(tmp_path):
    names = _names(tmp_path, "unused_keys_training.log")     # every key declared: the subcommand is the fault
    assert names[0] == "run-crashed" and not REFUSAL_RULES & set(names)


def test_a_key_no_release_declares_stays_run_crashed(tmp_path):
    names = _names(tmp_path, "unused_keys_typo.log")          # a typo or another tool's key: run-crashed weighs it
    assert names[0] == "run-crashed" and not REFUSAL_RULES & set(names)


def test_other_crashes_give_no_refusal(tmp_path):
    for fixture in ("model_type_keyerror.log", "no_grad_fn.log", "processor_not_found.log"):
        names = _names(tmp_path, fixture)
        assert names and not REFUSAL_RULES & set(names), fixture


def test_a_rename_that_depends_on_the_transformers_release_is_left_to_run_crashed(tmp_path):
    # evaluation_strategy: transformers itself accepted it through 4.45, so the refusal says which release ran
    f = first(tmp_path, "[rank3]: ValueError: Some keys are not used by the HfArgumentParser: ['evaluation_strategy']")
    assert f.name == "run-crashed" and "eval_strategy" in f.message


# -- the rule engine: two joined lists give `item` the fields of either -----------------------------------------------


def test_joined_lists_give_item_both_shapes_and_their_values():
    src = ast.parse("[k for k in lint.keys if k.kind == 'dataset'] + [d for d in ev.undefined_dataset]",
                    mode="eval").body
    vals = declared_values(ast.parse("item.check", mode="eval").body, namespaces(), (), item_from=src)
    assert vals is not None and "log" in vals and "dataset-undefined" in vals
    probs = check_names([ast.parse("item.quote + item.nonesuch", mode="eval").body], namespaces(), (), item_from=src)
    assert [p.name for p in probs] == ["item.nonesuch"]
