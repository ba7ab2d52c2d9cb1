"""What the headline probability of OOM is averaged over, in words the report prints beside it (trial 13: a run
sized at 90.2 GiB on a 79 GiB card at its stated cutoff_len printed "21 %", the average over shorter sample lengths
whose weights it never stated).

`p_oom` over open assumptions is the mixture Σ w·p(total_i) of facts/assume.py `mixture`, the weights the
calibrated table's (analyzers/memory/uncertainty.py `assumed_weight`, `length_weights`); nothing here changes
them. This module lists them (``mixture_weights``) and takes the probability at the values as stated and assumed
(``details["p_oom_assumed"]`` / ``p_oom_model_assumed``, kept by facts/verdict.py `mixed_p_oom`).
"""

from __future__ import annotations

import re
from typing import Any

# what takes each weighed assumption's doubt away: the input that replaces it with a read value
RESOLVES = {"sample-lengths": "the data on this machine, or --context FILE",
            "torch-version": "--torch or --env",
            "launcher": "--launch FILE", "image-pixels": "the data on this machine, or --context FILE",
            "gpu-variant": "the exact card in --gpu (e.g. A100-80GB)"}


def mixture_weights(total: float, hw: Any, assumptions: list[Any], gpu_spec: str | None) -> list[dict[str, Any]]:
    """Each assumption the mixture weighs: ``{"name", "weights": [[label, weight 0-1, total GiB], ...]}``, the
    assumed value first when it keeps weight; the weights of one assumption sum to 1 (they multiply across
    assumptions, facts/assume.py `mixture`). Empty when nothing is weighed."""
    from finetune_doctor.facts.assume import mixture

    shown: list[tuple[str, list[str], list[tuple[float, float, float | None]]]] = []
    mixture(total, hw, assumptions, gpu_spec, shown=shown)
    return [{"name": name, "weights": [[lab, round(w, 3), round(total * r, 2)] for lab, (w, r, _b) in
                                       zip(labels, opts)]} for name, labels, opts in shown]


def headline_words(mem: Any, cutoff: int | None) -> str | None:
    """One line for the text report: the probability at the values as stated and assumed (every sample filling
    `cutoff` tokens when the sample lengths are weighed) and the weights the headline averages over; None when
    the headline is not a mixture."""
    d = mem.details
    mix, pa, pma = d.get("mixture_weights"), d.get("p_oom_assumed"), d.get("p_oom_model_assumed")
    if not mix or pa is None or mem.p_oom is None:
        return None
    names = [m["name"] for m in mix]
    lengths = next((m for m in mix if m["name"] == "sample-lengths"), None)
    at = (f"at cutoff_len {cutoff} (every sample filling it), the other values as assumed" if lengths and cutoff
          else "at the values as assumed")
    model = f" (memory model {_p(pma)})" if pma is not None and abs(pma - pa) >= 0.005 else ""
    parts = []
    if lengths:
        ws = [(_short(lab), w) for lab, w, _t in lengths["weights"] if w >= 0.005]
        if ws and max(w for _l, w in ws) - min(w for _l, w in ws) < 0.005:
            parts.append(f"sample lengths {' / '.join(lab for lab, _w in ws)} tokens at {_p(ws[0][1])} each")
        else:
            parts.append("sample lengths " + ", ".join(f"{lab} tokens {_p(w)}" for lab, w in ws))
    others: dict[str, list[str]] = {}
    for m in mix:
        if m is not lengths and m["weights"]:
            others.setdefault(_p(m["weights"][0][1]), []).append(m["name"])
    parts += [f"{', '.join(ns)}: the assumed value {w}" for w, ns in others.items()]
    undo = "; ".join(dict.fromkeys(RESOLVES[n] for n in names if n in RESOLVES))
    return (f"{at}: probability of OOM {_p(pa)}{model}; the headline {_p(mem.p_oom)} averages over plausible "
            f"values with the table's weights — {'; '.join(parts)}" + (f" ({undo} replace them with what is read)"
                                                                      if undo else ""))


def _short(label: str) -> str:
    s = str(label)
    m = re.search(r"(\d+) tokens", s)
    return m.group(1) if m else s


def _p(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.01 or x == 0 else "< 1 %"
