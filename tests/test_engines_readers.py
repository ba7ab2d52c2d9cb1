"""readers/config/accelerate.py: accelerate configs as `accelerate launch` reads them and launch command lines as each
launcher reads them. References: LLaMA-Factory's own accelerate configs and launch script (fixtures/llamafactory,
copied unchanged), the launch lines of real user reports (fixtures/cases/*/cmdline.txt), and the launchers'
documented flags (accelerate 1.15 commands/launch.py, torchrun, the deepspeed launcher, LLaMA-Factory
launcher.py)."""

from pathlib import Path

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.readers.config.accelerate import (
    FSDP_LAUNCH_DEFAULTS, accelerate_config_from_values, launch_file_in, load_accelerate_config, parse_launch,
    read_launch_file)

ROOT = Path(__file__).resolve().parent.parent
LF = ROOT / "fixtures" / "llamafactory" / "examples"


def test_lf_fsdp1_config():
    acc = load_accelerate_config(str(LF / "accelerate" / "fsdp_config.yaml"))
    assert (acc.distributed_type, acc.num_processes, acc.num_machines, acc.mixed_precision) == ("FSDP", 2, 1, "bf16")
    assert acc.fsdp["fsdp_sharding_strategy"] == "FULL_SHARD" and acc.fsdp["fsdp_use_orig_params"] is True
    # a key the file omits reads as accelerate launch's default (commands/launch.py: --fsdp_version "1")
    assert "fsdp_version" not in acc.fsdp and acc.fsdp_value("fsdp_version") == 1
    assert acc.positions["fsdp_config.fsdp_offload_params"][0] == 10
    assert acc.key_of("fsdp_offload_params") == "fsdp_config.fsdp_offload_params"


def test_lf_fsdp2_and_multinode_configs():
    acc2 = load_accelerate_config(str(LF / "accelerate" / "fsdp2_config.yaml"))
    assert acc2.fsdp["fsdp_version"] == 2 and acc2.fsdp["fsdp_reshard_after_forward"] is True
    multi = load_accelerate_config(str(LF / "accelerate" / "fsdp_config_multiple_nodes.yaml"))
    assert (multi.num_processes, multi.num_machines) == (16, 2)
    off = load_accelerate_config(str(LF / "accelerate" / "fsdp_config_offload.yaml"))
    assert off.fsdp["fsdp_offload_params"] is True


def test_unprefixed_fsdp_keys_gain_the_prefix_accelerate_gives_them():
    # commands/launch.py:1262-1265: defaults.fsdp_config.x becomes args.fsdp_x
    acc = accelerate_config_from_values({"distributed_type": "FSDP", "fsdp_config": {"version": 2,
                                                                                     "offload_params": True}}, "a.yaml")
    assert acc.fsdp == {"fsdp_version": 2, "fsdp_offload_params": True}


def test_json_config_and_bad_files(tmp_path):
    p = tmp_path / "acc.json"
    p.write_text('{"distributed_type": "MULTI_GPU", "num_processes": 4, "mixed_precision": "fp16"}', encoding="utf-8")
    acc = load_accelerate_config(str(p))
    assert (acc.distributed_type, acc.num_processes, acc.mixed_precision) == ("MULTI_GPU", 4, "fp16")
    with pytest.raises(InputError, match="no such file"):
        load_accelerate_config(str(tmp_path / "missing.yaml"))
    q = tmp_path / "lf.yaml"
    q.write_text("model_name_or_path: Qwen/Qwen3-4B\n", encoding="utf-8")
    with pytest.raises(InputError, match="not an accelerate config"):
        load_accelerate_config(str(q))
    r = tmp_path / "list.yaml"
    r.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(InputError, match="mapping"):
        load_accelerate_config(str(r))


def test_defaults_table_matches_accelerate_launch():
    # the values of accelerate 1.15 commands/launch.py:514-601 (strings there, typed here)
    assert FSDP_LAUNCH_DEFAULTS["fsdp_version"] == 1 and FSDP_LAUNCH_DEFAULTS["fsdp_cpu_ram_efficient_loading"]
    assert FSDP_LAUNCH_DEFAULTS["fsdp_auto_wrap_policy"] is None and FSDP_LAUNCH_DEFAULTS["fsdp_use_orig_params"]


def test_lf_fsdp_qlora_train_sh():
    cmd = read_launch_file(str(LF / "extras" / "fsdp_qlora" / "train.sh"))
    assert cmd.launcher == "accelerate" and cmd.accelerate_config == "examples/accelerate/fsdp_config.yaml"
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "0,1" and cmd.visible_devices() == 2
    assert cmd.script == "src/train.py" and cmd.config == "examples/extras/fsdp_qlora/llama3_lora_sft.yaml"
    assert cmd.line == 4   # the command starts below the shebang and the comment


def test_case_launch_lines():
    # fixtures/cases/001: the deepspeed launcher on four of eight GPUs
    c1 = read_launch_file(str(ROOT / "fixtures" / "cases" / "001" / "cmdline.txt"))
    assert c1.launcher == "deepspeed" and c1.options["include"] == "localhost:4,5,6,7"
    assert c1.script == "src/train_bash.py" and "--deepspeed" in c1.script_args
    # fixtures/cases/007: accelerate launch with a config file, then the pasted config as comments
    c7 = read_launch_file(str(ROOT / "fixtures" / "cases" / "007" / "cmdline.txt"))
    assert c7.launcher == "accelerate" and c7.accelerate_config == "examples/accelerate/single_config.yaml"
    assert c7.visible_devices() == 8 and c7.config == "examples/lora_multi_gpu/llama3_lora_sft02.yaml"


@pytest.mark.parametrize(("text", "launcher", "options"), [
    ("torchrun --nnodes 2 --nproc_per_node 8 src/train.py cfg.yaml", "torchrun",
     {"nnodes": "2", "nproc_per_node": "8"}),
    ("torchrun --nnodes=1:4 --nproc-per-node=4 --standalone src/train.py cfg.yaml", "torchrun",
     {"nnodes": "1:4", "nproc_per_node": "4", "standalone": "true"}),
    ("python -m torch.distributed.run --nproc_per_node 2 src/train.py cfg.yaml", "torchrun", {"nproc_per_node": "2"}),
    ("deepspeed --num_gpus 4 --num_nodes 2 --hostfile hosts src/train.py cfg.yaml", "deepspeed",
     {"num_gpus": "4", "num_nodes": "2", "hostfile": "hosts"}),
    ("accelerate launch --multi_gpu --num_processes 4 --mixed_precision bf16 src/train.py cfg.yaml", "accelerate",
     {"multi_gpu": "true", "num_processes": "4", "mixed_precision": "bf16"}),
])
def test_launcher_flags(text, launcher, options):
    cmd = parse_launch(text)
    assert cmd.launcher == launcher and cmd.options == options
    assert cmd.script == "src/train.py" and cmd.config == "cfg.yaml"


def test_llamafactory_cli_environment_and_continuations():
    text = ("#!/bin/bash\n# multi-node\nexport NNODES=2\nexport NODE_RANK=0\n"
            "FORCE_TORCHRUN=1 NPROC_PER_NODE=8 \\\n  USE_MCA=1 llamafactory-cli train \\\n"
            "  examples/megatron/qwen3_moe_full.yaml learning_rate=1e-5\n")
    cmd = parse_launch(text, "run.sh")
    assert cmd.launcher == "llamafactory-cli" and cmd.line == 5
    assert cmd.env == {"NNODES": "2", "NODE_RANK": "0", "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "8", "USE_MCA": "1"}
    assert cmd.env_flag("USE_MCA") and not cmd.env_flag("USE_RAY")
    assert cmd.config == "examples/megatron/qwen3_moe_full.yaml" and cmd.script_args[-1] == "learning_rate=1e-5"
    assert parse_launch("lmf train cfg.yaml").launcher == "llamafactory-cli"


def test_no_launch_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no training launch"):
        parse_launch("pip install llamafactory\nllamafactory-cli env\n", "notes.txt")
    assert launch_file_in(str(tmp_path)) is None
    (tmp_path / "cmdline.txt").write_text("llamafactory-cli train cfg.yaml\n", encoding="utf-8")
    assert launch_file_in(str(tmp_path)) == str(tmp_path / "cmdline.txt")
