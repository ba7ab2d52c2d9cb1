#!/usr/bin/env python
"""Run LLaMA-Factory's own preprocessing on the fixture datasets and freeze the per-sample token lengths.

The result, fixtures/data/expected_lengths.json, is what tests/test_data_lf_parity.py asserts finetune-doctor's
`doctor data` lengths against: every kept sample's input length and label count, for several templates, stages,
cutoffs and data options.

Two interpreters are involved:

* the project's venv (``.venv/bin/python scripts/freeze_lf_lengths.py``) trains the test BPE tokenizer with
  tests/test_data_fixtures.py (two variants, see there) and records its fingerprint;
* a throwaway environment where LLaMA-Factory is installed (never the project venv), given by ``--lf-python``.
  It is re-invoked with ``--inner`` and runs ``llamafactory.data.loader.get_dataset`` exactly as training does:
  ``load_tokenizer`` → ``get_template_and_fix_tokenizer`` → ``get_dataset(stage=...)``.

How the LF environment used for the committed file was made (PyPI is the only network access here; LLaMA-Factory's
newest PyPI release is 0.9.5, the snapshot in LF_FACTS.md is 0.9.6.dev0 — the data code quoted there is the same):

    python3.11 -m venv /tmp/lfvenv
    echo /work/main/.venv/lib/python3.11/site-packages > /tmp/lfvenv/lib/python3.11/site-packages/zz.pth  # torch
    /tmp/lfvenv/bin/pip install llamafactory==0.9.5 --no-deps
    /tmp/lfvenv/bin/pip install "transformers>=4.55,<=5.6.0,!=4.57.0" "datasets>=2.16,<=4.0.0" \\
        "accelerate>=1.3,<=1.11.0" "peft>=0.18.0,<=0.18.1" "trl>=0.18,<=0.24.0" omegaconf pyyaml fire einops \\
        sentencepiece tiktoken protobuf pydantic scipy "tyro<0.9.0" packaging safetensors

torch comes from the project venv through the .pth line (the CPU wheel, 2.13). ``torchaudio`` is not installed:
LF's mm_plugin imports it at module level but the text path never calls it, so the inner run registers an empty
module under that name. ``DISABLE_VERSION_CHECK=1`` lets LF accept that torch. Nothing else is stubbed or patched.

Usage: ``.venv/bin/python scripts/freeze_lf_lengths.py --lf-python /tmp/lfvenv/bin/python``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "data"
OUT = FIXTURES / "expected_lengths.json"

SFT_SETS = ["alpaca_demo", "sharegpt_tools", "chat_roles"]
# sharegpt_tools holds a parallel call (glm4 tool format rejects it) and llama3's tool prompt embeds today's date
NO_TOOLS = {"chatglm3", "glm4", "llama3", "llama4"}
# Multimodal templates (gemma3, llama4, qwen2_vl, mistral_small) need a model processor: LF raises "Processor was
# not found" for a text-only tokenizer folder, so they cannot be frozen here; their text slots equal gemma/llama3/
# qwen/mistral's, which are.
TEMPLATES = ["default", "empty", "alpaca", "llama2", "llama2_zh", "llama3", "mistral", "ministral", "qwen",
             "qwen3", "qwen3_nothink", "chatml", "chatglm3", "glm4", "yi", "gemma", "gemma2", "deepseek",
             "deepseek3", "deepseekr1", "phi", "phi_small", "phi4", "intern2", "vicuna", "zephyr", "falcon",
             "cohere", "olmo", "openchat"]
QWEN_TOKENIZER = {"qwen", "qwen2_vl", "qwen3", "qwen3_nothink", "chatml", "yi", "intern2", "phi4"}


def runs() -> list[dict]:
    """The LF runs to freeze: id, tokenizer variant, LF stage, dataset, data arguments."""
    out = []

    def add(rid, tok, stage, dataset, **data):
        out.append({"id": rid, "tokenizer": tok, "stage": stage, "dataset": dataset, "data": data})

    for t in TEMPLATES:
        tok = "qwen" if t in QWEN_TOKENIZER else "llama"
        for ds in SFT_SETS:
            if ds == "sharegpt_tools" and t in NO_TOOLS:
                continue
            for cut in (4096, 96):
                add(f"sft-{t}-{ds}-{cut}", tok, "sft", ds, template=t, cutoff_len=cut)
    for ds in SFT_SETS:  # no template: LF parses the tokenizer's chat template, or falls back to 'empty'
        for cut in (4096, 96):
            add(f"sft-notemplate-chatml-{ds}-{cut}", "chatml", "sft", ds, cutoff_len=cut)
        add(f"sft-notemplate-llama-{ds}-96", "llama", "sft", ds, cutoff_len=96)
    add("sft-llama3-qwentok-alpaca_demo-96", "qwen", "sft", "alpaca_demo", template="llama3", cutoff_len=96)
    add("sft-qwen-llamatok-alpaca_demo-96", "llama", "sft", "alpaca_demo", template="qwen", cutoff_len=96)
    for ds in ("alpaca_lines", "alpaca_csv", "alpaca_parquet", "wrong_roles", "malformed_lines"):
        add(f"sft-qwen-{ds}-96", "qwen", "sft", ds, template="qwen", cutoff_len=96)
    add("sft-qwen-alpaca_lines-4096", "qwen", "sft", "alpaca_lines", template="qwen", cutoff_len=4096)
    for ds in ("sharegpt_tools", "chat_roles"):
        add(f"sft-qwen-maskhist-{ds}-96", "qwen", "sft", ds, template="qwen", cutoff_len=96, mask_history=True)
    add("sft-chatglm3-maskhist-chat_roles-64", "llama", "sft", "chat_roles", template="chatglm3", cutoff_len=64,
        mask_history=True)
    add("sft-qwen-trainprompt-alpaca_demo-96", "qwen", "sft", "alpaca_demo", template="qwen", cutoff_len=96,
        train_on_prompt=True)
    for ds in ("alpaca_demo", "sharegpt_tools"):
        add(f"sft-qwen3-nothinking-{ds}-96", "qwen", "sft", ds, template="qwen3", cutoff_len=96,
            enable_thinking=False)
        add(f"sft-qwen3-maskhist-{ds}-128", "qwen", "sft", ds, template="qwen3", cutoff_len=128, mask_history=True)
    add("sft-qwen-default_system-alpaca_demo-4096", "qwen", "sft", "alpaca_demo", template="qwen", cutoff_len=4096,
        default_system="Answer in one word.")
    add("sft-qwen-toolformat-sharegpt_tools-4096", "qwen", "sft", "sharegpt_tools", template="qwen",
        cutoff_len=4096, tool_format="default")
    for t in ("qwen", "llama2", "chatglm3"):
        tok = "qwen" if t == "qwen" else "llama"
        for cut, extra in ((128, {"packing": True}), (200, {"neat_packing": True})):
            add(f"sftpack-{t}-alpaca_demo-{cut}-{'neat' if 'neat_packing' in extra else 'pack'}", tok, "sft",
                "alpaca_demo", template=t, cutoff_len=cut, preprocessing_batch_size=5, **extra)
    for t in ("qwen", "llama3", "chatglm3", "mistral", "qwen3", "default", "gemma"):
        tok = "qwen" if t in QWEN_TOKENIZER else "llama"
        for ds in ("dpo_pairs", "alpaca_dpo"):
            for cut in (4096, 64):
                add(f"rm-{t}-{ds}-{cut}", tok, "rm", ds, template=t, cutoff_len=cut)
    for t, tok in (("qwen", "qwen"), ("llama3", "llama"), ("default", "llama")):
        for ds in ("pretrain_docs", "pretrain_txt"):
            add(f"pt-{t}-{ds}-64-nopack", tok, "pt", ds, template=t, cutoff_len=64, packing=False)
            add(f"pt-{t}-{ds}-64-pack", tok, "pt", ds, template=t, cutoff_len=64, preprocessing_batch_size=7)
    add("ppo-qwen-alpaca_demo-96", "qwen", "ppo", "alpaca_demo", template="qwen", cutoff_len=96)
    for t, tok in (("qwen", "qwen"), ("chatglm3", "llama")):
        for cut in (4096, 64):
            add(f"kto-{t}-kto_feedback-{cut}", tok, "kto", "kto_feedback", template=t, cutoff_len=cut)
    return out


# --- inner: runs inside the LLaMA-Factory environment --------------------------------------------------------------


def _inner(spec_path: str) -> None:
    import importlib.machinery
    import types

    if "torchaudio" not in sys.modules:
        try:
            import torchaudio  # noqa: F401
        except ImportError:
            mod = types.ModuleType("torchaudio")
            mod.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
            sys.modules["torchaudio"] = mod
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    import datasets
    import llamafactory
    import tokenizers
    import transformers
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.data.loader import get_dataset
    from llamafactory.hparams import DataArguments, ModelArguments
    from llamafactory.model import load_tokenizer
    from transformers import Seq2SeqTrainingArguments

    import copy

    from llamafactory.data import template as template_mod

    datasets.disable_progress_bars()
    # get_template_and_fix_tokenizer edits the registered Template in place (tool_format, default_system,
    # enable_thinking); a real run does that once per process, so every run here starts from pristine templates.
    pristine = copy.deepcopy(template_mod.TEMPLATES)
    job = json.loads(Path(spec_path).read_text())
    results = []
    out_dir = tempfile.mkdtemp()
    for r in job["runs"]:
        template_mod.TEMPLATES.clear()
        template_mod.TEMPLATES.update(copy.deepcopy(pristine))
        model_args = ModelArguments(model_name_or_path=job["tokenizers"][r["tokenizer"]])
        data_args = DataArguments(dataset=r["dataset"], dataset_dir=job["dataset_dir"], overwrite_cache=True,
                                  **r["data"])
        if r["stage"] == "pt" and data_args.packing is None:
            data_args.packing = True  # parser.py:520 does this after DataArguments.__post_init__
        if data_args.packing is None:
            data_args.packing = False
        training_args = Seq2SeqTrainingArguments(output_dir=out_dir, do_train=True, seed=42, report_to="none")
        tok_mod = load_tokenizer(model_args)
        template = get_template_and_fix_tokenizer(tok_mod["tokenizer"], data_args)
        entry = {"id": r["id"]}
        try:
            mod = get_dataset(template, model_args, data_args, training_args, stage=r["stage"], **tok_mod)
        except Exception as err:  # LF's own failure is part of what we freeze
            entry["error"] = f"{type(err).__name__}: {err}"
            results.append(entry)
            continue
        ds = mod["train_dataset"]
        if r["stage"] == "kto":  # the main sequence (LF also builds a mismatched KL sequence per row)
            entry["samples"] = [[len(x["input_ids"]), sum(1 for v in x["labels"] if v != -100), x["kto_tags"]]
                                for x in ds]
        elif r["stage"] == "rm":
            entry["samples"] = [[len(x["chosen_input_ids"]), len(x["rejected_input_ids"]),
                                 sum(1 for v in x["chosen_labels"] if v != -100),
                                 sum(1 for v in x["rejected_labels"] if v != -100)] for x in ds]
        elif r["stage"] == "pt":
            entry["samples"] = [len(x["input_ids"]) for x in ds]
        elif data_args.packing:
            rows = []
            for x in ds:
                pp = x.get("packing_params")
                real = None if not pp else len(x["input_ids"]) - pp["right_padding_length"]
                rows.append([len(x["input_ids"]), real])
            entry["rows"] = rows
        else:
            entry["samples"] = [[len(x["input_ids"]), sum(1 for v in x["labels"] if v != -100)] for x in ds]
        results.append(entry)
    Path(job["out"]).write_text(json.dumps({
        "results": results, "llamafactory": llamafactory.__version__, "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__, "datasets": datasets.__version__}))


# --- outer -----------------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lf-python", default="/tmp/lfvenv/bin/python",
                    help="python of an environment with LLaMA-Factory installed (never the project venv)")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated run-id prefixes (debugging)")
    args = ap.parse_args()
    if args.inner:
        _inner(args.inner)
        return 0
    sys.path.insert(0, str(ROOT / "tests"))
    from test_data_fixtures import build_tokenizer, fingerprint

    work = Path(tempfile.mkdtemp(prefix="freeze_lf_"))
    toks = {v: str(build_tokenizer(work / f"tok_{v}", v)) for v in ("llama", "qwen", "chatml")}
    fp = {fingerprint(p) for p in toks.values()}
    assert len(fp) == 1
    todo = runs()
    if args.only:
        todo = [r for r in todo if any(r["id"].startswith(p) for p in args.only.split(","))]
    job = {"runs": todo, "tokenizers": toks, "dataset_dir": str(FIXTURES), "out": str(work / "out.json")}
    (work / "job.json").write_text(json.dumps(job))
    env = dict(os.environ, HF_DATASETS_CACHE=str(work / "hf_datasets"), HF_HUB_OFFLINE="1",
               DISABLE_VERSION_CHECK="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run([args.lf_python, __file__, "--inner", str(work / "job.json")], check=True, env=env, cwd=str(work))
    res = json.loads((work / "out.json").read_text())
    by_id = {r["id"]: r for r in res["results"]}
    frozen = {
        "what": "per-sample lengths from LLaMA-Factory's get_dataset on fixtures/data (see scripts/freeze_lf_lengths.py)",
        "llamafactory": res["llamafactory"], "transformers": res["transformers"], "tokenizers": res["tokenizers"],
        "datasets": res["datasets"], "tokenizer_fingerprint": fp.pop(),
        "runs": [dict(r, **{k: v for k, v in by_id[r["id"]].items() if k != "id"}) for r in todo],
    }
    if args.only:
        print(json.dumps(frozen["runs"], indent=1)[:4000])
        return 0
    OUT.write_text(json.dumps(frozen, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({len(todo)} runs; LLaMA-Factory {res['llamafactory']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
