"""The paraphrase yardstick of issue #25: how the postmortem's first finding holds when a dev case's words are said
another way (fixtures/postmortem/paraphrases.py), by round and by kind.

A held-out round is mostly a title or one sentence plus at most one log line, and the dev fixes were written close
to the dev wording, so a dev figure overstates what the next round will score. Each paraphrase is judged exactly as
its case is (benchmarks/real_threads.py `judge_case`: the first finding's rule is one the case accepts and, where
the case gives `text`, the message holds it). Reported: right on the originals vs on paraphrase set 1 (written before
the fixes, then tuned on) vs set 2 (written after the fixes, never tuned on: the honest figure).

    python benchmarks/real_threads_paraphrase.py [--markdown FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kind_of(case: dict) -> str:
    """The kind a case is counted under: the first rule it accepts (the rule the thread's cause is named by)."""
    return case["accept"][0]


def score(rt, cases: dict, sets: dict[str, dict]) -> list[dict]:
    """One row per (case, variant): variant "orig" or "set1#i" / "set2#i"; right as judge_case says."""
    rows = []
    for key, case in cases.items():
        rows.append({"key": key, "variant": "orig", "right": rt.judge_case(case)["right"], "case": case, "text": None})
        for sname, table in sets.items():
            for i, words in enumerate(table.get(key, [])):
                j = rt.judge_case({**case, "log": words + "\n"})
                rows.append({"key": key, "variant": f"{sname}#{i}", "right": j["right"], "case": case,
                             "text": words, "first": j["first"], "message": j["message"]})
    return rows


def _frac(rs: list[dict]) -> str:
    ok = sum(1 for r in rs if r["right"])
    return f"{ok}/{len(rs)} ({100 * ok / len(rs):.0f} %)" if rs else "-"


def table(rows: list[dict], set_names: list[str]) -> str:
    cols = ["orig", *set_names]
    head = "| " + " | ".join(["group", *(("originals" if c == "orig" else c) for c in cols)]) + " |"
    out = [head, "|" + "---|" * (len(cols) + 1)]

    def line(label: str, sel: list[dict]) -> str:
        cells = [_frac([r for r in sel if r["variant"].split("#")[0] == c]) for c in cols]
        return f"| {label} | " + " | ".join(cells) + " |"

    out.append(line("**all**", rows))
    by_round: dict[int, list[dict]] = defaultdict(list)
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_round[r["case"]["round"]].append(r)
        by_kind[kind_of(r["case"])].append(r)
    for rnd in sorted(by_round, reverse=True):
        out.append(line(f"round {rnd}", by_round[rnd]))
    for k in sorted(by_kind, key=lambda k: (-len(by_kind[k]), k)):
        out.append(line(f"kind {k}", by_kind[k]))
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--sets", default="set1,set2", help="which paraphrase sets to score (comma-separated)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    rt = _load("real_threads", ROOT / "benchmarks" / "real_threads.py")
    para = _load("paraphrases", ROOT / "fixtures" / "postmortem" / "paraphrases.py")
    names = [s for s in a.sets.split(",") if getattr(para, s.upper(), None)]
    sets = {s: getattr(para, s.upper()) for s in names}
    keys = set().union(*sets.values()) if sets else set()
    cases = {(c["round"], c["id"]): c for c in rt.load_cases() if c["split"] == "dev" and (c["round"], c["id"]) in keys}
    missing = keys - set(cases)
    if missing:
        print(f"paraphrases of unknown dev cases: {sorted(missing)}", file=sys.stderr)
        return 2
    rows = score(rt, cases, sets)
    text = table(rows, names)
    print(text)
    if a.verbose:
        for r in rows:
            if r["variant"] != "orig" and not r["right"]:
                print(f"--- {r['key']} {r['variant']} [{kind_of(r['case'])}] -> {r['first']}: {r['text'][:110]!r}")
    if a.markdown:
        Path(a.markdown).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
