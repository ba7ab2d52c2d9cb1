"""Is the release narrowing of readers/config/lfnarrow.py sound on the launch-parity corpus (issue #21)?

For each config of scripts/gen_parity_corpus.py's corpus, LF's own parser (tests/parity/release_oracle.py, in a
child process) says whether a release accepts it: LF main (the snapshot, 0.9.6.dev0, at ../shared/oracles),
0.9.0 (.lf-releases/0.9.0) and 0.9.5 (the venv's), those present. A config a release accepts must keep that release in the range the
config's keys narrow to with no version given; a config called a conflict (keys of no one release) must be
accepted by none. Prints one JSON line per release: configs, accepted, accepted but narrowed away (must be 0),
conflicts, conflicts accepted (must be 0), and how many accepted configs were narrowed at all.

Usage: python scripts/measure_release_narrowing_parity.py [RELEASE ...]   (default all; minutes: the oracles parse every config)
"""

from __future__ import annotations

import json
import sysconfig
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import gen_parity_corpus  # noqa: E402
from parity.oracle_run import oracle_verdicts  # noqa: E402

from finetune_doctor.readers.config.lfnarrow import narrow  # noqa: E402
from finetune_doctor.readers.config.lfrelease import choose  # noqa: E402
from finetune_doctor.readers.config.yamlcfg import load_config  # noqa: E402

RELEASES = {"0.9.6.dev0": ROOT.parent.parent / "shared" / "oracles" / "llamafactory-main" / "src",
            "0.9.0": ROOT / ".lf-releases" / "0.9.0",
            "0.9.5": Path(sysconfig.get_paths()["purelib"])}   # the test venv's llamafactory (tests/test_parity_lf.py)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="narrow_parity_"))
    index = gen_parity_corpus.build(tmp / "corpus")
    judged = []
    for e in index:
        try:
            values = load_config(e["config"]).values
        except Exception:   # a corpus config the doctor refuses to read (bad YAML on purpose): nothing to narrow
            judged.append(None)
            continue
        judged.append(narrow(choose(None), values))
    for version, src in RELEASES.items():
        if sys.argv[1:] and version not in sys.argv[1:]:
            continue
        if not (src / "llamafactory").is_dir():
            src = Path("/work/shared/oracles/llamafactory-main/src") if version == "0.9.6.dev0" else src
        if not (src / "llamafactory").is_dir():
            print(json.dumps({"release": version, "skipped": f"no {src}"}))
            continue
        verdicts, why = oracle_verdicts(src, index, Path(tempfile.mkdtemp(dir=tmp)))
        if verdicts is None:
            print(json.dumps({"release": version, "skipped": why}))
            continue
        row = {"release": version, "configs": len(index), "accepted": 0, "accepted_narrowed_away": [],
               "accepted_narrowed": 0, "conflicts": 0, "conflicts_accepted": []}
        for e, v, rel in zip(index, verdicts, judged):
            if rel is None:
                continue
            row["conflicts"] += bool(rel.conflict)
            if not v.accepted:
                continue
            row["accepted"] += 1
            row["accepted_narrowed"] += len(rel.versions) < len(choose(None).versions)
            if rel.conflict:
                row["conflicts_accepted"].append(e["id"])
            elif version not in rel.versions:
                row["accepted_narrowed_away"].append(e["id"])
        print(json.dumps(row))


if __name__ == "__main__":
    main()
