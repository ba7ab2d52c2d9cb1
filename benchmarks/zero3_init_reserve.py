"""What a ZeRO-3 rank's caching allocator holds after the model is built and partitioned, by the way it was built:
under ``deepspeed.zero.Init`` or whole on the device and partitioned at ``deepspeed.initialize``. A diagnostic for
issue 23's plain ZeRO-3 LoRA rows that read near the unpartitioned model (benchmarks/results/memory_issue23_dev.md):
can the load alone leave that much reserved? Not used by the doctor.

The two allocation sequences, read in DeepSpeed 0.19.8 (installed):

* **under zero.Init** (transformers enters it when ``is_deepspeed_zero3_enabled()``, modeling_utils.py:1525 at 5.6.0):
  each module's parameters are created whole on the rank's device (zero.Init's patched tensor constructors), and
  when the module's ``__init__`` returns, ``_post_init_method`` partitions each one:
  runtime/zero/partition_parameters.py ``_partition_param`` (:1778-1870) allocates the rank's partition
  (``torch.empty(partition_size)``, :1834) while the whole tensor is alive, copies its slice, then frees the whole
  (``free_param``). Per parameter: malloc(whole), malloc(partition), free(whole). Loading the checkpoint afterwards
  gathers a module at a time and copies into the existing partitions (``GatheredParameters(modifier_rank=0)`` →
  ``_partition_param(has_been_updated=True)``): same-size whole blocks again, reused from the cache, no new
  partition.
* **without zero.Init** (a model built before any DeepSpeed config was alive): ``deepspeed.initialize`` moves the
  module whole to the device (runtime/engine.py:2093-2094 ``self.module.to(self.device)`` when no parameter has a
  ``ds_id``), then ``DeepSpeedZeRoOffload`` converts and partitions every parameter
  (runtime/zero/parameter_offload.py ``_convert_to_zero_parameters``). Sequence: malloc(whole) for every parameter,
  then per parameter malloc(partition), free(whole).

Both are replayed through the doctor's model of PyTorch's caching allocator (finetune_doctor/probes/allocator.py,
written from c10/cuda/CUDACachingAllocator.cpp; one stream, frees immediate), with every decoder linear (and its
bias), the embedding, an untied output layer and the norms of the model's architecture (the doctor's ModelArch),
bf16. Nothing empties the cache between load and training, so `reserved` here is a floor under the run's
``max_memory_reserved`` and nvidia-smi for the rest of the run.

    PYTHONPATH=$PWD python benchmarks/zero3_init_reserve.py [MODEL ...]

CPU only, seconds. Prints a markdown table; writes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))   # after PYTHONPATH: the tree named there wins

from finetune_doctor.probes.allocator import CachingAllocator  # noqa: E402

GIB = float(1 << 30)
BYTES = 2   # bf16


def parameters(arch) -> list[int]:
    """Element counts of the model's parameters in construction order: embedding, each decoder layer's linears
    (weight, then bias) and norms, the final norm, an untied output layer."""
    out = [arch.embedding_params()]
    for layer in range(arch.num_layers):
        for lin in arch.layer_linears(layer):
            for _ in range(lin.count):
                out.append(lin.in_features * lin.out_features)
                if lin.bias:
                    out.append(lin.out_features)
        other = arch.layer_other_params(layer)
        if other:
            out.append(other)
    if arch.final_norm:
        out.append(arch.final_norm_params())
    if arch.lm_head_params():
        out.append(arch.lm_head_params())
    return out


def under_zero_init(params: list[int], world: int) -> CachingAllocator:
    """Replay of the zero.Init construction (module docstring): per parameter whole, partition, free whole."""
    a = CachingAllocator()
    for n in params:
        whole = a.malloc(n * BYTES)
        a.malloc(-(-n // world) * BYTES)
        a.free(whole)
    return a


def partitioned_at_initialize(params: list[int], world: int) -> CachingAllocator:
    """Replay of a model moved whole to the device, then partitioned by deepspeed.initialize."""
    a = CachingAllocator()
    wholes = [a.malloc(n * BYTES) for n in params]
    for n, whole in zip(params, wholes):
        a.malloc(-(-n // world) * BYTES)
        a.free(whole)
    return a


def main(argv: list[str] | None = None) -> int:
    from finetune_doctor.readers.model.modelcfg import load_arch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    models = (argv if argv is not None else sys.argv[1:]) or ["Qwen/Qwen2.5-7B", "Qwen/Qwen-14B-Chat",
                                                              "meta-llama/Llama-2-70b-hf"]
    print("| model | ranks | unpartitioned GiB | partitions GiB | reserved after zero.Init GiB | reserved after "
          "initialize-time partitioning GiB |")
    print("|---|---|---|---|---|---|")
    for name in models:
        arch, _ = load_arch(name, offline=True)
        params = parameters(arch)
        whole = sum(params) * BYTES / GIB
        for world in (2, 4, 8):
            z = under_zero_init(params, world)
            d = partitioned_at_initialize(params, world)
            print(f"| {name} | {world} | {whole:.2f} | {z.allocated / GIB:.2f} | {z.reserved / GIB:.2f} | "
                  f"{d.reserved / GIB:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
