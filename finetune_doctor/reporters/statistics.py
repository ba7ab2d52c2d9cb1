"""``doctor lint --statistics``: one line per rule code, most frequent first, as ruff prints them.

Text: ``count  code  [*] name`` with the counts right-aligned (``[*]`` when ``--fix`` can apply every finding of
that code, ``[-]`` when it can apply some); json: the rows as a list of ``{"code", "name", "count", "fixable"}``.
Other formats print the text form (a statistics table has no SARIF or annotation shape).
"""

from __future__ import annotations

import json
from typing import Any


def render_statistics(rows: list[dict[str, Any]], fmt: str) -> str:
    """The statistics `rows` (pipeline/lint.py `statistics`) in `fmt`; "" for no rows in text."""
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if not rows:
        return ""
    width = max(len(str(r["count"])) for r in rows)
    code_w = max(len(r["code"]) for r in rows)
    out = []
    for r in rows:
        mark = "[*]" if r["fixable"] == r["count"] else "[-]" if r["fixable"] else "   "
        out.append(f"{r['count']:>{width}}\t{r['code']:<{code_w}}\t{mark} {r['name']}")
    return "\n".join(out) + "\n"
