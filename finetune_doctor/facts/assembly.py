"""`Assembly`: what was read and computed for one config (the fact namespaces, the source files, the live objects
remedy planners and probes re-run the estimator with), and `run_after`, the run re-resolved after a remedy's edits.
Built by facts/config.py `assemble_config` for every command; its input families fill it: facts/dsread.py (the
DeepSpeed JSON), facts/launchread.py (the launch line and accelerate config), facts/verdict.py (the assumptions folded
into the verdict). Split from facts/config.py at the 800-line cap (issue #22).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from finetune_doctor.facts import ds as ds_facts
from finetune_doctor.readers.config.yamlcfg import ConfigDoc
from finetune_doctor.run import resolve_run
from finetune_doctor.types import Assumption, Hardware, MemoryEstimate, SourceDoc


@dataclass
class Assembly:
    """What was read and computed for one config: the fact namespaces, the source files, the live objects.

    `facts` maps namespace names to plain values (facts/__init__.py); `sources` maps a role (config, override,
    deepspeed, model) to the `SourceDoc` read for it. The live objects (`run`, `ds`, `counts`) are what remedy
    planners and probes re-run the estimator with; they never reach a rule.
    """

    doc: ConfigDoc
    facts: dict[str, Any]
    sources: dict[str, SourceDoc]
    run: Any = None                # run.Run, when the model is known
    hw: Hardware | None = None
    memory: MemoryEstimate | None = None
    ds: Any = None                 # readers.deepspeed.dsconfig.DSConfig
    ds_stock: bool = False
    counts: Any = None             # analyzers.memory.params.ParamCounts
    launch: Any = None             # run.engines.LaunchInputs: accelerate config and launch command line
    notes: list[str] = field(default_factory=list)
    stack: dict[str, str | None] = field(default_factory=dict)   # the training stack the run was resolved for
    stack_sources: tuple[tuple[str, str, str], ...] = ()          # (package, version, where it came from)
    nnodes: int | None = None
    assumptions: list[Assumption] = field(default_factory=list)   # values used but not read (Report.assumptions)
    context: Any = None            # readers.config.context.MachineContext: the training machine, captured (--context)
    context_use: str | None = None   # how it was taken, when the report must say so (facts/machine.py how_used)
    hw_worst: Hardware | None = None   # the smallest card a bare --gpu may mean, when that decides the verdict
    ds_assumed: tuple[str, str] | None = None   # (the DeepSpeed path not here, the stock file used instead)
    kind: str = "train"            # readers/config/lfkind.py: which LF command reads the config
    release: Any = None            # readers/lfrelease.Release the keys were judged for
    tf_assumed: dict[str, str] | None = None   # transformers assumed from the LF release's range (facts/stackrange.py)
    kind_section: dict[str, Any] | None = None                    # export / chat estimates (facts/kinds.py)
    doc_read: Any = None           # the config as read (a v1 config before its adoption as v0 keys)
    v1_world: int | None = None    # the process count v1's batch layout was judged for (facts/kinds.py v1_batch)
    host_ram_gib: float | None = None   # --host-ram when no GPUs are known (a CPU merge is judged by it alone)
    _after: dict[tuple, Any] = field(default_factory=dict, repr=False)

    def live(self) -> dict[str, Any]:
        """The live objects remedy planners need (engine/planners.py): `run_after` re-resolves the run for edits."""
        mem = self.memory
        return {"run": self.run, "hw": self.hw, "doc": self.doc, "ds": self.ds, "counts": self.counts,
                "ds_stock": self.ds_stock, "ds_assumed": self.ds_assumed, "run_after": self.run_after,
                "hw_worst": self.hw_worst,
                # the report's p_oom is a mixture over the open assumptions (`mixed`): a remedy's before/after
                # is weighed over the same components, so the fix and the memory block give one number
                "p_oom_components": mem.details.get("p_oom_components") if mem is not None else None,
                "p_oom_full_components": mem.details.get("p_oom_full_components") if mem is not None else None,
                "mem_total": mem.total if mem is not None else None}

    def run_after(self, edits: Iterable[tuple[str, str, Any, bool]]) -> Any:
        """The Run LLaMA-Factory would execute after `edits` — (role, key, value, delete) with role ``config`` or
        ``deepspeed`` — resolved again by run.resolve_run, so a remedy's effect follows LLaMA-Factory's own rules
        (precision, ZeRO-3's dtypes, quantization) rather than a copy of them.

        Config edits apply to the merged YAML values; a new ``deepspeed`` path is read (LLaMA-Factory's stock file
        when it is not on disk here); DeepSpeed edits apply to the resolved JSON. Results are cached per edit set.
        Raises InputError when a new DeepSpeed path cannot be read.
        """
        key = tuple((r, k, repr(v), d) for r, k, v, d in edits)
        if key in self._after:
            return self._after[key]
        values = copy.deepcopy(dict(self.doc.values))
        ds = self.ds
        ds_resolved = copy.deepcopy(ds.resolved) if ds is not None else None
        reload_ds = False
        for role, k, v, delete in edits:
            if role == "deepspeed":
                if ds_resolved is not None:
                    _set_dotted(ds_resolved, k, v, delete)
            else:
                _set_dotted(values, k, v, delete)
                reload_ds |= k == "deepspeed"
        if reload_ds:
            ds, _ = ds_facts.load(values, self.doc.path, None, self.hw, self.run.arch.hidden_size, [])
        elif ds is not None and ds_resolved is not None:
            ds = replace(ds, resolved=ds_resolved)
        out = resolve_run(values, self.run.arch, self.hw, ds, nnodes=self.nnodes, stack=self.stack,
                          stack_sources=self.stack_sources, launch=self.launch)
        if not self.run.media_inputs:   # the data read here holds no media (text_only): no edit brings any
            out = out.with_(media_inputs=False)
        self._after[key] = out
        return out

    def run_summary(self) -> dict[str, Any] | None:
        """The JSON report's ``run`` object (DESIGN.md), None without a resolved model."""
        if self.run is None:
            return None
        return self.run.summary(params_b=self.counts.base / 1e9 if self.counts else None)

    def model_section(self) -> dict[str, Any]:
        """The report's ``model`` object: where the architecture came from (`ModelArch.source_kind`: local,
        model-config, hf-cache, modelscope-cache, openmind-cache, catalog, hub), its config file or address, and how
        it matched; empty without a resolved model."""
        if self.run is None:
            return {}
        a = self.run.arch
        cfg = self.sources["model"].path if "model" in self.sources else (a.source or None)
        return {"name": self.run.model_name, "source": getattr(a, "source_kind", None) or "catalog",
                "config": cfg, "model_type": a.model_type, "notes": a.notes or None}

    def inputs(self, **extra: Any) -> dict[str, Any]:
        """The JSON report's ``inputs`` object."""
        ds, stock = None, {}
        if self.ds is not None and self.ds_assumed:
            # not on this machine and not a stock name: a stock file stands in (the deepspeed-config assumption)
            ds, stock = self.ds_assumed[0], {"deepspeed_stand_in": self.ds_assumed[1]}
        elif self.ds is not None and self.ds_stock:
            # not on disk here: the file the YAML names, read from LLaMA-Factory's stock copy of it
            ds, stock = str(self.doc.values.get("deepspeed") or self.ds.path), {"deepspeed_stock": True}
        elif self.ds is not None and getattr(self.ds, "path", None):
            ds = self.sources["deepspeed"].path if "deepspeed" in self.sources else str(self.ds.path)
        ctx = {"context": self.context.path} if self.context is not None else {}
        if self.context is not None and self.context_use:
            ctx["context_use"] = self.context_use
        return {"config": self.doc.path, "deepspeed": ds, **stock, "run_dir": None, **ctx, **extra}


def _set_dotted(d: dict[str, Any], key: str, value: Any, delete: bool) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        nxt = d.get(p)
        if not isinstance(nxt, dict):
            nxt = d[p] = {}
        d = nxt
    if delete:
        d.pop(parts[-1], None)
    else:
        d[parts[-1]] = value
