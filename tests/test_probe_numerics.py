"""The numerics probe on a real checkpoint written to disk: a LLaMA whose MLP has an outlier feature (as real
checkpoints do, the cause of fp16 overflow) overflows in fp16 in that module, bf16 does not, and upcasting the MLP
to fp32 removes it. With no weights on disk the probe says numerics cannot be confirmed."""

from __future__ import annotations

import pytest

from lazyskip import importorskip_when_run  # noqa: E402

torch = None
_needs_torch = importorskip_when_run("torch", "transformers", bind=globals())   # at the first test (lazyskip.py)

from finetune_doctor.probes.numerics import FP16_MAX, probe_numerics, weights_on_disk  # noqa: E402

# every test here builds and runs torch models (seconds each): outside the fast lane (pytest -m "not slow")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outlier_checkpoint(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        # one intermediate feature of layer 1 grows past fp16's range (gate·up ≈ 1e6) and down_proj maps it
        # back to a small residual contribution: an overflow inside the MLP that fp32 or bf16 survive
        mlp = model.model.layers[1].mlp
        mlp.up_proj.weight[0].fill_(40.0)
        mlp.gate_proj.weight[0].fill_(40.0)
        mlp.down_proj.weight[:, 0].fill_(1e-6)
    path = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(path)
    return str(path)


def batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (1, 24), generator=g) for _ in range(2)]


def test_fp16_overflow_is_found_and_bf16_removes_it(outlier_checkpoint):
    assert weights_on_disk(outlier_checkpoint)
    r = probe_numerics(outlier_checkpoint, batches(), "float16", "bfloat16")
    fp16, bf16 = r.passes
    assert r.confirmed is True
    # the product act(gate)·up is not a module output; the first module that returns it is down_proj
    assert fp16.first_overflow == "model.layers.1.mlp.down_proj"
    assert fp16.loss is None                     # the loss of an overflowed forward is not finite
    assert bf16.first_overflow is None and bf16.loss is not None
    assert bf16.max_abs ** 2 > FP16_MAX          # gate and up outputs whose product exceeds fp16's range


def test_fp32_upcast_of_the_named_module_removes_it(outlier_checkpoint):
    r = probe_numerics(outlier_checkpoint, batches(), "float16", upcast_modules=("layers.1.mlp",))
    assert r.confirmed is True and r.passes[1].first_overflow is None


def test_a_clean_model_is_not_confirmed(outlier_checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(outlier_checkpoint)
    with torch.no_grad():
        mlp = m.model.layers[1].mlp
        mlp.up_proj.weight[0].fill_(0.01)
        mlp.gate_proj.weight[0].fill_(0.01)
    m.save_pretrained(tmp_path)
    r = probe_numerics(str(tmp_path), batches(), "float16", "bfloat16")
    assert r.confirmed is False and r.passes[0].first_overflow is None and "no overflow" in r.note


def test_random_weights_cannot_confirm_numerics(tmp_path):
    r = probe_numerics(str(tmp_path), batches())
    assert r.confirmed is None and "cannot be confirmed" in r.note and r.passes == ()
    assert probe_numerics(None, batches()).confirmed is None


def _tiny_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the of and to in is that for it as with was on be by this are or from at which an have not".split()
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>", eos_token="</s>").save_pretrained(path)


def test_check_probe_confirms_the_bf16_fix_of_fp16_on_a_bf16_checkpoint(tmp_path, monkeypatch, outlier_checkpoint):
    """`doctor check --probe` on a config whose checkpoint is on disk: FD102 (fp16 on a bf16 model) is confirmed
    by a forward pass on the configured data — fp16 overflows in the outlier MLP, bf16 does not."""
    import json
    import shutil

    from click.testing import CliRunner
    from transformers import AutoModelForCausalLM

    from finetune_doctor.cli import main

    model_dir = tmp_path / "tiny-llama"
    AutoModelForCausalLM.from_pretrained(outlier_checkpoint, dtype=torch.bfloat16).save_pretrained(model_dir)
    _tiny_tokenizer(model_dir)
    (tmp_path / "data").mkdir()
    rows = [{"instruction": "the of and to in is that for it as with", "input": "", "output": "was on be by this"}] * 3
    (tmp_path / "data" / "tiny.json").write_text(json.dumps(rows))
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps({"tiny": {"file_name": "tiny.json"}}))
    (tmp_path / "train.yaml").write_text(
        "model_name_or_path: tiny-llama\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: tiny\ndataset_dir: data\ntemplate: default\ncutoff_len: 64\nfp16: true\n"
        "per_device_train_batch_size: 1\noutput_dir: out\n")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["check", "train.yaml", "--gpu", "A100-80GB", "--no-data", "--probe",
                                  "--format", "json"])
    f = next(x for x in json.loads(r.stdout)["findings"] if x["name"] == "fp16-on-bf16-model")
    conf = f["fix"]["confirmed"]
    assert conf["by"] == "simulate" and conf["before_gib"] > 0
    assert "float16 overflows first in model.layers.1.mlp.down_proj" in conf["note"]
    assert "bfloat16 is finite everywhere" in conf["note"]
    shutil.rmtree(model_dir)
