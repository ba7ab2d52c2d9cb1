"""Bytes the simulate probe adds analytically for what it does not run (DeepSpeed's optimizer side, 8-bit states,
a frozen vision tower), and how they apply to each segment of the step."""

from __future__ import annotations

from dataclasses import dataclass

from finetune_doctor.dtypes import optimizer_state_bytes_per_param
from finetune_doctor.probes.spec import ProbeSpec
from finetune_doctor.probes.tracker import CATEGORIES, Peak

GIB = float(1 << 30)


@dataclass(frozen=True)
class Term:
    """Bytes added to (or, negative, removed from) one category at the segments `when` selects.

    `when`: "always"; "states" (from the first optimizer step on: optimizer states exist); "grads" (from the
    first backward on); "replace_grads" (drop the simulated gradients of this segment: ZeRO-2 reduces them into
    a partition bucket by bucket).

    `simulated`: which part of the category's figure the term changes — the bytes the probe simulated, or those
    it adds analytically. By default a positive term is analytic bytes added and a negative one removes simulated
    bytes; a term that moves simulated bytes to another category (the ZeRO-3 stand-in's fp32 shards, reported as
    DeepSpeed's master partition) or removes analytic ones (an analytic partition then offloaded) says so.
    """

    category: str
    nbytes: float
    when: str
    note: str = ""
    simulated: bool | None = None

    @property
    def on_simulated(self) -> bool:
        return self.nbytes < 0 if self.simulated is None else self.simulated


def _applies(when: str, key: tuple) -> bool:
    step, micro, phase = key[0], key[1], key[2]
    if when in ("always", "replace_grads"):
        return True
    if when == "states":
        return step >= 2 or phase in ("opt", "zero")
    if when == "opt":
        return phase == "opt"
    if when == "grads_live":
        # from a micro-batch's backward to the optimizer step (and through later micro-batches of an accumulation)
        return phase in ("bwd", "opt") or (phase in ("fwd", "ref") and micro > 0)
    return False


def analytic_terms(spec: ProbeSpec, counts: dict[str, float]) -> tuple[list[Term], float, list[str]]:
    """Terms for what is not simulated, from the (extrapolated) parameter counts. Returns (terms, host bytes,
    notes).

    DeepSpeed's optimizer side, read from deepspeed 0.19.8 (the version reference/deepspeed/ documents):

    * ZeRO-1/2 (``runtime/zero/stage_1_and_2.py``): an fp32 master partition (4 B/param / N) and the optimizer
      states on it, persistent; at ``step()`` an fp32 copy of this rank's gradient partition is made per parameter
      group and freed after that group's update ("Step 4: get rid of the fp32 gradients"); ZeRO-2 copies each
      reduced gradient into a half-precision partition buffer (``grads_in_partition``, allocated in backward,
      released with the IPG buffers after the step) and frees the replica gradients bucket by bucket; ZeRO-1 keeps
      the replica gradients until the step (simulated).
    * ZeRO-0 with bf16/fp16 (engine ``_configure_fp16_optimizer``): fp32 master copies and states of every
      parameter; counted like ZeRO-1 over one rank.
    * ZeRO-3 (``runtime/zero/stage3.py``): a half-precision parameter partition (2 B/N) beside the fp32 master
      partition (the FSDP2 stand-in's fp32 shards); a persistent flat gradient-partition buffer in the
      gradient-accumulation dtype (``grad_partitions_flat_buffer``, the model dtype unless
      ``data_types.grad_accum_dtype`` says otherwise: 2 B/N for bf16); at the step an fp32 copy per sub-group of
      at most ``sub_group_size`` (1e9) elements (``_prepare_fp32_grad_for_sub_group``). FSDP2's own fp32 gradient
      shards are replaced by these.

    Communication buffers (IPG buckets, all-gather/prefetch buckets) are the analytic model's `buffers`.
    """
    terms: list[Term] = []
    notes: list[str] = []
    host = 0.0
    N = max(spec.world_size, 1)
    T = counts["trainable"]
    # DeepSpeed's optimizer works on fp32 master partitions: states per parameter from the shared table
    states_per_param = optimizer_state_bytes_per_param(spec.optimizer_impl, 4.0)
    if counts.get("analytic_states"):
        terms.append(Term("optimizer", counts["analytic_states"], "states"))
    if spec.extra_params:
        # LF freezes a VLM's vision tower and projector by default (freeze_vision_tower, LF_FACTS §3): weights only
        b = {"float32": 4.0}.get(spec.checkpoint_dtype, 2.0) * spec.extra_params / (N if spec.sharded else 1)
        terms.append(Term("weights", b, "always"))
        notes.append(f"vision tower / projector ({spec.extra_params / 1e6:.0f}M frozen parameters) counted as "
                     "weights, not simulated; image activations are not included (text-only batches)")
    if spec.deepspeed and not spec.sharded:
        stage = spec.zero_stage
        P = N if stage >= 1 else 1
        half = counts["trainable_bytes"] / T if T else 2.0
        off = spec.offload_optimizer is not None and stage >= 1
        master, grads32, states = 4.0 * T / P, 4.0 * T / P, states_per_param * T / P
        if off:
            host += master + grads32 + states
            notes.append(f"DeepSpeed ZeRO-{stage}: fp32 master, fp32 gradients and optimizer states offloaded to "
                         f"the host ({(master + grads32 + states) / GIB:.2f} GiB per rank on the host)")
        else:
            terms += [Term("optimizer", master, "always"), Term("optimizer", states, "states"),
                      Term("gradients", grads32, "opt")]
        if stage >= 2:
            terms += [Term("gradients", 0.0, "replace_grads"), Term("gradients", half * T / N, "grads_live")]
        notes.append(f"DeepSpeed ZeRO-{stage} over {N} ranks: the replica (weights, activations"
                     f"{', gradients' if stage < 2 else ''}) is simulated; the fp32 master partition and optimizer "
                     f"states (persistent), the fp32 gradient partition (at the step)"
                     f"{' and the half-precision gradient partition (backward to step)' if stage >= 2 else ''} are "
                     "added as DeepSpeed 0.19.8 allocates them; communication buckets are not included")
    if spec.sharded and spec.deepspeed:
        shard_t = counts.get("shard_trainable", T / N)
        half_b = 2.0 if spec.compute_dtype in ("bfloat16", "float16") else 4.0
        master = counts.get("shard_trainable_bytes", 4.0 * shard_t)
        # the fp32 shards are DeepSpeed's master partition: reported under optimizer, as DESIGN.md's per-GPU
        # categories and the analytic model count it
        terms += [Term("weights", half_b * shard_t, "always"), Term("weights", -master, "always"),
                  Term("optimizer", master, "always", simulated=True), Term("gradients", 0.0, "replace_grads")]
        notes.append(f"DeepSpeed ZeRO-3 over {N} ranks simulated with FSDP2 fully_shard over a fake process group "
                     "(fp32 shards = DeepSpeed's master partition); DeepSpeed's half-precision parameter partition, "
                     "its persistent gradient-partition buffer and the fp32 gradients of the step are added as "
                     "DeepSpeed 0.19.8 allocates them; prefetch and bucket buffers are not included")
        if spec.offload_optimizer:
            terms.append(Term("optimizer", 0.0, "drop_optimizer"))
            host += master * 3 + half_b * shard_t
            notes.append("offload_optimizer: fp32 master, gradients and optimizer states counted on the host")
        else:
            terms += [Term("gradients", half_b * shard_t, "always"),
                      Term("gradients", 4.0 * min(shard_t, 1e9), "opt")]
        if spec.offload_param:
            frozen_shard = counts.get("shard_weights_bytes", 0.0) - counts.get("shard_trainable_bytes", 0.0)
            terms += [Term("weights", -frozen_shard, "always"),
                      Term("weights", -half_b * shard_t, "always", simulated=False)]
            host += frozen_shard + half_b * shard_t
            notes.append("offload_param: parameter partitions counted on the host; layers are fetched per use")
    return terms, host, notes


def apply_terms(key: tuple, peak: Peak, terms: list[Term]) -> tuple[float, dict[str, float], dict[str, float],
                                                                    dict[str, float]]:
    """The segment `key`'s bytes with the analytic `terms` applied to its simulated `peak`. Returns (total, bytes by
    category, the net change by category against the simulation — negative where simulated bytes were replaced —
    and the analytic part of each category's bytes: 0 ≤ analytic part ≤ bytes, the figure "of which analytic")."""
    sim = {c: float(peak.by_category.get(c, 0)) for c in CATEGORIES}
    kept = dict(sim)                        # simulated bytes still counted
    ana = {c: 0.0 for c in CATEGORIES}      # analytic bytes counted
    for t in terms:
        if t.when == "drop_optimizer" or not _applies(t.when, key):
            continue
        if t.when == "replace_grads":
            kept[t.category] = 0.0
        elif t.on_simulated:
            kept[t.category] += t.nbytes
        else:
            ana[t.category] += t.nbytes
    if any(t.when == "drop_optimizer" for t in terms):
        # offloaded: master and states live on the host; nothing of the optimizer stays on the GPU
        kept["optimizer"] = ana["optimizer"] = 0.0
    by = {c: kept[c] + ana[c] for c in CATEGORIES}
    return sum(by.values()), by, {c: by[c] - sim[c] for c in CATEGORIES}, ana
