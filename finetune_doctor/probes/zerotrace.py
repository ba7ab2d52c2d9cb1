"""One rank's allocation trace under DeepSpeed ZeRO-2 or ZeRO-3, for the allocator replay (probes/replay.py).

Pure Python, no torch. Input: an `AllocTrace` of the simulate probe for the DeepSpeed replica of the same shape
(its training step: activations, the adapter's own tensors), and a `ZeroLayout` (the model's parameters by
module, the DeepSpeed settings). Output: the same step with the replica's model build dropped and DeepSpeed's
own allocations put in, in the order DeepSpeed makes them. Read in deepspeed 0.19.8 (installed beside the
doctor; the sites are the same functions in the 0.10-0.16 releases LLaMA-Factory 0.9.x pins, at other lines):

ZeRO-3 (runtime/zero/stage3.py, partition_parameters.py, partitioned_param_coordinator.py):

* build under ``zero.Init``: per parameter the whole tensor, its partition (``_partition_param``,
  partition_parameters.py ``torch.empty(partition_size)``), then the whole freed;
* ``deepspeed.initialize``: the trainable partitions copied into one flat low-precision buffer
  (``_create_fp16_partitions_with_defragmentation``, stage3.py:913-998) and the per-parameter partitions freed;
  an fp32 clone per sub-group of at most ``sub_group_size`` elements (stage3.py:1160-1172); the IPG bucket of
  ``reduce_bucket_size`` elements (stage3.py:781); the gradient partition buffer (``grad_partitions_flat_buffer``,
  stage3.py:790, the gradient-accumulation dtype, 2 bytes by default);
* each module's fetch gathers its non-persistent parameters into one flat buffer of partition × world elements
  (``_all_gather_coalesced``, partition_parameters.py:1485) and prefetches the next ones in the recorded order
  while fewer than ``stage3_prefetch_bucket_size`` elements are in flight (the first parameter always goes;
  partitioned_param_coordinator.py:452-470); the release after the module (``release_sub_module``, :494) frees a
  buffer when no parameter of it is still wanted. The first step records the order and prefetches nothing.
  Parameters of at most ``stage3_param_persistence_threshold`` elements stay gathered (``ds_persist``);
* backward with gradient checkpointing: each layer's recompute fetches its modules in forward order, then the
  backward fetches them in reverse; a trained parameter's gradient is allocated whole by autograd, copied into
  the IPG bucket and freed (``__add_grad_to_ipg_bucket``); a full bucket is reduce-scattered (an output of
  bucket/world elements) into the gradient partition buffer (``__reduce_and_partition_ipg_grads``, :1648);
* step: per sub-group the flattened gradient partition (low precision), its fp32 copy
  (``_prepare_fp32_grad_for_sub_group``, :2683-2690), the low-precision flat freed, Adam's two fp32 states on the
  first step (torch allocates them lazily), the fp32 gradient freed (:2735).

ZeRO-2 (runtime/zero/stage_1_and_2.py): the model whole on the device; the trainable parameters flattened into
one buffer on the device (:505) and the originals freed, ``empty_cache()`` before each parameter group's
flattening (:449; HF's Trainer makes a second, no-decay group, so the originals' segments are released); the
fp32 partition clone (:560); each micro-step's first backward allocates the IPG buffers of ``reduce_bucket_size`` elements, a second with ``overlap_comm`` (:3266-3275,
the old ones dropped); gradients pass through the bucket as above; the rank's reduced gradients are copied into
``grads_in_partition`` (:2192, allocated on first use); step: the fp32 gradient partition (:3118), the states on
the first step, the fp32 gradient and ``grads_in_partition`` freed (:3141, ``_release_preflattened_grad_buffers``).

Approximations (each named in benchmarks/results/reserve_derivation.md): the step's events of a layer are split
evenly among its modules (the probe marks layers, not modules); the backward segment of a layer is its recompute
then its backward, half each; ZeRO-3's sub-groups are cut from one optimizer group (HF's small no-decay group of
norms and biases is not apart); parameters still gathered when the backward ends are released before the step;
the collectives' own temporaries beyond the reduce-scatter output are not modelled; with ``offload_optimizer`` only the fp32 side leaves the card (the
host copies' staging buffers are not modelled); an adapter's own parameters stay whole and gathered (LoRA's B matrices
above the persistence threshold are partitioned in DeepSpeed: tens of MiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from finetune_doctor.probes.trace import AllocTrace
from finetune_doctor.probes.tracedepth import synthesize
from finetune_doctor.readers.deepspeed.dsauto import hf_auto_values
from finetune_doctor.readers.deepspeed.dsschema import ZERO_FIELDS

HALF = 2   # bf16/fp16 bytes
FP32 = 4


@dataclass(frozen=True)
class ZeroLayout:
    """What DeepSpeed allocates around one rank's step. Element counts. `embed`/`head`: parameters of the
    embedding and of the output layer (empty when tied) modules; `layers`: per decoder layer, per module (in
    forward order), its parameters; `layer_other`: per layer, the norms' parameters (one persistent module);
    `final_norm`: the final norm. `full`: the base weights train (else an adapter of `adapter` elements, whose
    tensors the replica trace already holds). Settings as DeepSpeed resolves them (elements)."""

    stage: int
    world: int
    embed: tuple[int, ...]
    layers: tuple[tuple[tuple[int, ...], ...], ...]
    layer_other: tuple[int, ...]
    head: tuple[int, ...]
    final_norm: int
    full: bool
    adapter: int = 0
    # DeepSpeed's own defaults (runtime/zero/config.py), from their one home readers/deepspeed/dsschema.py
    reduce_bucket: int = int(ZERO_FIELDS["reduce_bucket_size"].default)
    prefetch_bucket: int = int(ZERO_FIELDS["stage3_prefetch_bucket_size"].default)
    persistence: int = int(ZERO_FIELDS["stage3_param_persistence_threshold"].default)
    max_live: int = int(ZERO_FIELDS["stage3_max_live_parameters"].default)
    max_reuse: int = int(ZERO_FIELDS["stage3_max_reuse_distance"].default)
    overlap_comm: bool = False
    sub_group: int = int(ZERO_FIELDS["sub_group_size"].default)
    offload: bool = False      # offload_optimizer to the host: the fp32 side lives there, not on the card

    def all_params(self) -> list[int]:
        out = list(self.embed)
        for mods, other in zip(self.layers, self.layer_other):
            out += [n for m in mods for n in m] + ([other] if other else [])
        out += ([self.final_norm] if self.final_norm else []) + list(self.head)
        return out


def part(n: int, world: int) -> int:
    """Elements of one rank's partition of an `n`-element tensor (DeepSpeed pads to a multiple of the world)."""
    return -(-n // world)


def layout_from_arch(arch: Any, stage: int, world: int, n_layers: int, full: bool, adapter: int = 0,
                     zero: dict | None = None) -> ZeroLayout:
    """The layout of `arch` (finetune_doctor.arch.ModelArch) cut to `n_layers` layers. `zero`: the DeepSpeed
    ``zero_optimization`` block; "auto" (and missing) values as transformers fills them from the hidden size
    (integrations/deepspeed.py ``fill_match``: reduce_bucket_size h², stage3_prefetch_bucket_size 0.9·h²,
    stage3_param_persistence_threshold 10·h) for ZeRO-3, DeepSpeed's own defaults otherwise (5e8; 5e7; 1e5)."""
    z = zero or {}
    auto = hf_auto_values(arch.hidden_size)

    def val(key: str) -> int:
        default = ZERO_FIELDS[key].default   # DeepSpeed's own default (runtime/zero/config.py), one home
        v = z.get(key, "auto" if stage == 3 else default)
        return int(float(auto.get(key, default) if v == "auto" else v))

    layers, other = [], []
    for i in range(n_layers):
        mods = []
        for lin in arch.layer_linears(i):
            w = lin.in_features * lin.out_features
            for _ in range(lin.count):
                mods.append((w, lin.out_features) if lin.bias else (w,))
        layers.append(tuple(mods))
        other.append(arch.layer_other_params(i))
    return ZeroLayout(stage=stage, world=world, embed=(arch.embedding_params(),), layers=tuple(layers),
                      layer_other=tuple(other), head=(arch.lm_head_params(),) if arch.lm_head_params() else (),
                      final_norm=arch.final_norm_params(), full=full, adapter=adapter,
                      reduce_bucket=val("reduce_bucket_size"),
                      prefetch_bucket=val("stage3_prefetch_bucket_size"),
                      persistence=val("stage3_param_persistence_threshold"),
                      max_live=val("stage3_max_live_parameters"),
                      max_reuse=val("stage3_max_reuse_distance"),
                      overlap_comm=bool(z.get("overlap_comm", False)),
                      sub_group=val("sub_group_size"),
                      offload=(z.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme"))


class _Out:
    """The trace being written: base events pass through; DeepSpeed's get serials of their own."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.serial = 1 << 40

    def a(self, nbytes: int) -> int:
        if not nbytes:
            return 0   # the allocator is not asked for empty tensors (as the probe's tracker skips them)
        self.serial += 1
        self.events.append(("a", self.serial, int(nbytes), 0))
        return self.serial

    def empty_cache(self) -> None:
        self.events.append(("e",))

    def f(self, serial: int | None) -> None:
        if serial:
            self.events.append(("f", serial))


def _split_step(events: tuple[tuple, ...]) -> list[tuple[Any, list[tuple]]]:
    """[(marker label, events)] from the first step marker on (the replica's build is dropped)."""
    out: list[tuple[Any, list[tuple]]] = []
    for e in events:
        if e[0] == "m" and e[1] and isinstance(e[1][0], int):
            out.append((e[1], []))
        elif e[0] == "m" and out:
            out.append((e[1], []))
        elif out:
            out[-1][1].append(e)
    return out


def _chunks(events: list[tuple], n: int) -> list[list[tuple]]:
    k = len(events)
    return [events[i * k // n:(i + 1) * k // n] for i in range(n)]


class _ZeroState:
    """DeepSpeed's side of the trace while it is written (see the module docstring for the sources)."""

    def __init__(self, lay: ZeroLayout, out: _Out):
        self.lay, self.o, self.w = lay, out, lay.world
        self.bucket_used = 0
        self.buffers: list[int] = []
        self.grads_in_partition = 0
        self.states_done = False
        self.step = 0

    # ---- build -----------------------------------------------------------------------------------------
    def build(self) -> None:
        lay, o, w = self.lay, self.o, self.w
        params = lay.all_params()
        if lay.stage == 3:
            parts = []
            for n in params:                       # zero.Init: whole, partition, whole freed
                whole = o.a(n * HALF)
                parts.append(o.a(part(n, w) * HALF))
                o.f(whole)
            for n in params:                       # persistent parameters stay gathered from the first fetch
                if n <= lay.persistence:
                    o.a(n * HALF)
            trained = params if lay.full else []
            if trained:
                o.a(sum(part(n, w) for n in trained) * HALF)     # defragmented low-precision partitions
                for s in parts:
                    o.f(s)
            for g in ([] if lay.offload else self.subgroups()):
                o.a(g * FP32)
            if lay.adapter:
                o.a(part(lay.adapter, w) * HALF)
            o.a(lay.reduce_bucket * HALF)
            if not lay.offload:   # offloaded, the gradient partitions live on the host (stage3.py ``self.device``)
                o.a(sum(part(n, w) for n in trained) * HALF + part(lay.adapter, w) * HALF)
        else:
            wholes = [o.a(n * HALF) for n in params]
            if lay.full:
                o.empty_cache()                                   # before each group's flattening (:449)
                o.a(sum(params) * HALF)                           # flattened on the device
                for s in wholes:
                    o.f(s)
                # the second group (HF's no-decay norms and biases) starts with empty_cache: the originals'
                # freed segments go back to the device
                o.empty_cache()
            if not lay.offload:
                o.a(part(self.trained(), w) * FP32)

    def trained(self) -> int:
        return sum(self.lay.all_params()) if self.lay.full else self.lay.adapter

    def subgroups(self) -> list[int]:
        """ZeRO-3's sub-groups, in partition elements: parameters in order until a group holds at least
        ``sub_group_size`` (stage3.py:1210-1233 ``_create_fp16_sub_groups``); one optimizer group assumed (HF's
        no-decay group of norms and biases is small)."""
        lay, w = self.lay, self.w
        if not lay.full:
            return [part(lay.adapter, w)] if lay.adapter else []
        groups, cur = [], 0
        for n in lay.all_params():
            cur += part(n, w)
            if cur >= lay.sub_group:
                groups.append(cur)
                cur = 0
        return groups + ([cur] if cur else [])

    # ---- gradients -------------------------------------------------------------------------------------
    def grads(self, sizes: tuple[int, ...]) -> None:
        """Autograd's whole gradient of each parameter, copied into the IPG bucket and freed; a full bucket is
        reduced (ZeRO-3: a reduce-scatter output of bucket/world elements; ZeRO-2: in place, then the rank's
        share copied into ``grads_in_partition``)."""
        if not self.lay.full:
            return
        for n in sizes:
            if self.bucket_used + n > self.lay.reduce_bucket and self.bucket_used:
                self.reduce()
            g = self.o.a(n * HALF)
            self.bucket_used += n
            self.o.f(g)

    def reduce(self) -> None:
        if not self.bucket_used:
            return
        if self.lay.stage == 3:
            s = self.o.a(part(self.bucket_used, self.w) * HALF)
            self.o.f(s)
        elif not self.grads_in_partition and not self.lay.offload:
            self.grads_in_partition = self.o.a(part(self.trained(), self.w) * HALF)
        self.bucket_used = 0

    def setup_buckets(self) -> None:
        """ZeRO-2 ``setup_buckets`` at a micro-step's first backward: the old IPG buffers dropped, new ones."""
        if self.lay.stage != 2:
            return
        for s in self.buffers:
            self.o.f(s)
        self.buffers = [self.o.a(self.lay.reduce_bucket * HALF) for _ in range(2 if self.lay.overlap_comm else 1)]

    def optimizer_step(self) -> None:
        lay, o, w = self.lay, self.o, self.w
        self.reduce()
        groups = self.subgroups() if lay.stage == 3 else ([part(self.trained(), w)] if self.trained() else [])
        if lay.offload:
            groups = []   # the fp32 gradients, states and update run on the host
        for g in groups:
            low = o.a(g * HALF) if lay.stage == 3 else 0
            g32 = o.a(g * FP32)
            o.f(low)
            if not self.states_done:
                o.a(g * FP32)
                o.a(g * FP32)
            o.f(g32)
        self.states_done = True
        if lay.stage == 2 and self.grads_in_partition:
            o.f(self.grads_in_partition)
            self.grads_in_partition = 0


Use = tuple  # (module key, its parameters' element counts, whether its gradients are made here)


def step_plan(lay: ZeroLayout) -> list[Use]:
    """The module uses of one forward and backward, in the order DeepSpeed's coordinator records them: the
    embedding, each layer's modules, the output layer; in the backward the output layer, then per layer from the
    last its recompute (modules in forward order) and its backward (in reverse); the embedding when it trains."""
    n = len(lay.layers)
    plan: list[Use] = [(("E",), lay.embed, False)]
    for i in range(n):
        plan += [(("L", i, j), sizes, False) for j, sizes in enumerate(lay.layers[i])]
    plan += [(("H",), lay.head, False), (("H",), lay.head, True)]
    for i in range(n - 1, -1, -1):
        mods = [(("L", i, j), sizes) for j, sizes in enumerate(lay.layers[i])]
        plan += [(k, s, False) for k, s in mods] + [(k, s, True) for k, s in reversed(mods)]
    if lay.full:
        plan.append((("E",), lay.embed, True))
    return plan


class _Coordinator:
    """ZeRO-3's partitioned-parameter coordinator over one pass of `step_plan` (partitioned_param_coordinator.py
    ``fetch_sub_module`` :310-492, ``release_sub_module`` :494, ``__params_to_release`` :634-664): a fetch
    gathers the module's missing parameters in one flat buffer; once the order is recorded (after the first
    step) it then pops the recorded queue, prefetching parameters not available while fewer than
    min(max live − available, prefetch bucket) elements are being prefetched, and noting for every popped entry
    the latest use it was popped for; a release frees the module's parameters except those noted for a later
    use and those used again within ``stage3_max_reuse_distance`` elements of the coming uses (all of them
    before the order is recorded). Persistent parameters are never gathered here (gathered at the build)."""

    def __init__(self, lay: ZeroLayout, out: _Out, plan: list[Use]):
        self.lay, self.o, self.plan = lay, out, plan
        self.params = [[((_k, i), n) for i, n in enumerate(sizes)] for _k, sizes, _g in plan]
        self.queue = [(u, pk, n) for u, ps in enumerate(self.params) for pk, n in ps if n > lay.persistence]
        self.where: dict[tuple, int] = {}
        self.members: dict[int, set] = {}
        self.available = 0
        self.qpos = 0
        self.recent: dict[tuple, int] = {}
        self.recorded = False

    def start(self, recorded: bool) -> None:
        self.qpos, self.recent, self.recorded = 0, {}, recorded

    def _gather(self, want: list[tuple]) -> None:
        if not want:
            return
        s = self.o.a(sum(part(n, self.lay.world) * self.lay.world for _pk, n in want) * HALF)
        self.members[s] = {pk for pk, _n in want}
        for pk, n in want:
            self.where[pk] = s
            self.available += n

    def _free(self, pk: tuple, n: int) -> None:
        s = self.where.pop(pk, None)
        if s is None:
            return
        self.available -= n
        self.members[s].discard(pk)
        if not self.members[s]:
            del self.members[s]
            self.o.f(s)

    def fetch(self, u: int) -> None:
        lay, q = self.lay, self.queue
        self._gather([(pk, n) for pk, n in self.params[u] if n > lay.persistence and pk not in self.where])
        while self.qpos < len(q) and q[self.qpos][0] <= u:
            self.qpos += 1
        if not self.recorded or lay.prefetch_bucket <= 0:
            return
        limit = min(lay.max_live - self.available, lay.prefetch_bucket)
        batch: dict[tuple, int] = {}
        while self.qpos < len(q) and sum(batch.values()) < limit:
            uu, pk, n = q[self.qpos]
            self.qpos += 1
            self.recent[pk] = max(self.recent.get(pk, -1), uu)
            if pk not in self.where and pk not in batch:
                batch[pk] = n
        self._gather(list(batch.items()))

    def release(self, u: int) -> None:
        cands = {pk: n for pk, n in self.params[u] if n > self.lay.persistence}
        if self.recorded:
            for pk in [pk for pk in cands if self.recent.get(pk, -1) > u]:
                del cands[pk]
            traversed = 0
            for ps in self.params[u + 1:]:
                if traversed >= self.lay.max_reuse or not cands:
                    break
                for pk, n in ps:
                    cands.pop(pk, None)
                    traversed += n
        for pk, n in cands.items():
            self._free(pk, n)

    def release_all(self) -> None:
        """Every parameter still gathered freed before the optimizer step (the coordinator's
        ``release_and_reset_all`` at the end of the pass)."""
        sizes = {pk: n for ps in self.params for pk, n in ps}
        for pk in list(self.where):
            self._free(pk, sizes[pk])


def _walk(segs: list[tuple[Any, list[tuple]]], lay: ZeroLayout, zs: _ZeroState, o: _Out) -> None:
    """Write the step segments with DeepSpeed's events between the replica's: each segment takes its module
    uses from `step_plan` in order (the embedding, a layer's modules, the output layer), its events split
    evenly among them."""
    live_serials: set[int] = set()

    def emit(events: list[tuple]) -> None:
        for e in events:
            if e[0] == "a":
                live_serials.add(e[1])
                o.events.append(e)
            elif e[0] == "f" and e[1] in live_serials:
                live_serials.discard(e[1])
                o.events.append(e)

    plan = step_plan(lay)
    coord = _Coordinator(lay, o, plan) if lay.stage == 3 else None
    u = 0
    for label, events in segs:
        o.events.append(("m", label))
        zs.step, phase, where = label[0], label[2], label[3:]
        take = 0
        if phase == "fwd" and where == ("embed",):
            u = 0
            if coord is not None:
                coord.start(recorded=zs.step > 1)
            take = 1
        elif where and where[0] in ("b", "t"):
            take = _layer_uses(plan, u)
        elif where == ("logits",):
            if phase == "bwd":
                zs.setup_buckets()
            take = 1
        elif phase == "bwd" and where == ("embed",):
            take = 1 if lay.full else 0
        elif phase == "opt":
            if coord is not None:
                coord.release_all()
            zs.optimizer_step()
        if not take:
            emit(events)
            continue
        for k, chunk in enumerate(_chunks(events, take)):
            if coord is not None:
                coord.fetch(u + k)
            emit(chunk)
            if plan[u + k][2]:
                zs.grads(plan[u + k][1])
            if coord is not None:
                coord.release(u + k)
        u += take
        if phase == "bwd" and where == ("embed",):
            zs.reduce()


def _layer_uses(plan: list[Use], u: int) -> int:
    """The number of uses of the layer whose first use is `u`: its modules (forward), or its recompute and
    backward (backward: the uses up to the next layer's recompute)."""
    layer = plan[u][0][1]
    k = u
    while k < len(plan) and plan[k][0][0] == "L" and plan[k][0][1] == layer:
        k += 1
    return k - u


def zero_trace(base: AllocTrace, lay: ZeroLayout) -> AllocTrace:
    """`base` (the simulate probe's trace of the DeepSpeed replica, at `len(lay.layers)` layers) with its
    model build replaced by DeepSpeed's and DeepSpeed's step allocations put between its events (module
    docstring). Raises ValueError when the depths differ."""
    if base.n_layers != len(lay.layers):
        raise ValueError(f"trace has {base.n_layers} layers, the layout {len(lay.layers)}")
    o = _Out()
    zs = _ZeroState(lay, o)
    zs.build()
    _walk(_split_step(base.events), lay, zs, o)
    return AllocTrace(tuple(o.events), base.n_layers)


def full_depth(a: AllocTrace, b: AllocTrace, num_layers: int) -> AllocTrace:
    """The replica's trace at `num_layers` layers from the probe's traces at k and k+1 layers
    (tracedepth.synthesize), with a marker before every layer: synthesize repeats the segment of the layer only
    the k+1 trace has, in place; that segment is cut into its num_layers − k copies by event count (the frees a
    layer hands to the next move at most a few events across a cut). DeepSpeed's events are then put in at full
    depth (`zero_trace`), so its buffers of every parameter are sized for the whole model, not extrapolated."""
    syn = synthesize(a, b, num_layers)
    if len(b.events) == len(syn.events):
        return syn
    labels_a = {e[1] for e in a.events if e[0] == "m"}
    copies = num_layers - a.n_layers
    out: list[tuple] = []
    seg: list[tuple] | None = None
    label: Any = None

    def flush() -> None:
        if seg is None:
            return
        if label in labels_a or not (len(label) > 3 and label[3] in ("b", "t")):
            out.extend([("m", label)] + seg)
            return
        for j, piece in enumerate(_chunks(seg, copies)):
            out.extend([("m", (*label, j))] + piece)

    for e in syn.events:
        if e[0] == "m":
            flush()
            seg, label = [], e[1]
        elif seg is None:
            out.append(e)
        else:
            seg.append(e)
    flush()
    return AllocTrace(tuple(out), num_layers)
