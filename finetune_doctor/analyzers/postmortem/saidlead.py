"""Leads a short report's words give a symptom said in words, by what they name of how the run was started or
what else holds the card (``ev.said.lead``; said.py tries them after the set-up leads of saidstack.py).

Each lead is a kind of root cause users name beside the symptom, read from the words only; the finding stays at
most a warning (the rules' ``words`` case):

- **one process over several GPUs** (LlamaFactory#4213): an OOM said of several GPUs with a plain ``python
  train.py`` launch. HF's Trainer falls back to ``torch.nn.DataParallel`` when a script is started without a
  distributed launcher while several GPUs are visible (transformers training_args.py ``_setup_devices``:
  ``n_gpu = torch.cuda.device_count()`` when not distributed; trainer.py wraps the model in ``nn.DataParallel`` when
  ``args.n_gpu > 1``), which keeps the reduced gradients, the optimizer states and the gathered outputs on GPU 0;
- **the memory filling on GPU 0 only** (microsoft/singleshotpose#52 "the memory can only used in the first gpu",
  NoamRosenberg/autodeeplab#2 "only GPU0 works in training"): the same one-process shape, said by its symptom;
- **another process holding the card** (LlamaFactory#8082): an OOM said beside a previous/zombie/other process
  still on the GPU: the job gets only what that process leaves;
- **a hang of an RL trainer with vLLM** (OpenRLHF#211): a hang said with vLLM named beside a training engine
  (ZeRO, FSDP, PPO/GRPO): the trainers push the policy's weights into the vLLM engines through a patch of vLLM's
  worker that each trainer release writes for a range of vLLM releases, so a vLLM outside that range hangs or
  fails in the weight sync; the trainer's pinned vLLM is the first thing to check;
- **checkpoints that outlive save_total_limit** (ms-swift#6392), said of a full disk: the Trainer protects the
  newest and the best checkpoint (transformers trainer_utils.py ``rotate_checkpoints``);
- **ZeRO-3 with an adapter and a checkpoint** (LlamaFactory#1226): an error said of a resume or a save with ZeRO-3
  and LoRA named: each rank holds a shard of the adapter (DeepSpeed 0.19.8 runtime/zero/partition_parameters.py:
  a partitioned parameter's data is ``torch.empty(0)``), so a checkpoint written without gathering holds partial
  adapter tensors.
"""

from __future__ import annotations

import re
from typing import Any

from finetune_doctor.readers.runlogs.userwords_vocab import HELD_CARD

# a plain python launch of a training script ("python src/train.py", "python3 train_bash.py", "CUDA_VISIBLE_DEVICES=
# 0,1,2,3 python ..."), not torchrun / deepspeed / accelerate / llamafactory-cli
_PLAIN_PYTHON = re.compile(r"(?<![\w-])python3?(?:\.\d+)?\s+(?:-u\s+)?\S*(?:train\w*|finetune\w*|sft\w*)\.py\b|"
                           r"用\s*python\s*(?:直接)?(?:启动|运行|跑)|\b(?:started|launched|ran|run) (?:it )?with (?:plain )?"
                           r"`?python`?\b(?! -m torch)", re.I | re.A)
# several GPUs named: a count of cards, "multi-GPU", a CUDA_VISIBLE_DEVICES list
_SEVERAL = re.compile(r"\b[2-9] ?(?:x ?)?(?:GPUs|cards|张卡|块卡)|[二两三四五六七八2-9]\s*(?:张|块)(?:显)?卡|多卡|多张卡|"
                      r"\bmulti[- ]?GPU\b|\bseveral GPUs\b|CUDA_VISIBLE_DEVICES=\d+(?:,\d+)+", re.I | re.A)
_ONE_OK = re.compile(r"\b(?:one|single|1) (?:GPU|card)\b[^.\n]{0,30}\b(?:works?|fine|ok|runs?)\b|单卡(?:可以|能|正常|没问题)",
                     re.I | re.A)

# the memory said to fill on the first GPU only ("the memory can only used in the first gpu", "only GPU0 works",
# "只有0号卡显存满了"): what one process driving several GPUs leaves (microsoft/singleshotpose#52,
# NoamRosenberg/autodeeplab#2)
_GPU0_ONLY = re.compile(r"\bonly (?:on |uses? |used in |in |fills )?(?:the )?(?:first (?:GPU|card)|GPU ?0|gpu0|cuda:0)\b|"
                        r"\b(?:first (?:GPU|card)|GPU ?0|cuda:0) (?:only|alone)\b|"
                        r"只有\s*(?:第一张卡|0\s*号卡|卡\s*0|GPU\s*0)|只用了?\s*(?:第一张卡|0\s*号卡|GPU\s*0)", re.I | re.A)

# another process said to hold the card: a previous run that did not exit, a zombie, another user's job
_HELD = HELD_CARD   # readers/runlogs/userwords_vocab.py: also the appended oom entry there

_VLLM = re.compile(r"(?<![\w-])vllm\b", re.I | re.A)
_TRAINER = re.compile(r"\bzero[-_ ]?[0-3]?\b|\bzero\d\b|\bdeepspeed\b|\bFSDP\b|\bPPO\b|\bGRPO\b|\bRLHF\b|\bOpenRLHF\b|"
                      r"\bverl\b|\btrl\b|\bray\b|\bweights? sync\w*|\bsync\w* (?:the )?weights\b|\bupdate_weights?\b|"
                      r"权重同步|同步权重|更新权重", re.I | re.A)


# ZeRO-3 with an adapter and a checkpoint said together (LlamaFactory#1226: "ZeRO-3和LoRA ... checkpoint恢复训练 ...
# dimension mismatch ... 无法把所有的LoRA参数保存下来"): the adapter saved from ZeRO-3's shards
# checkpoints said to outlive save_total_limit (ms-swift#6392: "step 200, 250, 300's checkpoint co-exist")
_LIMIT = re.compile(r"\bsave_total_limit\b|\bcheckpoints?\b[^.\n。]{0,40}?\b(?:co-?exist\w*|pil\w+ up)|"
                    r"(?:checkpoint|ckpt)\S{0,10}(?:没有?被?删除|越来越多)", re.I | re.A)
_Z3 = re.compile(r"\bzero[-_ ]?3\b|\bzero stage 3\b|\bstage[-_ ]?3\b|\bz3\b", re.I | re.A)
_ADAPTER = re.compile(r"\bq?lora\b|\badapters?\b|\bpeft\b", re.I | re.A)
_CKPT = re.compile(r"\bcheckpoints?\b|\bresum\w*|\bsav(?:e|es|ed|ing)\b|load_best_model_at_end|保存|恢复训练|续训", re.I | re.A)


# FSDP's use_orig_params said off ("fsdp_use_orig_params=False", "use_orig_params: false")
_ORIG_OFF = re.compile(r"use_orig_params\W{0,4}(?:=|:)?\s*(?:False|false|0)\b")


def said_lead(said: dict[str, Any]) -> str | None:
    """The lead of the module docstring that the words of `said` (``ev.said``: symptom, memory, text) give, or
    None."""
    text = str(said.get("text") or "")
    sym = said.get("symptom")
    if sym == "oom" and _PLAIN_PYTHON.search(text) and (_SEVERAL.search(text) or _ONE_OK.search(text)):
        return ("The words name a plain `python` launch over several GPUs: without a distributed launcher HF's "
                "Trainer runs one process over every visible GPU with torch DataParallel, which keeps the reduced "
                "gradients, the optimizer states and the gathered outputs on GPU 0, so GPU 0 runs out first and "
                "more cards do not help (a DeepSpeed file is then not used either); start it with "
                "`llamafactory-cli train` (it starts torchrun for several GPUs), `torchrun --nproc_per_node N` or "
                "`deepspeed`.")
    if sym == "oom" and _GPU0_ONLY.search(text):
        return ("The words say the memory fills on the first GPU only: that is what one process driving several "
                "GPUs leaves (torch DataParallel, which HF's Trainer falls back to when a script is started with "
                "plain `python` while several GPUs are visible, keeps the reduced gradients, the optimizer states and "
                "the gathered outputs on GPU 0), or a run that uses one GPU at all; start one process per GPU "
                "(`llamafactory-cli train`, `torchrun --nproc_per_node N`, `deepspeed`) and check that every GPU "
                "shows a process in `nvidia-smi`.")
    if sym == "oom" and _HELD.search(text):
        return ("The words say another process holds the card (a previous run that did not exit, a zombie, "
                "another job): this run gets only the memory it leaves; `nvidia-smi` lists the processes on each "
                "GPU (`doctor gpus` flags them), end the stale one (`kill PID`, or `fuser -v /dev/nvidia*`) and "
                "rerun.")
    if sym == "disk-full" and _LIMIT.search(text):
        return ("The words say checkpoints outlived save_total_limit: HF's Trainer never deletes the newest "
                "checkpoint nor, once an evaluation has picked one, the best (`metric_for_best_model`, which load_best_model_at_end sets), so it keeps "
                "max(save_total_limit, 2) folders after the first evaluation (transformers 5.6.0 trainer_utils.py "
                "`rotate_checkpoints`), and each full checkpoint holds the optimizer states too; size the disk for "
                "one more checkpoint, or save the weights only (`save_only_model: true`).")
    if sym in ("error", "version") and _Z3.search(text) and _ADAPTER.search(text) and _CKPT.search(text):
        return ("The words name ZeRO-3 with an adapter and a checkpoint: under ZeRO-3 each rank holds a shard of "
                "every parameter, the adapter's too (DeepSpeed keeps an empty placeholder in the module), so a "
                "checkpoint written from the module's own parameters without gathering them holds empty or partial "
                "LoRA tensors, and resuming from it (or load_best_model_at_end) fails on their shapes while the "
                "final save, gathered, is whole; set `stage3_gather_16bit_weights_on_model_save: true` in the "
                "DeepSpeed JSON, use a transformers/peft release whose Trainer gathers the adapter at every save "
                "(`pip show transformers peft deepspeed`), or train the adapter under ZeRO-2 (its optimizer states "
                "are small), and look at the shapes in a checkpoint's adapter_model.safetensors (a `[0]` is a shard).")
    if sym == "no-update" and _ORIG_OFF.search(text):
        return ("The words name FSDP with use_orig_params off: FSDP then replaces the model's parameters by flat "
                "parameters when the model is wrapped, so an optimizer built on the original parameters before "
                "that (before `accelerator.prepare(model)`) steps tensors the wrapped model no longer uses and the "
                "loss does not move (huggingface/accelerate#2665, #3256); set `fsdp_use_orig_params: true` or "
                "create the optimizer after the model is prepared.")
    if sym == "hang" and _VLLM.search(text) and _TRAINER.search(text):
        return ("The words name vLLM beside the training engine: RL trainers push the policy's weights into the "
                "vLLM engines through a patch of vLLM's worker written for a range of vLLM releases, and a vLLM "
                "outside that range hangs or fails in that weight sync; first install the vLLM release the "
                "trainer pins (its requirements or install extra), then look at the live processes (`py-spy dump "
                "--pid PID`).")
    return None


# Round 14 (wt/pmfix14a): the host's RAM said to run out (or a kill said), placed by the words in a phase. What
# fills host RAM in each phase (sources in the sentences' own terms):
# - loading: each training process reads the checkpoint into host memory before it reaches its card; FSDP's ranks all
#   do unless fsdp_cpu_ram_efficient_loading leaves it to rank 0 (rules/fsdp-host-ram.yaml), and a ZeRO-3 model is
#   partitioned while it is built only under deepspeed.zero.Init (transformers 5.6.0 modeling_utils.py:1535, 3660;
#   rules/zero3-model-loads-whole.yaml for the launch that skips it);
# - tokenization: LLaMA-Factory maps the dataset with num_proc=preprocessing_num_workers (0.9.5 data/loader.py:139,
#   250), each a process holding its shard's rows, inside main_process_first (:302, :313), so the main process of
#   each node preprocesses first (local=True unless data_shared_file_system) and the other ranks read its cache;
# - save: under ZeRO-3 with stage3_gather_16bit_weights_on_model_save, rank 0 copies every gathered 16-bit parameter
#   to its host before writing it (DeepSpeed _zero3_consolidated_16bit_state_dict; analyzers/memory/hostsave.py, the
#   one home of that size);
# - evaluation: with eval_accumulation_steps set, the Trainer moves the predictions (the logits: batch x sequence x
#   vocabulary) to the CPU and keeps them all for compute_metrics (transformers 5.6.0 training_args.py:438-441).
_HOST_PHASE = {
    "loading": ("The words place it at the model load: every training process reads the checkpoint into host RAM "
                "before it reaches its card (about 2 bytes per parameter in bf16, times the processes on the node), "
                "unless FSDP's `fsdp_cpu_ram_efficient_loading` leaves it to rank 0 or ZeRO-3 builds the model under "
                "zero.Init; fewer processes per node, rank-0 loading, or more RAM or swap get it through."),
    "tokenization": ("The words place it in the dataset's preprocessing: LLaMA-Factory maps the dataset with "
                     "`preprocessing_num_workers` processes, each holding its share of the rows, before the first "
                     "step; fewer workers, `streaming: true`, or tokenizing once into `tokenized_path` lowers it."),
    "save": ("The words place it at a checkpoint save: under ZeRO-3 with `stage3_gather_16bit_weights_on_model_save`"
             " rank 0 copies the whole gathered 16-bit model into its host memory to write it (an adapter only, "
             "where the Trainer gathers the trainable part), on top of what training already holds; more RAM on "
             "rank 0's node, or the setting off (DeepSpeed's shards are written, merged later with "
             "zero_to_fp32.py), avoids it."),
    "evaluation": ("The words place it in evaluation: with `eval_accumulation_steps` set, HF's Trainer moves every "
                   "batch's logits (batch x sequence x vocabulary) to host memory and keeps them all for "
                   "compute_metrics; `prediction_loss_only: true`, a smaller eval set, or no token-level metric "
                   "keeps them off the host."),
}


def host_lead(said: dict[str, Any]) -> str | None:
    """For the host's RAM said to run out or a process said killed (symptoms host-oom, killed, stopped), what fills
    host RAM in the phase the words name (`_HOST_PHASE`: loading, tokenization, save, evaluation; sources above
    it); None for another symptom or phase."""
    if said.get("symptom") not in ("host-oom", "killed", "stopped"):
        return None
    return _HOST_PHASE.get(str(said.get("phase")))
