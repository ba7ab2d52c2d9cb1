"""`doctor estimate`: the memory breakdown per GPU and host, and `--sweep` what-fits tables.

A sweep is a grid over ``KEY=v1,v2,...`` axes; each point re-reads the config with those keys as ``key=value``
overrides (exactly as ``llamafactory-cli train config.yaml key=value`` would) and re-runs the estimator.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from finetune_doctor.engine.judge import judge
from finetune_doctor.errors import InputError
from finetune_doctor.facts.config import MODES, assemble_config
from finetune_doctor.readers.config.cliflags import as_launch
from finetune_doctor.readers.config.yamlcfg import parse_override
from finetune_doctor.settings import Options
from finetune_doctor.types import Report


# Each point re-assembles the config (a few milliseconds); a grid this large is a typo, not a question.
MAX_SWEEP_POINTS = 1000


def parse_sweep(spec: str) -> tuple[str, list[str]]:
    """``KEY=v1,v2,...`` → (KEY, [v1, v2, ...]).

    Raises InputError naming the command line for a malformed spec or a key no LLaMA-Factory version knows
    (with the did-you-mean of the key schema): a misspelt key would otherwise give identical rows.
    """
    if "=" not in spec:
        raise InputError(f"--sweep {spec!r} is not KEY=v1,v2,...", file="<command line>")
    key, vals = spec.split("=", 1)
    key = key.strip()
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not key or not values:
        raise InputError(f"--sweep {spec!r} needs a key and at least one value", file="<command line>")
    from finetune_doctor.readers.config.keyschema import check_keys

    for p in check_keys({key.split(".")[0]: parse_override(f"{key}={values[0]}")[1]}):
        if p.kind == "unknown":
            hint = f" ({p.suggestion})" if getattr(p, "suggestion", None) else ""
            raise InputError(f"--sweep {key}: not a LLaMA-Factory key{hint}", file="<command line>")
    return key, values


def run(config: str, overrides: tuple[str, ...], opts: Options, *, sweeps: tuple[str, ...] = (),
        scan_data: bool = True) -> Report:
    """The estimate of `config` (and of each sweep point). Raises InputError on bad input; a model that cannot be
    resolved is a finding (model-unresolved, or not-checked-here for a model not on this machine) and leaves
    `memory` None, as in `check`.

    `scan_data` measures the longest micro-batch of the datasets on this machine, as ``check`` does, so that both
    commands give the same total for the same inputs; sweep points are not scanned (each is its worst case, every
    sample at cutoff_len)."""
    opts = replace(opts, launch=as_launch(config, opts.launch))   # a command line is its own launch
    # an unknown model narrows the estimate to "not estimated" with the finding that says what to give (FD607, or
    # FD098 for a model folder not on this machine), exactly as `check` does: the same inputs exit alike (README's
    # exit codes: 2 is for input the doctor cannot read, not for a model it cannot size; trial 11)
    asm = assemble_config(config, overrides, opts, replace(MODES["estimate"], scan_data=scan_data))
    findings = judge("estimate", asm.facts, asm.sources, opts, texts={asm.doc.path: asm.doc.text}, live=asm.live())
    sections: dict[str, Any] = {"model": asm.model_section()} if asm.run is not None else {}
    if asm.memory is not None:
        d = asm.memory.details
        sections["breakdown"] = {"moments_gib": d.get("moments_gib"), "phase": asm.memory.phase,
                                 "first_oom": d.get("first_oom"), "params": d.get("params"),
                                 "tokens_per_micro_batch": d.get("tokens_per_micro_batch"),
                                 "token_budget": d.get("token_budget")}
    if sweeps:
        axes = [parse_sweep(s) for s in sweeps]
        points = 1
        for _, vals in axes:
            points *= len(vals)
        if points > MAX_SWEEP_POINTS:
            raise InputError(f"--sweep grid has {points} points, more than {MAX_SWEEP_POINTS}", file="<command line>")
        rows = []
        for combo in itertools.product(*[vals for _, vals in axes]):
            ov = tuple(overrides) + tuple(f"{k}={v}" for (k, _), v in zip(axes, combo))
            m = assemble_config(config, ov, opts, replace(MODES["estimate"], assume=False), hw=asm.hw).memory
            rows.append({**{k: parse_override(f"{k}={v}")[1] for (k, _), v in zip(axes, combo)},
                         "total_gib": None if m is None else round(m.total, 2),
                         "peak_allocated_gib": None if m is None else round(m.peak_allocated, 2),
                         "host_gib": None if m is None else round(m.host, 2),
                         "fits": None if m is None else m.fits})
        run = asm.run
        # ZeRO-3 and FSDP refuse a PTQ checkpoint (LF 0.9.5 model_utils/quantization.py:100-104): no hint toward them
        shardable = run is None or not (run.ptq_method and not run.ptq_dequantized)
        sections["sweep"] = {"keys": [k for k, _ in axes], "rows": rows,
                             "capacity_gib": asm.hw.capacity_gib if asm.hw else None, "zero3_allowed": shardable}
    return Report(command="estimate", inputs=asm.inputs(), findings=tuple(findings), run=asm.run_summary(),
                  hardware=asm.hw, memory=asm.memory, sections=sections, notes=tuple(asm.notes),
                  assumptions=tuple(asm.assumptions))
