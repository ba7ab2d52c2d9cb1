"""Text rendering of ``sections["data"]`` (declared in facts/data.py): per-dataset table, histogram, worst batch.

`render(data)` returns one rich renderable; the text reporter draws it under the findings. `ScanProgress` is the
progress display `doctor data` shows on stderr while it scans (bytes of each dataset's files).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich import box
from rich.table import Table
from rich.text import Text

_BAR_WIDTH = 40


def _n(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    return f"{x:,}"


def _pct(part: int | None, whole: int | None) -> str:
    if not whole or part is None:
        return "-"
    return f"{part:,} ({100.0 * part / whole:.0f}%)" if part else "0"


def _dataset_table(data: dict[str, Any]) -> Table:
    cut = data.get("effective_cutoff") or data.get("cutoff_len")
    t = Table(title=f"Total tokens per sample (cutoff_len {_n(data.get('cutoff_len'))}"
                    + (", approximate" if data.get("approximate") else "") + ")",
              title_justify="left", pad_edge=False, box=box.SIMPLE, show_edge=False)
    t.add_column("dataset", no_wrap=True)
    t.add_column("samples", justify="right")
    for c in ("p50", "p90", "p99", "max"):
        t.add_column(c, justify="right")
    t.add_column(f">{cut}", justify="right")
    t.add_column("EOS lost", justify="right")
    t.add_column("no label", justify="right")
    t.add_column("status", no_wrap=True)
    rows = list(data.get("datasets") or [])
    for d in rows:
        tot = d.get("total") or {}
        status = d.get("status", "?")
        style = {"ok": "green", "partial": "yellow", "empty": "red", "unavailable": "dim"}.get(status, "")
        if status == "unavailable":
            t.add_row(d["name"], "-", "-", "-", "-", "-", "-", "-", "-", Text(status, style=style))
            continue
        dropped = d.get("dropped") or 0
        samples = _n(d.get("samples")) + (f" (-{dropped:,})" if dropped else "")
        t.add_row(d["name"], samples, _n(tot.get("p50")), _n(tot.get("p90")), _n(tot.get("p99")), _n(tot.get("max")),
                  _pct(d.get("truncated"), d.get("samples")), _pct(d.get("eos_lost"), d.get("samples")),
                  _pct(d.get("empty_targets"), d.get("samples")), Text(status, style=style))
    ov = data.get("overall")
    if ov and len([d for d in rows if d.get("status") != "unavailable"]) > 1:
        tot = ov.get("total") or {}
        t.add_row(Text("all", style="bold"), _n(ov.get("samples")), _n(tot.get("p50")), _n(tot.get("p90")),
                  _n(tot.get("p99")), _n(tot.get("max")), _pct(ov.get("truncated"), ov.get("samples")),
                  _pct(ov.get("eos_lost"), ov.get("samples")), _pct(ov.get("empty_targets"), ov.get("samples")), "")
    return t


def histogram_text(hist: dict[str, Any], cutoff: int | None, width: int = _BAR_WIDTH) -> Text:
    """Horizontal bars, one per bin of total tokens; bins above cutoff_len are red (those samples are cut)."""
    edges, counts = hist.get("edges") or [], hist.get("counts") or []
    out = Text()
    if not counts:
        return out
    peak = max(counts) or 1
    label_w = max(len(f"{edges[i]:,}–{edges[i + 1]:,}") for i in range(len(counts)))
    for i, c in enumerate(counts):
        lo, hi = edges[i], edges[i + 1]
        over = cutoff is not None and hi > cutoff
        n = 0 if c == 0 else max(1, round(width * c / peak))
        out.append(f"{lo:,}–{hi:,}".rjust(label_w) + " ", style="dim")
        out.append("█" * n, style="red" if over and lo >= cutoff else ("yellow" if over else "cyan"))
        out.append(f" {c:,}\n" if c else "\n", style="dim" if not c else "")
    if cutoff is not None:
        out.append(f"{'':>{label_w}} red: longer than cutoff_len {cutoff:,} (truncated); yellow: bin holds the cutoff\n",
                   style="dim")
    return out


def _worst(data: dict[str, Any]) -> Text | None:
    w = data.get("worst_micro_batch")
    if not w:
        return None
    rows = w["rows"]
    what = {"padded": "padded to the longest sample", "pairwise": "chosen + rejected rows, padded",
            "packed": "packed rows of cutoff_len"}.get(w["mode"], w["mode"])
    line = (f"Worst micro-batch: {rows} × {w['seq_len']:,} = {w['tokens']:,} tokens ({what}); "
            f"without packing {w['unpacked_tokens']:,}, with packing {w['packed_tokens']:,}; "
            f"a batch of {rows} rows filled to cutoff_len ({w['cutoff_tokens'] // max(rows, 1):,}) would be "
            f"{w['cutoff_tokens']:,}.")
    return Text(line)


def _where(file: str | None, line: int | None, row: int | None) -> str:
    """``file:line`` where a line names the row, else ``file row N`` (0-based row in the file, as datasets
    indexes it): a one-line JSON file or a Parquet file has no line per row."""
    if not file:
        return "-"
    if line:
        return f"{file}:{line}"
    return f"{file} row {row}" if row is not None else file


def _problems(data: dict[str, Any]) -> Table | None:
    probs = data.get("problems") or []
    if not probs:
        return None
    t = Table(title="Data problems", title_justify="left", pad_edge=False, box=box.SIMPLE, show_edge=False)
    t.add_column("dataset")
    t.add_column("rows", justify="right")
    t.add_column("what", overflow="fold")
    t.add_column("first at", overflow="fold")
    for p in probs:
        loc = p.get("location") or {}
        first = (p.get("examples") or [{}])[0]
        where = _where(loc.get("file"), loc.get("line"), first.get("row") if first.get("file") == loc.get("file")
                       else None)
        msg = p.get("message") or ""
        t.add_row(str(p.get("dataset") or "-"), _n(p.get("count")),
                  Text(f"{p.get('what')}" + (f": {msg}" if msg else ""), style="red" if p.get("fatal") else "yellow"),
                  where)
    return t


def _longest(data: dict[str, Any]) -> Table | None:
    ov = data.get("overall") or {}
    items = []
    for d in data.get("datasets") or []:
        for it in d.get("longest") or []:
            items.append((it["total"], d["name"], it))
    if not items:
        return None
    items.sort(key=lambda x: -x[0])
    t = Table(title="Longest samples", title_justify="left", pad_edge=False, box=box.SIMPLE, show_edge=False)
    t.add_column("tokens", justify="right")
    t.add_column("kept", justify="right")
    t.add_column("source/target", justify="right")
    t.add_column("dataset")
    t.add_column("where", overflow="fold")
    for total, name, it in items[:5]:
        where = _where(it["file"], it.get("line"), it.get("row", it.get("index")))
        t.add_row(_n(total), _n(it.get("kept")), f"{_n(it.get('source'))}/{_n(it.get('target'))}", name, where)
    del ov
    return t


def render(data: dict[str, Any]) -> Any:
    """A rich renderable for the data section: header, per-dataset table, histogram, worst batch, problems."""
    parts: list[Any] = []
    if data.get("error"):
        return Text(f"data not scanned: {data['error']}", style="red")
    tok = data.get("tokenizer") or {}
    tpl = data.get("template") or {}
    head = [f"stage {data.get('stage')} ({data.get('processor')})",
            f"template {tpl.get('name')}" + (" (efficient EOS)" if tpl.get("efficient_eos") else ""),
            ("[yellow]approximate counts[/]" if data.get("approximate") else f"tokenizer {tok.get('source')}")]
    if data.get("packing"):
        head.append("neat packing" if data.get("neat_packing") else "packing")
    if data.get("elapsed_s") is not None:
        head.append(f"{data['elapsed_s']:.1f} s")
    parts.append(Text.from_markup(" · ".join(str(h) for h in head), style="dim"))
    if data.get("partial"):
        parts.append(Text("partial: " + "; ".join(data.get("partial_reasons") or []), style="yellow"))
    parts.append(_dataset_table(data))
    ov = data.get("overall")
    if ov and ov.get("histogram", {}).get("counts"):
        parts.append(Text("Total tokens per sample (before truncation)", style="bold"))
        parts.append(histogram_text(ov["histogram"], data.get("effective_cutoff") or data.get("cutoff_len")))
    w = _worst(data)
    if w is not None:
        parts.append(w)
    ps = data.get("packing_stats")
    if ps:
        if "rows" in ps:
            parts.append(Text(f"Packing: {ps['rows']:,} rows of {ps['row_len']:,} tokens, "
                              f"{100 * (ps.get('pad_frac') or 0):.1f}% padding."))
        else:
            parts.append(Text(f"Packing: {ps['blocks']:,} blocks of {ps['block_len']:,} tokens; "
                              f"{ps['dropped_tokens']:,} tokens dropped at batch ends."))
    lg = _longest(data)
    if lg is not None:
        parts.append(lg)
    pr = _problems(data)
    if pr is not None:
        parts.append(pr)
    return Group(*parts)


class ScanProgress:
    """Progress bars on stderr, one per dataset, advanced in bytes of its files."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self._p = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                           console=Console(stderr=True), transient=True)
        self._tasks: dict[str, Any] = {}

    def start(self) -> None:
        self._p.start()

    def stop(self) -> None:
        self._p.stop()

    def update(self, name: str, done: int, total: int) -> None:
        if name not in self._tasks:
            self._tasks[name] = self._p.add_task(name, total=total)
        self._p.update(self._tasks[name], completed=done, total=total)
