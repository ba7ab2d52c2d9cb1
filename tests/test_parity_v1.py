"""Launch parity for LLaMA-Factory v1 configs: `doctor lint` against v1's own parser (``llamafactory.v1.config
.get_args`` at the snapshot), the same method as tests/test_parity_lf.py for v0: LF's examples (examples/v1) and
mutations of them, each judged by both sides.

The oracle runs in a child process (tests/parity/v1_oracle.py) with the snapshot's ``src`` first on its path, so
this process keeps the v0 release it imports; CI has the snapshot at ``../shared/oracles/llamafactory-main``
beside the clone. Outcomes as in tests/parity/compare.py: caught (an error at the mutated key), missed, misplaced,
clean, later (only errors whose code names a failure after parsing), false-error.

The layout corpus (``world/...``) puts global_batch_size, micro_batch_size, cp_size and dp_size on 1-8 processes:
the oracle lays each out with v1's own DistributedStrategy and BatchGenerator (tests/parity/v1_oracle.py), the
doctor lints it with ``--gpu Nx<card>``; only config errors (FD0xx) are compared there, since a memory verdict is
no launch check.

Bars (issue 24): recall of v1's rejections >= 99 %, no false error.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from shared_dirs import shared_dir

ROOT = Path(__file__).resolve().parent.parent
SHARED = shared_dir("oracles", "llamafactory-main", "src")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(SHARED is None, reason="no ../shared/oracles/llamafactory-main (the v1 oracle)"),
              pytest.mark.skipif(importlib.util.find_spec("omegaconf") is None
                                 or importlib.util.find_spec("transformers") is None,
                                 reason="v1's parser needs omegaconf and transformers (the test extra)")]
# a plugin name v1 looks up after parsing (readers/config/lfv1.py), and the attention its trainer requires at init
# (FD048: base_trainer.py, after the parser and the layout code the oracle runs)
LATER = {"FD003", "FD048"}
V0_KEYS = {"model_name_or_path": "Qwen/Qwen3-0.6B", "per_device_train_batch_size": 2, "dataset": "alpaca_en_demo",
           "deepspeed": "examples/deepspeed/ds_z3_config.json", "finetuning_type": "lora", "lora_rank": 8,
           "lora_target": "all", "quantization_bit": 4, "enable_liger_kernel": True, "gradient_checkpointing": True,
           "gradient_accumulation_steps": 4, "template": "qwen3", "stage": "sft", "do_train": True, "optim": "adamw_torch",
           "per_device_eval_batch_size": 1, "warmup_ratio": 0.1, "lr_scheduler_type": "cosine"}
WORLDS = (1, 2, 3, 4, 6, 8)
LAYOUT_EXAMPLES = ("train_lora_sft", "train_full_fsdp2", "train_full_deepspeed", "train_full_ulysses_cp",
                   "train_full_qwen3_moe_fsdpturbo_ep_fsdp")
LAYOUTS = [{"global_batch_size": g, "micro_batch_size": m} for g in (None, 6, 8, 12, 20)
           for m in (1, 2)] + [{"cp_size": 2, "global_batch_size": 8}, {"cp_size": 4, "global_batch_size": 8},
                                  {"dp_size": 2, "global_batch_size": 8}, {"dp_size": 4, "cp_size": 2},
                                  {"mp_replicate_size": 2}, {"mp_replicate_size": 2, "mp_shard_size": 2},
                                  {"micro_batch_size": 0, "global_batch_size": 4},
                                  {"dist_config": {"name": "fsdpturbo", "ep_size": 2}},
                                  {"dist_config": {"name": "fsdpturbo", "ep_size": 4}, "global_batch_size": 8},
                                  {"dist_config": {"name": "fsdpturbo", "ep_size": 0}}]
FLASH = ["fa2", "auto", "disabled", "eager", "sdpa", "flash_attention_2", True, "FA2", "flash_attention_3"]
PLUGIN_VALUES = [("str", "lora"), ("json", '{"name": "lora", "r": 8}'), ("noname", {"r": 8}), ("list", [1, 2]),
                 ("null", None), ("badjson", "{name: lora")]


def _yaml() -> YAML:
    y = YAML()
    y.default_flow_style = False
    return y


def _corpus(tmp: Path) -> list[dict[str, Any]]:
    """(id, path, right keys) of every v1 example and mutation, written under `tmp`."""
    examples = sorted((SHARED / "reference" / "llamafactory" / "examples" / "v1").rglob("*.yaml"))
    y = YAML(typ="safe", pure=True)
    out: list[dict[str, Any]] = []

    def add(ident: str, values: dict[str, Any], keys: tuple[str, ...] = (), world: int | None = None) -> None:
        path = tmp / (ident.replace("/", "__") + ".yaml")
        with path.open("w", encoding="utf-8") as fh:
            _yaml().dump(values, fh)
        out.append({"id": ident, "path": str(path), "keys": keys, "world": world})

    for ex in examples:
        base = y.load(ex.read_text(encoding="utf-8"))
        name = ex.stem
        add(f"example/{name}", base)
        for k, v in V0_KEYS.items():
            add(f"v0key/{name}/{k}", {**base, k: v}, (k,))
        for k in list(base):
            if len(k) > 4:
                typo = k[:-2] + k[-1]
                add(f"typo/{name}/{k}", {typo if kk == k else kk: vv for kk, vv in base.items()}, (typo,))
            add(f"drop/{name}/{k}", {kk: vv for kk, vv in base.items() if kk != k}, (k,))
        for v in FLASH:
            add(f"flash/{name}/{v}", {**base, "flash_attn": v}, ("flash_attn",))
        for pk in ("peft_config", "dist_config", "quant_config", "kernel_config", "init_config", "optim_config",
                   "lr_scheduler_config"):
            for tag, v in PLUGIN_VALUES:
                add(f"plugin/{name}/{pk}/{tag}", {**base, pk: copy.deepcopy(v)}, (pk,))
        for tag, extra, drop in (("dyn_no_steps", {"batching_strategy": "dynamic_batching"}, "max_steps"),
                                 ("dyn_zero_steps", {"batching_strategy": "dynamic_batching", "max_steps": 0}, None),
                                 ("dyn_save_epochs", {"batching_strategy": "dynamic_batching", "max_steps": 5,
                                                      "save_epochs": 1.0}, None),
                                 ("padding_free", {"batching_strategy": "padding_free"}, None),
                                 ("types", {"micro_batch_size": "2", "cutoff_len": 2048.0}, None)):
            vals = {k: v for k, v in {**base, **extra}.items() if k != drop}
            add(f"batch/{name}/{tag}", vals, ("max_steps", "batching_strategy", "save_epochs"))
        if name in LAYOUT_EXAMPLES:
            for i, layout in enumerate(LAYOUTS):
                vals = {**base, **{k: v for k, v in layout.items() if v is not None}}
                for w in WORLDS:
                    add(f"world/{name}/{i}/{w}", vals, ("global_batch_size", "micro_batch_size", "cp_size",
                                                        "dp_size", "mp_replicate_size", "mp_shard_size",
                                                        "dist_config"), world=w)
    return out


def _oracle(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    src = SHARED / "oracles" / "llamafactory-main" / "src"
    env = {k: v for k, v in os.environ.items() if k not in ("ALLOW_EXTRA_KEYS", "USE_V1", "RANK", "WORLD_SIZE")}
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "parity" / "v1_oracle.py"), str(src)],
                         input=json.dumps([{"path": e["path"], "world": e["world"]} for e in entries]),
                         capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    if res.returncode != 0:
        pytest.skip(f"v1's parser could not run here: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout)


def _doctor(path: str, world: int | None = None) -> list[tuple[str, str | None]]:
    from finetune_doctor.pipeline import lint
    from finetune_doctor.settings import Options

    opts = Options.from_cli(command="lint", paths=[path], lf_version="main",
                            gpu=f"{world}xH200" if world else None)
    report = lint.run([path], opts)
    return [(f.code, f.location.key) for f in report.findings if f.severity == "error"
            and (world is None or f.code.startswith("FD0"))]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("v1parity")
    entries = _corpus(tmp)
    verdicts = _oracle(entries)
    saved = os.getcwd()
    os.chdir(tmp)
    try:
        out = []
        for e, v in zip(entries, verdicts):
            errs = _doctor(e["path"], e["world"])
            if v["accepted"]:
                kind = "clean" if not errs else ("later" if all(c in LATER for c, _ in errs) else "false-error")
            elif not errs:
                kind = "missed"
            else:
                kind = "caught" if any(k in e["keys"] or (k or "").split(".")[0] in e["keys"] for _, k in errs) \
                    else "misplaced"
            out.append({**e, "outcome": kind, "lf": v["error"], "errors": errs})
    finally:
        os.chdir(saved)
    dump = os.environ.get("FD_V1_PARITY_RESULTS")
    if dump:   # the numbers in the report come from this file
        Path(dump).write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    return out


def test_corpus_size(outcomes: list[dict[str, Any]]) -> None:
    by = {}
    for o in outcomes:
        by[o["outcome"]] = by.get(o["outcome"], 0) + 1
    assert len(outcomes) >= 1000, by
    assert sum(1 for o in outcomes if o["lf"]) >= 400, by   # the corpus exercises v1's checks


def test_recall_of_v1_rejections(outcomes: list[dict[str, Any]]) -> None:
    rejected = [o for o in outcomes if o["lf"]]
    caught = [o for o in rejected if o["outcome"] == "caught"]
    recall = len(caught) / len(rejected)
    bad = [(o["id"], o["outcome"], o["lf"], o["errors"]) for o in rejected if o["outcome"] != "caught"]
    assert recall >= 0.99, (recall, bad[:10])


def test_no_false_error_on_what_v1_accepts(outcomes: list[dict[str, Any]]) -> None:
    false = [(o["id"], o["errors"]) for o in outcomes if o["outcome"] == "false-error"]
    assert not false, false[:10]


def test_every_v1_example_is_accepted_and_clean(outcomes: list[dict[str, Any]]) -> None:
    ex = [o for o in outcomes if o["id"].startswith("example/")]
    assert len(ex) >= 16
    assert all(o["lf"] is None and o["outcome"] == "clean" for o in ex), [(o["id"], o["lf"], o["errors"]) for o in ex]


def test_layout_corpus_exercises_the_start_up_checks(outcomes: list[dict[str, Any]]) -> None:
    """The world-size corpus reaches each of v1's layout refusals, and the doctor agrees with every one of them."""
    world = [o for o in outcomes if o["id"].startswith("world/")]
    refused = [o for o in world if o["lf"]]
    assert len(world) >= 500 and len(refused) >= 150
    for text in ("Global batch size must be divisible", "must be divisible by cp_size", "dp_size * cp_size",
                 "mp_replicate_size", "ZeroDivisionError", "dp_size must be divisible by ep_size",
                 "ep_size must be positive"):
        assert any(text in o["lf"] for o in refused), text
    # "later": accepted by the layout code, refused at trainer init (FD048: cp_size > 1 without flash_attention_2)
    assert [o["id"] for o in world if o["outcome"] not in ("caught", "clean", "later")] == []
    assert all(c == "FD048" for o in world if o["outcome"] == "later" for c, _k in o["errors"])
