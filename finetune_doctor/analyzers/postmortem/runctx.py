"""What the config side says about a run (the fact namespaces of facts/config.py), with the facts its logs
state as the fallback: the context every postmortem detector and cause asks."""

from __future__ import annotations

import math
from typing import Any

from finetune_doctor.arch import BF16_FAMILIES
from finetune_doctor.evidence import Evidence


class RunContext:
    """What the config side says (the fact namespaces facts/config.py `assemble_config` builds), with log facts as
    fallback."""

    def __init__(self, facts: dict[str, Any] | None, ev: Evidence):
        f = facts or {}
        self.cfg = f.get("cfg") or {}
        self.run = f.get("run") or {}
        self.model = f.get("model") or {}
        self.hw = f.get("hw") or {}
        self.mem = f.get("mem") or {}
        self.ds = f.get("ds") or {}
        self.lint = f.get("lint") or {}
        self.log: dict[str, Any] = {}
        self.log_at: dict[str, dict[str, Any]] = {}
        self.given_versions: dict[str, tuple[str, str]] = {}   # analyze's `versions` (the flags)
        # what a short report's words state of the set-up (readers/runlogs/statedwords.py): the first file's
        self.stated: dict[str, Any] = next((fe.stated for fe in ev.files if fe.stated), {})
        for fe in ev.files:
            for fact in fe.facts:
                if fact.name not in self.log:
                    self.log[fact.name] = fact.value
                    self.log_at[fact.name] = {"file": fact.file, "line": fact.line, "column": None, "key": None}

    def finetuning_type(self) -> str:
        return str(self.run.get("finetuning_type") or self.cfg.get("finetuning_type") or "lora")

    def method(self) -> tuple[str | None, str | None]:
        """(finetuning type, where it was read) — the config's, else the trainable share the log states (PEFT's
        "trainable params: T || all params: A": below 20 % an adapter, above 90 % a full fine-tune), else
        (None, None): method-dependent advice must then ask for the config or state its assumption."""
        ft = self.run.get("finetuning_type") or self.cfg.get("finetuning_type")
        if ft:
            return str(ft), "config"
        t, a = self.log.get("trainable_params"), self.log.get("all_params")
        if isinstance(t, int) and isinstance(a, int) and a > 0 and t > 0:
            share = t / a
            if share < 0.2:
                return "lora", f"the log's trainable share {100 * share:.2f} % (an adapter)"
            if share > 0.9:
                return "full", f"the log's trainable share {100 * share:.0f} % (a full fine-tune)"
        return None, None

    def fp16(self) -> tuple[bool, str | None]:
        if self.cfg.get("fp16") is True:
            return True, "config (fp16: true)"
        if self.run.get("compute_dtype") == "float16":
            return True, "resolved run (fp16 compute)"
        if self.log.get("compute_dtype") == "float16":
            return True, "log (compute dtype: torch.float16)"
        if self.log.get("fp16_enabled") is True or self.ds.get("fp16_enabled") is True:
            return True, "DeepSpeed fp16 enabled"
        return False, None

    def world(self) -> tuple[int | None, str | None]:
        if isinstance(self.log.get("world_size"), int) and self.log["world_size"] > 0:
            return self.log["world_size"], "log"
        if self.hw.get("num_gpus"):
            return int(self.hw["num_gpus"]), "--gpu/NVML"
        return None, None

    def zero_stage(self) -> int | None:
        for v in (self.log.get("zero_stage"), self.ds.get("zero_stage"), self.run.get("zero_stage") if
                  self.run.get("deepspeed") else None):
            if isinstance(v, int):
                return v
        return None

    def overlap_comm(self) -> bool | None:
        if isinstance(self.log.get("overlap_comm"), bool):
            return self.log["overlap_comm"]
        if isinstance(self.ds.get("overlap_comm"), bool):
            return self.ds["overlap_comm"]
        return None

    def params(self) -> tuple[float | None, str | None]:
        if self.model.get("params"):
            return float(self.model["params"]), f"model {self.model.get('name')}"
        if self.log.get("all_params"):
            return float(self.log["all_params"]), "log (all params)"
        e = self.log.get("ds_params_elems")
        if isinstance(e, str) and e:
            mult = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(e[-1], 1)
            try:
                return float(e.rstrip("KMBT")) * mult, "log (zero.Init num_elems)"
            except ValueError:
                pass
        return None, None

    def trainable(self) -> float | None:
        for v in (self.model.get("trainable_params"), self.log.get("trainable_params")):
            if v:
                return float(v)
        return None

    def model_shape(self) -> dict[str, Any]:
        """vocab_size, hidden_size and name of the model as the config side knows them (None where not)."""
        return {"vocab_size": self.vocab(), "hidden_size": self.model.get("hidden_size"),
                "name": self.model.get("name") or self.cfg.get("model_name_or_path")}

    def vocab(self) -> int | None:
        v = self.model.get("vocab_size")
        return int(v) if v else None

    def model_bf16(self) -> tuple[bool | None, str | None]:
        dt, mt = self.model.get("dtype"), self.model.get("model_type")
        name = self.model.get("name")
        given = self.cfg.get("model_name_or_path")
        if isinstance(given, str) and given and given != name:
            name = f"{given} ({name})"   # as the config names it; the catalog entry it was matched to in brackets
        if dt == "bfloat16":
            return True, f"{name} is stored in bf16"
        if mt in BF16_FAMILIES:
            return True, f"{name} ({mt}) belongs to a family pre-trained in bf16"
        if dt in ("float16", "float32"):
            return False, None
        return None, None

    def logging_steps(self) -> int | None:
        v = self.cfg.get("logging_steps") or self.log.get("logging_steps")
        ok = isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))   # 1e400 reads as inf: no count
        return int(v) if ok and not isinstance(v, bool) and v > 0 else None
