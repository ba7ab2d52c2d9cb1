"""Rounds 3-9's dev misses by kind (issue #25, session 13, wt/pmfix13b): other wordings and other pastes of each
kind, modelled on how users paste them, never the rounds' own texts. A finding read from words alone is at most a
warning.

- a traceback cut inside a trainer frame that does one set-up job (analyzers/postmortem/framecause.py): the
  Trainer's FSDP + PEFT set-up (transformers trainer.py ``_fsdp_qlora_plugin_updates``, accelerate#2761),
  accelerate's ``prepare``, a resume's ``_load_from_checkpoint``, ``Auto*.from_pretrained``: the likely kinds are
  named and the lines after the cut asked for; a frame that does many things names none; a checkpoint write
  outside transformers' Trainer (mmengine's hook, torch.save) and torch's cross_entropy likewise;
- torch's embedding on a weight that is not 2-D (aten/src/ATen/native/Embedding.cpp ``embedding_symint``): ZeRO-3
  or FSDP weights used outside their engine, most often a DeepSpeed ZeRO-3 config without a distributed launch
  (LlamaFactory#4557's kind), as a log line, a title or a sentence (launchcause.py);
- a DeepSpeedEngine method asked of the bare model, retyped from a screenshot (quotes lost, "obiect", "save
  checkpoint": LlamaFactory#4077's kind): the same missing distributed launch (launchcause.NO_ENGINE_TYPED);
- autograd's "element 0 of tensors does not require grad" quoted without its class (userwords_vocab.py);
- an "out of memory" said with the host's RAM named and no GPU word (axolotl#2975's kind: RAM filling while a
  pre-tokenised dataset loads) is host RAM (userwords.py), and a negation is a whole word ("the node runs out of
  memory": "node" negates nothing; userwords_vocab.NEGATED);
- leads of an OOM said with a plain ``python`` launch over several GPUs (DataParallel, LlamaFactory#4213's kind),
  an OOM said beside another process holding the card (LlamaFactory#8082's kind), a hang said with vLLM beside the
  training engine (OpenRLHF#211's kind) (saidlead.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pmhelp import first_of_text as first


# -- a traceback cut inside a trainer frame -------------------------------------------------------------------------

_HEAD = """Traceback (most recent call last):
  File "/workspace/sft_qlora.py", line 142, in <module>
    trainer.train()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 1885, in train
    return inner_training_loop(
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2033, in _inner_training_loop
"""

CUT_FSDP = {
    "cut mid-name": _HEAD + "    self._fsdp_qlo",
    "the whole call": _HEAD + "    self._fsdp_qlora_plugin_updates()",
    "rank-prefixed, inside the function": "\n".join(
        "[rank1]: " + ln for ln in (_HEAD + """    self._fsdp_qlora_plugin_updates()
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 4778, in _fsdp_qlora_plugin_updates
    fsdp_plugin.set_mixed_precision(""").splitlines()),
}


@pytest.mark.parametrize("case", sorted(CUT_FSDP))
def test_a_cut_in_the_fsdp_peft_set_up_names_the_releases_out_of_step(tmp_path, case):
    f = first(tmp_path, CUT_FSDP[case])
    assert f.name == "run-crashed"
    assert "the paste is cut inside the Trainer's FSDP set-up for a PEFT model" in f.message
    assert "accelerate" in f.message and "pip show transformers accelerate peft bitsandbytes" in f.message
    assert "give the lines after the cut" in f.message


def test_a_cut_in_accelerates_prepare_names_the_wrap(tmp_path):
    f = first(tmp_path, _HEAD + """    self.model = self.accelerator.prepare(self.model)
  File "/opt/conda/lib/python3.10/site-packages/accelerate/accelerator.py", line 1292, in prepare
    result = tuple(""")
    assert f.name == "run-crashed"
    assert "the paste is cut inside accelerate's wrap of the model" in f.message


def test_a_cut_in_a_resume_names_the_checkpoint_kinds(tmp_path):
    f = first(tmp_path, _HEAD + """    self._load_from_checkpoint(resume_from_checkpoint)
  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 2592, in _load_from_checkpoint
    state_dict = torch.load(""")
    assert f.name == "run-crashed"
    assert "a resume from a checkpoint" in f.message and "weights_only" in f.message


def test_a_cut_in_a_processor_load_names_an_unknown_model_type(tmp_path):
    f = first(tmp_path, """Traceback (most recent call last):
  File "/home/u/finetune.py", line 31, in <module>
    tokenizer = AutoTokenizer.from_pretrained(args.model_path, trust_remote_code=True)""")
    assert f.name == "run-crashed"
    assert "a model type the installed transformers does not know" in f.message


def test_a_cut_in_the_training_step_names_no_kind(tmp_path):
    """The training step does everything (forward, loss, backward): no kind is named from it."""
    f = first(tmp_path, _HEAD + "    tr_loss_step = self.training_step(model, inputs)")
    assert f.name == "run-crashed"
    assert "the paste is cut inside" not in f.message


def test_a_cut_in_a_checkpoint_hook_names_the_disk_and_quota(tmp_path):
    f = first(tmp_path, """2025-03-02 11:20:07 - mmengine - INFO - Saving checkpoint at 20 epochs
Traceback (most recent call last):
  File "tools/train.py", line 133, in <module>
    main()
  File "/opt/conda/lib/python3.10/site-packages/mmengine/runner/loops.py", line 103, in run
    self.runner.call_hook('after_train_epoch')
  File "/opt/conda/lib/python3.10/site-packages/mmengine/hooks/checkpoint_hook.py", line 352, in after_train_epoch
    self._save_checkpoint(runner)""")
    assert f.name == "run-crashed"
    assert "the paste is cut inside a checkpoint write" in f.message and "Disk quota exceeded" in f.message


def test_a_cut_in_cross_entropy_names_an_oom_as_likely_not_as_seen(tmp_path):
    f = first(tmp_path, """[rank3]: Traceback (most recent call last):
[rank3]:   File "/usr/local/lib/python3.11/site-packages/transformers/loss/loss_utils.py", line 36, in fixed_cross_entropy
[rank3]:     loss = nn.functional.cross_entropy(source, target, ignore_index=ignore_index, reduction=reduction)
[rank3]:   File "/usr/local/lib/python3.11/site-packages/torch/nn/functional.py", line 3462, in cross_entropy
[rank3]:     return torch._C._nn.cross_entropy_loss(""")
    assert f.name == "run-crashed"   # not cuda-oom: the OOM is a likely kind, not a line the log holds
    assert "the loss over the logits" in f.message and "CUDA out-of-memory" in f.message


# -- "'weight' must be 2-D": ZeRO-3 / FSDP weights outside their engine ---------------------------------------------

WEIGHT_2D = {
    "the log line": "RuntimeError: 'weight' must be 2-D",
    "a rank-prefixed traceback": """[rank0]: Traceback (most recent call last):
[rank0]:   File "/root/miniconda3/lib/python3.10/site-packages/torch/nn/modules/sparse.py", line 190, in forward
[rank0]:     return F.embedding(
[rank0]:   File "/root/miniconda3/lib/python3.10/site-packages/torch/nn/functional.py", line 2551, in embedding
[rank0]:     return torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse)
[rank0]: RuntimeError: 'weight' must be 2-D""",
}
WEIGHT_2D_WORDS = {
    "a Chinese title": "单卡用 ds_z3_config.json 训练报错：'weight' must be 2-D",
    "an English sentence": "Full fine-tuning with zero3 on one GPU fails with 'weight' must be 2-D at the first step.",
    "a question title": "Why do I get 'weight' must be 2-D when training with DeepSpeed stage 3 on a single card?",
    "a title without the quotes": "zero3 单卡 报错 weight must be 2-D",
}


@pytest.mark.parametrize("case", sorted(WEIGHT_2D))
def test_weight_not_2d_in_a_log_names_the_missing_distributed_launch(tmp_path, case):
    f = first(tmp_path, WEIGHT_2D[case])
    assert f.name == "run-crashed" and f.severity == "error"
    assert "no distributed launcher" in f.message and "FORCE_TORCHRUN=1" in f.message


def test_weight_not_2d_said_of_a_teacher_model_names_the_unwrapped_model(tmp_path):
    """Modelled on arcee-ai/DistillKit#3 (a teacher model never passed to deepspeed.initialize under ZeRO-3)."""
    f = first(tmp_path, "Distillation with Deepspeed Zero3: the teacher forward fails with 'weight' must be 2-D")
    assert f.name == "run-crashed" and "teacher model" in f.message


@pytest.mark.parametrize("case", sorted(WEIGHT_2D_WORDS))
def test_weight_not_2d_in_words_is_read_the_same_and_stays_a_warning(tmp_path, case):
    f = first(tmp_path, WEIGHT_2D_WORDS[case])
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "FORCE_TORCHRUN=1" in f.message


# -- autograd's no-grad text quoted without its class ----------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "element 0 of tensors does not require grad and does not have a grad_fn",
    "全参数微调 loss.backward() 报错 element 0 of tensors does not require grad",
    "Training with BAdam crashes in backward: element 0 of tensors does not require grad and does not have a grad_fn",
])
def test_the_no_grad_text_in_words_names_what_has_no_grad(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "the loss does not depend on any tensor that requires grad" in f.message


# -- leads a short report's words give ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "OOM on 4x RTX 3090 with python src/train.py, one GPU works fine",
    "四张卡用 python src/train.py 跑就爆显存，单卡可以",
    "CUDA_VISIBLE_DEVICES=0,1,2,3 python train_bash.py --stage pt ... runs out of GPU memory on GPU 0",
])
def test_an_oom_said_with_a_plain_python_launch_over_gpus_names_data_parallel(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"
    assert "plain `python` launch over several GPUs" in f.message and "DataParallel" in f.message


@pytest.mark.parametrize("text", [
    "4 GPUs but the memory is only used in the first GPU, so I got OUT OF MEMORY",
    "Only GPU0 fills up and runs out of memory while the other cards stay empty",
    "多卡训练只有0号卡显存爆了，其他卡没用上",
])
def test_an_oom_said_on_gpu_0_only_names_one_process_over_the_gpus(tmp_path, text):
    """Modelled on microsoft/singleshotpose#52 and NoamRosenberg/autodeeplab#2 (the memory used on the first GPU
    only)."""
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"
    assert "fills on the first GPU only" in f.message and "DataParallel" in f.message


def test_an_oom_said_under_torchrun_gets_no_data_parallel_lead(tmp_path):
    f = first(tmp_path, "OOM on 4 GPUs with torchrun --nproc_per_node 4 src/train.py")
    assert f.name == "cuda-oom"
    assert "DataParallel" not in f.message


@pytest.mark.parametrize("text", [
    "GPU out of memory because a previous training process did not exit and still holds the GPU",
    "显存不足，原来是之前的训练进程没有退出，还占用着显卡",
    "OOM at start: the GPU is still occupied by a zombie process from the last run",
    "CUDA OOM because GPU memory is occupied by another process",
    "显卡被别人的进程占着，训练一开始就 OOM",
    # the card said held, with no OOM word, beside torchrun's ChildFailedError (LlamaFactory#8082's kind)
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: the previous training process was still "
    "holding the GPU",
])
def test_an_oom_said_beside_another_process_on_the_card_names_it(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "cuda-oom" and f.severity == "warning"
    assert "another process holds the card" in f.message and "nvidia-smi" in f.message


@pytest.mark.parametrize("text", [
    # modelled on OpenRLHF/OpenRLHF#349 ("the async_fit_actor_model gets stuck"; the maintainers: which vllm version)
    "PPO with Ray and vLLM engines gets stuck at async_fit_actor_model",
    "GRPO 用 vllm 生成时 deepspeed 训练卡住不动",
    "Training gets stuck at the weight sync to vllm engines (OpenRLHF, zero2)",
    "训练卡在 vllm 权重同步那一步",
])
def test_a_hang_said_with_vllm_beside_the_trainer_names_the_weight_sync(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-hang" and f.severity == "warning"
    assert "vLLM release the trainer pins" in f.message


def test_a_hang_said_without_vllm_gets_no_weight_sync_lead(tmp_path):
    f = first(tmp_path, "PPO training hangs under ZeRO-3 after 200 steps")
    assert f.name == "run-hang"
    assert "vLLM" not in f.message


@pytest.mark.parametrize("text", [
    "AttributeError: LlamaForCausalLM object has no attribute save_checkpoint",
    "单卡 deepspeed 训练到保存时报错 AttributeError: Qwen2ForCausalLM'obiect has no attribute 'save checkpoint'",
    "Saving fails with AttributeError \"GemmaForCausalLM\" object has no attribute \"save_checkpoint\" on one GPU",
])
def test_a_retyped_engine_method_error_names_the_missing_launch(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "never wrapped by deepspeed.initialize" in f.message and "FORCE_TORCHRUN=1" in f.message


@pytest.mark.parametrize("text, rule", [
    ("DPO loss goes to inf with fp16 on a Llama-2 checkpoint", "nan-loss"),
    ("DPO 训练用 fp16，loss 一直是 0", "loss-stuck-zero"),
    ("loss is 0 or inf when training DPO in fp16", "loss-stuck-zero"),
])
def test_a_dpo_loss_of_0_or_inf_said_with_fp16_names_fp16_first(tmp_path, text, rule):
    """LlamaFactory#2819's kind (an fp16 run of a bf16-trained model whose DPO loss went to 0 or inf), said with
    fp16 in the words; "loss error" alone (that thread's title) names no value and stays unread."""
    f = first(tmp_path, text)
    assert f.name == rule and f.severity == "warning"
    assert "First: the words name fp16" in f.message


@pytest.mark.parametrize("text", [
    "RAM climbs to 1.3 TB while loading the tokenized dataset from disk until the node runs out of memory",
    "Loading a 550 GB pre-tokenized dataset: htop shows memory filling up, then the node is out of memory",
    "加载预处理好的数据集时系统内存一直涨，最后 out of memory",
])
def test_out_of_memory_said_with_the_hosts_ram_named_is_host_ram(tmp_path, text):
    f = first(tmp_path, text)
    assert f.name == "host-oom-killed" and f.severity == "warning"


def test_out_of_memory_said_of_the_gpu_beside_ram_stays_the_gpus(tmp_path):
    f = first(tmp_path, "GPU runs out of memory at step 10 although 512 GB of RAM are free")
    assert f.name == "cuda-oom"


def test_the_reference_model_lead_outranks_a_frames_lead(tmp_path):
    """A KTO run cut in its first step inside accelerate's wrap: the known reference-model fault of LF's DPO/KTO
    trainers under FSDP (refmodel.py, more specific: it reads the stage and release) replaces the kinds the frame
    names (fixture: fixtures/postmortem/trial9/kto-first-step, with the wrap frame appended)."""
    src = Path(__file__).resolve().parent.parent / "fixtures" / "postmortem" / "trial9" / "kto-first-step" / "train.log"
    text = src.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join("[rank1]: " + ln for ln in (
        '  File "/opt/conda/envs/lf/lib/python3.11/site-packages/transformers/trainer.py", line 2318, in '
        '_inner_training_loop',
        "    self.model = self.accelerator.prepare(self.model)"))
    f = first(tmp_path, text)
    assert f.name == "run-crashed"
    assert "known fault of LLaMA-Factory's DPO/KTO trainers" in f.message
    assert "the paste is cut inside" not in f.message


@pytest.mark.parametrize("text", [
    "tmp-checkpoint rename fails at save with transformers 4.36.0",
    "Saving crashes: the rename of tmp-checkpoint-500 failed under deepspeed, transformers 4.36",
    "保存时 tmp-checkpoint 重命名报错，transformers 4.36.0",
])
def test_a_staged_save_rename_said_to_fail_names_436s_episode(tmp_path, text):
    """LlamaFactory#1839 / transformers#28027's kind (4.36's staged save renamed from every process), said in
    words: an error (a warning) whose save lead names the release's episode and its fix."""
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "#27925" in f.message and "4.37.0" in f.message


@pytest.mark.parametrize("text, pkg", [
    ("FSDP QLoRA training fails after upgrading accelerate to 0.30.0", "accelerate"),
    ("升级 accelerate 到 0.30.0 之后报错", "accelerate"),
    ("SFT broke after updating transformers to 4.40.0", "transformers"),
])
def test_a_failure_said_after_moving_a_package_to_a_release_names_it(tmp_path, text, pkg):
    """accelerate#2761's kind in words (a run that failed once accelerate went to 0.30.0)."""
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert f"The words name {pkg}" in f.message


@pytest.mark.parametrize("text", [
    "Training dies right after saving checkpoint-1000 with ChildFailedError, exitcode 1",
    "训练保存 checkpoint 之后进程退出，报 ChildFailedError",
    "the run stopped with a RuntimeError right after the checkpoint save",
])
def test_a_process_said_to_exit_with_a_python_error_after_a_save_is_a_crash_at_the_save(tmp_path, text):
    """LlamaFactory#6848's kind in words (a child that exited 1 after a save): an error, its phase the save; what
    the words cannot say (which exception) is asked for. A positive exit code alone stays no evidence
    (tests/test_postmortem_short_pastes.py)."""
    f = first(tmp_path, text)
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "the failure was in a checkpoint save" in f.message and "Give the whole traceback" in f.message


def test_torchelastics_summary_is_not_read_as_words(tmp_path):
    """The summary's own "exitcode : 1 (pid: N)" lines stay the summary's reading, not an exit code said in words."""
    f = first(tmp_path, """  host      : node-3
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 51234)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html""")
    assert f.name == "run-crashed" and f.severity == "error"
    assert "failure summary reports without its traceback" in f.message


def test_a_cut_in_the_data_loader_names_the_collator_and_workers(tmp_path):
    f = first(tmp_path, _HEAD + """    batch_samples, num_items_in_batch = self.get_batch_samples(epoch_iterator, num_batches)
  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 701, in __next__
    data = self._next_data()""")
    assert f.name == "run-crashed"
    assert "the paste is cut inside the data loader" in f.message
