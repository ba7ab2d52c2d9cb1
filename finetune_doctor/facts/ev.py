"""``ev``: what a run's leftovers show — logs, trainer_log.jsonl, trainer_state.json, event files, recordings —
as one timeline and the detector results the postmortem rules judge (analyzers/postmortem/timeline.py `analyze`).

Each detector field is a mapping (None when the detector found nothing); every ``location`` in it is
``{file, line, column, key}`` of the evidence line. The detectors' own sub-fields are listed in evidence.py
("The ``ev`` fact namespace") and are accepted as written.
"""

from __future__ import annotations

from finetune_doctor.facts.lint import KEY_ITEM
from finetune_doctor.facts.schema import F, Namespace, OPEN

_DETECTORS = {
    "completed": "the training loop finished", "steps": "first, last, total, logged",
    "loss": "loss curve summary", "grad_norm": "grad-norm curve summary", "lr": "learning-rate schedule",
    "first_loss": "the first logged loss against ln(vocab)", "nan": "the first non-finite loss or grad norm",
    "grad_nan_only": "a non-finite grad_norm the loss never felt: {step, count, loss_from, loss_to, detail, location}",
    "loss_zero": "loss stuck at 0",
    "diverged": "a loss that fell, then climbed back: {first, first_step, low, low_step, last, last_step, back_pct, "
                "gn_text, lr, lr_text, location}", "loss_spike": "the first loss spike", "grad_spike": "the first grad-norm spike",
    "grad_const": "a constant grad norm", "scale": "DeepSpeed's loss-scale trajectory",
    "amp_skips": "HF AMP skipped steps", "benign_overflow": "overflow messages that are harmless",
    "fp16": "fp16 in use and what the model was trained in",
    "lr_high": "a learning rate above the safe range: {lr, threshold, step, what, reason, suggested, fix_title (the fix's "
               "title, causes.py), finetuning_type, location}",
    "oom": "a CUDA out-of-memory error", "nccl": "a collective that timed out or failed",
    "nccl_error": "an NCCL error that is not a timeout: {desc, meaning, rank, count, warns, step, location}",
    "killed": "a process killed by a signal", "crash": "an exception that ended the run",
    "host_alloc": "a host allocation that failed in-process (c10 DefaultCPUAllocator), not a kill: {bytes, "
                  "size_text, size_words, huge, phase, evidence, where_text, advice, allocator, raised_text, count, step, "
                  "location}",
    "attention_warning": "the attention backend warned",
    "gpus": "per-card memory from a recording",
    "model": "model facts the logs state", "world": "world size the logs state",
    "world_split": "logs or a launch script that start the ranks of one run with different world sizes "
                   "(analyzers/postmortem/worldsplit.py): {text, logs, cause, location, worlds, tasks}",
    "stack": "package versions the logs state: {package: {version, source}} (llamafactory-cli env, ds_report, "
             "DeepSpeed's init line, NCCL INFO)",
    "cuda_error": "a CUDA runtime/library error or device-side assert: {kind, exc, status, call, assert_site, "
                  "assert_cond, out_of_vocab, table, rank, ranks, count, step, meaning, fix_title, location, what (a CUDA "
                  "error / an Ascend NPU error), status_text}",
    "xid": "kernel Xid lines: {events: [{xid, pci, pid, process, host, meaning, action, who, location}], worst, "
           "count, codes, hardware, location}",
    "health": "run health (analyzers/postmortem/health.py): {no_update {why, evidence, check, location}, "
              "stopped {last_step, total, total_source, percent, bar_only, lead, location}, hang {the same + evidence, lead, "
              "more, shown (the logs show it, not only allow it)} (a start-up hang: last_step and total None)}",
    "said": "the user's own description of the failure, read from words when no log line gave evidence "
            "(analyzers/postmortem/said.py): {symptom [disk-full | nccl-error | image-tokens | native-crash | loss-scale | no-samples | "
            "host-oom | killed | oom | "
            "cuda-error | no-update | nan | loss-zero | diverged | timeout | hang | stopped | version | error], words, phase [evaluation | save | "
            "tokenization | loading | end | start | resume], phase_words, step, after, text, location, reading, "
            "stack_text (the packages and versions the words name, judged against LF's start-up ranges, and what to "
            "run: analyzers/postmortem/saidstack.py), version_text (a version conflict's generic words, with `pip show "
            "PACKAGE` only when stack_text names no command), lead (what the set-up words say of the kind), versions "
            "({package: version} the words state), nodes_only (an error said only of multi-node training), memory "
            "[gpu | None: an oom whose words do not say which memory], lr_first (a NaN or loss of 0 said to follow a "
            "loss that first trained: the learning rate first)}",
    "dict_steps": "HF metric dicts re-placed from the warmup lr, the epoch and logging_steps where the training bar "
                  "at their line disagreed (analyzers/postmortem/dictsteps.py): {basis [warmup-lr | epoch], moved, "
                  "first_moved {line, step}}",
    "ranks": "the ranks of a distributed run: {count, nodes, node_count, table, first_failed {rank, node, gpu, "
             "kind, state, step, phase, op, seq, cause, how, location, unseen, verb}, states {state: count}, "
             "seq_behind {ranks, value, others, gap, what}, waiting, waiting_count, stragglers [{rank, node, sec_per_step, ratio, why}], "
             "desync {source, lagging, seq, how, location}, failed_count}",
}

SAID_SYMPTOMS = ("disk-full", "nccl-error", "image-tokens", "native-crash", "loss-scale", "no-samples", "host-oom",
                 "killed", "oom", "cuda-error", "no-update", "nan", "loss-zero", "diverged", "timeout", "hang", "stopped",
                 "version", "error", "interrupted")
"""The symptoms words can name (readers/runlogs/userwords_vocab.py SYMPTOMS, tests/test_postmortem_said_kinds.py
pins the two lists equal): the values rule message tables switch on (``ev.said.symptom``)."""

NAMESPACE = Namespace("ev", __doc__.split("\n\n")[0], {
    **{k: OPEN(v) for k, v in _DETECTORS.items()},
    # said's other sub-fields are accepted as written (open); its symptom declares the values tables may name
    "said": F("dict", _DETECTORS["said"], open=True, fields={
        "symptom": F("str", "the symptom the words name", values=SAID_SYMPTOMS)}),
    "files": F("int", "files read"), "readable": F("int", "files that yielded anything"),
    "unread": F("list", "paths with problems"),
    "nccl_seen": F("str", "file:line of the first NCCL INFO/WARN line read (NCCL_DEBUG output), or null"), "has_metrics": F("bool", "a loss curve was found"),
    "loss_spikes": F("int", "loss spikes found"), "grad_spikes": F("int", "grad-norm spikes found"),
    "restarts": F("list", "resumes and relaunches", items={
        "step": F("int", "step"), "kind": F("str", "resume | relaunch | session-start"),
        "detail": F("str", "what was seen"), "location": OPEN("where")}),
    "ga_loss": F("dict", "a loss that follows gradient accumulation (a pasted table, or num_items_in_batch prints): "
                 "analyzers/postmortem/gaacc.py", fields={
        "variant": F("str", "the evidence's shape and the transformers release against gaacc.AFFECTED",
                     values=("table-in", "table-out", "table-unknown", "items-in", "items-unknown")),
        "shape": F("str", "table | items", values=("table", "items")), "ga": F("int", "gradient_accumulation_steps"),
        "release": F("str", "transformers release"), "release_text": F("str", "the release and where it was read"),
        "rows_text": F("str", "GA: loss pairs"), "columns": F("str", "the table's loss and GA columns"),
        "counts_text": F("str", "num_items_in_batch counts of one step"), "location": OPEN("where")}),
    "image_cut": F("dict", "a multimodal sample's placeholders cut: transformers' features/tokens mismatch with fewer "
                   "tokens than features (analyzers/postmortem/mmcause.py)", fields={
        "state": F("str", "cut (the error's counts show it) | said (the user's words name the mismatch, no count: "
                   "analyzers/postmortem/said.py said_image_cut)", values=("cut", "said")), "modality": F("str", "image | video"),
        "tokens": F("int", "placeholder tokens in input_ids"), "features": F("int", "features the vision tower returned"),
        "missing": F("int", "features - tokens"), "text": F("str", "the matched words"),
        "phase_words": F("str", "state said: the words that named the phase, else None"),
        "location": OPEN("where")}),
    "basis": F("str", "what the symptom rules read: the run's own output (log) or, when it gave no evidence, the "
               "user's description of the failure (words: ev.said)", values=("log", "words")),
    "data_parallel": F("dict", "one process over several GPUs (analyzers/postmortem/dpcause.py): HF Trainer's "
                       "DataParallel line, or a pasted plain `python` launch under several visible GPUs with torch's "
                       "same-device error", open=True, fields={
        "basis": F("str", "line (the Trainer's line) | command (the pasted launch and error)", values=("line", "command"))}),
    "no_samples": F("str", "what says the dataset gave no sample: log (LLaMA-Factory's own check ended the run, "
                    "analyzers/postmortem/samplecause.py) or words (ev.said); None otherwise", values=("log", "words")),
    "refused_keys": F("list", "the keys LLaMA-Factory's argument parser refused in the exception that ended the run "
                      "(\"Some keys are not used by the HfArgumentParser\"), judged by the key schema: "
                      "analyzers/postmortem/refusal.py; the items of unknown-key and renamed-key in a postmortem",
                      items={**KEY_ITEM, "location": OPEN("the log line"),
                             "quote": F("str", "the refusal as printed")}),
    "undefined_dataset": F("list", "LLaMA-Factory's \"Undefined dataset X in dataset_info.json\" in the exception "
                           "that ended the run (analyzers/postmortem/refusal.py): the item of dataset-not-defined's "
                           "`log` case", items={**KEY_ITEM, "location": OPEN("the log line"),
                                                "check": F("str", "the case of the rule's table", values=("log",)),
                                                "quote": F("str", "the refusal as printed")}),
    "zero_stage": F("int", "ZeRO stage from the log, else the DeepSpeed config"),
    "skipped": F("list", "what was not read and why", items={
        "path": F("str", "path"), "why": F("str", "the reason"), "extra": F("str", "the install extra that reads it")}),
    "overlap_comm": F("bool", "overlap_comm from the log, else the DeepSpeed config"),
    "events": F("list", "the timeline", items={
        "step": F("int", "step"), "kind": F("str", "DESIGN.md timeline kind"), "detail": F("str", "what happened"),
        "source": F("str", "file:line")}),
})


PAST_START_UP = {
    "oom": "the run ran out of GPU memory",
    "cuda_error": "the run died with a CUDA error",
    "nccl": "a collective timed out",
    "nccl_error": "NCCL failed in a collective",
    "xid": "the GPU driver logged an Xid while the run used the card",
}
"""Detectors whose evidence can only come from a run past LLaMA-Factory's argument parsing: HfArgumentParser,
get_train_args and TrainingArguments.__post_init__ (which opens the DeepSpeed file and asks about bf16) run on the
CPU before any model, dataset or collective touches a GPU (LF tuner.py ``run_exp``: ``get_train_args`` first)."""


def past_start_up(evf: dict) -> str | None:
    """Why the logs show the run got past start-up (argument parsing), or None when they do not: training steps
    logged (``steps.last`` / ``steps.logged``), or a failure `PAST_START_UP` names. A start-up refusal judged on the
    config (missing key, unknown key, a DeepSpeed file not here) is then contradicted by the run itself (trial 3:
    LlamaFactory#5617 died with "CUDA error: invalid argument" at the first iteration, yet its partial paste got
    "output_dir is not set" as an error)."""
    steps = evf.get("steps") or {}
    if steps.get("last") is not None or steps.get("logged"):
        return "the logs show training steps"
    for key, why in PAST_START_UP.items():
        if evf.get(key):
            return why
    if (evf.get("crash") or {}).get("in_loop"):
        return "the traceback runs through the Trainer's training loop"
    if (evf.get("image_cut") or {}).get("state") == "cut":
        # counted in the log, not said in words: transformers compares the image features with the placeholder
        # tokens inside the model's forward (e.g. Qwen2-VL's get_placeholder_mask), so a batch reached the model
        return "the run reached the model's forward pass (the image features/tokens check)"
    return None
