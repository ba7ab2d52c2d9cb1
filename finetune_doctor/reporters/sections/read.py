"""Text rendering of the ``read`` report section: which files were read, how much of each, and what could not
be read (truncated records, bad CRCs, binary junk, malformed lines), and the inputs skipped as copies of a file
already read (same size and hash of the first/last MiB). Data: pipeline/postmortem.py `read_data`."""

from __future__ import annotations

import os
from typing import Any

from finetune_doctor.fsutil import format_bytes

STATUS_STYLE = {"read": "green", "partial": "yellow", "skipped": "red"}


_size = format_bytes


def _path(p: str, base: str | None) -> str:
    if base:
        try:
            rel = os.path.relpath(p, base)
            if not rel.startswith(".."):
                return rel
        except ValueError:
            pass
    try:
        rel = os.path.relpath(p)
        return p if rel.startswith("..") else rel
    except ValueError:
        return p


def render(data: dict[str, Any]) -> Any:
    """A rich table: file, kind, status, size, what was extracted, and the problems under each file."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    files = data.get("files") or []
    if not files:
        return Text("no files found" + (f" in {data.get('run_dir')}" if data.get("run_dir") else ""), style="yellow")
    t = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, header_style="bold")
    for name, just in (("file", "left"), ("kind", "left"), ("status", "left"), ("size", "right"),
                       ("read", "right")):
        t.add_column(name, justify=just)  # type: ignore[arg-type]
    for f in files:
        got = []
        if f.get("lines"):
            got.append(f"{f['lines']} lines")
        if f.get("records"):
            got.append(f"{f['records']} records")
        if f.get("items"):
            got.append(f"{f['items']} items")
        t.add_row(_path(f["path"], data.get("run_dir")), f["kind"],
                  Text(f["status"], style=STATUS_STYLE.get(f["status"], "")), _size(f.get("size")),
                  ", ".join(got) or "—")
    lines: list[Any] = [t]
    for f in files:
        for p in f.get("problems") or []:
            lines.append(Text(f"{_path(f['path'], data.get('run_dir'))}: {p}", style="yellow"))
    for d in data.get("duplicates") or []:
        lines.append(Text(f"{_path(d['path'], data.get('run_dir'))}: same content as "
                          f"{_path(d['same_as'], data.get('run_dir'))} (size and first/last MiB hash); read once",
                          style="yellow"))
    c = data.get("counts") or {}
    lines.append(Text(f"{c.get('read', 0)} read, {c.get('partial', 0)} partly, {c.get('skipped', 0)} skipped",
                      style="dim"))
    return Group(*lines)
