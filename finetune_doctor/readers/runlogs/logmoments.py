"""Lines of a text log that mark a moment of the run rather than a failure: HF Trainer's evaluation and save
markers, its "***** train metrics *****" block, LLaMA-Factory's warnings, and the lines LLaMA-Factory's workflow
prints after ``trainer.train()`` has returned (`RUN_END`). `MomentLines` is mixed into readers/runlogs/logparse.py's
parser, whose state (`path`, `keep`, `step`, `timing`, `during()`) it uses.

The end-of-run lines (round 8, LlamaFactory#2776: a resume from a checkpoint already at the run's last step
ended at once, and the paste held only these lines):

- "No metric eval_loss to plot." — LLaMA-Factory extras/ploting.py ``plot_loss`` (:83 at the snapshot; logged
  through ``logger.warning_rank0``), which the SFT/PT/DPO/... workflows call after ``trainer.train()``,
  ``save_model``, ``log_metrics("train")`` and ``save_state`` when ``plot_loss: true`` (train/sft/workflow.py
  :120-140). Two log formats print it: LF >= 0.8 ``[WARNING|2024-06-11 11:55:22] llamafactory.extras.ploting:83 >>
  No metric eval_loss to plot.`` and LF <= 0.5 (``llmtuner``) ``03/10/2024 20:46:58 - WARNING -
  llmtuner.extras.ploting - No metric eval_loss to plot.``
- "Dropping the following result as it does not have all the necessary fields:" — transformers modelcard.py
  (``TrainingSummary.create_model_index``, logged at INFO), reached through ``Trainer.create_model_card``, which
  LF's ``create_modelcard_and_push`` (train/trainer_utils.py :87-115 at the snapshot) calls last in every
  workflow that trained.

Both are printed only once the training loop is over; the analyzers read the notice ``run-end`` as such
(analyzers/postmortem/causes.py ``LOOP_OVER``), and a run-end with no training step anywhere in the output as a
run that trained no step (analyzers/postmortem/health.py ``ended_untrained``).
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.evidence import Notice
from finetune_doctor.readers.runlogs import logpatterns as pat
from finetune_doctor.readers.runlogs.logcontext import Keep

RUN_END = re.compile(r"(?P<plot>No metric (?P<key>[\w/.-]+) to plot\.)|(?P<card>Dropping the following result as it "
                     r"does not have all the necessary fields)")
"""The end-of-run lines (module docstring); the trigger words "No metric " and "Dropping the following result" are in
logpatterns.TRIGGER_WORDS."""


class MomentLines:
    """The moment half of the text-log parser (a mixin; see the module docstring)."""

    path: str
    keep: Keep
    step: int | None
    timing: dict[str, Any]

    def during(self) -> int | None:  # pragma: no cover - provided by the parser
        raise NotImplementedError

    def _moment(self, text: str, line: int) -> None:
        """HF Trainer's evaluation and save markers (transformers/trainer.py ``evaluation_loop``: "***** Running
        Evaluation *****"; ``_save``: "Saving model checkpoint to DIR"): a crash after one is placed in it.
        ``value.step`` is the checkpoint's step (``checkpoint-N``) or the bar's step."""
        m = pat.SAVE_MARK.search(text)
        if m:
            c = pat.CHECKPOINT_STEP.search(m.group("dir"))
            self.keep.add("notices", Notice(self.path, line, self.during(), "save", text.strip()[:300],
                                            {"step": int(c.group("step")) if c else self.step}))
        elif "***** Running Evaluation" in text or "***** Running Prediction" in text:
            self.timing["eval_open"] = True
            self.keep.add("notices", Notice(self.path, line, self.during(), "eval-start", text.strip()[:300],
                                            {"step": self.step}))
        elif "***** train metrics *****" in text:
            # transformers trainer_pt_utils.py ``log_metrics`` prints "***** {split} metrics *****" on the main
            # process; LF's workflows call it with "train" once trainer.train() has returned (LF train/sft/
            # workflow.py L120-128 at the snapshot): the training loop is over, what follows is the final save,
            # evaluation, prediction or shutdown
            self.timing["loop_over"] = True
            self.keep.add("notices", Notice(self.path, line, self.during(), "train-metrics", text.strip()[:300],
                                            {"step": self.step}))

    def _run_end(self, text: str, line: int) -> None:
        """LLaMA-Factory's loss plot or the model card written after training (`RUN_END`): a notice ``run-end``
        with {step: the bar's step, what: "plot" or "model-card", key: the metric the plot lacked}."""
        m = RUN_END.search(text)
        if m is None:
            return
        self.timing["loop_over"] = True
        self.keep.add("notices", Notice(self.path, line, self.during(), "run-end", text.strip()[:300], {
            "step": self.step, "what": "plot" if m.group("plot") else "model-card", "key": m.group("key")}))

    def _warning(self, text: str, line: int) -> None:
        m = pat.ATTN_WARN.search(text)
        if m:
            self.keep.add("notices", Notice(self.path, line, self.during(), "attention-warning", text.strip()[:400],
                                            {"model": m.group("model"), "want": m.group("want"),
                                             "have": m.group("have")}))
            return
        m = pat.LF_LOG.match(text.strip())
        if m:
            self.keep.add("notices", Notice(self.path, line, self.during(), m.group("lvl").lower(),
                                            m.group("msg").strip()[:400], {"where": m.group("where"),
                                                                          "logger": m.group("logger")}))
