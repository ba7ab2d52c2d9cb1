"""LLaMA-Factory's reading of an on/off environment variable, the one copy for every reader, fact and analyzer
(issue #22: it was written seven times, one of them stripping the value, which LF does not).

v0's ``is_env_enabled`` (src/llamafactory/extras/misc.py:258-260 at the snapshot in
docs/reference/llamafactory/SNAPSHOT_COMMIT.txt): ``os.getenv(name, "0").lower() in ["true", "y", "1"]``, the
value neither stripped nor parsed further. v1's (src/llamafactory/v1/utils/env.py:28-30) also takes yes, on and t.
Variables read through it: USE_MODELSCOPE_HUB, USE_OPENMIND_HUB, USE_V1, FORCE_TORCHRUN, ALLOW_EXTRA_ARGS,
DISABLE_VERSION_CHECK (v0) and ALLOW_EXTRA_KEYS (v1).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

V0_TRUE = frozenset({"true", "y", "1"})
V1_TRUE = V0_TRUE | {"yes", "on", "t"}


def env_enabled(name: str, env: Mapping[str, Any] | None = None, *, v1: bool = False) -> bool:
    """Whether LLaMA-Factory takes variable `name` of `env` (default ``os.environ``) as on: its value lower-cased is
    one of `V0_TRUE` (`V1_TRUE` for the v1 parser's variables, `v1`); an absent variable is ``"0"``, off. A
    non-string value (a parsed file's int) is read as its ``str``. Never raises."""
    env = os.environ if env is None else env
    return str(env.get(name, "0")).lower() in (V1_TRUE if v1 else V0_TRUE)
