"""Estimates for the LLaMA-Factory configs that do not train: export (merge / quantize) and chat/API inference.

A merge is not a training step: ``llamafactory-cli export`` loads the base model (in ``infer_dtype``; ``auto`` is
the checkpoint dtype) on ``export_device`` -- ``cpu`` puts it in host RAM (LF main ``hparams/parser.py`` L694-699:
``device_map = {"": cpu}``), ``auto`` spreads it over the visible GPUs -- applies the adapter and
``merge_and_unload`` in place, and writes ``export_dir`` in ``export_size`` GB shards (``train/tuner.py``
``export_model``). No gradients, optimizer states, activations or logits exist. GPTQ export
(``export_quantization_bit``) calibrates on ``export_quantization_nsamples`` samples of
``export_quantization_maxlen`` tokens on the GPU and writes the quantized linears.

Chat/API (``llamafactory-cli chat|webchat|api``) holds the weights and a KV cache. What LF hands each engine
(LF main ``chat/*_engine.py`` and ``hparams/model_args.py`` L400-445): HF generates with ``max_new_tokens``
(default 1024) after the prompt, its KV cache growing with the sequence; vLLM gets ``max_model_len = vllm_maxlen``
(4096) and ``gpu_memory_utilization = vllm_gpu_util`` (0.7) -- it reserves that fraction of each card up front,
whatever the model needs; SGLang gets ``context_length = sglang_maxlen`` (4096) and ``mem_fraction_static =
sglang_mem_fraction`` (0.7), the same up-front reservation.

KV cache per token = 2 (K and V) x layers x KV heads x head_dim x bytes (weights' dtype). Units: GiB (2^30 bytes)."""

from __future__ import annotations

from typing import Any, Mapping

from finetune_doctor.facts import exportadapter
from finetune_doctor.facts.launchray import narrowed_past_first, ranks_train_as, ray_launcher
from finetune_doctor.readers.config.lfrelease import INSTALLED_HERE_NOTE, INSTALLED_HERE_WHY
from finetune_doctor.run.quantization import checkpoint_weight_bytes

GIB = 2 ** 30
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": None}


def _dtype_bytes(values: Mapping[str, Any], arch: Any) -> tuple[int, str]:
    want = str(values.get("infer_dtype", "auto"))
    if _BYTES.get(want):
        return _BYTES[want], want
    ckpt = str(getattr(arch, "dtype", "bfloat16") or "bfloat16")
    return (4 if "32" in ckpt else 2), ckpt


def _kv_per_token(arch: Any, nbytes: int) -> int:
    hd = arch.head_dim or (arch.hidden_size // max(arch.num_heads, 1))
    return 2 * arch.num_layers * arch.num_kv_heads * hd * nbytes


def export_estimate(values: Mapping[str, Any], arch: Any) -> dict[str, Any]:
    """The export's memory and output: ``device`` (cpu | gpu), ``peak_gib`` (host RAM for cpu, the GPUs' total
    for auto) = ``weights_gib`` + ``merge_gib`` (5 % of the weights for the delta merged in place), ``written_gib`` (size of export_dir), ``shards`` (files of export_size GB), ``quantized_bits``."""
    params = arch.total_params()
    nbytes, dtype = _dtype_bytes(values, arch)
    weights, fmt = checkpoint_weight_bytes(arch, nbytes)
    device = "cpu" if str(values.get("export_device", "cpu")) == "cpu" else "gpu"
    bits = values.get("export_quantization_bit")
    written = weights
    if fmt is None and isinstance(bits, int) and not isinstance(bits, bool) and bits in (2, 3, 4, 8):
        # GPTQ packs the decoder's linear weights; embeddings, norms and the LM head stay in the compute dtype
        emb = arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)
        written = (params - emb) * bits / 8 + emb * nbytes
        device = "gpu"   # calibration runs the model forward on the GPU (optimum GPTQ)
    size = values.get("export_size", 5)
    shard_gb = size if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0 else 5
    return {"device": device, "dtype": dtype, "params_b": round(params / 1e9, 3),
            "peak_gib": round(weights * 1.05 / GIB, 2),   # the merge adds one LoRA delta at a time
            "weights_gib": round(weights / GIB, 2), "merge_gib": round(weights * 0.05 / GIB, 2),
            "written_gib": round(written / GIB, 2), "shards": max(1, -(-int(written) // int(shard_gb * 1e9))),
            "quantized_bits": bits if fmt is None and isinstance(bits, int) and not isinstance(bits, bool) else None,
            "weights_format": fmt}


def chat_estimate(values: Mapping[str, Any], arch: Any, capacity_gib: float | None) -> dict[str, Any]:
    """Weights and KV cache of a chat/API config for its backend: ``backend``, ``weights_gib``, ``kv_gib``
    (at the length LF passes to the engine), ``reserved_gib`` (vLLM/SGLang's up-front fraction of one card, when the
    card is known), ``max_len`` and ``fits`` (None without a card). Assumes one sequence at a time (chat)."""
    nbytes, dtype = _dtype_bytes(values, arch)
    backend = str(values.get("infer_backend", "huggingface"))
    weights, fmt = checkpoint_weight_bytes(arch, nbytes)
    bits = values.get("quantization_bit")
    # a checkpoint stored quantized is loaded as stored: LF ignores quantization_bit then (model_utils/quantization.py)
    if fmt is None and isinstance(bits, int) and not isinstance(bits, bool) and bits in (4, 8):
        weights = weights * bits / (8 * nbytes)
    if backend == "vllm":
        max_len, frac = values.get("vllm_maxlen", 4096), values.get("vllm_gpu_util", 0.7)
    elif backend == "sglang":
        max_len, frac = values.get("sglang_maxlen", 4096), values.get("sglang_mem_fraction", 0.7)
    else:
        gen = values.get("max_new_tokens", 1024)
        cut = values.get("cutoff_len", 2048)
        max_len, frac = (gen if isinstance(gen, int) else 1024) + (cut if isinstance(cut, int) else 2048), None
    max_len = max_len if isinstance(max_len, int) and not isinstance(max_len, bool) else 4096
    kv = _kv_per_token(arch, nbytes) * max_len
    out: dict[str, Any] = {"backend": backend, "dtype": dtype, "weights_format": fmt,
                           "weights_gib": round(weights / GIB, 2),
                           "kv_gib": round(kv / GIB, 3), "max_len": max_len, "reserved_gib": None, "fits": None}
    if capacity_gib:
        if isinstance(frac, (int, float)) and not isinstance(frac, bool):
            out["reserved_gib"] = round(capacity_gib * frac, 2)
            out["fits"] = (weights + kv) / GIB <= capacity_gib * frac
        else:
            out["fits"] = (weights + kv) / GIB <= capacity_gib
    return out


def predict_only(values: Mapping[str, Any]) -> bool:
    """A train config that only evaluates or predicts: ``do_predict`` or ``do_eval`` true and ``do_train`` not.
    transformers' TrainingArguments default every do_* to False and LLaMA-Factory's workflows train only under
    ``if training_args.do_train`` (train/sft/workflow.py ``run_sft`` at 0.9.4; the same in pt/rm/dpo/kto/ppo), so
    such a run builds no optimizer and keeps no gradients (LF's examples/train_lora/llama3_lora_predict.yaml)."""
    return values.get("do_train") is not True and (values.get("do_predict") is True or values.get("do_eval") is True)


# transformers TrainingArguments.per_device_eval_batch_size's default (training_args.py, 8 in 4.x and 5.x)
HF_EVAL_BATCH = 8


def predict_estimate(values: Mapping[str, Any], arch: Any, capacity_gib: float | None) -> dict[str, Any]:
    """Weights and KV cache of a predict/eval-only run (`predict_only`): the HF engine's estimate (`chat_estimate`)
    at ``per_device_eval_batch_size`` sequences (``batch``; ``batch_assumed`` when the YAML does not set it) of
    cutoff_len + max_new_tokens tokens with ``predict_with_generate`` (Seq2SeqTrainer.prediction_step calls
    generate), else of cutoff_len (a loss forward). Not included (``left_out``): one forward's activations and its
    logits. Units GiB."""
    b = values.get("per_device_eval_batch_size")
    assumed = not (isinstance(b, int) and not isinstance(b, bool) and b > 0)
    batch = HF_EVAL_BATCH if assumed else b
    gen = values.get("predict_with_generate") is True
    e = chat_estimate({**values, "infer_backend": "huggingface", "max_new_tokens": values.get(
        "max_new_tokens", 1024) if gen else 0}, arch, None)
    kv = _kv_per_token(arch, _dtype_bytes(values, arch)[0]) * e["max_len"] * batch / GIB
    total = e["weights_gib"] + kv
    return {**e, "kind": "predict", "batch": batch, "batch_assumed": assumed, "generate": gen,
            "kv_gib": round(kv, 3), "total_gib": round(total, 2), "capacity_gib": capacity_gib,
            "fits": None if not capacity_gib else total <= capacity_gib,
            "left_out": "one forward's activations and logits"}


NOT_JUDGED = {
    "eval": "an evaluation config (llamafactory-cli eval): the doctor checks its keys but does not estimate the "
            "benchmark's memory (weights plus batch_size x the longest few-shot prompt)",
}


def _host_ram(asm: Any) -> float | None:
    """The training machine's host RAM per node in GiB when the inputs give it: --host-ram (with or without GPUs),
    a context file's or this machine's (NVML-seen GPUs) through the hardware; else None."""
    if asm.hw is not None and asm.hw.host_ram_gib:
        return float(asm.hw.host_ram_gib)
    return getattr(asm, "host_ram_gib", None)


def _export_places(peak: float, gpus: float | None, host: float | None, spills: bool) -> dict[str, Any]:
    """Where an export of `peak` GiB fits (GiB throughout; None: not judged for want of a size):
    ``cpu_fits`` (export_device: cpu, the whole model in host RAM), ``auto_fits`` (export_device: auto),
    ``spill_gib`` (what auto puts in host RAM) and ``gpus_gib`` (all visible cards). export_device auto makes LF pass
    ``device_map="auto"`` (LF main hparams/parser.py L694-699, model/patcher.py L432-437), and accelerate fills the
    GPUs, then CPU RAM (then LF's offload_folder on disk, not counted here): auto is judged against the GPUs and
    host RAM together. A GPTQ export (`spills` False) calibrates on the GPUs: those alone. Accelerate's own headroom
    per card is not modelled, so a fit by less than a few GiB is optimistic."""
    cpu_fits = None if host is None else peak <= host
    if gpus is None:
        return {"cpu_fits": cpu_fits, "auto_fits": None, "spill_gib": 0.0, "gpus_gib": None}
    if peak <= gpus or not spills:
        return {"cpu_fits": cpu_fits, "auto_fits": peak <= gpus, "spill_gib": 0.0, "gpus_gib": gpus}
    fits = None if host is None else peak <= gpus + host
    return {"cpu_fits": cpu_fits, "auto_fits": fits, "spill_gib": round(peak - gpus, 2) if fits else 0.0,
            "gpus_gib": gpus}


def _host_ram_unknown(peak_gib: float, gpus_gib: float | None = None) -> Any:
    """The `host-ram` assumption of an export whose fit depends on host RAM that was not given: the whole model
    (export_device: cpu), or what `gpus_gib` of GPUs leave of `peak_gib` (auto: device_map="auto" spills there)."""
    from finetune_doctor.types import Assumption

    why = (f"export_device: cpu loads the whole model into host RAM (about {peak_gib} GiB at the peak)"
           if gpus_gib is None else
           f"export_device: auto (device_map=\"auto\") fills the {gpus_gib:.2f} GiB of the GPUs and puts the other "
           f"{peak_gib - gpus_gib:.2f} GiB of the {peak_gib} GiB peak in host RAM")
    return Assumption(name="host-ram", value="unknown: the merge's host RAM is not judged",
                      source=why + " and the machine's RAM was not given",
                      resolve_with="--host-ram SIZE (e.g. 64GB), or --context FILE from the machine that merges")


def _host_ram_verdict(asm: Any, e: dict[str, Any], gpus_gib: float | None) -> None:
    """An export whose fit hangs on host RAM that was not given gets a verdict all the same (issue 21: a verdict on
    every config whose model is known): ``at-risk``, deciding assumption ``host-ram``, with the host RAM it needs
    (GiB, ``host_ram_needed_gib``): the upper end of the peak for export_device: cpu, what the GPUs leave of it for
    auto. The `host-ram` assumption then weighs the two sides of that line (fits / oom) and moves the verdict. No
    range of plausible host RAM is invented: merges run on laptops (16 GB) and on 2 TB nodes alike."""
    from dataclasses import replace

    if e["verdict"] is not None or e.get("host_ram_gib") is not None:
        return
    at = next((i for i, a in enumerate(asm.assumptions) if a.name == "host-ram"), None)
    if at is None:
        return
    top = max([e["peak_gib"], *(e.get("interval_gib") or [])])
    need = round(top if e["device"] == "cpu" else top - (gpus_gib or 0.0), 2)
    if need <= 0:
        return
    enough, short = f"host RAM >= {need} GiB free where it merges", f"host RAM < {need} GiB free"
    # the peak is the same on either side of the line; only the verdict differs
    asm.assumptions[at] = replace(asm.assumptions[at], alternatives=(enough, short),
                                  effect_gib={enough: round(top, 2), short: round(top, 2)},
                                  effect_verdict={enough: "fits", short: "oom"}, moves_verdict=True)
    e.update(verdict="at-risk", host_ram_needed_gib=need, deciding="host-ram")


def v1_doc(doc: Any) -> tuple[Any, list[str]]:
    """A v1 config's `ConfigDoc` as the v0 keys of the same run (readers/config/lfv1.py `to_v0`), each placed at the line
    of the v1 key it came from, so that a finding about the run points into the v1 file."""
    from dataclasses import replace

    from finetune_doctor.readers.config.lfv1 import to_v0

    values, notes = to_v0(doc.values)
    where = {"model_name_or_path": "model", "per_device_train_batch_size": "micro_batch_size",
             "finetuning_type": "peft_config", "lora_rank": "peft_config.r", "lora_target": "peft_config.target_modules",
             "quantization_bit": "quant_config.quantization_bit", "deepspeed": "dist_config.config_file",
             "disable_gradient_checkpointing": "enable_activation_checkpointing",
             "enable_liger_kernel": "kernel_config", "use_muon": "optim_config"}
    pos = dict(doc.positions)
    for v0, v1 in where.items():
        if v1 in doc.positions and v0 not in pos:
            pos[v0] = doc.positions[v1]
    return replace(doc, values=values, positions=pos), notes


def adopt_v1(asm: Any, nnodes: int | None = None) -> None:
    """Put a v1 config's run in `asm`: its v0 keys (`v1_doc`) as the doc the run is resolved from and as the
    ``cfg`` facts, and, for training, the notes on what v1 does that those keys cannot say."""
    from finetune_doctor.facts import cfg as cfg_facts

    asm.doc, notes = v1_doc(asm.doc)
    asm.notes.extend(notes if asm.kind == "train-v1" else ())
    if asm.kind == "train-v1":
        asm.v1_world = v1_batch(asm, v1_world(asm.hw, nnodes))
    asm.facts["cfg"] = cfg_facts.assemble({k: v for k, v in asm.doc.values.items() if k not in ("_v1", "_peft")})


V1_WORLDS = (2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
"""The rank counts named when the world size is not known: one node of up to 8 GPUs, and 2, 4, 8 such nodes."""


def v1_world(hw: Any, nnodes: int | None = None, env: Mapping[str, str] | None = None) -> int | None:
    """The number of processes a v1 run starts, when the inputs say it: the GPUs (``--gpu NxCARD``, NVML, --env,
    a context; GPUs per node x nodes as run/resolve.py counts them), else ``WORLD_SIZE`` in the environment; None
    when nothing says (a launch file's count is applied after the run resolves: `v1_batch` with its world)."""
    import os

    if hw is not None and hw.num_gpus:
        return max(hw.num_gpus // max(hw.nnodes, 1), 1) * (nnodes or hw.nnodes or 1)
    ws = str((os.environ if env is None else env).get("WORLD_SIZE", ""))
    return int(ws) if ws.isdigit() and int(ws) > 0 else None


def v1_batch(asm: Any, world: int | None) -> int:
    """Put v1's batch layout of `world` processes into `asm` (None: not known, one process assumed, as the
    ``launcher`` assumption says): the gradient accumulation v1 derives from ``global_batch_size`` becomes the run's
    ``gradient_accumulation_steps``; where v1 stops at start-up (readers/config/lfv1.py `batch_layout`) a ``lint.keys``
    problem of kind ``v1_launch`` (rule v1-launch-error, an error) when `world` is known, else, when the config
    sets ``global_batch_size`` and some common rank counts (`V1_WORLDS`) would stop it, one of kind ``v1_launch_unknown`` (a warning naming them) and an
    ``v1-world-size`` assumption. Replaces what an earlier call put there. Returns the world size used."""
    from finetune_doctor.readers.config.lfv1 import batch_layout
    from finetune_doctor.types import Assumption

    raw, doc, lint = asm.doc_read.values, asm.doc, asm.facts["lint"]
    lint["keys"] = [k for k in lint.get("keys", []) if k.get("kind") not in ("v1_launch", "v1_launch_unknown")]
    asm.assumptions[:] = [a for a in asm.assumptions if a.name != "v1-world-size"]
    used = world or 1
    lay = batch_layout(raw, used)
    refused = any(k.get("kind") == "v1_release" for k in lint["keys"])   # the release has no v1: that one error
    if lay["accum"] and lay["accum"] >= 1:
        doc.values["gradient_accumulation_steps"] = lay["accum"]
        if "global_batch_size" in asm.doc_read.positions:
            doc.positions["gradient_accumulation_steps"] = asm.doc_read.positions["global_batch_size"]
    else:
        doc.values.pop("gradient_accumulation_steps", None)

    def problem(kind: str, key: str, message: str, suggestion: str) -> None:
        lint["keys"].append({"key": key, "kind": kind, "message": message, "suggestion": suggestion,
                             "replacement": None, "fix": None, "fix_value": None, "condition": None,
                             "line": asm.doc_read.line_of(key), "override": key in asm.doc_read.overrides})

    if refused:
        return used
    if world is not None:
        if lay["error"]:
            problem("v1_launch", lay["key"], f"On {world} process{'es' if world > 1 else ''} v1 stops at start-up: \"{lay['error']}\"",
                    "make global_batch_size a multiple of data-parallel size x micro_batch_size"
                    if lay["key"] == "global_batch_size" else f"change `{lay['key']}` or the GPU count")
        return used
    if raw.get("global_batch_size") is None:
        # only a global batch makes the layout depend on arithmetic the user chose; cp_size 2 on an odd GPU count
        # (LF's own Ulysses example) is left to the check with a known world size
        return used
    fails = {w: batch_layout(raw, w) for w in V1_WORLDS}
    bad = [w for w, lo in fails.items() if lo["error"]]
    if not bad:
        return used
    ok = [w for w in (1, *V1_WORLDS) if w not in bad]
    keys = sorted({fails[w]["key"] for w in bad})
    g, m = lay["global"], lay["micro"]
    what = (f"`global_batch_size: {g}` with micro_batch_size {m}" if keys == ["global_batch_size"] else
            " and ".join(f"`{k}: {raw.get(k)}`" for k in keys))
    text = f"{what}: v1 stops at start-up on {_worlds(bad)} process(es) (its data-parallel layout check, " \
           f"e.g. \"{fails[bad[0]]['error']}\"); it starts on {_worlds(ok)}."
    problem("v1_launch_unknown", keys[0], text + " The world size is not known here.",
            "pass --gpu NxCARD (or WORLD_SIZE) to judge it")
    asm.assumptions.append(Assumption(
        name="v1-world-size", value=f"1 process: gradient accumulation {lay['accum'] or '?'}",
        source="the world size is not known; v1 divides global_batch_size by data-parallel size x micro_batch_size "
               "(v1 core/utils/batching.py L184-195)",
        alternatives=(*(f"{w} processes: accumulation {fails[w]['accum']}" for w in V1_WORLDS if w not in bad),
                      f"{_worlds(bad)} processes: v1 stops at start-up"),
        resolve_with="--gpu NxCARD, --launch FILE or WORLD_SIZE"))
    return used


def _worlds(ws: list[int]) -> str:
    return ", ".join(str(w) for w in ws[:-1]) + (" or " if len(ws) > 1 else "") + str(ws[-1]) if ws else "none"


def v1_launch(v1: Mapping[str, Any], launch: Any) -> Any:
    """The launch inputs of a v1 run: its ``dist_config`` fsdp2/fsdpturbo is FSDP2 (v1
    ``plugins/trainer_plugins/distributed/fsdp2.py``: fully_shard over the decoder layers, reshard after forward),
    given to the run resolver the way an accelerate FSDP2 config is, unless an accelerate config was given."""
    if v1.get("engine") != "fsdp2" or (launch is not None and launch.accelerate is not None):
        return launch
    from finetune_doctor.readers.config.accelerate import AccelerateConfig
    from finetune_doctor.run.engines import LaunchInputs

    acc = AccelerateConfig(path="<v1 dist_config>", values={}, positions={}, distributed_type="FSDP",
                           fsdp={"fsdp_version": 2, "fsdp_reshard_after_forward": True,
                                 "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"})
    return LaunchInputs(acc, launch.launch if launch is not None else None)


def launch_facts(opts: Any, hw: Any, env_report: Any = None, env: Mapping[str, str] | None = None
                 ) -> dict[str, Any]:
    """Whether the launcher and rank count were read from the user's inputs: ``launch_known`` (a --gpu count or
    GPUs seen, a --launch file, an --accelerate-config, or WORLD_SIZE / NPROC_PER_NODE / FORCE_TORCHRUN in the
    environment) and ``torchrun`` (FORCE_TORCHRUN=1, WORLD_SIZE > 1, or a torchrun launch line: LF runs torchrun
    then whatever the GPU count, LF ``cli.py`` / ``launcher.py``); ``torch_known`` (--torch, --env, or this
    machine's own GPUs: the installed torch is the training machine's)."""
    import os

    from finetune_doctor.readers.lfenv import env_enabled

    env = os.environ if env is None else env
    ws = str(env.get("WORLD_SIZE", "") or env.get("NPROC_PER_NODE", ""))
    torchrun = env_enabled("FORCE_TORCHRUN", env) or (ws.isdigit() and int(ws) > 1)
    from finetune_doctor.facts.hw import ENV_CARD_ONLY

    counted = hw is not None and getattr(hw, "source", None) != ENV_CARD_ONLY   # an --env card without its number
    known = bool(counted or _launch_states_ranks(getattr(opts, "launch", None))
                 or getattr(opts, "accelerate_config", None) or ws or torchrun)
    torch_known = bool(getattr(opts, "torch_version", None)
                       or (env_report is not None and env_report.versions.get("torch"))
                       or (hw is not None and getattr(hw, "source", None) == "nvml"))
    return {"launch_known": known, "torchrun": torchrun, "torch_known": torch_known,
            "launch_trains": _launch_line(getattr(opts, "launch", None))}


def _launch_states_ranks(path: str | None) -> bool:
    """Whether the --launch file (or a config that is itself a command line: cliflags.as_launch) says how many
    ranks run (readers/config/accelerate.py `LaunchCommand.states_ranks`); a file that launches nothing readable
    counts as saying so, as before (it is reported where it is read)."""
    if not path:
        return False
    from finetune_doctor.errors import InputError
    from finetune_doctor.readers.config.accelerate import read_launch_file

    try:
        return read_launch_file(path).states_ranks()
    except InputError:
        return True


def _launch_line(path: str | None) -> str | None:
    """The training launch a --launch file holds, as written (readers/config/accelerate.py `parse_launch` finds
    only launches that train); None without a file or with one that launches nothing (reported where it is read)."""
    if not path:
        return None
    from finetune_doctor.errors import InputError
    from finetune_doctor.readers.config.accelerate import read_launch_file

    try:
        return read_launch_file(path).text or None
    except InputError:
        return None


MODEL_ONLY_KEYS = frozenset({"model_name_or_path", "template", "adapter_name_or_path", "trust_remote_code",
                             "finetuning_type", "cache_dir", "model_revision", "image_max_pixels", "video_max_pixels"})


def config_kind_assumption(asm: Any) -> Any:
    """The ``config-kind`` assumption of a YAML that names only the model (`MODEL_ONLY_KEYS`): LLaMA-Factory's
    ``chat``/``api``/``webchat`` read it (early releases' examples/inference/*.yaml held model_name_or_path and
    template alone), but a training YAML pasted in part reads the same (trial 3: LlamaFactory#9392's two lines).
    None for any other config."""
    from finetune_doctor.types import Assumption

    keys = {str(k) for k in (getattr(asm.doc, "values", None) or {})}
    if asm.kind != "chat" or not keys or not keys <= MODEL_ONLY_KEYS:
        return None
    return Assumption(name="config-kind", value="chat (llamafactory-cli chat/api/webchat)",
                      source=f"the file names only the model ({', '.join(sorted(keys))}): no infer_backend, no "
                             "training key", alternatives=("part of a training YAML (llamafactory-cli train)",),
                      resolve_with="the whole YAML as it is launched")


def assumptions(asm: Any, opts: Any, hw: Any) -> list[Any]:
    """The assumptions of the config's reading: the LF release when the inputs did not name it, and, for a
    training config, the launcher and rank count when nothing says how the run is launched."""
    from finetune_doctor.types import Assumption

    out: list[Any] = []
    kind_only = config_kind_assumption(asm)
    if kind_only is not None:
        out.append(kind_only)
    rel = asm.release
    v1 = asm.kind in ("train-v1", "export-v1")
    if v1 and rel is not None and (not rel.known or rel.source == "installed here"):
        # only releases that ship v1 run a v1 config: the open range starts at the first of them
        from finetune_doctor.readers.config.lfrelease import v1_releases

        with_v1 = v1_releases()
        here = (f"; llamafactory {rel.given} is installed here, which is not necessarily the training machine's"
                if rel.known else "")
        out.append(Assumption(name="lf-version", value=f"a release with v1 (>= {with_v1[0]})", alternatives=with_v1,
                              source="not given: no --llamafactory, no --env" + here + "; a v1 config runs only "
                                     f"on a release that ships v1 (from {with_v1[0]})",
                              resolve_with="--llamafactory VERSION, or --env FILE with `llamafactory-cli env` "
                                           "output of the training machine"))
    elif rel is not None and not rel.older and (not rel.known or rel.note or rel.source == "installed here"):
        if not rel.known:
            from finetune_doctor.readers.config.keyschema import spans

            # narrowed by the config's keys (readers/config/lfnarrow.py) it may be one release, or have a hole
            value, why = (f"any release {spans(list(rel.versions))}" if len(rel.versions) > 1 else rel.versions[0],
                          rel.note or "not given: no --llamafactory, no --env, llamafactory not installed here")
            alts = tuple(rel.versions)
        else:
            value = rel.versions[0] if len(rel.versions) == 1 else f"{rel.versions[0]}-{rel.versions[-1]}"
            if rel.given and rel.given != value and rel.source != "installed here":
                value = f"{rel.given} as given, judged as {value}"   # what was stated stays in sight (trial 4)
            if rel.source == "installed here":   # trial 17: a test install became the training machine's release
                value = f"{value} ({INSTALLED_HERE_NOTE})"
            why = rel.note or INSTALLED_HERE_WHY
            alts = ()
        out.append(Assumption(name="lf-version", value=value, source=why, alternatives=alts,
                              resolve_with="--llamafactory VERSION, or --env FILE with `llamafactory-cli env` "
                                           "output of the training machine"))
    facts = asm.facts["lint"]
    suffix_open = facts.get("suffix_read") is None or (rel is not None and rel.source == "installed here")
    if facts.get("suffix_refused") and facts.get("suffix_read") is not False and suffix_open:
        # rule config-suffix-not-read judges a known release; an unknown one is an assumption, never an error
        suffix = facts["config_suffix"]
        out.append(Assumption(
            name="config-suffix", value=f"a LLaMA-Factory release that loads {suffix} configs "
                                        f"({facts['suffix_versions']})",
            source=f"LLaMA-Factory {facts['suffix_refused']} load only .yaml and .json files as a config "
                   "(hparams/parser.py); " + (f"llamafactory {rel.given} is installed here, which is not "
                                               "necessarily the training machine's" if rel is not None and rel.known
                                               else "which release the training machine runs was not given"),
            alternatives=(f"LLaMA-Factory {facts['suffix_refused']}: the {suffix} file is passed to the argument "
                          "parser, which stops with \"the following arguments are required: --output_dir\"",),
            resolve_with="--llamafactory VERSION or --env FILE; or rename the file to .yaml, which every "
                         "release loads"))
    dups = [d for d in facts.get("duplicates") or [] if d.get("refused") is None]
    if dups:
        # rules duplicate-key / duplicate-key-last-wins judge a known release; an unknown one reads on, assumed
        d = dups[0]
        keys = ", ".join(f"`{x['key']}` (lines {x['first_line']} and {x['line']})" for x in dups[:5])
        out.append(Assumption(
            name="duplicate-key", value=f"read on with the last value, as LLaMA-Factory {d['kept_versions']} do",
            source=f"the config repeats {keys}; LLaMA-Factory {d['kept_versions']} load it with PyYAML, which keeps "
                   f"the last value, and {d['refused_versions']} with OmegaConf.load, which refuses the file "
                   "(hparams/parser.py read_args); " + (f"llamafactory {rel.given} is installed here, which is not "
                                                        "necessarily the training machine's" if rel is not None
                                                        and rel.known else "which release the training machine "
                                                        "runs was not given"),
            alternatives=(f"LLaMA-Factory {d['refused_versions']}: the run stops at start-up with \"found "
                          f"duplicate key {d['key']}\"",),
            resolve_with="--llamafactory VERSION or --env FILE; or delete the repeated line, which every release "
                         "reads"))
    from finetune_doctor.facts.cutpaste import assumption as cut_assumption

    cut = cut_assumption(facts.get("config_cut"))   # a paste that may stop early (trial 11 cases 08, 09)
    if cut is not None:
        out.append(cut)
    launcher = launcher_assumption(asm, None)   # the run is not resolved yet: its world size is not known
    if launcher is not None:
        out.append(launcher)
    if asm.kind == "train-v1" and _v1_subcommand(facts.get("launch_trains")) is None:
        # a v1 YAML names no stage: `llamafactory-cli sft|dpo|rm` picks the trainer (v1 launcher.py L142-156)
        out.append(Assumption(name="v1-stage", value="sft (`USE_V1=1 llamafactory-cli sft`)",
                              source="a v1 config does not say which trainer runs it; the subcommand does",
                              alternatives=("dpo (chosen and rejected sequences per micro batch)", "rm"),
                              resolve_with="--launch FILE holding the `USE_V1=1 llamafactory-cli ...` line"))
    return out


# the alternatives of a multi-rank launch that facts/assumelaunch.py weighs (their labels are its effect keys)
BY_HAND = "torchrun or deepspeed started by hand (allocator default)"
ACCELERATE_FSDP = "accelerate launch with FSDP"
# LLaMA-Factory 0.8.0 cli.py:75-76 is the first release whose `llamafactory-cli train` starts torchrun itself when
# several devices are visible; before it the command (and `python src/train_bash.py`) trained in one process, which
# the HF Trainer runs as torch DataParallel over every visible GPU (analyzers/memory/dataparallel.py)
TORCHRUN_RELEASE = (0, 8, 0)
DATA_PARALLEL = "one process, torch DataParallel over the visible GPUs (llamafactory-cli train before 0.8.0)"
# the transformers such a run had, when none is given: LLaMA-Factory 0.7.1 requires >= 4.37.2 and 0.8.0 >= 4.41.2
# (the wheels' METADATA), so the 0.7.x releases ran with 4.37.2-4.41.1; 4.40.2 stands for them (the loss's fp32
# copy of the shifted logits and a forward that returns fp32 logits, as every release before 4.46 did)
DATA_PARALLEL_TRANSFORMERS = "4.40.2"


def data_parallel_open(asm: Any, engine: str | None, deepspeed: bool) -> bool:
    """Whether the ``launcher`` assumption of a multi-GPU run on one node keeps `DATA_PARALLEL` open: the
    LLaMA-Factory release is not known (not given, or only installed here, which is not necessarily the training
    machine's: the ``lf-version`` assumption) or is older than `TORCHRUN_RELEASE`, the run trains with DDP (no
    DeepSpeed file: transformers' DeepSpeed integration starts a process group of its own and trains on one GPU),
    on one node (DataParallel cannot span nodes), not on an Ascend NPU (``n_gpu`` is 1 there, transformers 4.40.2
    training_args.py:2069-2072), and not in 8 bits (the Trainer does not wrap a model loaded in 8 bits,
    trainer.py:1627-1629)."""
    from finetune_doctor.run.engines import on_npu

    if engine != "ddp" or deepspeed or int(getattr(asm, "nnodes", None) or 1) > 1 or on_npu(getattr(asm, "hw", None)):
        return False
    values = getattr(getattr(asm, "doc", None), "values", None) or {}
    if str(values.get("quantization_bit", "")).strip() == "8":
        return False
    rel = getattr(asm, "release", None)
    if narrowed_past_first(rel, values, getattr(asm, "kind", "train")):   # the keys rule out LF < 0.8.0 (trial 15)
        return False
    if rel is None or not rel.known or rel.source == "installed here":
        return True
    from finetune_doctor.numbers import parse_version   # the one reader of release strings

    got = parse_version(str(rel.given or ""))   # major.minor[.patch], patch 0 when not written
    return got is not None and len(got) >= 2 and got + (0,) * (3 - len(got)) < TORCHRUN_RELEASE


def fsdp_refused(run: Any) -> str | None:
    """LLaMA-Factory's own refusal of FSDP for `run` (a run.Run), None when FSDP could load it: a PTQ checkpoint
    other than MXFP4/FP8 (LF main model/model_utils/quantization.py L101-105, "DeepSpeed ZeRO-3 or FSDP is
    incompatible with PTQ-quantized models."), HQQ or EETQ on the fly (L211, L223) and bitsandbytes at other than
    4 bits (L191-193, "Only 4-bit quantized model can use fsdp+qlora or auto device map."). The message is LF's."""
    if run is None:
        return None
    if run.ptq_method is not None and not run.ptq_dequantized:
        return "DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models."
    if run.ptq_method is None and run.quantization_bit is not None:
        method = str(run.quantization_method or "bnb").lower()
        if method == "hqq":
            return "HQQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."
        if method == "eetq":
            return "EETQ quantization is incompatible with DeepSpeed ZeRO-3 or FSDP."
        if method in ("bnb", "bitsandbytes") and run.quantization_bit != 4:
            return "Only 4-bit quantized model can use fsdp+qlora or auto device map."
    return None


def launcher_assumption(asm: Any, world_size: int | None, engine: str | None = None,
                        deepspeed: bool = False, run: Any = None) -> Any:
    """The one producer of the ``launcher`` assumption (an unweighed `Assumption`), or None when the inputs say how
    the run is launched. `world_size` is the resolved run's rank count (None: read before the run is resolved,
    when only the ``lint.launch_known`` fact can be asked); `engine` the run's engine (``ddp``, ``megatron``, ...)
    and `deepspeed` whether the YAML names a DeepSpeed file.

    Over several ranks the question is the launcher (llamafactory-cli's torchrun sets expandable segments, a
    torchrun started by hand does not: LLaMA-Factory ``launcher.py``), unless `launch_read` says it was read or
    Megatron launches itself; on one rank it is whether anything says how many ranks run (``launch_known``:
    facts/kinds.py `launch_facts`). facts/config.py records it when the config is read; facts/assumelaunch.py asks
    again with the resolved run and weighs the alternatives, and that entry replaces the first (issue #22: there were
    two producers with their own wording and their own test of a known launch)."""
    from finetune_doctor.types import Assumption

    if asm.kind not in ("train", "train-v1"):
        return None
    if world_size is not None and world_size > 1:
        if engine == "megatron" or launch_read(asm):
            return None
        deepspeed, engine, how = ranks_train_as(asm, engine, deepspeed)   # one description for lint and check
        if run is not None and getattr(run, "launcher", None) == "ray":
            return Assumption(name="launcher", **ray_launcher(run, how))
        refused = fsdp_refused(run)
        alts = (BY_HAND, ACCELERATE_FSDP) if engine == "ddp" and refused is None else (BY_HAND,)
        # `llamafactory-cli train` on several GPUs starts torchrun (LF main launcher.py L60-126: FORCE_TORCHRUN or
        # more than one device), never accelerate: FSDP needs an accelerate config (or the YAML's `fsdp`) that no
        # input names, so its alternative is weighed and shown but does not decide the verdict (facts/assumebase.py
        # `UNNAMED`); where LF refuses FSDP for the model it is not an alternative at all
        why = ("no --launch, --accelerate-config, accelerate config beside the YAML, or FORCE_TORCHRUN/NNODES in "
               "the environment; `llamafactory-cli train` on several GPUs starts torchrun (LLaMA-Factory "
               "launcher.py), which is what is assumed")
        if engine == "ddp" and refused is None:
            why += ("; an accelerate launch with FSDP is weighed but does not decide the verdict: no input names an "
                    "FSDP config")
        elif engine == "ddp":
            why += f"; FSDP is not an alternative: LLaMA-Factory refuses it for this model (\"{refused}\")"
        resolve = "--launch FILE (the launch command line) or --accelerate-config FILE"
        if data_parallel_open(asm, engine, deepspeed):
            alts += (DATA_PARALLEL,)
            why += ("; the training machine's LLaMA-Factory release is not known to be 0.8.0 or later (before "
                    "0.8.0, llamafactory-cli train ran one process over every visible GPU)")
            resolve += ", or --llamafactory VERSION"
        return Assumption(name="launcher", value=f"llamafactory-cli train (torchrun, {how}, expandable segments on)",
                          source=why, alternatives=alts, resolve_with=resolve)
    if asm.facts["lint"].get("launch_known"):
        return None
    return Assumption(name="launcher", value="one process on one GPU (python, no torchrun)",
                      source="no --gpu count, --launch file, accelerate config or WORLD_SIZE / FORCE_TORCHRUN in "
                             "the environment", alternatives=("torchrun over several GPUs", "accelerate launch"),
                      resolve_with="--gpu NxCARD, --launch FILE or --accelerate-config FILE")


def launch_read(asm: Any) -> bool:
    """Whether anything the doctor can see says how a multi-rank run is launched: ``--launch``,
    ``--accelerate-config``, an accelerate config beside the YAML (facts/config.py), or llamafactory-cli's launch
    variables in this environment (FORCE_TORCHRUN, NNODES: LLaMA-Factory launcher.py)."""
    import os

    if getattr(asm, "launch", None) is not None:
        return True
    return any(os.environ.get(k) for k in ("FORCE_TORCHRUN", "NNODES"))


def _v1_subcommand(line: str | None) -> str | None:
    """The v1 trainer a launch line (`launch_facts`' ``launch_trains``) names with `llamafactory-cli sft|dpo|rm|train`,
    None without one."""
    if not line:
        return None
    import re

    m = re.search(r"(?:llamafactory-cli|lmf)\s+(sft|dpo|rm|train)\b", line)
    return m.group(1) if m else None


def not_training(asm: Any, arch: Any) -> Any:
    """Finish the assembly of a config that does not train (export, chat, eval, v1 export): no training run is
    resolved, the kind's own estimate goes to ``asm.kind_section`` and a note, or one note says what is not
    judged. Returns `asm`."""
    from finetune_doctor.facts import run as run_facts

    values = asm.doc.values
    asm.facts["run"] = run_facts.assemble(None, values)
    from finetune_doctor.readers.config.lfkind import COMMANDS

    cmd = COMMANDS.get(asm.kind, asm.kind)
    if asm.kind in NOT_JUDGED:
        asm.notes.append(NOT_JUDGED[asm.kind])
        return asm
    if arch is None:
        asm.notes.append(f"a {cmd} config: its estimate needs the model's architecture, which is not known here")
        return asm
    if asm.kind == "export-v1":
        # v1 merge_and_export_model (plugins/model_plugins/peft.py L301-335): ModelEngine(is_train=False) loads the
        # model on the accelerator, merges the LoRA and saves in export_size GB shards, in infer_dtype
        peft = values.get("_peft") or {}
        values = {"export_size": peft.get("export_size", 5), "infer_dtype": peft.get("infer_dtype", "auto"),
                  "export_device": "auto"}
    if asm.kind == "train":   # predict/eval only (`predict_only`): no optimizer, no gradients
        _predict(asm, arch, values)
    elif asm.kind in ("export", "export-v1"):
        e = export_estimate(values, arch)
        base_peak, ad = e["peak_gib"], exportadapter.adapter_term(asm, arch, dict(values))
        e.update(ad or {"adapter_gib": 0.0}, peak_gib=round(base_peak + (ad or {}).get("adapter_gib", 0.0), 2))
        where = "host RAM (export_device: cpu)" if e["device"] == "cpu" else "GPU memory over the visible GPUs"
        quant = f", GPTQ {e['quantized_bits']}-bit" if e["quantized_bits"] else ""
        asm.notes.append(f"a {cmd} config (merge{quant}), not training: the model loads in {e['dtype']} into "
                         f"{where}, about {e['peak_gib']} GiB at the peak; export_dir receives about "
                         f"{e['written_gib']} GiB in {e['shards']} shard(s)")
        cap = asm.hw.capacity_gib * (asm.hw.num_gpus or 1) if asm.hw is not None and asm.hw.capacity_gib else None
        e["capacity_gib"] = None if e["device"] == "cpu" else cap
        e["host_ram_gib"] = _host_ram(asm)
        e.update(_export_places(e["peak_gib"], cap, e["host_ram_gib"], spills=not e["quantized_bits"]))
        if ad and e["device"] == "gpu" and cap and base_peak <= cap < e["peak_gib"]:
            # accelerate placed the base model alone; the adapter then loads onto the cards it filled
            e.update(auto_fits=False, spill_gib=0.0)
        e["fits"] = e["cpu_fits"] if e["device"] == "cpu" else e["auto_fits"]
        if e["device"] == "gpu" and e["spill_gib"]:
            asm.notes.append(f"export_device: auto loads with device_map=\"auto\": the GPUs hold {cap:.2f} GiB and "
                             f"the other {e['spill_gib']} GiB go to host RAM ({e['host_ram_gib']:.2f} GiB given), "
                             "a slower merge that fits")
        if e["host_ram_gib"] is None and (e["device"] == "cpu" or e["auto_fits"] is None and cap is not None):
            asm.assumptions.append(_host_ram_unknown(e["peak_gib"], None if e["device"] == "cpu" else cap))
        e["verdict"] = None if e["fits"] is None else ("fits" if e["fits"] else "oom")
        _export_load_dtype(asm, arch, values, e)
        if ad and not ad["adapter_read"]:
            asm.assumptions.append(a := exportadapter.rank_assumption(
                arch, base_peak, e["capacity_gib"] if e["device"] == "gpu" else e["host_ram_gib"], e["verdict"]))
            if a.moves_verdict:
                lo, hi = e.get("interval_gib") or (e["peak_gib"], e["peak_gib"])
                e.update(verdict="at-risk", interval_gib=[lo, max(hi, *a.effect_gib.values())],
                         interval_of="adapter-rank" + (" and load-dtype" if e.get("interval_gib") else ""))
        _host_ram_verdict(asm, e, cap)
        e["p_oom"], e["no_probability"] = None, exportadapter.NO_PROBABILITY
        asm.kind_section = {"kind": "export", **e}
    else:
        cap = asm.hw.capacity_gib if asm.hw is not None else None
        e = chat_estimate(values, arch, cap)
        extra = (f"; the engine reserves {e['reserved_gib']} GiB of each card up front" if e["reserved_gib"] else "")
        asm.notes.append(f"a {cmd} config ({e['backend']}), not training: weights {e['weights_gib']} GiB + KV cache "
                         f"{e['kv_gib']} GiB at {e['max_len']} tokens{extra}")
        e["capacity_gib"] = cap
        asm.kind_section = {"kind": "chat", **e}
    _named_quant(asm, arch, values)
    asm.facts["lint"]["kind_estimate"] = dict(asm.kind_section)   # for the rules (inference/export-does-not-fit)
    return asm


def _predict(asm: Any, arch: Any, values: Mapping[str, Any]) -> None:
    """`not_training` for a predict/eval-only train config: its estimate, a note, the eval-batch assumption."""
    from finetune_doctor.types import Assumption

    cap = asm.hw.capacity_gib if asm.hw is not None else None
    e = predict_estimate(values, arch, cap)
    what = "do_predict" if values.get("do_predict") is True else "do_eval"
    asm.notes.append(
        f"a {what} run without do_train: LLaMA-Factory builds no optimizer and keeps no gradients, so it is sized as "
        f"inference, not as a training step: weights {e['weights_gib']} GiB + KV cache {e['kv_gib']} GiB for "
        f"{e['batch']} sequence(s) of {e['max_len']} tokens = {e['total_gib']} GiB per GPU"
        + (f" of {cap:.2f} GiB ({'fits' if e['fits'] else 'does not fit'})" if cap else "")
        + f"; {e['left_out']} are not included")
    if e["batch_assumed"]:
        asm.assumptions.append(Assumption(
            name="eval-batch", value=HF_EVAL_BATCH,
            source="per_device_eval_batch_size is not set: transformers' TrainingArguments default",
            resolve_with="set per_device_eval_batch_size in the YAML"))
    asm.kind_section = {k: e[k] for k in ("kind", "dtype", "batch", "batch_assumed", "generate", "max_len",
                                          "weights_gib", "kv_gib", "total_gib", "capacity_gib", "fits", "left_out")}


def _export_load_dtype(asm: Any, arch: Any, values: Mapping[str, Any], e: dict[str, Any]) -> None:
    """The ``load-dtype`` assumption of a CPU merge (export_device: cpu, infer_dtype: auto) on a machine the inputs
    do not describe. LLaMA-Factory loads it in ``infer_optim_dtype(config.torch_dtype)`` (model/patcher.py
    L375-379; LF 0.9.0 L62-66): bf16 for a bf16 checkpoint where torch sees a bf16 CUDA/NPU device, else fp16 where
    it sees any CUDA or NPU device, else **float32** (extras/misc.py ``_is_fp16_available = is_torch_npu_available()
    or is_torch_cuda_available()``). A merge machine with no GPU visible therefore holds the model in 4 bytes a
    parameter, twice the 16-bit estimate (trial 6 case 07, LlamaFactory#4711: Qwen2-72B, 252 GB of RAM, "Killed").
    The float32 peak is weighed; when it changes the verdict, the verdict is ``at-risk`` and ``interval_gib`` spans
    both (GiB). A ``--gpu`` (or NVML) card says the machine has a device: nothing is assumed then."""
    from finetune_doctor.types import Assumption

    if e["device"] != "cpu" or e.get("weights_format") or str(values.get("infer_dtype", "auto")) != "auto":
        return
    if asm.hw is not None and asm.hw.capacity_gib:
        return
    alt = export_estimate({**values, "infer_dtype": "float32"}, arch)
    alt["peak_gib"] = round(alt["peak_gib"] + e.get("adapter_gib", 0.0), 2)   # the adapter is float32 either way
    if alt["peak_gib"] <= e["peak_gib"]:
        return   # a float32 checkpoint: already sized at 4 bytes
    label = "float32 (no CUDA or NPU device visible where it merges)"
    host = e.get("host_ram_gib")
    alt_verdict = None if host is None else ("fits" if alt["peak_gib"] <= host else "oom")
    moves = e["verdict"] is not None and alt_verdict is not None and alt_verdict != e["verdict"]
    e["interval_gib"] = [e["peak_gib"], alt["peak_gib"]]
    if moves:
        e["verdict"] = "at-risk"
    where = "the catalogue entry's" if getattr(arch, "source_kind", "") == "catalog" else "the checkpoint's"
    asm.assumptions.append(Assumption(
        name="load-dtype", value=f"{e['dtype']} (a CUDA or NPU device is visible where it merges)",
        source=f"{where} dtype {arch.dtype}, loaded as LLaMA-Factory's infer_optim_dtype picks it: 16-bit where "
               "torch sees a CUDA or NPU device, float32 where it sees none (extras/misc.py, model/patcher.py); "
               "export_device: cpu does not say whether the merging machine has one",
        alternatives=(label,), effect_gib={label: alt["peak_gib"]},
        effect_verdict={label: alt_verdict} if alt_verdict else {},
        resolve_with="--gpu SPEC of the machine that merges (or run the doctor there), or infer_dtype in the config",
        moves_verdict=moves))


def _named_quant(asm: Any, arch: Any, values: Mapping[str, Any]) -> None:
    """The ``weights-quantization`` assumption of a chat/export checkpoint sized from its name's ending alone
    (quant.py `hinted_spec`: ``-AWQ`` as AWQ 4-bit g128), as training records it (facts/quantassume.py
    `named_quant_assumption`): the unquantized base model is shown beside it, not weighed (an upload named -AWQ is
    not stored unquantized)."""
    from dataclasses import replace

    from finetune_doctor.quant import UNQUANTIZED_LABEL as UNQUANTIZED
    from finetune_doctor.types import Assumption

    quant = getattr(arch, "quant", None)
    sec = asm.kind_section
    if quant is None or not getattr(quant, "from_name", False) or not sec or not sec.get("weights_format"):
        return
    plain = replace(arch, quant=None)
    if sec["kind"] == "chat":
        alt = chat_estimate(values, plain, sec.get("capacity_gib"))
        total, fits = round(alt["weights_gib"] + alt["kv_gib"], 2), alt["fits"]
    else:
        alt = export_estimate(values, plain)
        total, fits = alt["peak_gib"], None
    verdict = None if fits is None else ("fits" if fits else "oom")
    asm.assumptions.append(Assumption(
        name="weights-quantization", value=f"{quant.label} (as the name's ending suggests)",
        source=f"no config.json of the checkpoint was read; the name '{asm.doc.values.get('model_name_or_path')}' ends as "
               f"such uploads do, and they are stored as {quant.label} (quant.py hinted_spec)",
        alternatives=(UNQUANTIZED,), effect_gib={UNQUANTIZED: total},
        effect_verdict={UNQUANTIZED: verdict} if verdict else {},
        resolve_with="--model-config (the checkpoint's config.json), or the model folder on this machine",
        moves_verdict=False))
