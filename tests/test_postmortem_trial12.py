"""Trial 12's findings in `doctor postmortem` as kinds: ranks started into different worlds (FD343), the exit code
of a hung run, and what a bare ``Killed`` line shows. Log lines are in the upstream formats named beside them."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from finetune_doctor.cli import main

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "postmortem")


def invoke(*args):
    r = CliRunner().invoke(main, ["postmortem", *args], catch_exceptions=False)
    return r.exit_code, r.output


def _write(path, text):
    path.write_text(text)
    return str(path)


# LLaMA-Factory launcher.py:69 and hparams/parser.py:652-653 at the snapshot, with LF's logger prefix
NODE = ("[INFO|2025-06-01 08:00:01] llamafactory.launcher:69 >> Initializing {n} distributed tasks at: 10.1.0.5:29500\n"
        "[INFO|2025-06-01 08:00:09] llamafactory.hparams.parser:652 >> Process rank: {r}, world size: {w}, "
        "device: cuda:0, distributed training: True, compute dtype: torch.bfloat16\n"
        "[INFO|2025-06-01 08:01:30] llamafactory.model.adapter:143 >> Fine-tuning method: LoRA\n")


def test_logs_of_two_nodes_with_different_world_sizes_are_the_cause_and_exit_1(tmp_path):
    a = _write(tmp_path / "n0.log", NODE.format(n=8, r=0, w=16))
    b = _write(tmp_path / "n1.log", NODE.format(n=2, r=8, w=10))
    code, out = invoke("--log", a, "--log", b, "--format", "json")
    rep = json.loads(out)
    first = rep["findings"][0]
    assert code == 1 and first["code"] == "FD343", [f["code"] for f in rep["findings"]]
    assert "n0.log says 8 processes on its node (line 1) and world size 16 (line 2)" in first["message"]
    assert "n1.log says 2 processes on its node (line 1) and world size 10 (line 2)" in first["message"]
    assert "FD318" not in [f["code"] for f in rep["findings"]]


def test_a_launch_script_that_sets_devices_on_one_node_only_is_named_with_its_lines(tmp_path):
    a = _write(tmp_path / "n0.log", NODE.format(n=8, r=0, w=16))
    sh = _write(tmp_path / "launch.sh",
                "#!/bin/bash\n"
                "# node A\n"
                "CUDA_VISIBLE_DEVICES=0,1 FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=0 MASTER_ADDR=10.1.0.5 \\\n"
                "  llamafactory-cli train sft.yaml\n"
                "# node B\n"
                "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=1 MASTER_ADDR=10.1.0.5 "
                "llamafactory-cli train sft.yaml\n")
    code, out = invoke("--log", a, "--launch", sh, "--format", "json")
    first = json.loads(out)["findings"][0]
    assert code == 1 and first["code"] == "FD343"
    assert ("launch.sh launches its nodes differently: line 3 (node 0): CUDA_VISIBLE_DEVICES=0,1; line 6 (node 1): "
            "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7") in first["message"]


def test_one_node_log_and_a_symmetric_script_are_no_split(tmp_path):
    a = _write(tmp_path / "n0.log", NODE.format(n=4, r=0, w=8))
    sh = _write(tmp_path / "launch.sh",
                "export FORCE_TORCHRUN=1 NNODES=2 MASTER_ADDR=10.1.0.5\n"
                "NODE_RANK=0 NPROC_PER_NODE=4 llamafactory-cli train sft.yaml\n"
                "NODE_RANK=1 NPROC_PER_NODE=4 llamafactory-cli train sft.yaml\n")
    code, out = invoke("--log", a, "--launch", sh, "--format", "json")
    assert "FD343" not in [f["code"] for f in json.loads(out)["findings"]]


def test_a_hang_the_logs_show_exits_1_and_one_they_only_allow_is_a_warning(tmp_path):
    # two ranks' logs, HF's "Total optimization steps" line (trainer.py) and tqdm bars; rank 1 stops 2 steps behind
    for r, last in ((0, 231), (1, 229)):
        _write(tmp_path / f"rank{r}.log",
               "[INFO|trainer.py:2527] 2025-09-14 10:03:40,118 >>   Total optimization steps = 400\n"
               + "".join(f" 55%|#####     | {s}/400 [1:00:00<45:00, 16.14s/it]\n" for s in range(220, last + 1)))
    code, out = invoke("--log", str(tmp_path / "rank0.log"), "--log", str(tmp_path / "rank1.log"), "--format", "json")
    hang = next(f for f in json.loads(out)["findings"] if f["code"] == "FD325")
    assert hang["severity"] == "error" and code == 1
    assert "rank(s) 1 stopped at step 229 while others reached 231, and no rank failed" in hang["message"]
    code, _ = invoke("--log", str(tmp_path / "rank0.log"), "--log", str(tmp_path / "rank1.log"), "--fail-on", "never")
    assert code == 0
    # a log ending at LF's per-rank line: a hang only if the job was still running there, as a cut paste reads
    code, out = invoke("--log", os.path.join(FIX, "startup_hang", "lf_process_rank_last.log"), "--format", "json")
    first = json.loads(out)["findings"][0]
    assert first["code"] == "FD325" and first["severity"] == "warning" and code == 0


MIXED = """\
model_name_or_path: Qwen/Qwen2-VL-7B-Instruct
trust_remote_code: true
image_resolution: 512
stage: sft
do_train: true
finetuning_type: lora
dataset: mllm_demo
template: qwen2_vl
cutoff_len: 2048
output_dir: saves/qwen2_vl-7b/lora/sft
per_device_train_batch_size: 1
learning_rate: 1.0e-4
bf16: true
"""


def test_lint_exits_1_on_keys_every_release_and_main_refuse_and_0_for_the_build_that_may_hold_them(tmp_path):
    cfg = _write(tmp_path / "mixed.yaml", MIXED)
    # unknown-build: no version known, as on a machine without LLaMA-Factory (the test venv carries one)
    r = CliRunner().invoke(main, ["lint", cfg, "--llamafactory", "unknown-build", "--format", "concise"])
    assert r.exit_code == 1 and "FD040" in r.output, r.output
    # a git install between 0.9.1 and 0.9.2: its commit decides, so the keys are warnings (FD041) and lint passes
    r = CliRunner().invoke(main, ["lint", cfg, "--llamafactory", "0.9.2.dev0", "--format", "concise"])
    assert r.exit_code == 0 and "FD040" not in r.output and "FD041" in r.output, r.output


def test_a_bare_killed_line_says_sigkill_without_an_exit_code_the_log_does_not_print(tmp_path):
    # bash prints strsignal(SIGKILL) = "Killed" for a job SIGKILL ended; the status (128 + 9) is not printed
    log = _write(tmp_path / "train.log",
                 "[INFO|2025-03-02 14:20:05] llamafactory.data.loader:143 >> Loading dataset corpus.json...\n"
                 "Running tokenizer on dataset (num_proc=16):  37%|###7      | 682000/1843211 [03:05<05:11, "
                 "3723.40 examples/s]\n"
                 "Killed\n")
    code, out = invoke("--log", log, "--format", "json")
    rep = json.loads(out)
    first = rep["findings"][0]
    assert first["code"] == "FD315" and code == 1
    assert "SIGKILL (the shell prints `Killed` when SIGKILL ends a job)" in first["message"]
    # the findings only: the JSON also echoes the log path, and pytest's temp folder may be named pytest-137
    assert not any("137" in f["message"] for f in rep["findings"])


def test_a_dict_before_the_first_bar_is_placed_by_its_epoch_and_the_axis_says_it_was_estimated(tmp_path):
    # HF's ProgressCallback.on_log prints the dict (tqdm.write, stdout) and the bar goes to stderr; the first dict
    # of this paste comes before any bar line. Epoch 0.2 of a run whose dict at epoch 0.25 sits on bar step 250.
    log = _write(tmp_path / "train.log",
                 "{'loss': 1.2345, 'grad_norm': 2.5, 'learning_rate': 4.8e-05, 'epoch': 0.2}\n"
                 " 20%|##        | 200/1000 [10:00<40:00,  3.00s/it]\n"
                 " 25%|##5       | 250/1000 [12:30<37:30,  3.00s/it]\n"
                 "{'loss': 1.1111, 'grad_norm': 2.4, 'learning_rate': 4.7e-05, 'epoch': 0.25}\n"
                 " 26%|##6       | 260/1000 [13:00<37:00,  3.00s/it]\n")
    code, out = invoke("--log", log, "--format", "json")
    loss = json.loads(out)["postmortem"]["curves"]["loss"]
    assert loss["steps"] == [200, 250] and loss["basis"] == "estimated", loss
    code, text = invoke("--log", log)
    assert "step axis (estimated: the log prints no step" in text


QWEN35 = """\
model_name_or_path: /data/models/Qwen3.5-9B
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: mllm_demo
template: qwen3_5
cutoff_len: 2048
output_dir: saves/qwen35/lora
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 1.0
bf16: true
"""

# LLaMA-Factory data/mm_plugin.py:178 at the snapshot (`_validate_input`), under torchrun's "[rankN]:" prefix
PROCESSOR_GONE = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/opt/LlamaFactory/src/llamafactory/data/mm_plugin.py", line 178, in _validate_input\n'
    '[rank0]:     raise ValueError("Processor was not found, please check and update your model file.")\n'
    "[rank0]: ValueError: Processor was not found, please check and update your model file.\n")


def test_a_processor_load_failure_names_the_model_types_transformers_requirement_first(tmp_path):
    cfg = _write(tmp_path / "sft.yaml", QWEN35)
    log = _write(tmp_path / "err.log", PROCESSOR_GONE)
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--transformers", "4.56.2", "--format", "json")
    crash = next(f for f in json.loads(out)["findings"] if f["code"] == "FD317")
    msg = crash["message"]
    lead = msg.index("the model's type `qwen3_5` needs transformers >= 5.2.0")
    assert "this run's transformers is 4.56.2 (--transformers)" in msg
    assert lead < msg.index("If the version is not it: LLaMA-Factory's multimodal template needs")
    # not stated: the requirement is named as open, never as the cause
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--format", "json")
    msg = next(f for f in json.loads(out)["findings"] if f["code"] == "FD317")["message"]
    assert "the inputs do not say which transformers ran" in msg
    # a transformers that registers the type: the version is no cause
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--transformers", "5.3.0", "--format", "json")
    msg = next(f for f in json.loads(out)["findings"] if f["code"] == "FD317")["message"]
    assert "needs transformers" not in msg and "multimodal template needs the model's processor" in msg


Z3 = """\
model_name_or_path: Qwen/Qwen2.5-7B-Instruct
stage: sft
do_train: true
finetuning_type: full
deepspeed: examples/deepspeed/ds_z3_config.json
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/qwen25-7b/full
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-5
num_train_epochs: 1.0
bf16: true
"""

# torch ProcessGroupNCCL.cpp's watchdog line (WorkNCCL::checkTimeout's message) under torchrun's "[rankN]:" prefix
WATCHDOG = (
    "[INFO|trainer.py:2527] 2025-11-02 10:00:00,100 >>   Total optimization steps = 300\n"
    "  0%|          | 0/300 [00:00<?, ?it/s]\n"
    "  1%|          | 2/300 [00:40<1:39:20, 20.00s/it]\n"
    "[rank1]:[E1102 10:31:00.000001 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=911, OpType=_ALLGATHER_BASE, NumelIn=1048576, NumelOut=8388608, "
    "Timeout(ms)=1800000) ran for 1800042 milliseconds before timing out.\n")


def test_a_timeout_the_config_sets_is_yours_and_the_memory_table_follows_the_findings(tmp_path):
    cfg = _write(tmp_path / "z3.yaml", Z3 + "ddp_timeout: 1800\n")
    log = _write(tmp_path / "train.log", WATCHDOG)
    code, text = invoke("--log", log, "--config", cfg, "--gpu", "8xH100-80GB", "--offline")
    assert "1800 s: your ddp_timeout (the config sets ddp_timeout: 1800)" in " ".join(text.split())
    assert "default ddp_timeout" not in text
    # no OOM in the run: what happened leads, the estimate is background
    assert text.index("FD314") < text.index("Memory per GPU"), text
    cfg = _write(tmp_path / "z3_default.yaml", Z3)
    code, text = invoke("--log", log, "--config", cfg, "--gpu", "8xH100-80GB", "--offline")
    assert "1800 s: transformers' default ddp_timeout" in " ".join(text.split())


MOE = Z3.replace("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-30B-A3B-Instruct-2507").replace("template: qwen\n",
                                                                                        "template: qwen3_nothink\n")


def test_a_zero3_moe_hang_on_transformers_4_names_the_known_moe_hang_and_not_on_5(tmp_path):
    cfg = _write(tmp_path / "moe.yaml", MOE)
    log = _write(tmp_path / "train.log", WATCHDOG)
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--transformers", "4.57.1", "--format", "json")
    msg = next(f for f in json.loads(out)["findings"] if f["code"] == "FD314")["message"]
    assert "Likely: the known ZeRO-3 hang of mixture-of-experts models on transformers < 5.0.0 (this run's is " \
           "4.57.1, --transformers)" in msg and "LlamaFactory#9628" in msg
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--transformers", "5.0.0", "--format", "json")
    msg = next(f for f in json.loads(out)["findings"] if f["code"] == "FD314")["message"]
    assert "mixture-of-experts" not in msg and "ZeRO-3 parameter all-gather hang" in msg
    # a dense model on transformers 4: not this cause
    cfg = _write(tmp_path / "dense.yaml", Z3)
    code, out = invoke("--log", log, "--config", cfg, "--offline", "--transformers", "4.57.1", "--format", "json")
    assert "mixture-of-experts" not in next(f for f in json.loads(out)["findings"] if f["code"] == "FD314")["message"]


def test_logs_that_stop_before_training_are_not_nothing_to_diagnose(tmp_path):
    # LF's start-up lines only (hparams/parser.py:652-653, model/adapter.py), no step, no error: a hang before
    # training or a cut output, never an empty report
    log = _write(tmp_path / "node.log", NODE.format(n=4, r=0, w=4))
    code, out = invoke("--log", log, "--format", "json")
    f = json.loads(out)["findings"][0]
    assert f["code"] == "FD318" and "Nothing to diagnose" not in f["message"]
    assert "the output stops before the first training step" in f["message"]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = invoke(str(empty), "--format", "json")
    assert json.loads(out)["findings"][0]["message"].startswith("Nothing to diagnose: 0 file(s) looked at")


def test_logs_of_two_jobs_with_different_masters_are_no_split(tmp_path):
    a = _write(tmp_path / "old.log", NODE.format(n=4, r=0, w=4))
    b = _write(tmp_path / "new.log", NODE.format(n=8, r=0, w=8).replace("10.1.0.5:29500", "10.1.0.9:29501"))
    code, out = invoke("--log", a, "--log", b, "--format", "json")
    assert "FD343" not in [f["code"] for f in json.loads(out)["findings"]]
