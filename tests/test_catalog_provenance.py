"""Every catalogue entry carries its checkpoint dtype and vocabulary, each with its source (issue 21).

The dtype is the model's config.json's (top level or text_config), else the stored weights' (what LLaMA-Factory's
``torch_dtype="auto"`` load resolves to when config.json names none), else the modeling code's own choice; an alias
entry inherits its base's unless its own config.json overrides the field. The doctor sizes with exactly that
value: before this, 30 base entries had no dtype in the catalogue and were sized as float32 checkpoints
(google/gemma-7b, bf16 on the hub: +119 % and a false OOM)."""

from __future__ import annotations

import pytest

from finetune_doctor.readers.model.catalog import catalog_arch, catalog_entries, find_in_catalog

FROM = {"config.json", "stored weights", "modeling code", "transformers class default"}
ENTRIES = catalog_entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_has_dtype_and_vocab_with_their_source(entry):
    prov = entry.get("provenance") or {}
    for field in ("torch_dtype", "vocab_size"):
        rec = prov.get(field)
        assert isinstance(rec, dict), f"{entry['id']}: no {field} provenance"
        assert rec.get("value") not in (None, "", "auto"), f"{entry['id']}: {field} has no value"
        assert isinstance(rec.get("source"), str) and len(rec["source"]) > 10, f"{entry['id']}: {field} source"
        assert rec.get("from", "").split(": ")[-1] in FROM, f"{entry['id']}: {field} from {rec.get('from')!r}"
        assert isinstance(rec.get("checked"), bool)
    assert prov.get("architecture")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_the_doctor_sizes_with_the_recorded_dtype_and_vocab(entry):
    arch = catalog_arch(entry, entry["id"])
    prov = entry["provenance"]
    want = str(prov["torch_dtype"]["value"]).replace("torch.", "")
    assert arch.dtype == {"bf16": "bfloat16", "fp16": "float16"}.get(want, want)
    assert arch.vocab_size == prov["vocab_size"]["value"]
    assert "assumed float32 here" not in arch.notes   # no entry falls back to the conservative guess


def test_gemma_7b_is_bf16_as_on_the_hub():
    entry, _ = find_in_catalog("google/gemma-7b")
    arch = catalog_arch(entry, "google/gemma-7b")
    assert arch.dtype == "bfloat16" and "from the config.json" in arch.notes
    assert entry["provenance"]["torch_dtype"]["checked"] is True


def test_a_checkpoint_without_a_config_dtype_is_sized_in_its_stored_dtype():
    entry, _ = find_in_catalog("openai-community/gpt2-large")
    assert "torch_dtype" not in entry["config"]                 # the real config.json names none
    assert entry["provenance"]["torch_dtype"]["from"] == "stored weights"
    assert catalog_arch(entry, "gpt2-large").dtype == "float32"


def test_gemma_7b_lora_without_a_precision_flag_is_sized_from_bf16_weights(tmp_path, monkeypatch):
    """LF infers the compute dtype from the checkpoint when neither bf16 nor fp16 is set (LF_FACTS.md §2): a
    float32 guess doubled the frozen weights (31.9 GiB instead of 16.0 GiB) and ran the step in fp16."""
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text("model_name_or_path: google/gemma-7b\nstage: sft\ndo_train: true\n"
                                     "finetuning_type: lora\ntemplate: gemma\ndataset: alpaca_en_demo\n"
                                     "cutoff_len: 2048\nper_device_train_batch_size: 2\noutput_dir: out\n")
    r = CliRunner().invoke(main, ["estimate", "g.yaml", "--gpu", "A100-80GB", "--offline", "--format", "json"])
    d = json.loads(r.output)
    assert d["run"]["precision"]["weights"] == "bfloat16" and d["run"]["precision"]["compute"] == "bfloat16"
    assert d["memory"]["per_gpu_gib"]["weights"] == pytest.approx(15.9, abs=0.3)   # 8.54 B x 2 bytes


# The records whose value was not read in a stored file (checked false), each with where it was looked for. The
# audit pins the list: a new entry that joins without a read dtype and vocabulary fails here, and an entry read
# later must leave it (issue 21: "every catalogue entry has its dtype ... and vocab, each with its source").
NOT_READ = {
    ("baichuan-inc/Baichuan-7B", "torch_dtype"),             # weights read (BF16); config.json's field not stored
    ("LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct", "torch_dtype"),  # only re-saves of the hub file are stored
    ("mistralai/Codestral-22B-v0.1", "torch_dtype"),          # gated hub repository
}   # zai-org/GLM-4.6's vocabulary left in session 14 (read in a llama.cpp load of its GGUF; test_catalog_glm.py),
#     Tele-AI/TeleChat2-7B's dtype in session 16 (its shards' pickle scan on the hub tree; the test below)


def test_the_records_not_read_in_a_stored_file_are_exactly_the_named_ones():
    unread = {(e["id"], f) for e in ENTRIES for f in ("torch_dtype", "vocab_size")
              if e["provenance"][f]["checked"] is False}
    assert unread == NOT_READ


@pytest.mark.parametrize("eid, field", sorted(NOT_READ))
def test_a_record_not_read_says_where_it_was_looked_for_and_the_doctor_weighs_the_dtype(eid, field):
    entry, _ = find_in_catalog(eid)
    assert len(entry["provenance"][field]["source"]) > 200
    if field == "torch_dtype":
        # facts/assume.py _checkpoint turns this note into the 'checkpoint-dtype' assumption (the other width)
        assert "recalled, not re-read" in catalog_arch(entry, eid).notes


def test_telechat2_7b_dtype_is_read_from_its_stored_weights_and_no_longer_assumed(tmp_path, monkeypatch):
    """config.json names no dtype, so the stored weights decide: the hub tree's pickle scan of the first shard
    (and of the third and fourth) imports torch.BFloat16Storage, and the four shards' 15.24 GB are the entry's
    7,617,105,920 elements at 2 bytes. A read record leaves the `checkpoint-dtype` assumption out of the report."""
    import json

    from click.testing import CliRunner

    from finetune_doctor.cli import main

    entry, _ = find_in_catalog("Tele-AI/TeleChat2-7B")
    rec = entry["provenance"]["torch_dtype"]
    assert (rec["value"], rec["from"], rec["checked"]) == ("bfloat16", "stored weights", True)
    assert "torch.BFloat16Storage" in rec["source"] and "TeleChat2-7B/tree/main" in rec["source"]
    arch = catalog_arch(entry, entry["id"])
    assert arch.total_params() == 7_617_105_920
    assert 15.22e9 <= arch.total_params() * 2 <= 15.26e9   # 4.13 + 3.49 + 3.49 + 4.13 GB, each to 0.01 GB
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.yaml").write_text("model_name_or_path: Tele-AI/TeleChat2-7B\nstage: sft\ndo_train: true\n"
                                     "finetuning_type: lora\ntemplate: telechat2\ndataset: alpaca_en_demo\n"
                                     "cutoff_len: 2048\nper_device_train_batch_size: 1\nbf16: true\n"
                                     "output_dir: out\n")
    r = CliRunner().invoke(main, ["estimate", "t.yaml", "--gpu", "A100-80GB", "--offline", "--format", "json"])
    d = json.loads(r.output)
    assert d["run"]["precision"]["weights"] == "bfloat16"
    assert "checkpoint-dtype" not in {a["name"] for a in d["assumptions"]}
    assert d["memory"]["per_gpu_gib"]["weights"] == pytest.approx(14.26, abs=0.1)   # 7.62 B x 2 bytes


def _at(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_a_record_read_from_the_catalogue_copy_holds_the_copy_s_value(entry):
    """Where provenance names a ``field``, the value is the one the entry's copied config.json (or, for an
    alias, its ``config_overrides``) holds there: the record cannot drift from the file it cites."""
    copy = entry.get("config", entry.get("config_overrides"))
    for f in ("torch_dtype", "vocab_size"):
        rec = entry["provenance"][f]
        if rec.get("field") and not rec["from"].startswith("same_architecture_as"):
            assert _at(copy, rec["field"]) == rec["value"], (entry["id"], f)
        if rec["from"].startswith("same_architecture_as"):
            base, _ = find_in_catalog(rec["from"].split(":")[0].split(" ", 1)[1])
            assert base["provenance"][f]["value"] == rec["value"], (entry["id"], f)
