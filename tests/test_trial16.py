"""Trial 16 (a new user on four "will it fit" checks; fixtures written here, real-shaped: LLaMA-Factory's own
example YAML layout). Each test pins the kind of fault, not the trial's case."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from finetune_doctor.cli import main

# LLaMA-Factory's examples/train_lora/llama3_lora_sft.yaml layout, with a Qwen2.5-7B model and long samples
QWEN_LORA = """### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all

### dataset
dataset: alpaca_en_demo
template: qwen
cutoff_len: {cutoff}

### output
output_dir: saves/qwen2.5-7b/lora/sft

### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


def _check(tmp_path, text, *args):
    cfg = tmp_path / "train.yaml"
    cfg.write_text(text, encoding="utf-8")
    j = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--format", "json", *args])
    t = CliRunner().invoke(main, ["check", str(cfg), "--no-data", *args])
    return j.exit_code, json.loads(j.output), " ".join(t.output.split())


def test_the_memory_screen_judges_the_card_on_one_figure(tmp_path):
    """k3's kind: a total over the card (what nvidia-smi shows, allocator cache included) beside "fits yes" and
    "the estimate alone stays under the card", both judged on what the run needs. The screen now prints that
    figure as a row under the table, and the token budget's sentence quotes the same figure (the need at the
    limit), not the shown total. Numbers are read back from the JSON report (tolerance: the text's rounding)."""
    _, rep, flat = _check(tmp_path, QWEN_LORA.format(cutoff=6656), "--gpu", "L40S")
    mem, cap = rep["memory"], rep["hardware"]["capacity_gib"]
    total, need = mem["per_gpu_gib"]["total"], mem["need_gib"]
    assert total > cap > need and mem["fits"] is True   # the case: shown total over the card, the need under it
    assert f"total {total:.2f} {100 * total / cap:.1f}%" in flat
    assert f"needs to run {need:.2f} GiB = {100 * need / cap:.1f}% of capacity: the figure the card, fits and" in flat
    assert "fits yes" in flat
    train = mem["token_budget"]["train"]
    # the figure at the token limit is the need (what the card limit judges), below the shown total there
    assert train["need_gib"] < train["total_gib"]
    assert f"there the run needs {train['need_gib']:.1f} GiB of {cap:.1f}" in flat
    assert f"there the estimate is {train['total_gib']:.1f}" not in flat
    assert "what it needs stays under the card even at cutoff_len" in flat and train["card_tokens_per_sample"] == 6656


def test_a_missing_train_batch_whose_alternative_crosses_the_card_moves_the_verdict(tmp_path):
    """k1's kind (a paste that lost its `### train` lines): transformers' default batch 8 is sized, and the
    alternative 1 lands on the other side of the card. That alternative now carries the `!` and opens the verdict
    (facts/assumebase.py NEVER_OPENS no longer holds train-batch). Its total is checked against the same config with
    per_device_train_batch_size: 1 written out (tolerance 0.01 GiB: the same estimator, two inputs)."""
    text = QWEN_LORA.format(cutoff=2048).replace("per_device_train_batch_size: 2\n", "")
    _, rep, flat = _check(tmp_path, text, "--gpu", "A100-40GB")
    (batch,) = [a for a in rep["assumptions"] if a["name"] == "train-batch"]
    cap = rep["hardware"]["capacity_gib"]
    assert batch["value"] == 8 and rep["memory"]["need_gib"] > cap   # at 8 the run needs more than the card
    written = tmp_path / "one"
    written.mkdir()
    _, one, _ = _check(written, text.replace("### train\n", "### train\nper_device_train_batch_size: 1\n"),
                       "--gpu", "A100-40GB")
    assert batch["effect"]["total_gib"]["1"] == pytest.approx(one["memory"]["per_gpu_gib"]["total"], abs=0.01)
    assert one["memory"]["need_gib"] < cap and batch["effect"]["verdict"]["1"] != "oom"
    assert batch["moves_verdict"] is True and "! train-batch: 8 — if 1:" in flat
    assert rep["memory"]["verdict"] == "at-risk" and rep["memory"]["deciding_assumption"]["name"] == "train-batch"


def _qwen2_moe_params(cfg: dict) -> int:
    """Parameters of a Qwen2-MoE checkpoint counted from its config.json, by transformers' module layout
    (models/qwen2_moe/modeling_qwen2_moe.py: q/k/v with bias, o without; per layer 2 RMSNorm weights; a router of
    num_experts outputs; num_experts SwiGLU experts of moe_intermediate_size; one shared SwiGLU expert and its
    one-output gate), untied embeddings and a final norm. Written here, independent of analyzers/memory/params.py."""
    h, kv = cfg["hidden_size"], cfg["num_key_value_heads"] * cfg["hidden_size"] // cfg["num_attention_heads"]
    attn = (h * h + h) + 2 * (h * kv + kv) + h * h
    moe = cfg["num_experts"] * 3 * h * cfg["moe_intermediate_size"] + 3 * h * cfg["shared_expert_intermediate_size"]
    layer = attn + moe + h * cfg["num_experts"] + h + 2 * h
    return 2 * cfg["vocab_size"] * h + cfg["num_hidden_layers"] * layer + h


def test_qwen2_57b_a14b_is_catalogued_and_counted_independently(tmp_path):
    """LF#4447's model, added from its config.json (read in TensorRT-LLM's vendored copy, models.json read_from).
    The doctor's count must equal the count from the module layout (tolerance 0.1 %) and the Qwen2 blog's 57.41B
    (tolerance 0.01B); the folder name with -Instruct is sized as that entry."""
    from finetune_doctor.readers.model.catalog import find_in_catalog

    entry, _ = find_in_catalog("Qwen/Qwen2-57B-A14B")
    counted = _qwen2_moe_params(entry["config"])
    assert counted / 1e9 == pytest.approx(57.41, abs=0.01)
    _, rep, _ = _check(tmp_path, QWEN_LORA.format(cutoff=1024).replace(
        "Qwen/Qwen2.5-7B-Instruct", "/data/models/Qwen2-57B-A14B-Instruct"), "--gpu", "A100-80GB")
    assert rep["run"]["params_b"] == pytest.approx(counted / 1e9, rel=1e-3)
    assert rep["model"]["source"] == "catalog"


def test_a_did_you_mean_says_when_it_crosses_size_or_moe(tmp_path):
    """k1's kind: `Qwen2-57B` (a folder named without its active size) was offered Qwen/Qwen2-72B, a dense model of
    another size, with no word. The MoE of the stated size is now offered first and says it is a MoE; a suggestion
    of another size says so."""
    code, rep, _ = _check(tmp_path, QWEN_LORA.format(cutoff=1024).replace("Qwen/Qwen2.5-7B-Instruct", "Qwen2-57B"),
                          "--gpu", "A100-80GB")
    msg = next(f["message"] for f in rep["findings"] if f["code"] == "FD607")
    hint = msg[msg.index("(did you mean "):msg.index("?)")]
    assert hint.startswith("(did you mean Qwen/Qwen2-57B-A14B (a MoE, 14B active)")
    for other in hint[len("(did you mean "):].split(", Qwen/")[1:]:
        assert "another size than 57B" in other or "a MoE" in other, other
    assert code == 1


def test_a_context_file_used_implicitly_or_without_gpus_is_named_with_what_wins(tmp_path):
    """k3's kind: `doctor context` run on a laptop (no GPU) wrote .doctor-context.json beside the config, and every
    later check read it with no word of where it came from. Now the report names a context found beside the config,
    and one that records no GPU says it is not the training machine's cards and what gives them (--gpu, or
    nothing). A context passed with --context that records GPUs needs no such word."""
    cfg = tmp_path / "train.yaml"
    cfg.write_text(QWEN_LORA.format(cutoff=2048), encoding="utf-8")
    made = CliRunner().invoke(main, ["context", str(cfg), "--no-data"])
    assert made.exit_code == 0, made.output
    ctx_file = tmp_path / ".doctor-context.json"
    saved = json.loads(ctx_file.read_text())
    assert saved["hardware"]["gpu"] is None   # this machine has no GPU the doctor may read (FINETUNE_DOCTOR_NO_NVML)

    def run(*args):
        r = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--format", "json", *args])
        return json.loads(r.output)

    with_gpu = run("--gpu", "A100-80GB")
    use = with_gpu["inputs"]["context_use"]
    assert use.startswith("found beside the config, used without --context")
    assert "captured on a machine with no GPU" in use and "--gpu A100-80GB gives the cards" in use
    assert with_gpu["hardware"]["source"] == "flag" and with_gpu["hardware"]["gpu"] == "A100-80GB"
    assert "no --gpu: the cards are unknown here" in run()["inputs"]["context_use"]
    text = CliRunner().invoke(main, ["check", str(cfg), "--no-data", "--gpu", "A100-80GB"]).output
    assert "context: " in text and "found beside the config" in " ".join(text.split())
    # the same file holding the training machine's cards (as `doctor context` writes them there), passed explicitly
    saved["hardware"].update(gpu="A100-80GB", num_gpus=8, capacity_gib=79.15, bf16=True, source="nvml")
    passed = tmp_path / "train-machine.json"
    passed.write_text(json.dumps(saved), encoding="utf-8")
    ctx_file.unlink()
    rep = run("--context", str(passed))
    assert "context_use" not in rep["inputs"] and rep["hardware"]["source"] == "context"


# a DDP run's log as transformers and torchrun print it: `transformers-cli env` pasted first, the Trainer's save line,
# then rank 1's traceback of the staged save's rename ({code}: the release's or the dev build's line at that frame)
SAVE_LOG = """- `transformers` version: {version}
- Platform: Linux-5.15.0-105-generic-x86_64-with-glibc2.35
- Python version: 3.10.14
- PyTorch version (GPU?): 2.5.1+cu124 (True)
[INFO|trainer.py:3910] 2025-02-10 11:02:41,118 >> Saving model checkpoint to /data/out/qwen2.5-vl-lora/checkpoint-200
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 3176, in _save_checkpoint
[rank1]:     {code}
[rank1]:   File "/opt/conda/lib/python3.10/os.py", line 270, in renames
[rank1]:     rename(old, new)
[rank1]: OSError: [Errno 39] Directory not empty: '/data/out/qwen2.5-vl-lora/{staging}' -> '/data/out/qwen2.5-vl-lora/checkpoint-200'
"""


@pytest.mark.parametrize("version, staging, code, episode, fix", [
    # p2's kind (ms-swift#3031): the dev build's random staging folder; its own episode, not 4.36's
    ("4.49.0.dev0", "tmp-checkpoint-k2x9w_qa", "os.renames(output_dir, checkpoint_dir)",
     "transformers 4.49.0.dev0 (main in February 2025)", "install the transformers 4.49.0 release or later"),
    # the first episode itself: 4.36.2 renamed from every process, 4.37.0 fixed it
    ("4.36.2", "tmp-checkpoint-200", "os.rename(staging_output_dir, output_dir)",
     "transformers 4.36 renamed", "upgrade transformers to 4.37.0 or later"),
    # a dev build after both fixing releases has both fixes: no transformers to change
    ("4.47.0.dev0", "tmp-checkpoint-200", "os.rename(staging_output_dir, output_dir)",
     None, "the fix: save from one writer"),
])
def test_the_rename_race_advice_compares_the_transformers_build_read(tmp_path, version, staging, code, episode, fix):
    """The rename-race reading (paths read) named 4.36 and "a release with the fix (#28364) ends it" whatever
    transformers ran. It now compares the release or dev build read (version_key: 4.37.0 < 4.47.0.dev0 <
    4.49.0.dev0 < 4.49.0) with the episodes of savecause.py, as a cut traceback's reading does."""
    from pmhelp import diagnose_dir

    (tmp_path / "train.log").write_text(SAVE_LOG.format(version=version, staging=staging, code=code),
                                        encoding="utf-8")
    f = diagnose_dir(str(tmp_path)).findings[0]
    assert f.code == "FD317" and f"('{staging}' -> 'checkpoint-200')" in f.message
    assert f"transformers {version} (read at " in f.message and fix in f.message
    if episode:
        assert f"is in the affected releases: {episode}" in f.message
    else:
        assert "is in none of them, so another writer is likelier" in f.message
        assert "upgrade transformers" not in f.message
    if version != "4.36.2":
        assert "#28364, the rename on the main process only) ends it" not in f.message


QWEN72_FULL_Z3 = """### model
model_name_or_path: Qwen/Qwen2-72B-Instruct

### method
stage: sft
do_train: true
finetuning_type: full
deepspeed: examples/deepspeed/ds_z3_config.json

### dataset
dataset: alpaca_en_demo
template: qwen
cutoff_len: 2048

### output
output_dir: saves/qwen2-72b/full/sft

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 2
learning_rate: 1.0e-5
num_train_epochs: 3.0
bf16: true
"""


def _fixes(rep):
    fix = next(f["fix"] for f in rep["findings"] if f["code"] == "FD601")
    return [fix, *fix.get("alternatives", [])]


def test_an_offload_remedy_past_what_nodes_have_says_so_without_host_ram(tmp_path):
    """k4's kind (LF#5553): a full 72B run on the 4 cards of one node; offloading every state puts them all in that
    node's host RAM (~1.4 TB; the fp32 master weights and Adam's two moments alone are 72.7e9 x 12 B = 812 GiB),
    and with no --host-ram it was ranked first with no word. Now it says it is past what many nodes have (1 TiB,
    planners.PLAUSIBLE_HOST_RAM_GIB) and ranks after the others; --host-ram 2TB judges it instead."""
    from finetune_doctor.engine.planners import PLAUSIBLE_HOST_RAM_GIB

    _, rep, _ = _check(tmp_path, QWEN72_FULL_Z3, "--gpu", "4xA100-80GB")
    fixes = _fixes(rep)
    off = [i for i, f in enumerate(fixes) if "offload" in f["title"] and "parameters" in f["title"]]
    assert off, [f["title"] for f in fixes]
    cost = fixes[off[0]]["cost"]
    need = float(cost.split("host RAM needed per node ≈ ")[1].split(" GiB")[0])
    # independent floor: fp32 master weights + Adam's two moments of the whole model, 12 bytes per parameter, on the
    # node's host (4 ranks, one node), in GiB
    assert need > 72.7e9 * 12 / 2**30 > PLAUSIBLE_HOST_RAM_GIB * 0.75
    assert "more than many GPU nodes have" in cost and "until --host-ram SIZE gives the node's own" in cost
    assert off[0] == len(fixes) - 1 and "the bound taken for a node while --host-ram is not given" in cost
    given = tmp_path / "given"
    given.mkdir()
    _, rep2, _ = _check(given, QWEN72_FULL_Z3, "--gpu", "4xA100-80GB", "--host-ram", "2TB")
    assert all("more than many GPU nodes have" not in (f.get("cost") or "") for f in _fixes(rep2))


# LLaMA-Factory 0.9.0's examples/train_lora/qwen2vl_lora_sft.yaml layout, with the 0.9.0/0.9.1 image bound
QWEN2VL_LORA = """### model
model_name_or_path: Qwen/Qwen2-VL-7B-Instruct

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all

### dataset
dataset: mllm_demo
template: qwen2_vl
cutoff_len: 2048
image_resolution: 448

### output
output_dir: saves/qwen2_vl-7b/lora/sft

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
bf16: true
"""


@pytest.mark.parametrize("lf, pixels", [
    ("0.9.0", 448 * 448),   # 0.9.0 data/mm_plugin.py: max(w, h) > image_resolution -> scaled to that side
    ("0.9.1", 448),         # 0.9.1: w * h > image_resolution -> scaled to that many pixels
    ("0.9.2", 768 * 768),   # renamed to image_max_pixels: LF stops on the key (FD002); the default bound is sized
])
def test_image_resolution_is_sized_as_the_release_reads_it(tmp_path, lf, pixels):
    """k2's kind: `image_resolution: 448` under --llamafactory 0.9.1 was sized at 0.9.2's default bound
    (589,824 pixels) because the release named by --llamafactory did not reach the run's LF-dependent terms."""
    code, rep, _ = _check(tmp_path, QWEN2VL_LORA, "--gpu", "A100-80GB", "--llamafactory", lf)
    (img,) = [a for a in rep["assumptions"] if a["name"] == "image-pixels"]
    assert img["value"] == pixels
    codes = {f["code"] for f in rep["findings"]}
    assert ("FD002" in codes) == (lf == "0.9.2")
    assert {"package": "llamafactory", "version": lf, "source": "--llamafactory"} in rep["run"]["stack"]


# the longest paragraph a rule's documentation may print: about 14 lines at 100 columns (FD317's list of the
# causes it reads, 1,327 characters, is the longest); trial 16 read `doctor explain FD317` as one 40-line block
EXPLAIN_PARAGRAPH_MAX = 1400


def test_doctor_explain_renders_paragraphs():
    from finetune_doctor.engine.loader import load_rules
    from finetune_doctor.reporters.catalog import render_explain

    for rule in load_rules([]):
        text = render_explain(rule)
        longest = max(len(p) for p in text.split("\n\n"))
        assert longest <= EXPLAIN_PARAGRAPH_MAX, (rule.code, longest)
    out = CliRunner().invoke(main, ["explain", "FD317"]).output
    body = out[out.index("## What it does"):out.index("## Why is this bad?")]
    assert body.count("\n\n") >= 8   # scope, torchelastic, causes, fallback, chain, consequences, ... stops
