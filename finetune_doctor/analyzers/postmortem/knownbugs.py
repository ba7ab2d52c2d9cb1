"""Known regressions of single library releases, named when a report's words state such a release (issue #25).

A title such as "transformers 4.36.0 FileNotFoundError at checkpoint save" or "deepspeed 0.14.3 grad_norm is 0" names
the cause itself when that release is known to fail that way: the thread's fix is another release, not a setting.
The rows (package, the first and last affected release, the release that fixed it where a thread states one, the
words of the symptom, the upstream thread) are data: catalog/known_regressions.json, each with the source it was
checked against; read once, on first use. Only a release the words state (readers/runlogs/statedwords.py) is
judged, never one assumed; a row applies only when the report's words also say its symptom, so a release merely
named beside another failure is not blamed.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from finetune_doctor.numbers import version_key

CATALOG = Path(__file__).resolve().parent.parent.parent / "catalog" / "known_regressions.json"


@lru_cache(maxsize=1)
def rows() -> tuple[dict[str, Any], ...]:
    """The rows of catalog/known_regressions.json, each with its `words` compiled (case-insensitive) as ``pattern``."""
    data = json.loads(CATALOG.read_text(encoding="utf-8"))
    return tuple({**r, "pattern": re.compile(r["words"], re.I)} for r in data["rows"])


def _inside(version: str, first: str, last: str) -> bool:
    v, lo, hi = version_key(version), version_key(first), version_key(last)
    if v is None or lo is None or hi is None:
        return False
    # a pre-release of the first release counts as it ("4.36.0.dev0" is the episode's start)
    return lo <= v <= hi or (v[0] == lo[0] and v[0] == hi[0])


def known_regression(versions: Mapping[str, str], text: str) -> dict[str, Any] | None:
    """The first catalogue row whose package the words state at a release inside [first, last] (`versions`:
    {package: version} of full releases the words state) and whose symptom words occur in `text`; the row with
    ``version`` (the stated one) added. None when no row applies."""
    for r in rows():
        v = versions.get(r["package"])
        if v and _inside(str(v), r["first"], r["last"]) and r["pattern"].search(text):
            return {**r, "version": str(v)}
    return None


_FIXED = {True: "{pkg} {fixed} fixed it: install it, or go back to a release older than {first}",
          False: "no fixing release is known here: go back to a release older than {first} or past {last}, and "
                 "check the thread for a later fix"}


# the `pip show` sentence, keyed by whether the words' stack sentence already names the command
_PIP = {True: "", False: " `pip show {pkg}` on the training machine confirms the release that ran."}


def regression_lead(said: Mapping[str, Any], versions: Mapping[str, str]) -> str | None:
    """The lead of a words finding whose words state a release with a known regression of the kind they describe
    (`known_regression`): the package and release, what that release does, the upstream thread and the release to
    move to; the `pip show` sentence only where the words' stack sentence (``stack_text``) has none. None when no
    row applies."""
    row = known_regression(versions, str(said.get("text") or ""))
    if row is None:
        return None
    fix = _FIXED[bool(row["fixed_in"])].format(pkg=row["package"], fixed=row["fixed_in"], first=row["first"],
                                               last=row["last"])
    pip = _PIP["`pip show" in str(said.get("stack_text") or "")].format(pkg=row["package"])
    return (f"{row['package']} {row['version']}, the release the words name, has a known regression of this kind: "
            f"{row['symptom']} ({row['url']}); {fix}.{pip}")
