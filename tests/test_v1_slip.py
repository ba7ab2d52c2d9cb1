"""lfkind._v1_slip answers as difflib.get_close_matches over every v1 key does (it only skips difflib when the
quick_ratio bound rules every v1 key out): on every top-level key of LF's example configs and the key schema, and
on one-letter slips of every v1 key."""

from __future__ import annotations

import difflib
import json
import random
import string
from pathlib import Path

from finetune_doctor.readers.config import lfkind

ROOT = Path(__file__).resolve().parent.parent


def _words() -> set[str]:
    words = set(json.loads((ROOT / "finetune_doctor" / "catalog" / "lf_keys.json").read_text())["keys"])
    for f in (ROOT / "fixtures" / "llamafactory" / "examples").rglob("*.yaml"):
        for line in f.read_text(errors="replace").splitlines():
            if ":" in line and not line.startswith((" ", "#", "-")):
                words.add(line.split(":", 1)[0].strip())
    rng = random.Random(22)
    for key in sorted(lfkind.V1_KEYS):
        for _ in range(20):
            w = list(key)
            i = rng.randrange(len(w))
            op = rng.choice("dis")
            if op == "d" and len(w) > 1:
                del w[i]
            elif op == "i":
                w.insert(i, rng.choice(string.ascii_lowercase + "_"))
            else:
                w[i] = rng.choice(string.ascii_lowercase + "_")
            words.add("".join(w))
    return words


def test_slip_is_difflibs_answer():
    words = _words()
    got = {w: lfkind._v1_slip(w) for w in words}
    want = {w: bool(difflib.get_close_matches(w, lfkind.V1_KEYS, n=1, cutoff=0.85)) for w in words}
    assert got == want
    assert 100 < sum(got.values()) < len(words) - 100   # both answers are exercised
