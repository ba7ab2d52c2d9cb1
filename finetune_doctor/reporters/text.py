"""Text reporter: the report for people, drawn with rich into a string that the CLI prints.

Layout, top to bottom: the command and its inputs; one line summarising the run as LLaMA-Factory will
execute it; the GPUs; the per-GPU memory table (when memory was estimated); the timeline of a crashed or
finished run (postmortem); the findings grouped by severity, each with its fix (edits ``key: old → new``,
memory effect, cost, the other ranked remedies, the probe's confirmation); every ``report.sections`` entry;
the notes; and a closing count ``N errors, N warnings, N info``.

Sections are drawn by ``finetune_doctor.reporters.sections.<key>.render(data)`` when that module exists. Its
contract: take the section's data, return a string (printed as is, no markup), a rich renderable, or an
iterable of those. A key without a module is shown as a generic key/value listing.

Colour only when it will reach a terminal: ``NO_COLOR`` (any non-empty value, no-color.org) turns it off,
``FORCE_COLOR`` (any non-empty value, as rich reads it) turns it on, otherwise ``sys.stdout.isatty()``
decides. rich is imported inside `TextReporter.render`, so importing this module stays cheap.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any, Iterable

from finetune_doctor.reporters import display_path, summary_line
from finetune_doctor.reporters._source import SourceIndex, edit_text
from finetune_doctor.types import SEVERITIES, Finding, Fix, Report

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console, RenderableType

DEFAULT_WIDTH = 100
MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime")
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
SEVERITY_HEADING = {"error": "Errors", "warning": "Warnings", "info": "Info"}
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "fp8"}
TIMELINE_MAX = 40


def want_color(stream: Any = None) -> bool:
    """Whether output to `stream` (default stdout) should be coloured: NO_COLOR, then FORCE_COLOR, then TTY."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class TextReporter:
    """Human-readable report. `color` None decides by `want_color`; `width` None uses the terminal's
    width on a TTY and 100 columns otherwise (so files and pipes get stable lines)."""

    def __init__(self, color: bool | None = None, width: int | None = None):
        self.color = want_color() if color is None else bool(color)
        if width is None:
            width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if self.color else DEFAULT_WIDTH
        self.width = max(40, int(width))

    def render(self, report: Report) -> str:
        console = make_console(self.color, self.width)
        _Drawer(console, report).draw()
        return strip_trailing(console.file.getvalue())  # type: ignore[attr-defined]


def make_console(color: bool, width: int) -> "Console":
    """A rich Console that writes into a StringIO, with colour exactly when `color` says so."""
    from io import StringIO

    from rich.console import Console

    return Console(file=StringIO(), width=width, force_terminal=color, no_color=not color,
                   color_system="auto" if color else None, highlight=False, emoji=False,
                   soft_wrap=False, legacy_windows=False, force_jupyter=False, force_interactive=False)


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


def strip_trailing(text: str) -> str:
    """Drop the blanks rich pads lines with (also before a closing colour code), so output diffs cleanly."""
    return _TRAILING.sub(r"\1", text)


def gib(x: float | None, nd: int = 2) -> str:
    return "?" if x is None else f"{x:.{nd}f}"


class _Drawer:
    def __init__(self, console: "Console", report: Report):
        from rich.text import Text

        self.c = console
        self.r = report
        self.Text = Text
        self.sources = SourceIndex()

    # -- pieces ---------------------------------------------------------------------------------------
    def heading(self, text: str, style: str = "bold") -> None:
        self.c.print()
        self.c.print(self.Text(text, style=style))

    def indent(self, renderable: "RenderableType", level: int = 1) -> None:
        from rich.padding import Padding

        self.c.print(Padding(renderable, (0, 0, 0, 2 * level)))

    def table(self, *columns: tuple[str, str]) -> Any:
        from rich import box
        from rich.table import Table

        t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, header_style="bold", footer_style="bold")
        for name, justify in columns:
            t.add_column(name, justify=justify)  # type: ignore[arg-type]
        return t

    # -- the report -----------------------------------------------------------------------------------
    def draw(self) -> None:
        self.header()
        self.run_line()
        self.hardware_line()
        self.memory()
        self.timeline()
        self.findings()
        self.sections()
        self.notes()
        self.c.print()
        counts = self.r.summary()
        worst = self.r.worst()
        self.c.print(self.Text(summary_line(counts), style=SEVERITY_STYLE.get(worst or "", "green")))

    def header(self) -> None:
        T = self.Text
        self.c.print(T.assemble(("doctor ", "bold"), (self.r.command, "bold")))
        for key, value in (self.r.inputs or {}).items():
            if value is None or value == [] or value == ():
                continue
            if isinstance(value, (list, tuple)):
                value = ", ".join(str(display_path(str(v))) for v in value)
            elif isinstance(value, (str, os.PathLike)):
                value = display_path(os.fspath(value))
            self.indent(T(f"{key}: {value}"))

    def run_line(self) -> None:
        run = self.r.run
        if not run:
            return
        parts = []
        model = run.get("model")
        if model:
            pb = run.get("params_b")
            parts.append(f"{model} ({pb:.2f}B params)" if isinstance(pb, (int, float)) else str(model))
        kind = "/".join(str(run[k]) for k in ("stage", "finetuning_type") if run.get(k))
        if kind:
            parts.append(kind)
        prec = run.get("precision") or {}
        if any(prec.get(k) for k in ("weights", "trainable", "compute")):
            parts.append(", ".join(f"{k} {DTYPE_SHORT.get(str(prec[k]), prec[k])}"
                                   for k in ("weights", "trainable", "compute") if prec.get(k)))
        zero = run.get("zero_stage")
        if zero is not None:
            off = run.get("offload") or {}
            offs = [f"{k}→{v}" for k, v in off.items() if v]
            parts.append(f"ZeRO-{zero}" + (f" (offload {', '.join(offs)})" if offs else ""))
        if run.get("world_size") is not None:
            parts.append(f"world size {run['world_size']}")
        mb, ga = run.get("micro_batch"), run.get("grad_accum")
        if mb is not None or ga is not None:
            parts.append(f"micro batch {mb if mb is not None else '?'} × grad accum {ga if ga is not None else '?'}")
        if run.get("seq_len") is not None:
            parts.append(f"seq len {run['seq_len']}")
        gc = run.get("gradient_checkpointing")
        if gc is not None:
            parts.append(f"GC {'on' if gc else 'off'}")
        if run.get("attention"):
            parts.append(f"attention {run['attention']}")
        self.c.print(self.Text.assemble(("run: ", "bold"), " · ".join(parts)))

    def hardware_line(self) -> None:
        hw = self.r.hardware
        if hw is None:
            return
        if not hw.gpu:
            self.c.print(self.Text.assemble(("gpus: ", "bold"), "unknown (pass --gpu, e.g. --gpu 8xA100-80GB)"))
            return
        parts = [f"{hw.num_gpus} × {hw.gpu}" if hw.num_gpus else hw.gpu]
        if hw.nnodes and hw.nnodes > 1:
            parts.append(f"{hw.nnodes} nodes")
        if hw.capacity_gib is not None:
            parts.append(f"{gib(hw.capacity_gib)} GiB usable each")
        if hw.bf16 is not None:
            parts.append(f"bf16 {'yes' if hw.bf16 else 'no'}")
        parts.append(f"from {hw.source}")
        self.c.print(self.Text.assemble(("gpus: ", "bold"), " · ".join(parts)))

    def memory(self) -> None:
        mem = self.r.memory
        if mem is None:
            return
        cap = self.r.hardware.capacity_gib if self.r.hardware else None
        self.heading(f"Memory per GPU (busiest rank, {mem.method})")
        t = self.table(("", "left"), ("GiB", "right"), ("% of capacity", "right"))

        def pct(v: float | None) -> str:
            return f"{100.0 * v / cap:.1f}%" if (cap and v is not None) else "—"

        extra = [k for k in mem.per_gpu if k not in MEMORY_TERMS and k != "total"]
        for term in (*MEMORY_TERMS, *extra):
            v = mem.per_gpu.get(term)
            t.add_row(term, gib(v), pct(v))
        total = mem.per_gpu.get("total")
        over = cap is not None and total is not None and total > cap
        style = "bold red" if over else "bold"
        t.show_footer = True
        for col, text in zip(t.columns, ("total", gib(total), pct(total))):
            col.footer = self.Text(text, style=style if col.header != "" else "bold")
        self.indent(t)
        fits = {True: ("yes", "green"), False: ("NO", "bold red"), None: ("unknown", "")}[mem.fits]
        T = self.Text
        line = T.assemble(
            "capacity ", (f"{gib(cap)} GiB" if cap is not None else "unknown"),
            " · headroom ", (f"{gib(mem.headroom)} GiB" if mem.headroom is not None else "unknown"),
            " · fits ", fits,
            f" · peak allocated {gib(mem.peak_allocated)} GiB",
            f" · host RAM per node {gib(mem.host)} GiB",
            f" · method {mem.method}",
        )
        self.indent(line)

    def timeline(self) -> None:
        events = self.r.timeline
        if not events:
            return
        self.heading("Timeline")
        t = self.table(("step", "right"), ("event", "left"), ("detail", "left"), ("source", "left"))
        for e in events[:TIMELINE_MAX]:
            style = "red" if e.kind in ("nan", "oom", "killed", "nccl_timeout") else ""
            t.add_row("—" if e.step is None else str(e.step), self.Text(e.kind, style=style), e.detail,
                      _source_ref(e.source))
        self.indent(t)
        if len(events) > TIMELINE_MAX:
            self.indent(self.Text(f"… {len(events) - TIMELINE_MAX} more events (see --format json)"))

    def findings(self) -> None:
        if not self.r.findings:
            self.heading("No findings.", "green")
            return
        for sev in SEVERITIES:
            group = sorted((f for f in self.r.findings if f.severity == sev), key=Finding.sort_key)
            if not group:
                continue
            self.heading(f"{SEVERITY_HEADING[sev]} ({len(group)})", SEVERITY_STYLE[sev])
            for f in group:
                self.finding(f)
        others = [f for f in self.r.findings if f.severity not in SEVERITIES]
        for f in others:
            self.finding(f)

    def finding(self, f: Finding) -> None:
        T = self.Text
        where = _where(f)
        self.c.print(T.assemble((f.code, SEVERITY_STYLE.get(f.severity, "bold")), " ", (f.name, "bold"),
                                ("  " + where if where else "", "dim")))
        self.indent(T(f.message))
        if f.fix is not None:
            self.fix(f.fix)

    def fix(self, fix: Fix, level: int = 1) -> None:
        T = self.Text
        self.indent(T.assemble(("fix", "bold green"), f" ({fix.safety}): ", fix.title), level)
        for e in fix.edits:
            self.indent(T(edit_text(e, self.sources)), level + 1)
        for line in _fix_facts(fix):
            self.indent(T(line), level + 1)
        if fix.alternatives:
            self.indent(T("alternatives:", style="bold"), level + 1)
            for i, alt in enumerate(fix.alternatives, start=2):
                edits = "; ".join(edit_text(e, self.sources) for e in alt.edits)
                facts = " · ".join(_fix_facts(alt))
                body = f"{i}. {alt.title} ({alt.safety})" + (f": {edits}" if edits else "")
                self.indent(T(body + (f" · {facts}" if facts else "")), level + 2)

    def sections(self) -> None:
        for key, data in self.r.sections.items():
            self.heading(key.replace("_", " ").capitalize())
            renderer = _section_renderer(key)
            if renderer is None:
                for item in _generic(data, self.Text):
                    self.indent(item)
                continue
            out = renderer(data)
            items: Iterable[Any] = [out] if (isinstance(out, str) or not isinstance(out, Iterable)) else out
            for item in items:
                if item is None:
                    continue
                self.indent(self.Text(item) if isinstance(item, str) else item)

    def notes(self) -> None:
        if not self.r.notes:
            return
        self.heading("Notes")
        for n in self.r.notes:
            self.indent(self.Text(f"- {n}"))


def _where(f: Finding) -> str:
    loc = f.location
    if not loc.file:
        return ""
    path = display_path(loc.file) or loc.file
    return f"{path}:{loc.line}" if loc.line else path


def _source_ref(source: str | None) -> str:
    """``/abs/run/trainer_log.jsonl:120`` -> path shown relative to the working directory when below it."""
    if not source:
        return ""
    path, sep, line = source.rpartition(":")
    if sep and line.isdigit() and path:
        return f"{display_path(path)}:{line}"
    return display_path(source) or source


def _fix_facts(fix: Fix) -> list[str]:
    """Effect, cost and confirmation of a fix, one short line each."""
    out = []
    eff = dict(fix.effect or {})
    before, after = eff.pop("total_gib_before", None), eff.pop("total_gib_after", None)
    if before is not None or after is not None:
        out.append(f"effect: total {gib(before, 1)} → {gib(after, 1)} GiB")
    for k, v in eff.items():
        out.append(f"effect: {k} {v:.2f}" if isinstance(v, float) else f"effect: {k} {v}")
    if fix.cost:
        out.append(f"cost: {fix.cost}")
    c = fix.confirmed
    if c is not None:
        if c.by:
            line = f"confirmed by {c.by} probe"
            if c.before_gib is not None or c.after_gib is not None:
                line += f": {gib(c.before_gib, 1)} → {gib(c.after_gib, 1)} GiB"
            if c.nan_free_steps is not None:
                line += f" · {c.nan_free_steps} NaN-free steps"
        else:
            line = "not confirmed by a probe"
        if c.note:
            line += f" ({c.note})"
        out.append(line)
    return out


def _section_renderer(key: str) -> Any:
    """``finetune_doctor.reporters.sections.<key>.render`` when that module exists, else None."""
    if not key.isidentifier():
        return None
    name = f"finetune_doctor.reporters.sections.{key}"
    try:
        mod = import_module(name)
    except ModuleNotFoundError as err:
        if err.name == name:
            return None
        raise  # the section module exists but is broken: show the bug, do not hide it
    fn = getattr(mod, "render", None)
    return fn if callable(fn) else None


def _scalar(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}" if (abs(v) >= 1e5 or (v != 0 and abs(v) < 1e-3)) else f"{v:.2f}".rstrip("0").rstrip(".")
    return str(v)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _generic(data: Any, Text: Any, depth: int = 0) -> list[Any]:
    """A key/value view of arbitrary section data: scalars inline, lists of flat records as a table."""
    from rich import box
    from rich.padding import Padding
    from rich.table import Table

    pad = 2 * depth
    out: list[Any] = []
    if hasattr(data, "as_dict") and callable(data.as_dict):
        data = data.as_dict()
    if isinstance(data, dict):
        for k, v in data.items():
            if hasattr(v, "as_dict") and callable(v.as_dict):
                v = v.as_dict()
            if _is_scalar(v):
                out.append(Padding(Text(f"{k}: {_scalar(v)}"), (0, 0, 0, pad)))
            elif isinstance(v, (list, tuple)) and all(_is_scalar(x) for x in v):
                out.append(Padding(Text(f"{k}: {', '.join(_scalar(x) for x in v) or '—'}"), (0, 0, 0, pad)))
            else:
                out.append(Padding(Text(f"{k}:"), (0, 0, 0, pad)))
                out.extend(_generic(v, Text, depth + 1))
        return out
    if isinstance(data, (list, tuple)):
        rows = [r.as_dict() if hasattr(r, "as_dict") else r for r in data]
        if rows and all(isinstance(r, dict) and all(_is_scalar(x) for x in r.values()) for r in rows):
            cols: list[str] = []
            for r in rows:
                cols.extend(k for k in r if k not in cols)
            t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
            for col in cols:
                t.add_column(str(col))
            for r in rows:
                t.add_row(*(_scalar(r.get(col)) for col in cols))
            out.append(Padding(t, (0, 0, 0, pad)))
            return out
        for r in rows:
            if _is_scalar(r):
                out.append(Padding(Text(f"- {_scalar(r)}"), (0, 0, 0, pad)))
            else:
                out.extend(_generic(r, Text, depth))
        return out
    out.append(Padding(Text(_scalar(data)), (0, 0, 0, pad)))
    return out
