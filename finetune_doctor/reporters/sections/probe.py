"""Text rendering of ``sections["probe"]`` (pipeline/probe.py `section_data`).

A header line (how the run was probed and where its peak is), a table of the peak's tensor bytes by category in
GiB (simulate) or of each rank's measured allocated / reserved / device memory (gpu), the allocator replay of a
simulation (probes/replayed.py: peak reserved, fragmentation, verdict, PyTorch's OOM message on a card it would
not fit, the same with expandable segments), a table of the fixes the probe confirmed (before → after GiB per
GPU), then the probe's notes (what was modelled rather than run).
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, Iterator, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from finetune_doctor.reporters.safe import safe_str

_ORDER = ("weights", "buffers", "gradients", "optimizer", "activations", "logits", "temp", "inputs")


@contextlib.contextmanager
def progress(stream: TextIO | None = None) -> Iterator[Callable[[str], None] | None]:
    """What a running probe is doing, on one transient status line of `stream` (default stderr): yields a
    callback ``update(message)`` that shows the message with the seconds since the probe started; the line is
    erased when the block ends, before any report is printed. Yields None, and writes nothing, when `stream` is
    not a terminal (output redirected, CI, a JSON or SARIF report piped on).

    The line is redrawn only when a message comes (rich ``Live`` with ``auto_refresh=False``): a refresh thread
    could hold the terminal's lock at the moment the simulate probe forks (probes/forked.py), and the child would
    inherit the lock held."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        yield None
        return
    console = Console(file=stream, highlight=False)
    t0 = time.monotonic()
    with Live(Text(""), console=console, auto_refresh=False, transient=True, redirect_stdout=False,
              redirect_stderr=False) as live:
        def update(message: str) -> None:
            live.update(Text(f"probe: {safe_str(message)} · {time.monotonic() - t0:.0f} s", style="dim"),
                        refresh=True)

        yield update


def _g(x: Any, nd: int = 2) -> str:
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, (int, float)) else str(x))


def render(data: dict[str, Any]) -> Any:
    """A rich renderable for the probe section; tolerates missing keys (older or partial payloads)."""
    res = data.get("result") or {}
    parts: list[Any] = []
    by = data.get("by") or "?"
    head = f"{by}: {data.get('spec') or ''}".rstrip(": ")
    if by == "simulate":
        depth = res.get("depth") or []
        how = (f"{depth[0]} and {depth[1]} layers extrapolated to {res.get('num_layers')}" if len(depth) == 2
               else f"{res.get('num_layers')} layers")
        head += f" · {how} · {res.get('steps')} steps · {_g(res.get('wall_s'), 1)} s"
        if res.get("world_size", 1) > 1:
            head += f" · rank {res.get('rank', 0)} of {res.get('world_size')}"
    parts.append(Text(head, style="bold"))
    if by == "simulate":
        t = Table(title=f"tensor peak {_g(res.get('peak_allocated_gib'))} GiB at {res.get('segment', '?')}",
                  title_justify="left", pad_edge=False)
        t.add_column("category")
        t.add_column("GiB", justify="right")
        t.add_column("of which analytic", justify="right")
        cats = res.get("by_category_gib") or {}
        ana = res.get("analytic_gib") or {}
        for c in _ORDER:
            if cats.get(c) or ana.get(c):
                t.add_row(c, _g(cats.get(c)), _g(ana.get(c)) if ana.get(c) else "")
        t.add_row(Text("total per GPU", style="bold"), Text(_g(data.get("total_gib")), style="bold"), "")
        parts.append(t)
        ranks = res.get("per_rank_gib") or {}
        if len(ranks) > 1:
            parts.append(Text("tensor peak per rank: " + ", ".join(f"rank {k} {_g(v)} GiB" for k, v in ranks.items())))
    elif by == "gpu":
        t = Table(title="measured per rank (GiB)", title_justify="left", pad_edge=False)
        for col in ("rank", "max allocated", "max reserved", "device used"):
            t.add_column(col, justify="right")
        alloc = res.get("peak_allocated_gib") or []
        resv = res.get("peak_reserved_gib") or []
        used = res.get("device_used_gib") or []
        for i, a in enumerate(alloc):
            t.add_row(str(i), _g(a), _g(resv[i] if i < len(resv) else None), _g(used[i] if i < len(used) else None))
        parts.append(t)
        steps = res.get("steps")
        ok = res.get("nan_free_steps")
        style = "green" if res.get("finite") else "red"
        parts.append(Text(f"{ok}/{steps} steps with finite loss and gradient norm", style=style))
        if res.get("error"):
            parts.append(Text(str(res["error"]), style="red"))
    if data.get("replay"):
        parts.extend(_replay(data["replay"]))
    fixes = data.get("fixes") or []
    if fixes:
        t = Table(title="fixes confirmed", title_justify="left", pad_edge=False)
        t.add_column("finding")
        t.add_column("fix", overflow="fold")
        t.add_column("by")
        t.add_column("before → after GiB", justify="right")
        for f in fixes:
            ba = "-" if f.get("before_gib") is None else f"{_g(f.get('before_gib'), 1)} → {_g(f.get('after_gib'), 1)}"
            t.add_row(f"{f.get('code', '')} {f.get('name', '')}".strip(), f.get("title") or "", f.get("by") or "-",
                      ba)
        parts.append(t)
    for n in res.get("notes") or []:
        parts.append(Text(f"· {n}", style="dim"))
    return Group(*parts)


def _pct(p: Any) -> str:
    if not isinstance(p, (int, float)):
        return "unknown"
    return "< 1 %" if p < 0.01 else ("> 99 %" if p > 0.99 else f"{100 * p:.0f} %")


def _replay_line(r: dict[str, Any], label: str) -> Text:
    frag = r.get("fragmentation_share")
    return Text(f"{label}: peak reserved {_g(r.get('peak_reserved_gib'))} GiB (allocated "
                f"{_g(r.get('peak_allocated_gib'))}, reserved but unallocated {_g(r.get('fragmentation_gib'))} GiB"
                f"{'' if frag is None else f' = {100 * frag:.1f} %'}) at {r.get('peak_segment', '?')} · total per GPU "
                f"{_g(r.get('total_gib'))} GiB" + ("" if r.get("fits") is None else
                                                   (" · fits" if r.get("fits") else " · does not fit")))


def _replay(r: dict[str, Any]) -> list[Any]:
    """The allocator replay's lines (payload: confirm.py `replay_data`)."""
    conf = r.get("alloc_conf") or "defaults"
    out: list[Any] = [_replay_line(r, f"allocator replay ({conf})")]
    if r.get("verdict"):
        lo, hi = (r.get("interval_gib") or [None, None])[:2]
        out.append(Text(f"verdict {r['verdict']} · probability of OOM {_pct(r.get('p_oom'))} · 90 % interval "
                        f"{_g(lo)}–{_g(hi)} GiB"))
    if r.get("oom"):
        out.append(Text("on this card PyTorch would stop with: " + str(r["oom"].get("message", "")), style="red"))
    alt = r.get("with_expandable_segments")
    if alt:
        out.append(_replay_line(alt, "with expandable_segments:True"))
    return out
