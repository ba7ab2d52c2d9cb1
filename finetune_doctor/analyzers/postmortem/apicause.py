"""A keyword a class or method of a library does not take, said with no traceback (a title, a retyped line): which
package defines the callee, and what is known of the releases that changed its signature (issue #25, round 12's
first kind: "DPOTrainer.__init__() got an unexpected keyword argument 'gamma'" was answered with "the package that
defines DPOTrainer" where the name alone says trl).

The callee's package comes from its class name (`OWNERS`, the classes each package exports at top level); the
version facts (`CHANGES`) each cite where they were read:

* trl dropped ``average_log_prob`` from ``DPOTrainer.get_batch_logps`` in 0.9, its release of June 2024 after 0.8.6
  (huggingface/trl#1699 prepared 0.9.3 on 2024-06-05): the report the day after (hiyouga/LlamaFactory#4114, fixed by
  trl 0.8.6 or a newer LLaMA-Factory) and the same error in princeton-nlp/SimPO#29 (2024-06-13), whose trainer then
  divided the two sums the new method returns;
* trl 0.7.2's ``DPODataCollatorWithPadding`` was built with the tokenizer (trl/trainer/utils.py at v0.7.2, cited in
  huggingface/trl#884); later releases tokenize in the trainer's dataset map and the collator only pads (fields
  ``pad_token_id``, ``label_pad_token_id``, ``is_encoder_decoder``), so code written against 0.7.2 fails on them
  (pipilurj/bootstrapped-preference-optimization-BPO#7: trl==0.7.2 with transformers==4.31.0 fixed it);
* trl renamed its trainers' ``tokenizer`` argument to ``processing_class`` (huggingface/trl#2162, October 2024; a
  FutureWarning kept the old name for DPO and SFT until 0.14.0);
* transformers deprecated ``Trainer(tokenizer=...)`` for ``processing_class`` (huggingface/transformers#32385,
  4.46) and removed it for v5 (huggingface/transformers#41128);
* transformers renamed ``TrainingArguments.evaluation_strategy`` to ``eval_strategy`` in 4.41
  (huggingface/transformers#30190), the old name kept until 4.46 (the deprecation window stated in
  huggingface/peft#1664).
"""

from __future__ import annotations

OWNERS = {
    "trl": ("DPOTrainer", "DPOConfig", "KTOTrainer", "KTOConfig", "ORPOTrainer", "ORPOConfig", "CPOTrainer",
            "CPOConfig", "PPOTrainer", "PPOConfig", "PPOv2Trainer", "RewardTrainer", "RewardConfig", "SFTTrainer",
            "SFTConfig", "GRPOTrainer", "GRPOConfig", "RLOOTrainer", "RLOOConfig", "OnlineDPOTrainer",
            "DPODataCollatorWithPadding", "DataCollatorForCompletionOnlyLM", "DataCollatorForPreference",
            "AutoModelForCausalLMWithValueHead"),
    "transformers": ("Trainer", "Seq2SeqTrainer", "TrainingArguments", "Seq2SeqTrainingArguments", "TrainerCallback",
                     "GenerationConfig", "PreTrainedModel", "PreTrainedTokenizer", "PreTrainedTokenizerFast",
                     "AutoModelForCausalLM", "AutoTokenizer", "AutoConfig", "AutoProcessor", "BitsAndBytesConfig",
                     "DataCollatorForSeq2Seq", "DataCollatorWithPadding", "HfArgumentParser"),
    "peft": ("LoraConfig", "PeftModel", "PeftModelForCausalLM", "PeftConfig", "LoraModel", "PromptTuningConfig",
             "PrefixTuningConfig", "AdaLoraConfig"),
    "accelerate": ("Accelerator", "DeepSpeedPlugin", "FullyShardedDataParallelPlugin"),
    "deepspeed": ("DeepSpeedEngine", "DeepSpeedCPUAdam", "FusedAdam", "DeepSpeedZeroOptimizer"),
    "datasets": ("Dataset", "DatasetDict", "IterableDataset"),
}
"""package -> the classes it exports whose names users' tracebacks carry (trl/__init__.py, transformers/__init__.py,
peft/__init__.py, accelerate/__init__.py, deepspeed's runtime and ops, datasets/__init__.py)."""

OWNER_OF = {cls: pkg for pkg, names in OWNERS.items() for cls in names}

CHANGES = {
    ("DPOTrainer.get_batch_logps", "average_log_prob"): (
        "trl 0.9 (June 2024, the release after 0.8.6) removed average_log_prob from DPOTrainer.get_batch_logps, which "
        "now returns the sum of the log-probabilities and the number of completion tokens (hiyouga/LlamaFactory#4114, "
        "princeton-nlp/SimPO#29): install trl 0.8.6, or a release of the trainer written for the newer trl"),
    ("DPODataCollatorWithPadding.__init__", "tokenizer"): (
        "trl 0.7.2's DPODataCollatorWithPadding was built with the tokenizer; later trl releases tokenize in the "
        "trainer and the collator only pads (pad_token_id, label_pad_token_id), so code written for 0.7.2 fails "
        "on them (huggingface/trl#884 cites 0.7.2's trl/trainer/utils.py; "
        "pipilurj/bootstrapped-preference-optimization-BPO#7): install trl 0.7.2 with the transformers of that "
        "time (4.31), or port the call to the installed collator"),
    ("Trainer.__init__", "tokenizer"): (
        "transformers deprecated Trainer's tokenizer argument for processing_class in 4.46 and removed it in v5 "
        "(huggingface/transformers#32385, #41128): pass processing_class=, or install a transformers before v5"),
    ("TrainingArguments.__init__", "evaluation_strategy"): (
        "transformers renamed evaluation_strategy to eval_strategy in 4.41 and kept the old name until 4.46 "
        "(huggingface/transformers#30190): write eval_strategy, or install a transformers before 4.46"),
    ("trl", "tokenizer"): (
        "trl renamed its trainers' tokenizer argument to processing_class (huggingface/trl#2162, October 2024; the "
        "old name was kept with a warning for DPO and SFT until 0.14.0): pass processing_class=, or install the trl "
        "release the calling code was written for"),
}
"""(callee as the message names it, keyword) -> the release that changed it, with its source; (package, keyword)
for a keyword a package renamed on all its trainers' constructors."""

UNKNOWN_OWNER = ("the installed release of the package that defines {owner} does not take the keyword '{kw}': the code "
                 "calling it was written for a newer (or older) release; upgrade that package to the version your "
                 "trainer's requirements pin (`pip show` it, and the trainer's setup file names the range)")
KNOWN_OWNER = ("{owner} is {whose}, and the installed {pkg}{ver} does not take the keyword '{kw}' of {fn}(): the code "
               "calling it was written for another {pkg} release, or for a modified {pkg} that a project ships as "
               "its own copy (then install that copy, not the one from PyPI); `pip show {pkg}` and install the "
               "release the calling code pins")
"""The two wordings: the callee's package unknown (class not in `OWNERS`) or named."""


def keyword_owner(fn: str, kw: str, versions: dict[str, tuple[str, str]]) -> str:
    """What "`fn`() got an unexpected keyword argument '`kw`'" says with no traceback: `fn` as printed
    ("DPOTrainer.__init__", "DPOTrainer.get_batch_logps"), `versions` package -> (version, where read). Names the
    package that defines the class (`OWNER_OF`), and the release that changed that keyword where `CHANGES` knows
    it. Never raises."""
    owner = fn.split(".")[0]
    pkg = OWNER_OF.get(owner)
    if pkg is None:
        return UNKNOWN_OWNER.format(owner=owner, kw=kw)
    got = versions.get(pkg)
    whose = pkg + ("'" if pkg.endswith("s") else "'s")
    ver = f" {got[0]} ({got[1]})" if got else ""
    said = KNOWN_OWNER.format(owner=owner, pkg=pkg, whose=whose, kw=kw, fn=fn, ver=ver)
    change = CHANGES.get((fn, kw)) or (CHANGES.get((pkg, kw)) if fn.endswith("Trainer.__init__") else None)
    return f"{said}; {change}" if change else said
