"""The held-out history of calibrate.py: each round's test half as it was scored ONCE, kept across refits.

Why a page of its own. benchmarks/calibrate.py writes benchmarks/results/calibrate.md whole on every run, and after a
round is scored it becomes dev (calib_data.HELD_OUT_ROUND moves on), so the next refit printed no test half and the
round's one held-out score was lost from the page: sessions 11 and 12 put it back by hand after each refit (closing
note of session 12, 'Fragile, not mended'). benchmarks/results/calibrate_heldout.md holds one section per round,
``## Round N, held out (...)``, written by `record` the first time calibrate.py scores round N as its test half and
never rewritten after (a second scoring of the same round is a dev figure, not a held-out one); calibrate.md gets the
headline of every kept round from `with_history`, above its dev numbers.

Rounds 2-8 were moved there from git history (the page at the commit that scored each round: ada88d1, 50f4ac1,
d60d0d8, d9fd8c3, d94b349, f939d2f, e651b04), their ``## test half`` sections as the script printed them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "benchmarks" / "results" / "calibrate_heldout.md"
HEADING = re.compile(r"^## Round (\d+), held out\b.*$", re.M)
# the first summary line calibrate.report prints for a half (summary_lines('fitted table', ...))
HEADLINE = re.compile(r"^- fitted table: Brier .*$", re.M)
INTRO = [
    "# Held-out history of the p_oom and interval calibration",
    "",
    "Each section is one calibration round's test half as benchmarks/calibrate.py scored it ONCE, with the table "
    "fitted on the earlier rounds only, before the round became dev. Written by `calib_heldout.record` the first time "
    "a round is scored; never rewritten by a later run (benchmarks/calib_heldout.py). Rounds 2-8 were moved here from "
    "git history (the page at the commit that scored each round). The numbers are those of the code and table of "
    "their day; the same rows scored now, as dev, are in calibrate.md and calib_loro.md.",
    "",
]


def rounds(text: str) -> list[int]:
    """The round numbers of the ``## Round N, held out`` sections of `text`, in page order."""
    return [int(m.group(1)) for m in HEADING.finditer(text)]


def test_section(md: str) -> str | None:
    """The ``## test half`` section of a calibrate.md page `md` (up to the next ``## `` heading), or None."""
    m = re.search(r"^## test half\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    return m.group(1).strip("\n") if m else None


def git_head() -> str:
    """The short commit of the tree that ran (what the held-out score was taken at), or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record(page: Path, round_no: int, md: str, code: str, when: str) -> bool:
    """Append round `round_no`'s test half of the calibrate.md text `md` to `page` (created with `INTRO` when
    missing), headed ``## Round N, held out (scored once on WHEN at CODE)``, unless `page` already holds round N or
    `md` has no test half. Returns whether it wrote."""
    body = test_section(md)
    old = page.read_text(encoding="utf-8") if page.exists() else "\n".join(INTRO) + "\n"
    if body is None or round_no in rounds(old):
        return False
    section = [f"## Round {round_no}, held out (scored once on {when} at {code})", "",
               f"Written by benchmarks/calibrate.py when it scored round {round_no} as its test half.", "", body, ""]
    page.write_text(old.rstrip("\n") + "\n\n" + "\n".join(section), encoding="utf-8")
    return True


def history_lines(page: Path = PAGE) -> list[str]:
    """The ``## Held-out history`` section calibrate.md carries: per kept round of `page`, its heading and the
    fitted table's headline (Brier over runs, coverage, memory error). Empty when `page` has no round."""
    if not page.exists():
        return []
    text = page.read_text(encoding="utf-8")
    parts = list(HEADING.finditer(text))
    if not parts:
        return []
    out = ["## Held-out history (each round scored once, before it became dev)", "",
           f"Kept in benchmarks/results/{page.name} (benchmarks/calib_heldout.py: written once per round, never by a "
           "refit); every other number on this page is from the run that wrote it.", "",
           "| round | scored | fitted table on its test half |", "|---|---|---|"]
    for i, m in enumerate(parts):
        end = parts[i + 1].start() if i + 1 < len(parts) else len(text)
        head = HEADLINE.search(text, m.end(), end)
        when = re.sub(r"^## Round \d+, held out\s*", "", m.group(0)).strip(" ()")
        line = head.group(0).removeprefix("- fitted table: ") if head else "(no headline)"
        cells = [c.replace("|", "\\|") for c in (when, line)]   # a pipe inside a table cell is escaped
        out.append(f"| {m.group(1)} | {cells[0]} | {cells[1]} |")
    return out


def with_history(md: str, page: Path = PAGE) -> str:
    """calibrate.md text `md` with `history_lines` inserted before its ``## Rows`` section (appended when it has
    none); `md` unchanged when `page` keeps no round."""
    lines = history_lines(page)
    if not lines:
        return md
    block = "\n".join(lines) + "\n\n"
    if "\n## Rows\n" in md:
        return md.replace("\n## Rows\n", "\n" + block + "## Rows\n", 1)
    return md.rstrip("\n") + "\n\n" + block
