"""Write the hostile corpus of issue 17 (tests/fuzzkit/corpus.py) to a folder, with the command lines that read
each input, for running it through an installed ``doctor`` by hand (the test suite builds it in a temporary folder
and runs it in-process: tests/test_fuzz_corpus.py).

Usage: python scripts/gen_hostile_corpus.py OUT_DIR [--run]
  OUT_DIR/cases.jsonl gets one {"name", "class", "argv"} line per command line; --run also runs each through
  ``python -m finetune_doctor`` with a 60 s limit and prints the runs whose exit code is not 0/1/2, that print an
  internal error or a traceback, or that hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from fuzzkit.corpus import build  # noqa: E402


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    cases = build(os.path.join(out, "inputs"))
    with open(os.path.join(out, "cases.jsonl"), "w", encoding="utf-8") as fh:
        for c in cases:
            for argv in c.argvs:
                fh.write(json.dumps({"name": c.name, "class": c.klass, "argv": argv}, ensure_ascii=True) + "\n")
    runs = sum(len(c.argvs) for c in cases)
    print(f"{len(cases)} inputs, {runs} command lines: {out}/cases.jsonl")
    if "--run" not in sys.argv:
        return 0
    bad = 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FINETUNE_DOCTOR_NO_NVML": "1"}
    for c in cases:
        for argv in c.argvs:
            try:
                r = subprocess.run([sys.executable, "-m", "finetune_doctor", *argv], capture_output=True, env=env,
                                   timeout=60)
            except subprocess.TimeoutExpired:
                bad += 1
                print(f"HANG  [{c.name}] {argv}")
                continue
            text = (r.stdout + r.stderr).decode("utf-8", "replace")
            if r.returncode not in (0, 1, 2) or "internal error" in text or "Traceback" in text:
                bad += 1
                print(f"FAIL  [{c.name}] exit {r.returncode}: {text.strip().splitlines()[-1][:200]}")
    print(f"{bad} problem runs of {runs}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
