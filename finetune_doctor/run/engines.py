"""The engine a run trains with and over how many ranks: FSDP/FSDP2 through accelerate, Megatron-Core through
LLaMA-Factory's adapters, Ray workers, and multi-node world sizes from a launch command line.

`resolve_engine` takes the `Run` that run/resolve.py built from the YAML (DDP or DeepSpeed, world size from the
GPUs) and returns it with the engine's fields filled (run/model.py, "engines" block), following the code that
decides each one:

* **who launches how many ranks** (`_world`): ``accelerate launch`` runs ``num_processes`` ranks over
  ``num_machines`` (accelerate 1.15 ``utils/launch.py:108-122, 212-226``: ``nproc_per_node = num_processes //
  num_machines``); torchrun ``--nnodes`` × ``--nproc_per_node``; the deepspeed launcher ``--num_nodes`` ×
  ``--num_gpus`` or the devices of ``--include``; ``llamafactory-cli train`` runs torchrun with ``NNODES`` ×
  ``NPROC_PER_NODE`` (default: every visible device; LLaMA-Factory ff6d4d1 ``launcher.py:64-66``); Ray runs
  ``ray_num_workers`` workers of one GPU each (``train/tuner.py:307-371``, ``trainer_utils.py:894-903``) when
  ``USE_RAY=1`` (``extras/misc.py:339-340``).
* **FSDP** (`_fsdp`): on when the accelerate config's ``distributed_type`` is FSDP, ``accelerate launch
  --use_fsdp`` or the YAML's ``fsdp`` option; DeepSpeed wins when both are set (accelerate ``state.py:972-1011``
  tests ``ACCELERATE_USE_DEEPSPEED`` before FSDP). Settings as accelerate's ``FullyShardedDataParallelPlugin``
  resolves them (``utils/dataclasses.py:1815-2010``) after the launch defaults (readers/config/accelerate.py), or as
  transformers 5.24 ``TrainingArguments._process_fsdp_args`` builds them from the YAML (FSDP2 by default there).
  The mixed-precision dtype is TrainingArguments' ``mixed_precision`` (``bf16``/``fp16`` from the YAML, else the
  launcher's ``ACCELERATE_MIXED_PRECISION``; training_args.py:1614-1618), and under QLoRA the 4-bit storage dtype
  (transformers ``distributed/fsdp.py:267-287`` ``update_fsdp_plugin_peft``), which LLaMA-Factory sets to the
  compute dtype (``model_utils/quantization.py:184-190``).
* **Megatron-Core** (`_megatron`): LLaMA-Factory's mcore adapter (``USE_MCA=1``; hparams/parser.py:315-333,
  train/mca/workflow.py) or Megatron Bridge (``USE_MEGATRON_BRIDGE=1``; hparams/megatron_bridge_args.py) with
  TP/PP/VPP/EP/ETP/CP/SP sizes, the distributed optimizer and recomputation as the adapter's arguments default
  them (alibaba/ROLL ``mcore_adapter/src/mcore_adapter/training_args.py`` at 8eb27cc).

Nothing here judges: what LLaMA-Factory, accelerate or Megatron refuse at launch is computed as facts
(`engine_facts`) for the rules in rules/fsdp-*.yaml, megatron-*.yaml and ray-*.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from finetune_doctor.numbers import parse_version
from finetune_doctor.run.model import Run
from finetune_doctor.run.values import as_bool, as_int
from finetune_doctor.types import Hardware

if TYPE_CHECKING:   # annotations only: the accelerate reader is imported by whoever reads an accelerate config
    from finetune_doctor.readers.config.accelerate import AccelerateConfig, LaunchCommand


@dataclass(frozen=True)
class LaunchInputs:
    """What besides the YAML says how a run is launched: an accelerate config and/or a launch command line."""

    accelerate: AccelerateConfig | None = None
    launch: LaunchCommand | None = None


# YAML keys that only the Megatron backends read (mcore adapter's DistributingParallelArguments/MegatronArguments,
# LLaMA-Factory's MegatronBridgeArguments); any of them means the YAML was written for one of those backends.
MCORE_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
              "expert_model_parallel_size", "expert_tensor_parallel_size", "context_parallel_size",
              "use_distributed_optimizer", "recompute_granularity", "recompute_method", "recompute_num_layers",
              "moe_token_dispatcher_type", "moe_grouped_gemm", "overlap_param_gather", "overlap_grad_reduce")
# keys only Megatron Bridge has (megatron_bridge_args.py:126-150)
BRIDGE_ONLY_KEYS = ("use_packed_sequences", "export_hf_on_finish", "megatron_pretrained_checkpoint", "extra_config",
                    "masked_softmax_fusion", "mixed_precision")
_HALF = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}


def resolve_engine(run: Run, cfg: dict[str, Any], inputs: LaunchInputs | None, hw: Hardware | None) -> Run:
    """`run` with the engine resolved (module docstring). Pure: returns a new Run; notes say what was assumed."""
    inputs = inputs or LaunchInputs()
    notes = list(run.notes)
    kw: dict[str, Any] = _world(run, cfg, inputs, hw, notes)
    acc, launch = inputs.accelerate, inputs.launch
    kw.update(_accelerate_precision(run, cfg, acc, launch))
    kw.update(_accelerate_deepspeed(run, acc, notes, launch))
    deepspeed = kw.get("deepspeed", run.deepspeed)
    mcore = _megatron_variant(cfg, launch)
    if mcore:
        kw.update(_megatron(run, cfg, mcore, kw.get("world_size", run.world_size), notes))
    elif not deepspeed:
        kw.update(_fsdp(run.with_(**kw), cfg, acc, launch, notes))
    elif _fsdp_requested(cfg, acc, launch):
        kw["fsdp_ignored"] = True
        notes.append("an FSDP config is given but the YAML names a DeepSpeed config: DeepSpeed runs (accelerate "
                     "state.py:972 checks DeepSpeed before FSDP)")
    if "engine" not in kw:
        w = kw.get("world_size", run.world_size)
        kw["engine"] = "deepspeed" if deepspeed else ("ddp" if w > 1 else "single")
    kw.update(_one_process_replicas(run, cfg, launch, hw, kw["engine"], notes))
    kw["notes"] = tuple(dict.fromkeys(notes))
    return run.with_(**kw)


# ---- ranks ------------------------------------------------------------------------------------------------------

def on_npu(hw: Hardware | None) -> bool:
    """Whether `hw` is an Ascend NPU (the hardware catalogue's vendor ``huawei``)."""
    if hw is None or not hw.gpu:
        return False   # no GPUs given (a lint): the catalogue is not imported (~5-8 ms, issue #22)
    from finetune_doctor.hardware.catalog import vendor_of

    return vendor_of(hw.gpu) == "huawei"


def _one_process_replicas(run: Run, cfg: dict[str, Any], launch: LaunchCommand | None, hw: Hardware | None,
                          engine: str, notes: list[str]) -> dict[str, Any]:
    """``dp_replicas`` of a launch line that starts the training script with plain ``python`` (``python
    src/train.py``, ``src/train_bash.py`` of early releases): one process that sees every visible GPU
    (``CUDA_VISIBLE_DEVICES``, else the card count of --gpu). The HF Trainer of that process finds no distributed
    launch, counts the visible cards as ``n_gpu`` and wraps the model in ``nn.DataParallel`` when there are
    several, unless the model is loaded in 8 bits (transformers 4.40.2 training_args.py:2074-2083,
    trainer.py:1627-1629); a DeepSpeed file makes transformers start a process group of its own instead, and on
    an Ascend NPU ``n_gpu`` is 1 (training_args.py:2069-2072). Empty for every other launch (analyzers/memory/dataparallel.py has GPU 0's extra)."""
    if launch is None or launch.launcher != "python" or engine != "single" or on_npu(hw):
        return {}
    n = launch.visible_devices() or (hw.num_gpus if hw is not None and hw.num_gpus else None)
    if not n or n <= 1 or run.quantization_bit == 8:
        return {}
    notes.append(f"one python process over {n} visible GPUs: the HF Trainer runs it as torch DataParallel, "
                 "GPU 0 holds the model, its optimizer and the logits of the whole batch")
    return {"dp_replicas": n}


def _int(v: Any) -> int | None:
    n = as_int(v, 0)
    return n if n > 0 else None


def _world(run: Run, cfg: dict[str, Any], inputs: LaunchInputs, hw: Hardware | None,
           notes: list[str]) -> dict[str, Any]:
    """world_size, nnodes, gpus_per_node and launcher from the launch command, the accelerate config or Ray."""
    acc, launch = inputs.accelerate, inputs.launch
    per_node_hw = run.gpus_per_node if hw is not None and hw.num_gpus else None
    out: dict[str, Any] = {}
    nodes = per = None
    launcher = launch.launcher if launch else ("accelerate" if acc else None)
    if launch is not None:
        visible = launch.visible_devices()
        o = launch.options
        if launch.launcher == "torchrun":
            nodes = _int(str(o.get("nnodes", "1")).split(":")[-1])
            per = _int(o.get("nproc_per_node")) or visible or per_node_hw
        elif launch.launcher == "deepspeed":
            include = o.get("include") or ""
            devs = [d for part in include.split("@") for d in part.split(":", 1)[-1].split(",") if ":" in part and d]
            nodes = _int(o.get("num_nodes"))
            per = _int(o.get("num_gpus")) or (len(devs) if devs else None) or visible or per_node_hw
        elif launch.launcher == "llamafactory-cli":
            nodes = _int(launch.env.get("NNODES"))
            per = _int(launch.env.get("NPROC_PER_NODE")) or visible or per_node_hw
        elif launch.launcher == "accelerate":
            total = _int(o.get("num_processes")) or (acc.num_processes if acc else None)
            nodes = _int(o.get("num_machines")) or (acc.num_machines if acc else None) or 1
            if total:
                per = max(total // nodes, 1)
        elif launch.launcher == "python":
            nodes, per = 1, 1
    elif acc is not None and acc.num_processes:
        nodes = acc.num_machines or 1
        per = max(acc.num_processes // nodes, 1)
    ray = _int(cfg.get("ray_num_workers"))
    use_ray = ray is not None and ray > 1 and (launch is None or launch.env_flag("USE_RAY"))
    if ray is not None and ray > 1 and not use_ray:
        notes.append(f"ray_num_workers: {ray} is ignored: the launch sets no USE_RAY=1 (LLaMA-Factory "
                     "extras/misc.py use_ray), so llamafactory-cli launches torchrun over the local GPUs")
    if use_ray:
        # one GPU per worker, bundles packed onto as few nodes as fit (trainer_utils.py get_placement_group)
        cap = per_node_hw or ray
        per = min(ray, cap)
        nodes = math.ceil(ray / per)
        out.update(world_size=ray, gpus_per_node=per, nnodes=nodes, launcher="ray", ray_num_workers=ray)
        notes.append(f"Ray: {ray} workers of one GPU each")
        return out
    if nodes or per:
        nodes = nodes or run.nnodes or 1
        per = per or run.gpus_per_node or 1
        if nodes * per != run.world_size:
            notes.append(f"world size {nodes * per} ({nodes} node(s) × {per}) from the "
                         f"{'launch command' if launch else 'accelerate config'}")
        out.update(world_size=nodes * per, nnodes=nodes, gpus_per_node=per)
    if launcher:
        out["launcher"] = launcher
    if ray is not None:
        out["ray_num_workers"] = ray
    return out


def _accelerate_precision(run: Run, cfg: dict[str, Any], acc: AccelerateConfig | None,
                          launch: LaunchCommand | None) -> dict[str, Any]:
    """Autocast under ``accelerate launch`` when the YAML sets neither bf16 nor fp16: TrainingArguments takes
    ``mixed_precision`` from ``ACCELERATE_MIXED_PRECISION`` (transformers 5.24 training_args.py:1614-1618), which
    accelerate launch exports from ``--mixed_precision`` or the config file (utils/launch.py:175, 284)."""
    if run.deepspeed or as_bool(cfg.get("bf16")) or as_bool(cfg.get("fp16")) or as_bool(cfg.get("pure_bf16")):
        return {}
    mp = (launch.options.get("mixed_precision") if launch and launch.launcher == "accelerate" else None) or (
        acc.mixed_precision if acc else None)
    if mp in _HALF:
        return {"autocast": _HALF[mp]}
    return {}


def _accelerate_deepspeed(run: Run, acc: AccelerateConfig | None, notes: list[str],
                          launch: LaunchCommand | None = None) -> dict[str, Any]:
    """DeepSpeed set up by the accelerate config alone (``distributed_type: DEEPSPEED`` with an inline
    ``deepspeed_config`` and no ``deepspeed:`` in the YAML): its ZeRO stage and offload devices (accelerate
    DeepSpeedPlugin fields ``zero_stage``, ``offload_optimizer_device``, ``offload_param_device``) and whether the
    model is built under zero.Init (`_zero3_init`)."""
    if acc is None or acc.distributed_type != "DEEPSPEED" or run.deepspeed:
        return {}
    d = acc.deepspeed
    if d.get("deepspeed_config_file"):
        notes.append(f"DeepSpeed from the accelerate config's deepspeed_config_file {d['deepspeed_config_file']} "
                     "(pass it as `deepspeed:` in the YAML to have it read)")
    stage = as_int(d.get("zero_stage"), 2)
    oo, op = d.get("offload_optimizer_device"), d.get("offload_param_device")
    notes.append(f"DeepSpeed ZeRO-{stage} from the accelerate config")
    return {"deepspeed": True, "zero_stage": stage, "engine": "deepspeed",
            "offload_optimizer": oo if oo in ("cpu", "nvme") and stage >= 1 else None,
            "offload_param": op if op in ("cpu", "nvme") and stage == 3 else None,
            "autocast": None, "zero3_init": _zero3_init(run, stage, d, launch, notes)}


# accelerate v1.0.0 made DeepSpeedPlugin.set_deepspeed_weakref set transformers' HfDeepSpeedConfig whatever
# zero3_init_flag says (v0.34.0 utils/dataclasses.py: the whole body under ``if self.zero3_init_flag``)
ACCELERATE_WEAKREF_ALWAYS = (1, 0, 0)


def _zero3_init(run: Run, stage: int, d: dict[str, Any], launch: LaunchCommand | None, notes: list[str]) -> bool:
    """Whether a ZeRO-3 run set up by the accelerate config builds its model under ``deepspeed.zero.Init``.

    Only ``zero3_init_flag: false`` (the config's ``deepspeed_config`` or ``accelerate launch --zero3_init_flag``,
    which wins) with accelerate before 1.0.0 says no. The chain, each link read at the versions named:
    accelerate launch exports the flag only when it is given (utils/launch.py:405-406 at 0.33.0, :514-515 at
    1.11.0), and without it DeepSpeedPlugin defaults to the config's own stage-3 test (utils/dataclasses.py:1015-1018
    at 0.33.0, :1290-1299 at 1.11.0), so an absent flag is on; transformers' TrainingArguments builds the plugin
    from the environment and calls ``set_deepspeed_weakref`` (training_args.py:2004-2011 at 4.45.0, :1672-1677 at
    5.6.0); before accelerate 1.0.0 that sets the HfDeepSpeedConfig weakref only under the flag (0.33.0
    dataclasses.py:1102-1105, the same at v0.34.0), and ``is_deepspeed_zero3_enabled()`` reads only that weakref
    (transformers 4.45.0 integrations/deepspeed.py:289-293), so it stays False; LLaMA-Factory then loads as for one
    GPU: ``torch_dtype`` the compute dtype, ``low_cpu_mem_usage`` and ``device_map={"": current device}`` (LF 0.9.0
    model/patcher.py:93-104, hparams/parser.py:346), and transformers skips zero.Init; DeepSpeed partitions the
    whole model only at
    ``deepspeed.initialize`` (0.19.8 runtime/zero/parameter_offload.py:180, :258-279). From accelerate 1.0.0 the
    weakref is set whatever the flag says and transformers builds under zero.Init. An accelerate the inputs do not
    name is taken as 1.0.0 or later (LLaMA-Factory requires >= 1.3.0 at the oracle snapshot, pyproject.toml:45)."""
    if stage != 3:
        return True
    flag = d.get("zero3_init_flag")
    if launch is not None and launch.options.get("zero3_init_flag") is not None:
        flag = launch.options.get("zero3_init_flag")
    # accelerate's str_to_bool reads false/0/no/off as off (utils/environment.py); anything else leaves it on here
    if flag is None or str(flag).strip().lower() not in ("false", "0", "no", "off"):
        return True
    version = next((v for pkg, v, _src in run.stack_sources if pkg == "accelerate"), None)
    parsed = parse_version(version)
    if parsed is None or tuple(parsed) >= ACCELERATE_WEAKREF_ALWAYS:
        return True
    notes.append(f"zero3_init_flag false with accelerate {version}: the model loads whole on every rank, and "
                 "DeepSpeed partitions it only at deepspeed.initialize")
    return False


# ---- FSDP -------------------------------------------------------------------------------------------------------

def _yaml_fsdp(cfg: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """The YAML's TrainingArguments ``fsdp`` (option string or list) and ``fsdp_config`` (dict), as transformers
    5.24 ``_process_fsdp_args`` / ``_apply_legacy_fsdp_to_config`` read them."""
    raw = cfg.get("fsdp")
    if raw in (None, "", False) or (isinstance(raw, (list, tuple)) and not raw):
        return False, {}
    opts = raw.split() if isinstance(raw, str) else [str(x) for x in raw] if isinstance(raw, (list, tuple)) else []
    fc = cfg.get("fsdp_config") if isinstance(cfg.get("fsdp_config"), dict) else {}
    conf = {(k[5:] if str(k).startswith("fsdp_") else str(k)): v for k, v in fc.items()}
    for o in opts:
        o = o.lower()
        if o == "offload":
            conf.setdefault("cpu_offload", True)
        elif o in ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard"):
            conf.setdefault("sharding", o)
    return True, conf


def _fsdp_requested(cfg: dict[str, Any], acc: AccelerateConfig | None, launch: LaunchCommand | None) -> bool:
    on_acc = acc is not None and acc.distributed_type == "FSDP"
    on_launch = launch is not None and launch.launcher == "accelerate" and as_bool(launch.options.get("use_fsdp"))
    return on_acc or on_launch or _yaml_fsdp(cfg)[0]


# transformers 5.24 TrainingArguments._process_fsdp_args defaults, for FSDP set in the YAML and launched without
# accelerate launch (llamafactory-cli / torchrun: no FSDP_* environment)
_TRANSFORMERS_FSDP_DEFAULTS: dict[str, Any] = {
    "fsdp_version": 2, "fsdp_offload_params": False, "fsdp_min_num_params": 0, "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_reshard_after_forward": True, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_transformer_layer_cls_to_wrap": None, "fsdp_backward_prefetch": None, "fsdp_state_dict_type": "FULL_STATE_DICT",
    "fsdp_forward_prefetch": False, "fsdp_use_orig_params": True, "fsdp_cpu_ram_efficient_loading": False,
    "fsdp_sync_module_states": True, "fsdp_activation_checkpointing": False,
}


def _fsdp_settings(acc: AccelerateConfig | None, launch: LaunchCommand | None,
                   cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """FSDP launch settings: launch defaults ← config file ← command-line flags; the YAML's fsdp_config over all."""
    from finetune_doctor.readers.config.accelerate import FSDP_LAUNCH_DEFAULTS

    by_accelerate = acc is not None or (launch is not None and launch.launcher == "accelerate")
    s = dict(FSDP_LAUNCH_DEFAULTS if by_accelerate else _TRANSFORMERS_FSDP_DEFAULTS)
    source = "accelerate launch defaults"
    if acc is not None:
        s.update(acc.fsdp)
        source = "accelerate config"
    if launch is not None and launch.launcher == "accelerate":
        flags = {k: v for k, v in launch.options.items() if k.startswith("fsdp_")}
        s.update(flags)
        if flags:
            source = "accelerate launch"
    on, conf = _yaml_fsdp(cfg)
    if on:
        # transformers 5.24 _process_fsdp_args: FSDP2 and TRANSFORMER_BASED_WRAP unless fsdp_config says otherwise
        source = "YAML fsdp/fsdp_config"
        s["fsdp_version"] = conf.get("version", 2)
        s["fsdp_auto_wrap_policy"] = conf.get("auto_wrap_policy", "TRANSFORMER_BASED_WRAP")
        if "sharding" in conf:
            s["fsdp_sharding_strategy"] = str(conf["sharding"]).upper()
            s["fsdp_reshard_after_forward"] = conf["sharding"] in ("full_shard", "hybrid_shard")
        for k in ("reshard_after_forward", "cpu_ram_efficient_loading", "activation_checkpointing", "use_orig_params",
                  "sync_module_states", "forward_prefetch", "backward_prefetch", "state_dict_type", "auto_wrap_policy",
                  "transformer_layer_cls_to_wrap", "min_num_params"):
            if k in conf:
                s[f"fsdp_{k}"] = conf[k]
        if "cpu_offload" in conf or "offload_params" in conf:
            s["fsdp_offload_params"] = conf.get("cpu_offload", conf.get("offload_params"))
    return s, source


def _fsdp(run: Run, cfg: dict[str, Any], acc: AccelerateConfig | None, launch: LaunchCommand | None,
          notes: list[str]) -> dict[str, Any]:
    """The Run's fsdp_* fields (module docstring)."""
    if not _fsdp_requested(cfg, acc, launch):
        return {}
    s, source = _fsdp_settings(acc, launch, cfg)
    version = as_int(s.get("fsdp_version"), 1)
    version = 2 if version == 2 else 1
    raf = s.get("fsdp_reshard_after_forward")
    if version == 1:
        strategy = str(s.get("fsdp_sharding_strategy") or "FULL_SHARD").upper()
        if strategy.isdigit():   # accelerate accepts the ShardingStrategy enum's 1-based index
            strategy = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")[
                min(max(int(strategy), 1), 5) - 1]
        reshard = strategy in ("FULL_SHARD", "HYBRID_SHARD")
    else:
        reshard = as_bool(raf, True)
        strategy = "FULL_SHARD" if reshard else "SHARD_GRAD_OP"
    # pure_bf16 sets only the compute dtype (LF hparams/parser.py:640-641 at the oracle snapshot), not
    # TrainingArguments.bf16, so accelerate's mixed precision stays what the launch or its config says
    mp = "bf16" if as_bool(cfg.get("bf16")) else ("fp16" if as_bool(cfg.get("fp16")) else None)
    if mp is None:
        mp = (launch.options.get("mixed_precision") if launch and launch.launcher == "accelerate" else None) or (
            acc.mixed_precision if acc else None) or "no"
    param_dtype = _HALF.get(mp)
    if run.quantization_bit == 4 and (run.quantization_method or "bnb") == "bnb":
        param_dtype = run.compute_dtype   # the 4-bit storage dtype LF sets (quantization.py:189)
    wrap = s.get("fsdp_auto_wrap_policy")
    wrap = str(wrap).upper() if wrap else "NO_WRAP"
    cls = s.get("fsdp_transformer_layer_cls_to_wrap")
    cls_t = tuple(c.strip() for c in (cls if isinstance(cls, (list, tuple)) else str(cls).split(","))
                  if str(c).strip()) if cls else ()
    offload = as_bool(s.get("fsdp_offload_params"))
    ac = as_bool(s.get("fsdp_activation_checkpointing"))
    label = f"FSDP{'2' if version == 2 else ''} {strategy}" + (" + CPU offload" if offload else "")
    notes.append(f"{label} from the {source}" + (f", params all-gathered in {param_dtype}" if param_dtype else
                                                   ", no mixed precision (units all-gathered in their own dtypes)"))
    out = {"engine": "fsdp", "fsdp": True, "fsdp_version": version, "fsdp_sharding": strategy,
           "fsdp_reshard_after_forward": reshard, "fsdp_offload_params": offload, "fsdp_param_dtype": param_dtype,
           "fsdp_wrap": wrap, "fsdp_wrap_cls": cls_t,
           "fsdp_min_num_params": as_int(s.get("fsdp_min_num_params"), 0),
           "fsdp_use_orig_params": as_bool(s.get("fsdp_use_orig_params"), True),
           "fsdp_backward_prefetch": (str(s["fsdp_backward_prefetch"]).upper()
                                      if s.get("fsdp_backward_prefetch") else None),
           "fsdp_forward_prefetch": as_bool(s.get("fsdp_forward_prefetch")),
           "fsdp_cpu_ram_efficient_loading": as_bool(s.get("fsdp_cpu_ram_efficient_loading")),
           "fsdp_sync_module_states": as_bool(s.get("fsdp_sync_module_states"), True),
           "fsdp_activation_checkpointing": ac, "fsdp_source": source,
           "fsdp_state_dict_type": str(s["fsdp_state_dict_type"]) if s.get("fsdp_state_dict_type") else None}
    if version == 1:
        out["fsdp_flat_dtype_conflict"] = _flat_dtype_conflict(run, wrap)
    elif acc is not None and acc.fsdp.get("fsdp_sharding_strategy") and str(
            acc.fsdp["fsdp_sharding_strategy"]).upper() != strategy:
        # FSDP2 reads reshard_after_forward only; sharding_strategy is FSDP1's (utils/dataclasses.py:1829-1846)
        out["fsdp_ignored_strategy"] = str(acc.fsdp["fsdp_sharding_strategy"]).upper()
    if ac and not run.gradient_checkpointing:
        out["gradient_checkpointing"] = True   # FSDP's checkpoint wrapper on the wrapped layers
    if mp in _HALF and run.autocast is None:
        out["autocast"] = _HALF[mp]            # accelerate runs native AMP under FSDP too
    return out


def _flat_dtype_conflict(run: Run, wrap: str) -> str | None:
    """FSDP1 flattens each unit's parameters into one FlatParameter of one dtype (torch
    ``distributed/fsdp/_flat_param.py:812-816``: "Must flatten tensors with uniform dtype"). LLaMA-Factory upcasts
    trainable parameters to fp32 (model/adapter.py:337-349) and, with ``upcast_layernorm``, every 1-D norm weight
    (model_utils/checkpointing.py:171-175 ``prepare_model_for_training``); a unit that holds both such a parameter and a
    half-precision one fails at wrapping. With PEFT, transformers replaces the wrap policy by peft's, which gives
    every trainable leaf (LoRA A/B, modules_to_save) its own unit (transformers ``distributed/fsdp.py:267-280``),
    so LoRA alone never mixes. Returns the unit that would mix, or None."""
    half_frozen = run.weights_dtype in ("bfloat16", "float16") or run.quantized
    if not half_frozen or run.finetuning_type == "full":
        return None
    if run.upcast_layernorm:
        return "each decoder layer (its norm weights are upcast to fp32 by upcast_layernorm, its linears are " \
               f"{run.weights_dtype if not run.quantized else 'stored in the compute dtype'})"
    if run.finetuning_type == "freeze" and not run.pure_bf16:
        if wrap == "NO_WRAP":
            return "the whole model, one unit under NO_WRAP (trainable layers in fp32, frozen ones in " \
                   f"{run.weights_dtype})"
        if "all" not in run.freeze_trainable_modules:
            return "each trainable decoder layer (the modules of freeze_trainable_modules train in fp32, the rest " \
                   f"stays {run.weights_dtype})"
    return None


# ---- Megatron-Core --------------------------------------------------------------------------------------------

def _megatron_variant(cfg: dict[str, Any], launch: LaunchCommand | None) -> str | None:
    """``mca`` (mcore adapter), ``bridge`` (Megatron Bridge) or None. The launch environment decides when known
    (LLaMA-Factory parser.py:397-407); otherwise the YAML's Megatron keys do, Bridge-only keys meaning Bridge."""
    if launch is not None:
        if launch.env_flag("USE_MCA"):
            return "mca"
        if launch.env_flag("USE_MEGATRON_BRIDGE"):
            return "bridge"
    if not any(k in cfg for k in MCORE_KEYS):
        return None
    return "bridge" if any(k in cfg for k in BRIDGE_ONLY_KEYS) else "mca"


def _megatron(run: Run, cfg: dict[str, Any], variant: str, world: int, notes: list[str]) -> dict[str, Any]:
    """The Run's mcore_* fields. Defaults are the adapter's: mcore adapter sizes None → 1 (the checkpoint's
    config otherwise), ``use_distributed_optimizer`` False, no recomputation; Megatron Bridge's distributed
    optimizer True (megatron_bridge_args.py:109-112). ``expert_tensor_parallel_size`` unset is TP (Megatron
    arguments.py:587-588, model_parallel_config.py:506-507). mca trains every parameter: its workflow loads the
    model with mcore_adapter's AutoModel and attaches no adapter (train/mca/workflow.py:215-262)."""
    tp = _int(cfg.get("tensor_model_parallel_size")) or 1
    pp = _int(cfg.get("pipeline_model_parallel_size")) or 1
    cp = _int(cfg.get("context_parallel_size")) or 1
    ep = _int(cfg.get("expert_model_parallel_size")) or 1
    etp = _int(cfg.get("expert_tensor_parallel_size")) or tp
    vpp = _int(cfg.get("virtual_pipeline_model_parallel_size"))
    sp = as_bool(cfg.get("sequence_parallel"))
    if variant == "mca":
        # mcore adapter model_config.py:368-373: TP>1 with EP>1 forces SP on; SP without TP is switched off
        sp = (sp or ep > 1) and tp > 1
    do = as_bool(cfg.get("use_distributed_optimizer"), variant == "bridge")
    rec = cfg.get("recompute_granularity")
    rec = str(rec).lower() if rec else None
    ft = run.finetuning_type
    if variant == "mca" and ft != "full":
        notes.append(f"finetuning_type: {ft} is not applied by the mcore adapter: every parameter trains "
                     "(train/mca/workflow.py attaches no adapter)")
        ft = "full"
    dp = max(world // max(tp * pp * cp, 1), 1)
    edp = max(world // max(etp * ep * pp, 1), 1)
    frac = float(cfg.get("optimizer_offload_fraction") or 0.0) if as_bool(cfg.get("optimizer_cpu_offload")) else 0.0
    mp = str(cfg.get("mixed_precision") or ("bf16_mixed" if variant == "bridge" else "")).lower()
    half = "bfloat16" if as_bool(cfg.get("bf16")) or mp.startswith("bf16") else (
        "float16" if as_bool(cfg.get("fp16")) or mp.startswith("fp16") else "float32")
    name = "the mcore adapter (USE_MCA=1)" if variant == "mca" else "Megatron Bridge (USE_MEGATRON_BRIDGE=1)"
    notes.append(f"Megatron-Core through {name}: TP {tp} · PP {pp}{f' (VPP {vpp})' if vpp else ''} · CP {cp} · "
                 f"EP {ep}{f' · ETP {etp}' if etp != tp else ''} · DP {dp}"
                 f"{' · SP' if sp and tp > 1 else ''}{' · distributed optimizer' if do else ''}"
                 f"{f' · {rec} recompute' if rec else ''}")
    if run.deepspeed:
        notes.append("the DeepSpeed config is not used: the Megatron backends set deepspeed to None")
    return {"engine": "megatron", "mcore": variant, "mcore_tp": tp, "mcore_pp": pp, "mcore_vpp": vpp,
            "mcore_cp": cp, "mcore_ep": ep, "mcore_etp": etp, "mcore_sp": sp, "mcore_dp": dp,
            "mcore_expert_dp": edp, "mcore_distributed_optimizer": do, "mcore_recompute": rec,
            "mcore_recompute_method": str(cfg["recompute_method"]) if cfg.get("recompute_method") else None,
            "mcore_recompute_num_layers": _int(cfg.get("recompute_num_layers")),
            "mcore_optimizer_offload": max(0.0, min(frac, 1.0)),
            "mcore_overlap_param_gather": as_bool(cfg.get("overlap_param_gather"), variant == "bridge"),
            "mcore_overlap_grad_reduce": as_bool(cfg.get("overlap_grad_reduce"), variant == "bridge"),
            "mcore_ce_fusion": as_bool(cfg.get("cross_entropy_loss_fusion")),
            "finetuning_type": ft, "deepspeed": False, "zero_stage": 0, "offload_optimizer": None,
            "offload_param": None, "weights_dtype": half, "trainable_dtype": half, "autocast": None,
            "gradient_checkpointing": rec is not None,
            **_mcore_layout_error(run, cfg, variant, world, tp, pp, cp, ep, etp, vpp, sp, do)}


def _mcore_layout_error(run: Run, cfg: dict[str, Any], variant: str, world: int, tp: int, pp: int, cp: int,
                        ep: int, etp: int, vpp: int | None, sp: bool, do: bool) -> dict[str, Any]:
    """The first parallel layout Megatron-Core (or the adapter in front of it) refuses at launch, as
    ``mcore_error`` (its message, in the words of the check) and ``mcore_error_key`` (the YAML key to change)."""
    a = run.arch
    # in the order the launch meets them: argument parsing (the adapter's or LLaMA-Factory's), the model check,
    # the process groups, then the model's config
    early: list[tuple[bool, str, str]] = []
    layers = a.num_layers + as_bool(cfg.get("account_for_embedding_in_pipeline_split")) + as_bool(
        cfg.get("account_for_loss_in_pipeline_split"))
    stages = pp * (vpp or 1)
    late: list[tuple[bool, str, str]] = []
    if variant == "mca":
        # mcore_adapter training_args.py MegatronArguments.__post_init__
        og, gr = as_bool(cfg.get("overlap_param_gather")), as_bool(cfg.get("overlap_grad_reduce"))
        early += [(og and not do, "overlap_param_gather",
                   "--overlap_param_gather only supported with distributed optimizer"),
                  (og and not gr, "overlap_grad_reduce",
                   "--overlap_grad_reduce should be turned on when using --overlap_param_gather"),
                  # LLaMA-Factory train/mca/workflow.py:93-109 (_check_model_support), extras/constants.py:58-74
                  (a.model_type not in MCA_SUPPORTED_MODELS, "model_name_or_path",
                   f"Model {a.model_type} is not supported by mcore_adapter")]
        # mcore_adapter models/model_config.py:398-409
        late.append((not cfg.get("pipeline_model_parallel_layout") and layers % stages != 0,
                     "pipeline_model_parallel_size", f"The number of layers ({layers}) must be a multiple of the "
                     f"pipeline_model_parallel_size ({pp}) and virtual_pipeline_model_parallel_size ({vpp})"))
    else:
        size = tp * pp * cp * ep
        # LLaMA-Factory hparams/parser.py:336-348, 431-441 and megatron_bridge_args.py __post_init__
        early += [
            (as_bool(cfg.get("sequence_parallel")) and tp <= 1, "sequence_parallel",
             "`sequence_parallel` requires `tensor_model_parallel_size` > 1"),
            (run.stage not in ("pt", "sft"), "stage", "Megatron Bridge only supports the `pt` and `sft` stages"),
            (run.finetuning_type not in ("full", "lora"), "finetuning_type",
             "Megatron Bridge only supports `full` and `lora` finetuning"),
            (run.quantization_bit is not None, "quantization_bit",
             "Quantized models are not supported with Megatron Bridge"),
            (bool(cfg.get("deepspeed")), "deepspeed", "Megatron Bridge is incompatible with DeepSpeed"),
            (size > world or world % size != 0, "tensor_model_parallel_size",
             f"Total Megatron Bridge parallel size ({size}) must divide `world_size` ({world})"),
        ]
        # megatron/core/transformer/transformer_block.py:156-159, 174-178
        late += [(layers % pp != 0, "pipeline_model_parallel_size",
                  f"num_layers={layers} should be divisible by config.pipeline_model_parallel_size={pp}"),
                 (vpp is not None and (layers // pp) % vpp != 0, "virtual_pipeline_model_parallel_size",
                  f"num_layers_per_pipeline_rank {layers // pp} should be divisible by vp_size {vpp}")]
    core: list[tuple[bool, str, str]] = [
        # megatron/core/parallel_state.py:815-823 (initialize_model_parallel)
        (world % (tp * pp * cp) != 0, "tensor_model_parallel_size",
         f"world_size ({world}) is not divisible by tensor x pipeline x context parallel size ({tp * pp * cp})"),
        # parallel_state.py:877-883
        (world % (etp * ep * pp) != 0, "expert_model_parallel_size",
         f"world_size ({world}) is not divisible by expert_tensor_model_pipeline_parallel size ({etp * ep * pp})"),
        # parallel_state.py:827-830
        (vpp is not None and pp <= 1, "virtual_pipeline_model_parallel_size",
         "pipeline-model-parallel size should be greater than 1 with interleaved schedule"),
        # megatron/core/transformer/transformer_config.py:1446-1450
        (a.num_heads % tp != 0, "tensor_model_parallel_size",
         f"num_attention_heads ({a.num_heads}) must be a multiple of tensor_model_parallel_size ({tp})"),
        # transformer_config.py:1461-1468
        (a.num_kv_heads % tp != 0 and tp % a.num_kv_heads != 0, "tensor_model_parallel_size",
         f"num_query_groups ({a.num_kv_heads}) must be a multiple or divisor of tensor_model_parallel_size ({tp})"),
        # transformer_config.py:1595-1596
        (ep > 1 and not a.is_moe, "expert_model_parallel_size", "num_moe_experts must be non None to use "
         "expert-parallel (the model has no experts)"),
        # megatron/core/transformer/moe/moe_layer.py:186
        (a.is_moe and a.num_experts % ep != 0, "expert_model_parallel_size",
         f"num_moe_experts ({a.num_experts}) is not divisible by expert_model_parallel_size ({ep})"),
    ]
    checks = early + core + late
    for bad, key, msg in checks:
        if bad:
            return {"mcore_error": msg, "mcore_error_key": key}
    return {}


# LLaMA-Factory extras/constants.py:58-74 (ff6d4d1): the model types the mcore adapter converts
MCA_SUPPORTED_MODELS = frozenset({"deepseek_v3", "glm4_moe", "llama", "mistral", "mixtral", "qwen2", "qwen2_vl",
                                  "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3", "qwen3_moe", "qwen3_next",
                                  "qwen3_5", "qwen3_5_moe"})
