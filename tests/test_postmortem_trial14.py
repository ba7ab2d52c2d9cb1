"""Trial 14's findings in `doctor postmortem` (and `lint` on a cut paste) as kinds, each with a fixture written in
the upstream format named beside it: one paste given as both --env and --log, NCCL's own lines, the exit code of a
crashed run whatever its cause's severity, "out of memory" that names no memory, a compiler's fatal error quoted in
a report, a config cut mid-key, a log that shows the run started against start-up refusals, a DataLoader worker's
bus error, and what the user says they did not use."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main
from finetune_doctor.readers.runlogs.userwords import read_words


def invoke(*args):
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.output


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# LLaMA-Factory's bug-report template: the title, `llamafactory-cli env` (extras/env.py print_env) and the output
ENV_BLOCK = ("### System Info\n\n"
             "- `llamafactory` version: 0.9.1\n"
             "- Platform: Linux-5.4.0-150-generic-x86_64-with-glibc2.31\n"
             "- Python version: 3.11.9\n"
             "- PyTorch version: 2.5.1+cu124 (GPU)\n"
             "- Transformers version: 4.46.1\n"
             "- Datasets version: 3.1.0\n"
             "- Accelerate version: 1.0.1\n"
             "- PEFT version: 0.12.0\n"
             "- TRL version: 0.9.6\n"
             "- GPU type: NVIDIA A100-SXM4-80GB\n\n")
# a Python traceback (CPython Lib/traceback.py) ending in an exception of the trainer's own code
TRACEBACK = ('Traceback (most recent call last):\n'
             '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2122, in train\n'
             '    return inner_training_loop(\n'
             '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2474, in _inner_training_loop\n'
             '    self.optimizer.step()\n'
             "TypeError: step() got an unexpected keyword argument 'closure_fn'\n")


def test_one_paste_given_as_env_and_log_is_read_as_both(tmp_path):
    paste = _write(tmp_path / "report.txt", "Training fails at the first step\n\n" + ENV_BLOCK
                   + "### Reproduction\n\n" + TRACEBACK)
    code, out = invoke("postmortem", "--log", paste, "--env", paste, "--format", "json")
    rep = json.loads(out)
    assert code == 1, out
    assert rep["findings"][0]["code"] == "FD317"
    assert "unexpected keyword argument 'closure_fn'" in rep["findings"][0]["message"]
    assert [r["status"] for r in rep["read"]["files"]] == ["read"]
    assert rep["hardware"]["gpu"] == "A100-80GB"


def test_the_same_paste_given_as_log_only_feeds_the_env_facts(tmp_path):
    paste = _write(tmp_path / "report.txt", ENV_BLOCK + TRACEBACK)
    code, out = invoke("postmortem", "--log", paste, "--format", "json")
    rep = json.loads(out)
    assert code == 1 and rep["findings"][0]["code"] == "FD317"
    assert rep["hardware"]["gpu"] == "A100-80GB"
    # print_env named the card, not how many: the one counted is an assumption, not a fact
    assert [(a["name"], a["value"]) for a in rep["assumptions"]] == [("gpu-count", 1)]


def test_an_env_report_alone_given_as_env_and_log_is_still_not_a_log(tmp_path):
    env = _write(tmp_path / "env.txt", ENV_BLOCK)
    code, out = invoke("postmortem", "--log", env, "--env", env, "--format", "json")
    rep = json.loads(out)
    assert rep["read"]["files"][0]["status"] == "skipped"
    assert rep["read"]["files"][0]["problems"] == ["not read: the --env file, not a log"]
    assert code == 0 and [f["code"] for f in rep["findings"]] == ["FD318"]


# torch >= 2.6: the watchdog is ProcessGroupNCCL's Watchdog class; the exception its run() rethrows carries the
# C++ stack "Exception raised from run at .../ProcessGroupNCCL.cpp:N"; NCCL_DEBUG=INFO lines are
# "host:pid:tid [dev] NCCL INFO file.cc:line -> result" (nccl src/include/checks.h) behind a collector's timestamp
WATCHDOG_CUT = (
    "2025-03-02 10:11:12 node-a:3141:3200 [1] NCCL INFO transport/net.cc:712 -> 6\n"
    "2025-03-02 10:11:12 node-a:3141:3200 [1] NCCL INFO proxy.cc:1500 -> 6\n"
    "2025-03-02 10:41:13 frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x2f1 (0x7f1 in "
    "/usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so)\n"
    "2025-03-02 10:41:13 frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0x11a (0x7f2 in "
    "/usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so)\n"
    "2025-03-02 10:41:13 \n"
    "2025-03-02 10:41:13 Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2055 "
    "(most recent call first):\n"
    "2025-03-02 10:41:13 frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3 in "
    "/usr/lib/python3/site-packages/torch/lib/libc10.so)\n")


def test_the_watchdogs_own_exception_frames_are_a_watchdog_abort_not_no_evidence(tmp_path):
    log = _write(tmp_path / "paste.txt", "DDP training hangs, then dies\n\n" + WATCHDOG_CUT)
    code, out = invoke("postmortem", "--log", log, "--format", "json")
    rep = json.loads(out)
    codes = [f["code"] for f in rep["findings"]]
    assert code == 1 and codes[0] == "FD314", codes
    assert "FD318" not in codes
    assert any(e["kind"] == "nccl_timeout" for e in rep["timeline"])
    # the message saying timeout or error is not in the paste: neither is stated
    assert rep["findings"][0]["message"].startswith("NCCL watchdog abort (only its exception stack is in the input")
    assert "NCCL watchdog timeout" not in rep["findings"][0]["message"]


def test_nccl_info_lines_are_never_called_absent(tmp_path):
    log = _write(tmp_path / "nccl.txt",
                 "node-a:3141:3141 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>\n"
                 "node-a:3141:3141 [0] NCCL INFO cudaDriverVersion 12040\n"
                 "node-a:3141:3141 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
                 "loading checkpoint shards took long\n")
    code, out = invoke("postmortem", "--log", log, "--format", "json")
    rep = json.loads(out)
    f = rep["findings"][0]
    assert code == 0 and f["code"] == "FD318"
    assert "NCCL INFO lines are there, from nccl.txt:1 on, but none of them reports a failure" in f["message"]
    assert "crash, OOM, NCCL or exit line" not in f["message"]


# transformers' Qwen2-VL forward (modeling_qwen2_vl.py): the image features/tokens check inside the model
IMAGE_CRASH = ('Traceback (most recent call last):\n'
               '  File "/opt/conda/lib/python3.11/site-packages/transformers/models/qwen2_vl/modeling_qwen2_vl.py", '
               'line 1681, in forward\n'
               '    raise ValueError(\n'
               'ValueError: Image features and image tokens do not match: tokens: 980, features 1296\n')


@pytest.mark.parametrize("fmt", ["text", "json", "concise", "sarif", "github"])
def test_a_crash_whose_cause_is_a_warning_exits_1_in_every_format(tmp_path, fmt):
    log = _write(tmp_path / "train.log", IMAGE_CRASH)
    code, out = invoke("postmortem", "--log", log, "--format", fmt)
    assert code == 1, out
    code, _ = invoke("postmortem", "--log", log, "--format", "json")
    rep = json.loads(_)
    assert rep["findings"][0]["code"] == "FD416" and rep["findings"][0]["severity"] == "warning"
    assert rep["postmortem"]["crashed"] is True


def test_exit_codes_of_the_other_postmortem_paths(tmp_path):
    crash = _write(tmp_path / "crash.log", TRACEBACK)
    assert invoke("postmortem", "--log", crash)[0] == 1                           # cause unnamed (FD317 error)
    assert invoke("postmortem", "--log", crash, "--fail-on", "never")[0] == 0     # the user turned failing off
    image = _write(tmp_path / "image.log", IMAGE_CRASH)
    assert invoke("postmortem", "--log", image, "--fail-on", "never")[0] == 0
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "train.log", IMAGE_CRASH)
    assert invoke("postmortem", str(run))[0] == 1                                  # a run folder, cause a warning
    report = tmp_path / "report.json"
    assert invoke("postmortem", "--log", image, "--format", "json", "--output", str(report))[0] == 1
    assert json.loads(report.read_text())["postmortem"]["crashed"] is True
    words = _write(tmp_path / "title.txt", "training stops with out of memory after a few steps\n")
    assert invoke("postmortem", "--log", words)[0] == 0                           # words alone show no crash
    # HF Trainer's metric dicts (trainer.py `log`), a run that trained and ended
    clean = _write(tmp_path / "ok.log", "".join(
        f"{{'loss': {2.0 - i / 10:.4f}, 'grad_norm': {1.9 - i / 7:.4f}, 'learning_rate': 1e-05, 'epoch': {i / 10:.2f}}}\n"
        for i in range(1, 6)) + "{'train_runtime': 120.5, 'train_samples_per_second': 4.1, "
        "'train_steps_per_second': 0.5, 'train_loss': 1.7, 'epoch': 0.5}\n")
    assert invoke("postmortem", "--log", clean)[0] == 0


def test_out_of_memory_without_a_memory_named_says_which_is_unknown(tmp_path):
    words = _write(tmp_path / "title.txt", "训练大数据集时报 out of memory，小数据集正常\n")
    code, out = invoke("postmortem", "--log", words, "--format", "json")
    rep = json.loads(out)
    f = rep["findings"][0]
    assert f["code"] == "FD301" and code == 0
    assert f["message"].startswith('You describe running out of memory ("out of memory") without saying which')
    assert "You describe running out of GPU memory" not in f["message"]
    assert [(a["name"], a["value"], a["alternatives"]) for a in rep["assumptions"]] == [
        ("oom-memory", "GPU memory", ["host RAM"])]
    gpu = _write(tmp_path / "gpu.txt", "训练到 eval 阶段显存 OOM，GPU 是 4090\n")
    rep = json.loads(invoke("postmortem", "--log", gpu, "--format", "json")[1])
    assert rep["findings"][0]["message"].startswith('You describe running out of GPU memory ("')
    assert rep["assumptions"] == []


# GCC/Clang: "FILE:LINE:COL: fatal error: HEADER: No such file or directory", then "compilation terminated."
COMPILER = ("torch.compile fails on my machine\n\n"
            "I installed the headers already but it still fails:\n\n"
            "```\n"
            "/usr/include/python3.11/Python.h:12:10: fatal error: pyconfig.h: No such file or directory\n"
            "   12 | #include \"pyconfig.h\"\n"
            "      |          ^~~~~~~~~~~~\n"
            "compilation terminated.\n"
            "```\n")


def test_a_compiler_fatal_error_quoted_in_a_report_is_the_crash_with_its_header(tmp_path):
    paste = _write(tmp_path / "issue.txt", COMPILER)
    code, out = invoke("postmortem", "--log", paste, "--format", "json")
    rep = json.loads(out)
    f = rep["findings"][0]
    assert code == 1 and f["code"] == "FD317" and f["severity"] == "error"
    assert "no log lines were given" not in f["message"]
    assert "a compiler error (/usr/include/python3.11/Python.h: fatal error: pyconfig.h" in f["message"]
    assert "the header pyconfig.h was not found" in f["message"]
    assert "Python development headers" in f["message"]


# a LLaMA-Factory YAML (examples/train_full layout) whose paste stops inside a key
CUT_CONFIG = ("### model\n"
              "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\n\n"
              "### method\n"
              "stage: sft\n"
              "do_train: true\n"
              "finetuning_type: full\n\n"
              "### dataset\n"
              "dataset: alpaca_en_demo\n"
              "template: qwen\n"
              "cutoff_len: 2048\n\n"
              "### output\n"
              "output_dir: saves/qwen2.5-7b/full/sft\n\n"
              "### train\n"
              "per_device_train_batch_size: 1\n"
              "gradient_accumulation_steps: 8\n"
              "learning_rate: 1.0e-5\n"
              "num_train_epochs: 3.0\n"
              "warm\n")


def test_lint_reads_a_config_cut_mid_key_and_hedges_what_the_lost_lines_held(tmp_path):
    cfg = _write(tmp_path / "train.yaml", CUT_CONFIG)
    code, out = invoke("lint", cfg, "--format", "json")
    assert code != 2, out
    rep = json.loads(out)
    fp32 = next(f for f in rep["findings"] if f["code"] == "FD101")
    assert fp32["severity"] == "warning"
    assert "may be cut off (its last line, `warm`, stops in the middle of a key)" in fp32["message"]
    assert any(a["name"] == "config-complete" for a in rep["assumptions"])


def test_postmortem_reads_the_cut_config_too(tmp_path):
    cfg = _write(tmp_path / "train.yaml", CUT_CONFIG)
    log = _write(tmp_path / "train.log", TRACEBACK)
    code, out = invoke("postmortem", "--log", log, "--config", cfg, "--format", "json")
    assert code == 1, out
    assert json.loads(out)["findings"][0]["code"] == "FD317"


def test_a_malformed_yaml_that_is_not_a_cut_word_still_exits_2(tmp_path):
    cfg = _write(tmp_path / "bad.yaml", "stage: sft\nmodel_name_or_path: [unclosed\ndataset: x\n")
    code, out = invoke("lint", cfg)
    assert code == 2 and "malformed YAML" in out


def test_a_log_that_reached_the_forward_pass_outranks_start_up_refusals(tmp_path):
    cfg = _write(tmp_path / "train.yaml", "model_name_or_path: Qwen/Qwen2-VL-7B-Instruct\nstage: sft\n"
                 "do_train: true\nfinetuning_type: lora\nlora_rnak: 8\ndataset: mllm_demo\ntemplate: qwen2_vl\n"
                 "cutoff_len: 1024\noutput_dir: saves/x\nbf16: true\n")
    log = _write(tmp_path / "train.log", IMAGE_CRASH)
    code, out = invoke("postmortem", "--log", log, "--config", cfg, "--format", "json")
    rep = json.loads(out)
    assert code == 1 and rep["findings"][0]["code"] == "FD416"
    unknown = next(f for f in rep["findings"] if f["code"] == "FD001")
    assert unknown["severity"] == "warning"
    assert "The run reached the model's forward pass" in unknown["message"]
    assert "got past start-up" in unknown["message"]
    # one order in every format: the log's cause first, though its file sorts after the config's
    concise = invoke("postmortem", "--log", log, "--config", cfg, "--format", "concise")[1].splitlines()
    assert [ln.split(": ")[1].split()[0] for ln in concise] == [f["code"] for f in rep["findings"]]


def test_a_traceback_through_the_training_loop_outranks_start_up_refusals(tmp_path):
    cfg = _write(tmp_path / "train.yaml", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\n"
                 "do_train: true\nfinetuning_type: lora\nlora_rnak: 8\ndataset: alpaca_en_demo\ntemplate: qwen\n"
                 "output_dir: saves/x\nbf16: true\n")
    log = _write(tmp_path / "train.log", TRACEBACK)
    rep = json.loads(invoke("postmortem", "--log", log, "--config", cfg, "--format", "json")[1])
    assert rep["findings"][0]["code"] == "FD317"
    unknown = next(f for f in rep["findings"] if f["code"] == "FD001")
    assert unknown["severity"] == "warning"
    assert "The traceback runs through the Trainer's training loop, so the run got past start-up" in unknown["message"]


def test_the_lf_version_of_a_pasted_env_block_judges_the_config(tmp_path):
    cfg = _write(tmp_path / "train.yaml", "model_name_or_path: Qwen/Qwen2.5-7B-Instruct\nstage: sft\n"
                 "do_train: true\nfinetuning_type: lora\ndataset: alpaca_en_demo\ntemplate: qwen\n"
                 "output_dir: saves/x\nbf16: true\n")
    log = _write(tmp_path / "report.txt", ENV_BLOCK + TRACEBACK)
    code, out = invoke("postmortem", "--log", log, "--config", cfg, "--format", "json")
    rep = json.loads(out)
    assert code == 1
    assert "lf-version" not in [a["name"] for a in rep["assumptions"]]
    assert rep["run"] is not None


# torch/utils/data/_utils/signal_handling.py + torch/csrc/DataLoader.cpp: a worker's SIGBUS as the main process
# re-raises it
BUS = ("Traceback (most recent call last):\n"
       '  File "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
       "    data = self._data_queue.get(timeout=timeout)\n"
       "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that "
       "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.\n")


def test_a_loader_workers_bus_error_names_shared_memory_first_in_every_format(tmp_path):
    log = _write(tmp_path / "train.log", BUS)
    rep = json.loads(invoke("postmortem", "--log", log, "--format", "json")[1])
    first = rep["findings"][0]
    assert first["code"] == "FD340"
    assert "too little shared memory" in first["message"] and "/dev/shm" in first["message"]
    assert "compare the versions of the compiled packages" not in first["message"]
    order = [f["code"] for f in rep["findings"]]
    concise = invoke("postmortem", "--log", log, "--format", "concise")[1]
    assert [ln.split(": ")[1].split()[0] for ln in concise.splitlines()] == order
    text = invoke("postmortem", "--log", log)[1]
    assert text.index(order[0] + " ") < text.index(order[1] + " ")


@pytest.mark.parametrize("words, phase", [
    ("没用流式加载，在packing快结束的时候报oom", None),
    ("I did not use streaming loading, the run hangs", None),
    ("not using packing; OOM during eval", "evaluation"),
    ("without using deepspeed the loss is nan at step 30", None),
])
def test_what_the_user_did_not_use_names_no_phase(words, phase):
    said = read_words(words + "\n")
    assert said is not None and said["phase"] == phase


def test_negations_inside_an_error_are_kept():
    assert read_words("No space left on device while saving\n")["symptom"] == "disk-full"
    assert read_words("without using deepspeed the loss is nan at step 30\n")["symptom"] == "nan"
    assert read_words("Training stops without any error at step 46\n")["symptom"] == "stopped"


def test_fix_on_a_cut_config_says_why_it_writes_nothing(tmp_path):
    cfg = _write(tmp_path / "train.yaml", CUT_CONFIG)
    code, out = invoke("lint", cfg, "--fix")
    assert code == 2
    assert "not fixed: the file looks cut (its last line, `warm`, stops in the middle of a key)" in out
    assert (tmp_path / "train.yaml").read_text(encoding="utf-8") == CUT_CONFIG
