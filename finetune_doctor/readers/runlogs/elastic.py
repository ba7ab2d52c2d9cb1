"""torchelastic's error files: the JSON a worker wrote when it died with ``@record`` on its entry point
(``TORCHELASTIC_ERROR_FILE``; torchrun puts it at ``<log_dir>/<run_id>/attempt_<n>/<local_rank>/error.json``,
torch/distributed/elastic/multiprocessing/api.py:290-292 and :384 of torch 2.13).

Shape (errors/error_handler.py:69-88): ``{"message": {"message": "<Cls>: <msg>", "extraInfo": {"py_callstack":
"<traceback>", "timestamp": "<POSIX seconds>"}}}``; an older or re-written root-cause file holds ``message`` as a
string with ``timestamp`` beside it (errors/__init__.py:152-158), and the agent may add ``errorCode``. The
traceback text is scanned by the text-log reader, so an OOM, an NCCL timeout or a CUDA error inside it is read as
from any log; the timestamp is the file's failure time (what orders the ranks' failures).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from finetune_doctor.evidence import FileEvidence, FileRead, Notice
from finetune_doctor.readers.runlogs.logs import parse_text, regular_size

MAX_BYTES = 4 << 20
_CLS = re.compile(r"^(?P<cls>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*): ?(?P<msg>.*)", re.S)


def read_elastic_error(path: str) -> FileEvidence:
    """One error file: the exception as a notice, the traceback scanned, the timestamp as ``timing.fail_wall``."""
    size = regular_size(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
        d = json.loads(raw[:MAX_BYTES].decode("utf-8", "replace"))
        if not isinstance(d, dict) or "message" not in d:
            raise ValueError("no message")
    except ValueError as err:
        return FileEvidence(FileRead(path, "elastic-error", size, min(size, MAX_BYTES), complete=False,
                                     problems=(f"not a torchelastic error file ({err})",)))
    msg: Any = d["message"]
    stack = ""
    ts = d.get("timestamp")
    if isinstance(msg, dict):
        info = msg.get("extraInfo") if isinstance(msg.get("extraInfo"), dict) else {}
        stack = str(info.get("py_callstack") or "")
        ts = info.get("timestamp", ts)
        msg = msg.get("message")
    text = str(msg or "")
    try:
        wall = float(ts) if ts is not None else None
    except (TypeError, ValueError):
        wall = None
    body = (stack if text.split("\n")[0] in stack else stack + "\n" + text).strip() + "\n"
    fe = parse_text(path, body.encode("utf-8", "replace"))
    notices = list(fe.notices)
    m = _CLS.match(text.strip())
    if m and not any(n.kind == "exception" for n in notices):
        notices.append(Notice(path, 1, None, "exception", text.strip()[:500],
                              {"cls": m.group("cls"), "msg": m.group("msg")[:300], "rank": None}))
    timing = dict(fe.timing)
    if wall is not None:
        timing["fail_wall"] = wall
    rd = FileRead(path, "elastic-error", size, min(size, MAX_BYTES), lines=fe.read.lines, items=fe.read.items + 1,
                  complete=size <= MAX_BYTES, note="torchelastic error file" + (f", errorCode {d['errorCode']}"
                                                                              if "errorCode" in d else ""))
    return replace(fe, read=rd, notices=tuple(notices), timing=timing)
