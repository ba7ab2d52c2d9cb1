"""Trial 18's postmortem trips (benchmarks/results/trial18.md) as kinds. Fixtures: fixtures/postmortem/trial18/
(FIXTURE.md names each thread).

- A pasted launch command is what was run, not the user's words; a traceback cut inside torchrun's own launcher
  (launch_agent → agent.run()) is the launcher failing before any worker, most often the rendezvous; the
  multi-node example's MASTER_ADDR is flagged whenever a multi-node launch names it (a pasted line or --launch).
- An NCCL timeout of a multi-node run with no step logged leads with the inter-node network; a config that sets
  another ddp_timeout is named as the contradiction it is; the log's world size is not multiplied by --nnodes.
- A NaN paste that starts mid-run is "the first step in the paste"; fp16 on a bf16-pre-trained family is the
  cause and bf16 the fix when the config or the words say fp16.
"""

from __future__ import annotations

import shutil

import pytest

from finetune_doctor.readers.runlogs.launchlines import blank_launch_lines, launch_lines
from pmhelp import FIXTURES, diagnose_dir

FIX = FIXTURES / "trial18"


def _run(tmp_path, name, **opts):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(FIX / name, d / name)
    return diagnose_dir(d, **opts)


def test_torchrun_launcher_cut_is_the_launcher_failing_not_words(tmp_path):
    r = _run(tmp_path, "lf5864_launcher.log")
    f = r.findings[0]
    assert f.name == "run-crashed", [x.name for x in r.findings]
    assert "You describe" not in f.message and "llamafactory-cli train examples" not in f.message
    assert "torchrun's elastic agent" in f.message and "before any worker started" in f.message
    assert "MASTER_ADDR=192.168.0.1 is the address of LLaMA-Factory's multi-node example command: on 2 nodes" \
        in f.message
    assert any(n.startswith("launch command read from the launch line pasted in") and "NNODES=2" in n
               for n in r.notes), r.notes


def test_launch_file_flags_the_example_address_on_two_nodes(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    # the traceback alone (the launch lines not pasted): the settings come from --launch
    text = (FIX / "lf5864_launcher.log").read_text(encoding="utf-8")
    (d / "train.log").write_text(text[text.index("Traceback"):], encoding="utf-8")
    sh = tmp_path / "node1.sh"
    sh.write_text("FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=1 MASTER_ADDR=192.168.0.1 MASTER_PORT=29500 "
                  "llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml\n")
    r = diagnose_dir(d, launch=str(sh))
    assert "on 2 nodes it must be the master node's own address" in r.findings[0].message
    sh.write_text("FORCE_TORCHRUN=1 NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.7 MASTER_PORT=29500 "
                  "llamafactory-cli train examples/train_lora/llama3_lora_sft.yaml\n")
    r = diagnose_dir(d, launch=str(sh))
    assert "multi-node example" not in r.findings[0].message
    assert "MASTER_ADDR=10.0.0.7" in r.findings[0].message


def test_example_address_is_noted_beside_an_nccl_timeout(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    text = (FIX / "lf5450_worker.log").read_text(encoding="utf-8").replace("192.168.175.4", "192.168.0.1")
    (d / "worker.log").write_text(text, encoding="utf-8")
    r = diagnose_dir(d)
    assert any(n.startswith("MASTER_ADDR=192.168.0.1 is the address") for n in r.notes), r.notes


@pytest.mark.parametrize("line, is_launch", [
    ("FORCE_TORCHRUN=1 NNODES=2 RANK=0 MASTER_ADDR=192.168.0.1 MASTER_PORT=29500 llamafactory-cli train a.yaml", True),
    ("(llama-factory) u@worker-1:/data/LLaMA-Factory$ FORCE_TORCHRUN=1 NNODES=2 llamafactory-cli train x.yaml", True),
    ("torchrun --nnodes 2 --nproc_per_node 8 src/train.py", True),
    ("deepspeed --num_gpus 8 src/train.py --deepspeed ds.json", True),
    ("deepspeed 0.15 和 torch 2.4 不兼容", False),
    ("I ran llamafactory-cli and it crashed", False),
])
def test_launch_line_shapes(line, is_launch):
    assert bool(launch_lines(line)) is is_launch
    blanked = blank_launch_lines(line)
    assert len(blanked) == len(line) and (blanked.strip() == "") is is_launch


def test_multi_node_timeout_leads_with_the_network_and_reads_ddp_timeout(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(FIX / "lf5450_worker.log", d / "worker.log")
    r = diagnose_dir(d, config=FIX / "lf5450_llama3_lora_sft.yaml", nnodes=2)
    f = next(x for x in r.findings if x.name == "nccl-timeout")
    assert "within 600 s, not the 180000000 s your config's ddp_timeout sets" in f.message
    assert "most likely passed none" not in f.message
    assert "a 2-node run (--nnodes) that logged no step before the timeout: the inter-node network first" \
        in f.message
    assert "NCCL_SOCKET_IFNAME" in f.message and "NCCL_IB_DISABLE=1" in f.message
    assert r.run["world_size"] == 2, r.run.get("world_size")
    assert any("spans the 2 nodes --nnodes gives" in n for n in r.notes), r.notes


def test_network_lead_from_the_pasted_launch_line_and_not_for_one_node(tmp_path):
    r = _run(tmp_path, "lf5450_worker.log")
    f = next(x for x in r.findings if x.name == "nccl-timeout")
    assert "a 2-node run (the launch line in" in f.message and "most likely passed none" in f.message
    d = tmp_path / "one"
    d.mkdir()
    text = (FIX / "lf5450_worker.log").read_text(encoding="utf-8").replace("NNODES=2", "NNODES=1")
    (d / "worker.log").write_text(text, encoding="utf-8")
    f = next(x for x in diagnose_dir(d).findings if x.name == "nccl-timeout")
    assert "inter-node network" not in f.message


def test_nan_paste_from_mid_run_is_not_the_first_step(tmp_path):
    r = _run(tmp_path, "lf6286_glm4_nan.log")
    f = next(x for x in r.findings if x.name == "nan-loss")
    assert "from the first step in the paste (step 70;" in f.message and "no config was given" in f.message
    assert "first logged step" not in f.message and "ordinary settings" not in f.message


GLM4_FP16 = """model_name_or_path: THUDM/glm-4-9b-chat
trust_remote_code: true
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: alpaca_zh_demo
template: glm4
cutoff_len: 1024
output_dir: saves/glm4-9b/lora/sft
logging_steps: {every}
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 5.0e-5
num_train_epochs: 3.0
fp16: true
"""


@pytest.mark.parametrize("every, opening", [(5, "from the first step in the paste (step 70;"),
                                            (100, "from the first logged step with ordinary settings")])
def test_fp16_on_glm4_is_offered_as_the_fix(tmp_path, every, opening):
    cfg = tmp_path / "glm4.yaml"
    cfg.write_text(GLM4_FP16.format(every=every))
    r = _run(tmp_path, "lf6286_glm4_nan.log", config=cfg)
    f = next(x for x in r.findings if x.name == "nan-loss")
    assert opening in f.message and "fp16 training of a model pre-trained in bf16" in f.message
    assert f.fix.title == "train in bf16 instead of fp16"
    assert {(e.key, e.value) for e in f.fix.edits} >= {("bf16", True)}


def test_fp16_said_beside_the_paste_names_the_family(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    text = (FIX / "lf6286_glm4_nan.log").read_text(encoding="utf-8")
    (d / "train.log").write_text("GLM-4 lora 用 fp16 训练出现 nan\n" + text, encoding="utf-8")
    f = next(x for x in diagnose_dir(d).findings if x.name == "nan-loss")
    assert "your words name fp16 and glm4" in f.message and f.fix.title == "train in bf16 instead of fp16"
    (d / "train.log").write_text("LlamaFactory fp16 训练出现 nan\n" + text, encoding="utf-8")
    f = next(x for x in diagnose_dir(d).findings if x.name == "nan-loss")
    assert "your words name fp16" not in f.message and f.fix.title == "switch the attention kernel"


@pytest.mark.parametrize("line, launch", [
    ("torchrun crashes with OOM when I set --nproc_per_node 8", False),
    ("accelerate launch hangs, see config.yaml", False),
    ("deepspeed train fails with CUDA out of memory", False),
    ("deepspeed 0.15 和 torch 2.4 不兼容", False),
    ("FORCE_TORCHRUN=1 NNODES=2 RANK=0 MASTER_ADDR=192.168.0.1 MASTER_PORT=29500 llamafactory-cli train x.yaml", True),
    ("(env) u@h:/dir$ torchrun --nnodes 2 --nproc_per_node 8 src/train.py", True),
    ("deepspeed --num_gpus 8 train.py", True),
    ("accelerate launch train.py --config_file fsdp.yaml", True),
    ("lmf train examples/train_lora/llama3_lora_sft.yaml", True),
])
def test_a_sentence_naming_a_launcher_is_not_a_launch_line(line, launch):
    # review of the session's diff: the user's own sentence ("torchrun crashes with OOM ...") was blanked as a launch
    # command, and its symptom words lost; the first word after the launcher must be an argument
    from finetune_doctor.readers.runlogs.launchlines import launch_lines

    assert bool(launch_lines(line)) is launch
