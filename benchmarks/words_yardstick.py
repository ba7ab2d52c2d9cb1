"""Round-14 words yardstick (issue #25): the postmortem's first finding on short failure reports written by kind
(fixtures/postmortem/paraphrases_round14.py), not paraphrases of any dev case. Each report is judged as a real thread
is (benchmarks/real_threads.py `judge_case`: the first finding's rule is an accepted one and, where `text` is given,
its message holds it).

    python benchmarks/words_yardstick.py [--set cases|harder] [--verbose]
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


def score(which: str = "CASES") -> list[dict]:
    """One row per report of set `which`: kind, words, right, first finding, message."""
    sys.path.insert(0, str(ROOT))
    rt = _load("real_threads", ROOT / "benchmarks" / "real_threads.py")
    ys = _load("paraphrases_round14", ROOT / "fixtures" / "postmortem" / "paraphrases_round14.py")
    rows = []
    for kind, words, accept, text in getattr(ys, which):
        j = rt.judge_case({"log": words + "\n", "accept": accept, "text": text})
        rows.append({"kind": kind, "words": words, **j})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--set", default="CASES", help="CASES (written first) or HARDER")
    a = ap.parse_args()
    rows = score(a.set.upper())
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    ok = sum(r["right"] for r in rows)
    print(f"all: {ok}/{len(rows)} ({100 * ok / len(rows):.0f} %)")
    for k, rs in sorted(by_kind.items(), key=lambda kv: -len(kv[1])):
        print(f"  {k}: {sum(r['right'] for r in rs)}/{len(rs)}")
    if a.verbose:
        for r in rows:
            if not r["right"]:
                print(f"--- [{r['kind']}] {r['words'][:90]!r} -> {r['first']}: {r['message'][:160]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
