"""LLaMA-Factory v1's own parser as the launch-parity oracle for v1 configs, run in a child process.

Usage: ``python v1_oracle.py LF_SRC < configs.json > verdicts.json``: for every YAML path in the input list it reads
the file the way v1's ``get_args`` does (``OmegaConf.load`` then ``OmegaConf.to_container``, LF main
``v1/config/arg_parser.py`` L40-44) and calls ``get_args(dict)``; the verdict is ``{"accepted": bool, "error":
"<Type>: message" | null}``. LF_SRC (the snapshot's ``src`` folder) is put first on ``sys.path`` here only, so the
test process keeps whatever ``llamafactory`` release it imports for the v0 oracle. ``ALLOW_EXTRA_KEYS`` is removed
from the environment: the default launch.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    sys.path.insert(0, sys.argv[1])
    os.environ.pop("ALLOW_EXTRA_KEYS", None)
    from omegaconf import OmegaConf

    from llamafactory.v1.config.arg_parser import get_args

    out = []
    for path in json.load(sys.stdin):
        try:
            args = OmegaConf.to_container(OmegaConf.load(path))
            get_args(args)
            out.append({"accepted": True, "error": None})
        except Exception as err:   # every exception is a refusal to start: that is the verdict
            out.append({"accepted": False, "error": f"{type(err).__name__}: {err}"})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
