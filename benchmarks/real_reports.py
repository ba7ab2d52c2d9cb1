"""Re-run `doctor check` on every real report in fixtures/real_reports/ and print a table.

Each folder holds config.yaml (+ ds.json), cmdline.txt (the doctor command, run in the folder, already
--offline) and case.md (with a line `- expected verdict: oom|fits|host-oom|nan`). The script appends
`--format json`, reads the verdict and the finding codes, and prints a markdown table comparing the
doctor's verdict with the outcome the user reported.

    python benchmarks/real_reports.py [--doctor PATH] [--root DIR]

Works offline: every cmdline passes --offline and HF_HUB_OFFLINE=1 is set. A model whose config.json
is neither local nor in the bundled catalog comes back as FD607 (model-unresolved) with no memory
estimate; the table says so ("unresolved").
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = HERE.parent / "fixtures" / "real_reports"


def run_case(folder: Path, doctor: str) -> dict:
    cmd = shlex.split((folder / "cmdline.txt").read_text().strip())
    if cmd and cmd[0] in ("doctor", "finetune-doctor"):
        cmd[0] = doctor
    cmd += ["--format", "json"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", FINETUNE_DOCTOR_NO_NVML="1")
    p = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=600)
    out = {"rc": p.returncode, "stderr": p.stderr.strip()}
    try:
        out["report"] = json.loads(p.stdout)
    except json.JSONDecodeError:
        out["report"] = None
    return out


def expected_of(folder: Path) -> str:
    m = re.search(r"^- expected verdict:\s*(\S+)", (folder / "case.md").read_text(), re.M)
    return m.group(1) if m else "?"


def model_of(folder: Path) -> str:
    m = re.search(r"^model_name_or_path:\s*(\S+)", (folder / "config.yaml").read_text(), re.M)
    return m.group(1).strip("\"'").rstrip("/").split("/")[-1] if m else "?"


def judge(expected: str, res: dict) -> tuple[str, str]:
    """(doctor's verdict in words, right/wrong/n.a.)."""
    rep = res["report"]
    if rep is None:
        return f"stopped (exit {res['rc']}): {res['stderr'][:80]}", "n.a."
    codes = [f["code"] for f in rep.get("findings", [])]
    mem = rep.get("memory")
    if not mem:
        why = "unresolved model (FD607)" if "FD607" in codes else "no memory estimate"
        return why, "n.a."
    v = mem.get("verdict")
    pg = mem.get("per_gpu_gib", {})
    cap = (rep.get("hardware") or {}).get("capacity_gib")
    words = f"{v} ({pg.get('total')} / {cap} GiB, p_oom {mem.get('p_oom')})"
    if expected == "oom":
        ok = v in ("oom", "at-risk")
    elif expected == "fits":
        ok = v == "fits"
    elif expected == "host-oom":
        ok = "FD603" in codes
    elif expected == "nan":
        ok = any(c.startswith(("FD1", "FD3")) for c in codes)
    else:
        return words, "n.a."
    return words, "right" if ok else "wrong"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doctor", default=shutil.which("doctor") or "doctor", help="the doctor executable")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    a = ap.parse_args(argv)
    rows, tally = [], {"right": 0, "wrong": 0, "n.a.": 0}
    for folder in sorted(p for p in a.root.iterdir() if (p / "cmdline.txt").is_file()):
        exp = expected_of(folder)
        res = run_case(folder, a.doctor)
        verdict, ok = judge(exp, res)
        tally[ok] += 1
        codes = ",".join(f["code"] for f in (res["report"] or {}).get("findings", []))
        rows.append(f"| {folder.name} | {model_of(folder)} | {exp} | {verdict} | {ok} | {codes} | {res['rc']} |")
    print("| report | model | reported | doctor verdict | right? | findings | exit |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{tally['right']} right, {tally['wrong']} wrong, {tally['n.a.']} without a verdict")
    return 0


if __name__ == "__main__":
    sys.exit(main())
