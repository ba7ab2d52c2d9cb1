"""Short reports by kind (issue #25, session 12): a title, one sentence or one log line that names a version
conflict, an NCCL/CUDA/driver mismatch, a disk that filled, or a hang, read with what the same words state of the
stack and the set-up (readers/runlogs/statedwords.py, analyzers/postmortem/saidstack.py).

The texts are as users and the tools write them:
- torch/cuda/__init__.py ``_lazy_init`` raises c10/cuda/CUDAFunctions.cpp's "The NVIDIA driver on your system is
  too old (found version N)" (the same text is a ``UserWarning: CUDA initialization: ...`` at import);
  cudaGetErrorString(cudaErrorInsufficientDriver) is "CUDA driver version is insufficient for CUDA runtime
  version" (driver_types.h, code 35);
- the dynamic loader's "undefined symbol: ncclCommRegister" from an ImportError of torch/lib/libtorch_cuda.so;
- LLM-Adapters' finetune.py "The version of PEFT you are using is not compatible, please use a version that is
  greater than 0.5.0" (AGI-Edgerunners/LLM-Adapters#39);
- LLaMA-Factory 0.9.0 llamafactory/hparams/parser.py:45 calls ``check_dependencies()`` at import
  (extras/misc.py:75, its accelerate>=0.30.1,<=0.33.0 at :84; catalog/lf_stack_ranges.json);
- transformers 4.45.0 trainer.py:3476-3477 calls ``self.optimizer.train()``, which accelerate 0.33.0
  optimizer.py:124-128 forwards to the torch optimizer ("'AdamW' object has no attribute 'train'");
- kubelet's eviction "Pod ephemeral local storage usage exceeds the total limit of containers %s."
  (kubernetes pkg/kubelet/eviction/helpers.go ``podEphemeralStorageMessageFmt``);
- datasets' map bar "Map (num_proc=2):   0%|          | 0/1000 [00:00<?, ? examples/s]" (arrow_dataset.py).
A finding read from words alone is at most a warning (the `words` case); a log line that proves it is an error.
"""

from __future__ import annotations


import pytest

from finetune_doctor.analyzers.postmortem.stackcause import releases_judging
from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.readers.runlogs.statedwords import setup_words, stated_versions
from finetune_doctor.settings import Options
from pmhelp import first_of_text as first


# -- what the words state -------------------------------------------------------------------------------------------

def test_stated_versions_read_names_versions_and_ranges_as_written():
    got = stated_versions("deepspeed 0.14.3 does not work with torch 2.4")
    assert got == {"deepspeed": {"version": "0.14.3", "spec": None, "line": 1},
                   "torch": {"version": "2.4", "spec": None, "line": 1}}
    got = stated_versions("我必须得更新accelerate到0.34.2不然会报错\n但是更新之后llamafactory报错accelerate版本过高")
    assert got["accelerate"]["version"] == "0.34.2" and got["llamafactory"] == {"version": None, "spec": None,
                                                                                  "line": 2}
    assert stated_versions("pip install accelerate>=0.30.1,<=0.33.0")["accelerate"]["spec"] == ">=0.30.1,<=0.33.0"
    # "greater than" binds to the one package the words name
    peft = stated_versions('"The version of PEFT you are using is not compatible, please use a version that is '
                           'greater than 0.5.0"')
    assert peft == {"peft": {"version": None, "spec": ">0.5.0", "line": 1}}
    # "0.x" is kept as written, and a path or a module is no mention
    assert stated_versions("deepspeed 0.x with torch 2.4")["deepspeed"]["version"] == "0.x"
    assert stated_versions('  File "/opt/site-packages/transformers/trainer.py", line 5\nfrom llamafactory.cli '
                           "import main") == {}


def test_setup_words_name_zero3_moe_map_and_nodes_only_where_said():
    s = setup_words("[bug] deepspeed zero3 +lora 训练mixtrial-7*8模型会hang，无法计算loss")
    assert s["zero3"] == "zero3" and s["moe"] == "mixtrial" and s["map"] is None and s["nodes"] is None
    assert setup_words("Qwen3-30B-A3B ds_z3_config 卡住")["moe"] == "-A3B"
    # a card count is no MoE ("2x4090"), a dense model is none
    assert setup_words("zero3 on 2x4090 with Llama-3-8B hangs")["moe"] is None
    assert setup_words("多机多卡训练的时候报错")["nodes"] == "多机"


def test_releases_judging_reads_lf_start_up_ranges_from_the_catalogue():
    # accelerate 0.34.2: 0.9.0 requires <=0.33.0, 0.9.1-0.9.3 >=0.34.0, 0.9.4 on >=1.3.0
    got = releases_judging("accelerate", "0.34.2")
    assert got is not None
    assert "refuses accelerate 0.34.2 in 0.9.0, 0.9.4–" in got and "admits it in 0.8.0–0.8.3, 0.9.1–0.9.3" in got
    assert releases_judging("torch", "2.4") is None          # LF's start-up check does not range torch
    assert releases_judging("deepspeed", "0.x") is None      # not a version to judge


# -- 1. version conflicts said in words or by one line --------------------------------------------------------------

def test_version_conflict_in_words_names_the_packages_and_what_to_run(tmp_path):
    f = first(tmp_path, "torch and deepspeed versions are currently incompatible")
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "You describe a version conflict" in f.message
    assert "The words name torch (no version), deepspeed (no version)" in f.message
    assert "`pip show torch deepspeed`" in f.message


def test_a_version_conflict_asks_for_pip_show_in_one_sentence(tmp_path):
    """Issue #25: the generic `pip show PACKAGE` sentence stood beside the one naming the packages."""
    f = first(tmp_path, "torch and deepspeed versions are currently incompatible")
    assert f.message.count("`pip show") == 1 and "`pip show PACKAGE`" not in f.message
    assert "and a model newer than the installed transformers is not recognised. The words name torch" in f.message
    (tmp_path / "b").mkdir()
    f = first(tmp_path / "b", "version conflict after upgrading, model type qwen3 not recognised")
    assert f.message.count("`pip show") == 1 and "`pip show transformers` on the training machine" in f.message
    # no package named: the generic sentence is the only one
    (tmp_path / "c").mkdir()
    f = first(tmp_path / "c", "version conflict")
    assert f.message.count("`pip show") == 1 and "compare `pip show PACKAGE` (or `llamafactory-cli env`)" in f.message


def test_stated_versions_are_judged_against_lf_ranges(tmp_path):
    f = first(tmp_path, "need accelerate>=0.34.0 but llamafactory says the accelerate version 0.34.2 is too high, "
                        "version conflict")
    assert f.name == "run-crashed"
    assert "refuses accelerate 0.34.2 in 0.9.0" in f.message


def test_a_quoted_version_refusal_names_the_copy_the_run_imports(tmp_path):
    f = first(tmp_path, '"The version of PEFT you are using is not compatible, please use a version that is '
                        'greater than 0.5.0"')
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "The words name peft >0.5.0" in f.message
    assert 'print(peft.__version__, peft.__file__)' in f.message and "a folder named peft" in f.message


def test_a_traceback_cut_in_lf_start_up_check_reads_the_words_above_it(tmp_path):
    log = ("我必须得更新accelerate到0.34.2不然会报错AttributeError: 'AdamW' object has no attribute 'train'\n"
           "但是更新accelerate版本之后llamafactory报错accelerate版本过高\n"
           "Traceback (most recent call last):\n"
           '  File "/home/u/envs/py311/bin/llamafactory-cli", line 5, in <module>\n'
           "    from llamafactory.cli import main\n"
           '  File "/home/u/envs/py311/lib/python3.11/site-packages/llamafactory/hparams/parser.py", line 45, '
           "in <module>\n"
           "    check_dependencies()")
    f = first(tmp_path, log)
    assert f.name == "run-crashed" and f.severity == "error"
    assert "the traceback stops inside LLaMA-Factory's start-up dependency check" in f.message
    assert "refuses accelerate 0.34.2 in 0.9.0" in f.message


def test_a_title_that_opens_with_the_error_is_a_crash_said(tmp_path):
    f = first(tmp_path, "[FIXED] Error patching SFTTrainer")
    assert f.name == "run-crashed" and f.severity == "warning" and "SFTTrainer" in f.message


# -- 2. NCCL / CUDA / driver mismatches -----------------------------------------------------------------------------

def test_nccl_version_mismatch_in_words_asks_for_each_nodes_nccl(tmp_path):
    f = first(tmp_path, "multi-node training fails: NCCL version mismatch between the two nodes")
    assert f.name == "nccl-error" and f.severity == "warning"
    assert "torch.cuda.nccl.version()" in f.message and "LD_LIBRARY_PATH" in f.message


def test_nccl_issue_in_a_title_is_nccl_error(tmp_path):
    f = first(tmp_path, "[BUG] NCCL issue in ESM2 pretraining")
    assert f.name == "nccl-error" and f.severity == "warning"
    assert f.message.startswith('You describe an NCCL error ("NCCL issue")')


def test_an_exception_quoted_in_a_multi_node_report_is_read_as_the_exception(tmp_path):
    # LLaMA-Factory data/template.py: "Template {name} does not exist."
    f = first(tmp_path, "多机多卡训练的时候报错 ValueError: Template qwen3 does not exist.")
    assert f.name == "run-crashed" and "registers no template 'qwen3'" in f.message


def test_an_error_said_only_of_multi_node_training_leads_to_nccl(tmp_path):
    f = first(tmp_path, "多机多卡训练的时候报错")
    assert f.name == "nccl-error" and 'The words tie the error to several nodes ("多机")' in f.message
    assert f.message.startswith('You describe an error of multi-node training ("多机多卡训练的时候报错")')


def test_an_oom_on_several_nodes_stays_an_oom(tmp_path):
    assert first(tmp_path, "多机训练的时候报错 CUDA out of memory").name == "cuda-oom"


def test_undefined_nccl_symbol_names_the_libnccl_that_shadows_torchs(tmp_path):
    f = first(tmp_path, "ImportError: /usr/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined "
                        "symbol: ncclCommRegister")
    assert f.name == "run-crashed" and f.severity == "error"
    assert "the libnccl loaded lacks ncclCommRegister" in f.message and "nvidia-nccl-cu12" in f.message


@pytest.mark.parametrize("line", [
    "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
    "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
    "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
])
def test_a_driver_older_than_torchs_cuda_is_a_cuda_error(tmp_path, line):
    f = first(tmp_path, line)
    assert f.name == "cuda-error" and f.severity == "error"
    assert "the NVIDIA driver is older than the CUDA runtime torch was built with" in f.message


def test_the_driver_warning_at_import_is_words_not_a_failure(tmp_path):
    f = first(tmp_path, "/usr/lib/python3/site-packages/torch/cuda/__init__.py:128: UserWarning: CUDA "
                        "initialization: The NVIDIA driver on your system is too old (found version 11040).")
    assert f.name == "cuda-error" and f.severity == "warning"
    assert "`nvidia-smi` shows the highest CUDA the driver supports" in f.message


def test_no_kernel_image_in_words_asks_for_the_arch_list(tmp_path):
    f = first(tmp_path, "训练时报 no kernel image is available for execution on the device，5090 显卡")
    assert f.name == "cuda-error" and "torch.cuda.get_arch_list()" in f.message


# -- 3. a disk that filled, said in words ---------------------------------------------------------------------------

def test_cannot_write_disk_space_in_words_is_disk_full(tmp_path):
    f = first(tmp_path, '3. At around Epoch 7 training crashes with "cannot write to file/disk space" error.')
    assert f.name == "disk-full" and f.severity == "warning"


def test_a_pods_ephemeral_storage_eviction_points_at_a_volume(tmp_path):
    f = first(tmp_path, "fine-tuning in a Kubernetes pod: the pod was evicted, Pod ephemeral local storage usage "
                        "exceeds the total limit of containers 20Gi.")
    assert f.name == "disk-full" and f.severity == "warning"
    assert "point output_dir, HF_HOME and TMPDIR at a mounted volume" in f.message


def test_shared_memory_in_words_is_not_the_disk(tmp_path):
    f = first(tmp_path, "docker 里训练报 No space left on device，/dev/shm 只有 64M")
    assert f.name == "disk-full" and "/dev/shm is not the disk" in f.message


def test_dev_shm_full_from_the_log_line_names_shm(tmp_path):
    # ATen's MapAllocator text (aten/src/ATen/MapAllocator.cpp) under a DataLoader worker
    f = first(tmp_path, "RuntimeError: unable to write to file </torch_1234_567890_0>: No space left on device (28)")
    assert f.severity == "error" and "/dev/shm is full, not the disk" in f.message


# -- 4. hangs said in words, with the set-up words -------------------------------------------------------------------

def test_zero3_with_an_moe_model_names_the_expert_gather_hang(tmp_path):
    f = first(tmp_path, "[bug] deepspeed zero3 +lora 训练mixtrial-7*8模型会hang，无法计算loss")
    assert f.name == "run-hang" and f.severity == "warning"
    assert 'ZeRO-3 with a mixture-of-experts model (the report: "zero3", "mixtrial")' in f.message


def test_zero3_hang_of_a_dense_model_gets_no_moe_lead(tmp_path):
    f = first(tmp_path, "zero3 training of Llama-3-8B on 2x4090 is stuck at 0%")
    assert f.name == "run-hang" and "mixture-of-experts" not in f.message


def test_a_map_bar_left_at_zero_is_a_hang_in_tokenization(tmp_path):
    log = ("DATASET PREPARATION IN PROGRESS...\n"
           "Loading cached shuffled indices for dataset at /tmp/data/train/cache-b8d5b2a7daea0d9d.arrow\n"
           "Map (num_proc=2):   0%|          | 0/1000 [00:00<?, ? examples/s]")
    f = first(tmp_path, log)
    assert f.name == "run-hang" and f.severity == "warning"
    assert "preprocessing_num_workers" in f.message


def test_a_map_bar_that_moved_on_is_no_hang(tmp_path):
    log = ("Map (num_proc=2):   0%|          | 0/1000 [00:00<?, ? examples/s]\n"
           "Map (num_proc=2): 100%|██████████| 1000/1000 [00:03<00:00, 300.0 examples/s]")
    (tmp_path / "train.log").write_text(log + "\n", encoding="utf-8")
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    assert all(f.name != "run-hang" for f in r.findings)


# -- model types and library files named in one line ----------------------------------------------------------------

def test_a_model_type_said_not_recognised_names_the_transformers_it_needs(tmp_path):
    # catalog/tf_model_types.json: qwen2_vl from transformers 4.45.0
    f = first(tmp_path, "model type qwen2_vl not recognised")
    assert f.name == "run-crashed" and f.severity == "warning"
    assert "The model type `qwen2_vl` the words name needs transformers >= 4.45.0" in f.message


def test_a_model_type_and_a_stated_transformers_are_compared(tmp_path):
    f = first(tmp_path, "fine-tuning fails: unrecognized model type qwen3_moe with transformers 4.40.0")
    assert "needs transformers >= 4.51.0" in f.message and "the transformers stated is 4.40.0 (the words): older" \
        in f.message and "older, so it cannot build the model's config" in f.message


def test_keyerror_of_a_catalogued_model_type_is_config_mappings_failure(tmp_path):
    # transformers before the "does not recognize this architecture" wording: CONFIG_MAPPING["qwen3"] raised
    f = first(tmp_path, "KeyError: 'qwen3'")
    assert f.name == "run-crashed" and f.severity == "error"
    assert "the model's type `qwen3` needs transformers >= 4.51.0" in f.message


def test_a_library_ctypes_cannot_load_is_read_from_oserror(tmp_path):
    # torch/__init__.py _load_global_deps loads its CUDA libraries with ctypes.CDLL, which raises OSError
    f = first(tmp_path, "OSError: libnccl.so.2: cannot open shared object file: No such file or directory")
    assert f.name == "run-crashed" and "a shared library (libnccl.so.2)" in f.message


@pytest.mark.parametrize("words, names", [
    ("deepspeed 0.15 和 torch 2.4 不兼容", "deepspeed 0.15, torch 2.4"),
    ("vllm 0.6.3 requires torch==2.4.0, but you have torch 2.5.1 which is incompatible.", "torch 2.5.1"),
])
def test_two_packages_said_not_to_go_together(tmp_path, words, names):
    f = first(tmp_path, words)
    assert f.name == "run-crashed" and "You describe a version conflict" in f.message
    assert f"The words name {names}" in f.message


def test_training_that_does_not_move_is_a_hang(tmp_path):
    assert first(tmp_path, "GPU util 100% but training does not move").name == "run-hang"


@pytest.mark.parametrize("line", [
    "AttributeError: 'AdamW' object has no attribute 'train'",
    "AttributeError: 'DeepSpeedZeroOptimizer_Stage3' object has no attribute 'train'",
])
def test_an_optimizer_without_train_names_the_transformers_accelerate_pair(tmp_path, line):
    # transformers 4.45 Trainer.training_step -> accelerate 0.33 optimizer.py:128 AcceleratedOptimizer.train
    # (huggingface/transformers#33620); LF 0.9.0's check_dependencies caps accelerate at 0.33.0
    f = first(tmp_path, line)
    assert f.name == "run-crashed" and f.severity == "error"
    assert "install accelerate>=0.34.2" in f.message and "refuses accelerate 0.34.2 in 0.9.0" in f.message


# -- a title above one log line: the line is the evidence, the title's words narrow it ------------------------------

def test_a_watchdog_timeout_under_a_title_naming_zero3_and_moe_names_the_expert_hang(tmp_path):
    # ProcessGroupNCCL.cpp's watchdog line as torch 2.4 prints it
    log = ("Mixtral-8x7B zero3 lora 训练卡住\n"
           "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=3, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for "
           "1800040 milliseconds before timing out.")
    f = first(tmp_path, log)
    assert f.name == "nccl-timeout" and f.severity == "error"
    assert 'Likely: ZeRO-3 with a mixture-of-experts model (the report: "zero3", "Mixtral")' in f.message


def test_a_start_up_refusal_names_the_lf_releases_that_admit_the_version_found(tmp_path):
    # transformers utils/versions.py require_version's text, called by LF 0.9.0's check_dependencies
    log = ("llamafactory 0.9.0 with accelerate 0.34.2 fails at start\n"
           "ImportError: accelerate>=0.30.1,<=0.33.0 is required for a normal functioning of this module, but found "
           "accelerate==0.34.2.")
    f = first(tmp_path, log)
    assert f.name == "run-crashed" and "admits it in 0.8.0–0.8.3, 0.9.1–0.9.3" in f.message
    # the refusal is the check itself, not a sign that it was skipped
    assert "the check was skipped" not in f.message


def test_a_pinned_release_in_words_is_a_version():
    assert stated_versions("一开始用的是建议的trl==0.15.0版本")["trl"] == {"version": "0.15.0", "spec": None,
                                                                       "line": 1}


def test_nccls_own_words_are_not_called_multi_node_only(tmp_path):
    f = first(tmp_path, "多机训练 socketFinalizeAccept 报错")
    assert f.name == "nccl-error" and f.message.startswith('You describe an NCCL error ("socketFinalizeAccept")')


def test_zero3_and_moe_said_by_the_pasted_config_name_the_hang(tmp_path):
    # a title above the training YAML, as LLaMA-Factory's issue form asks for it (examples/train_lora/*.yaml keys)
    report = ("训练卡住，没有任何报错\n\n"
              "model_name_or_path: Qwen/Qwen3-30B-A3B-Instruct-2507\n"
              "stage: sft\n"
              "do_train: true\n"
              "finetuning_type: lora\n"
              "deepspeed: examples/deepspeed/ds_z3_config.json\n"
              "dataset: alpaca_en_demo\n"
              "template: qwen3\n"
              "cutoff_len: 2048\n"
              "preprocessing_num_workers: 16\n")
    f = first(tmp_path, report)
    assert f.name == "run-hang" and f.severity == "warning"
    assert 'ZeRO-3 with a mixture-of-experts model (the report: "ds_z3_config", "-A3B")' in f.message
    # the config's preprocessing_num_workers alone does not make it a datasets-map hang
    assert "The words name a datasets map" not in f.message


def test_unknown_location_names_a_folder_that_shadows_the_package(tmp_path):
    # CPython's import_from (Python/ceval.c): "cannot import name %R from %R (unknown location)" for a module
    # without __file__, a namespace package: a folder named peft with no __init__.py on the path
    f = first(tmp_path, "ImportError: cannot import name 'LoraConfig' from 'peft' (unknown location)")
    assert f.name == "run-crashed" and f.severity == "error"
    assert "a folder named peft with no __init__.py" in f.message and "print(peft.__path__)" in f.message


def test_a_full_disk_under_the_datasets_cache_names_that_writer(tmp_path):
    # errno 28 on one of datasets' map cache files (arrow_dataset.py writes cache-<fingerprint>.arrow)
    f = first(tmp_path, "OSError: [Errno 28] No space left on device: "
                        "'/root/.cache/huggingface/datasets/json/default-1a2b/0.0.0/cache-123.arrow'")
    assert f.name == "disk-full" and f.severity == "error"
    assert "The path is datasets' map cache (HF_DATASETS_CACHE" in f.message
    assert "A checkpoint save" not in f.message


def test_cuda_versions_said_not_to_match_name_the_three_cudas_to_compare(tmp_path):
    f = first(tmp_path, "CUDA版本不匹配导致训练报错")
    assert f.name == "run-crashed" and f.severity == "warning"
    assert 'The words say CUDA versions disagree ("CUDA版本不匹配")' in f.message
    assert "torch.version.cuda" in f.message and "`nvidia-smi`" in f.message and "`nvcc -V`" in f.message


@pytest.mark.parametrize("words, loading", [
    ("it hangs after loading the model", False), ("模型加载完后卡住", False),
    ("stuck while loading checkpoint shards", True),
])
def test_a_hang_after_the_load_is_not_placed_in_it(tmp_path, words, loading):
    f = first(tmp_path, words)
    assert f.name == "run-hang" and ("While the weights load" in f.message) == loading


@pytest.mark.parametrize("words, rule", [
    ("训练时显存空间不足", "cuda-oom"),             # GPU memory's "space" is no disk
    ("内存空间不足被kill", "host-oom-killed"),     # nor is host RAM's
    ("/root 空间不够了，保存失败", "disk-full"),
])
def test_space_said_of_memory_is_not_the_disk(tmp_path, words, rule):
    assert first(tmp_path, words).name == rule


def test_the_symptoms_rule_tables_may_name_are_the_ones_words_can_give():
    # rule message tables switch on ev.said.symptom (host-oom-killed, learning-rate-too-high-confirmed); the loader
    # checks their cases against facts/ev.py SAID_SYMPTOMS, which must be the reader's vocabulary, no more, no less
    from finetune_doctor.facts.ev import SAID_SYMPTOMS
    from finetune_doctor.readers.runlogs.userwords_vocab import SYMPTOMS

    assert sorted(SAID_SYMPTOMS) == sorted({k for k, _ in SYMPTOMS})
