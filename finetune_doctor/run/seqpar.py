"""Sequence parallelism of the 360-LLaMA-Factory fork (``sequence_parallel_size``, ``sequence_parallel_mode``).

360-LLaMA-Factory (github.com/Qihoo360/360-LLaMA-Factory, read at 6fd8b28) adds two model arguments to
LLaMA-Factory: ``sequence_parallel_size`` (default 1, src/llamafactory/hparams/model_args.py:232-235) and
``sequence_parallel_mode`` (``zigzag-ring`` | ``llama3`` | ``ulysses``, default ``zigzag-ring``, :236-239). With a size
N > 1 its dataset decorator pads every sequence to ``cutoff_len`` (data/loader.py:234-254, ``pad_sequence``: the
pad length is ``data_args.cutoff_len`` whatever the sample's length) and splits it into N chunks, one per rank of
an SP group (loader.py:256-284; data/data_utils.py:96-103 cuts the zigzag halves 2N ways and gives rank r chunks r
and 2N-1-r). The flash-attention forward is replaced by ring-flash-attn's zigzag ring attention over the group
(model/model_utils/sequence_parallel.py:12-31, :52-73). So each rank runs its layers, its head and its loss over
cutoff_len / N tokens, whatever the data; the weights, gradients and optimizer states are untouched (DeepSpeed
partitions them over the whole world, which knows nothing of the SP groups).

Upstream LLaMA-Factory declares neither key: its parser stops on them ("Got unknown args"), or drops them under
``ALLOW_EXTRA_ARGS`` and then trains every rank on the whole sequence (facts/assume.py `_sequence_parallel` weighs
that alternative).
"""

from __future__ import annotations

from typing import Any

from finetune_doctor.run.values import as_bool, as_int

# the modes the fork's argument accepts (model_args.py:236) and the one it implements (sequence_parallel.py:60-63
# raises NotImplementedError('Other sequence parallel modes are to be implemented.') for the others)
SP_MODES = ("zigzag-ring", "llama3", "ulysses")
SP_IMPLEMENTED = ("zigzag-ring",)


def sp_cutoff(cutoff_len: int, sp: int) -> int:
    """The cutoff_len the fork trains at under sequence-parallel size `sp` (tokens): raised to the nearest multiple
    of 8·sp above when cutoff_len / sp is not a multiple of 8 (hparams/parser.py:265-270, its warning says it
    "automatically increase[s] the cutoff_len"); unchanged for sp <= 1."""
    if sp <= 1:
        return cutoff_len
    chunk = cutoff_len // sp
    return cutoff_len if chunk % 8 == 0 else (chunk + (8 - chunk % 8)) * sp


def hyper_parallel_cp(cfg: dict[str, Any], stage: str) -> int:
    """The context-parallel size of LLaMA-Factory's HyperParallel backend (ranks sharing one sequence; 1 = none):
    ``hyper_parallel_cp_size`` (default 1, hparams/finetuning_args.py:518-521 at the snapshot ff6d4d1) when
    ``use_hyper_parallel`` is on for a pt/sft run (train/tuner.py:92-100 hands those to HyperParallel's trainer,
    train/hyper_parallel/workflow.py:54-55 passes the size on). The split happens inside the external
    ``hyper_parallel`` package, which the doctor has not read: the memory model does not size it, and
    facts/assume.py `_sequence_parallel` weighs the split as an open assumption."""
    if not as_bool(cfg.get("use_hyper_parallel")) or stage not in ("pt", "sft"):
        return 1
    return max(as_int(cfg.get("hyper_parallel_cp_size"), 1), 1)


def sequence_parallel(cfg: dict[str, Any], world: int, notes: list[str]) -> dict[str, Any]:
    """The `Run` fields of the fork's sequence parallelism read from merged YAML keys `cfg`: ``sp_size`` (ranks
    that share one sequence, 1 = none) and ``sp_mode``. `world` is the run's rank count; `notes` receives what the
    fork refuses at start-up (cutoff_len not divisible by the size, parser.py:262-263; a world that is not a
    multiple of it, sequence_parallel.py:39; a mode other than zigzag-ring, sequence_parallel.py:60-63; zigzag-ring
    with neat_packing, parser.py:273-274) and the raised cutoff_len. The size is kept as written even then: the
    doctor sizes what the YAML asks for. Never raises."""
    sp = as_int(cfg.get("sequence_parallel_size"), 1)
    hp = {"hp_cp_size": hyper_parallel_cp(cfg, str(cfg.get("stage") or "sft"))}
    if sp <= 1:
        return {"sp_size": 1, "sp_mode": "", **hp}
    mode = str(cfg.get("sequence_parallel_mode") or "zigzag-ring")
    cutoff = as_int(cfg.get("cutoff_len"), 2048)
    if cutoff % sp:
        notes.append(f"sequence_parallel_size {sp} does not divide cutoff_len {cutoff}: 360-LLaMA-Factory stops "
                     "('cutoff_len must be a multiple of sequence_parallel_size.')")
    elif sp_cutoff(cutoff, sp) != cutoff:
        notes.append(f"sequence_parallel_size {sp}: 360-LLaMA-Factory raises cutoff_len {cutoff} to "
                     f"{sp_cutoff(cutoff, sp)} so that each rank's share is a multiple of 8 tokens")
    if world % sp:
        notes.append(f"sequence_parallel_size {sp} does not divide the {world} ranks: 360-LLaMA-Factory stops "
                     "('Total number of GPUs must be a multiple of sequence_parallel_size.')")
    if mode not in SP_IMPLEMENTED:
        notes.append(f"sequence_parallel_mode {mode}: 360-LLaMA-Factory implements zigzag-ring only and stops on "
                     "the others ('Other sequence parallel modes are to be implemented.')")
    return {"sp_size": sp, "sp_mode": mode, **hp}
