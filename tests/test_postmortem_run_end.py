"""A run whose output reaches its end with no training step (issue #25, round 8's kind LlamaFactory#2776: a resume
from a checkpoint already at the last step ends at once): LLaMA-Factory's end-of-training lines are read
(readers/runlogs/logmoments.py ``run-end``) and, with no step anywhere, the run is said to have trained no step
(analyzers/postmortem/health.py `ended_untrained`, rule no-parameter-update).

The lines are as their writers print them: HF Trainer's banner and resume lines (transformers trainer.py
``_inner_training_loop``, 4.40-4.46: "Continuing training from checkpoint, will skip to saved global_step",
"Continuing training from epoch E", "Continuing training from global step N", "Will skip the first E epochs
then the first B batches in the first epoch."), ``log_metrics``' "***** train metrics *****" block, LF's
``plot_loss`` warning in LF >= 0.8's format ("[WARNING|date time] llamafactory.extras.ploting:83 >> No metric K to
plot.", extras/logging.py) and in LF <= 0.5's (``llmtuner``, "%m/%d/%Y %H:%M:%S - WARNING - name - msg"), and
transformers modelcard.py's INFO line that drops an incomplete result.
"""

from __future__ import annotations

from pmhelp import diagnose_dir

from finetune_doctor.readers.runlogs.logs import read_text_log

RESUMED = """\
[INFO|trainer.py:2078] 2024-06-11 11:55:22,961 >> ***** Running training *****
[INFO|trainer.py:2079] 2024-06-11 11:55:22,961 >>   Num examples = 6,000
[INFO|trainer.py:2080] 2024-06-11 11:55:22,961 >>   Num Epochs = 3
[INFO|trainer.py:2081] 2024-06-11 11:55:22,961 >>   Instantaneous batch size per device = 4
[INFO|trainer.py:2084] 2024-06-11 11:55:22,961 >>   Total train batch size (w. parallel, distributed & accumulation) = 32
[INFO|trainer.py:2085] 2024-06-11 11:55:22,961 >>   Gradient Accumulation steps = 8
[INFO|trainer.py:2086] 2024-06-11 11:55:22,961 >>   Total optimization steps = 561
[INFO|trainer.py:2087] 2024-06-11 11:55:22,963 >>   Number of trainable parameters = 20,971,520
[INFO|trainer.py:2109] 2024-06-11 11:55:22,964 >>   Continuing training from checkpoint, will skip to saved global_step
[INFO|trainer.py:2110] 2024-06-11 11:55:22,964 >>   Continuing training from epoch 3
[INFO|trainer.py:2111] 2024-06-11 11:55:22,964 >>   Continuing training from global step 561
[INFO|trainer.py:2113] 2024-06-11 11:55:22,964 >>   Will skip the first 3 epochs then the first 0 batches in the first epoch.
0it [00:00, ?it/s]
[INFO|trainer.py:2329] 2024-06-11 11:55:23,017 >> \n\nTraining completed. Do not forget to share your model on huggingface.co/models =)
[INFO|trainer.py:3410] 2024-06-11 11:55:23,020 >> Saving model checkpoint to saves/qwen2-7b/lora/sft
***** train metrics *****
  epoch                    =        3.0
  total_flos               =        0GF
  train_loss               =        0.0
  train_runtime            = 0:00:00.05
  train_samples_per_second =  343187.65
  train_steps_per_second   =  10722.862
[WARNING|2024-06-11 11:55:23] llamafactory.extras.ploting:83 >> No metric eval_loss to plot.
[WARNING|2024-06-11 11:55:23] llamafactory.extras.ploting:83 >> No metric eval_accuracy to plot.
"""

TRAINED = """\
[INFO|trainer.py:2086] 2024-06-11 11:55:22,961 >>   Total optimization steps = 30
{'loss': 1.8125, 'grad_norm': 0.91, 'learning_rate': 9.5e-05, 'epoch': 0.33}
{'loss': 1.5202, 'grad_norm': 0.64, 'learning_rate': 5.0e-05, 'epoch': 0.67}
{'loss': 1.4471, 'grad_norm': 0.58, 'learning_rate': 5.0e-06, 'epoch': 1.0}
100%|██████████| 30/30 [01:31<00:00,  3.05s/it]
{'train_runtime': 91.52, 'train_samples_per_second': 2.62, 'train_steps_per_second': 0.328, 'train_loss': 1.5933, 'epoch': 1.0}
[WARNING|2024-06-11 11:57:01] llamafactory.extras.ploting:83 >> No metric eval_loss to plot.
"""

OLD_FORMAT = """\
05/21/2024 09:12:40 - WARNING - llmtuner.extras.ploting - No metric eval_accuracy to plot.
[INFO|modelcard.py:450] 2024-05-21 09:12:40,311 >> Dropping the following result as it does not have all the necessary fields:
{'task': {'name': 'Causal Language Modeling', 'type': 'text-generation'}}
"""


def _report(tmp_path, text):
    (tmp_path / "train.log").write_text(text, encoding="utf-8")
    return diagnose_dir(str(tmp_path))


def test_the_reader_marks_both_end_of_run_lines(tmp_path):
    (tmp_path / "a.log").write_text(OLD_FORMAT, encoding="utf-8")
    fe = read_text_log(str(tmp_path / "a.log"))
    ends = [(n.line, n.value["what"], n.value["key"]) for n in fe.notices if n.kind == "run-end"]
    assert ends == [(1, "plot", "eval_accuracy"), (2, "model-card", None)]


def test_a_resume_at_the_last_step_is_a_run_that_trained_nothing(tmp_path):
    r = _report(tmp_path, RESUMED)
    f = r.findings[0]
    assert f.name == "no-parameter-update"
    assert "it resumed from a checkpoint at global step 561 of the 561 the run has" in f.message
    assert "raise num_train_epochs or max_steps past the checkpoint's global_step" in f.message


def test_the_end_lines_alone_say_no_step_came_before_them(tmp_path):
    f = _report(tmp_path, OLD_FORMAT).findings[0]
    assert f.name == "no-parameter-update"
    assert "with no training step before it" in f.message and ":1, and no metric" in f.message


def test_a_run_that_trained_is_finished_not_untrained(tmp_path):
    r = _report(tmp_path, TRAINED)
    assert "no-parameter-update" not in [f.name for f in r.findings]
    assert "no-run-evidence" not in [f.name for f in r.findings]
