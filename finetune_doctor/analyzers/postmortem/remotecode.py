"""A version clash visible only in a traceback's frame paths: the innermost frame is a model's own code, loaded with
``trust_remote_code`` from the Hugging Face modules cache, and the exception says the installed transformers does
not have what that code calls (issue #25, pasted output).

transformers copies a model repository's ``.py`` files into ``HF_MODULES_CACHE`` (``~/.cache/huggingface/modules``)
under the package ``transformers_modules`` and imports them from there (transformers dynamic_module_utils.py
``get_cached_module_file`` / ``get_class_from_dynamic_module``), so a frame whose path holds
``/transformers_modules/<repo>/`` runs the model's own code, written against the transformers its authors used.
When that code calls a transformers function with a keyword the installed release dropped or does not have yet
(``GenerationMixin._extract_past_from_model_output() got an unexpected keyword argument
'standardize_cache_format'`` from ChatGLM3's modeling_chatglm.py under a newer transformers), uses an attribute or
imports a name the release lacks, the clash is between the model's files and transformers — not between the trainer
and transformers, which is what a traceback read by package alone suggests. The remedy is on that side: the
transformers release the model card names, or the model's files updated from its repository.

Read from the ``File "..."`` lines the reader kept above the exception (readers/runlogs/logkept.py
`frame_lines_above`, the exception Notice's ``frame_lines``), so a paste cut above its "Traceback" header counts.
"""

from __future__ import annotations

import re
from typing import Any

REMOTE_FRAME = re.compile(r'File "(?P<path>[^"]*?[/\\]transformers_modules[/\\](?P<rest>[^"]+?))", line (?P<line>\d+), in '
                          r"(?P<func>[\w<>]+)")
CLASH = re.compile(r"\(\) ?got an unexpected keyword argument|\(\) takes \d+ positional arguments? but|\(\) missing "
                   r"\d+ required positional argument|has no attribute '\w+'|cannot import name '\w+' from "
                   r"'transformers")
"""What the exception says the installed transformers lacks: a keyword or an argument count (CPython's TypeError
texts for a call, Objects/call.c and Python/ceval.c), an attribute (AttributeError), an importable name
(ImportError "cannot import name 'X' from 'transformers...'")."""
_HASH = re.compile(r"^[0-9a-f]{40}$")


def _repo(rest: str) -> tuple[str, str]:
    """(the model's folder under transformers_modules, its file) of a remote-code frame path: the hub's
    ``<org>/<name>/<commit hash>/file.py`` or a local folder's ``<name>/file.py``; the commit hash is dropped."""
    parts = [p for p in re.split(r"[/\\]", rest) if p]
    name = [p for p in parts[:-1] if not _HASH.match(p)]
    return "/".join(name) or "?", parts[-1]


def remote_code_clash(cls: str, msg: str, exc: Any) -> str | None:
    """Words for an exception (`cls`, `msg`; `exc` the Notice, for its ``frame_lines``) raised with the model's own
    remote code as the innermost frame and saying the installed transformers lacks what it calls (`CLASH`); None
    otherwise."""
    if cls not in ("TypeError", "AttributeError", "ImportError") or not CLASH.search(msg):
        return None
    lines = (getattr(exc, "value", None) or {}).get("frame_lines") or ()
    if not lines:
        return None
    m = REMOTE_FRAME.search(lines[-1])   # the innermost frame: the line right above the exception's
    if m is None:
        return None
    repo, file = _repo(m.group("rest"))
    return (f"the innermost frame is the model's own code ({repo}/{file}, {m.group('func')}, loaded with "
            "trust_remote_code from the Hugging Face modules cache), and it calls transformers in a way the installed "
            "release does not support: the model's files were written for another transformers release. Install the "
            "transformers release the model card names, or update the model's .py files from its repository (a "
            "newer revision written for current transformers); the trainer's own pins are not the clash")
