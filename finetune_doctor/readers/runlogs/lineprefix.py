"""Strip what log viewers, launchers and collectors put before a line, keeping what it says about the line.

A line the reader matches may carry, in front of the text the program printed, any stack of:

* a log viewer's line number: ``[80818] `` (GitHub issue pastes, LlamaFactory#7396), ``  123 | ``;
* torch's rank prefix ``[rank3]:`` (every line of a Python traceback once a process group exists, torch >= 2.3)
  and torchrun's ``--tee`` / ``--redirects`` prefix ``[default0]:`` (role name + local rank, torch/distributed/
  elastic/multiprocessing/api.py);
* Slurm's ``srun --label`` task id ``3: ``, pdsh's host label ``gpu-node-2: `` (DeepSpeed's multi-node runner) and
  Kubernetes' ``kubectl logs --prefix`` ``[pod/name/container] ``;
* a Markdown quote ``> `` (a paste quoted in an issue reply; nested ``> > `` too) and terminal colours: ANSI SGR
  codes (``\x1b[36m``), anywhere on the line, also as GitHub shows them once the escape byte is lost in the copy
  (``[36m(TaskRunner pid=9831)[0m``, verl's Ray logs);
* Ray's worker prefix ``(WorkerDict pid=26103) `` / ``(RayTrainWorker pid=1790, ip=10.0.3.17) `` (ray/_private/
  worker.py print_worker_logs: the actor's class name, its pid and, off the head node, its ip), as verl, OpenRLHF and
  LLaMA-Factory's ``USE_RAY=1`` print every line of a worker;
* Docker Compose's service label ``trainer-1  | `` (v1: ``trainer_1  | ``; padded to the longest service name, the
  bar alone on a blank line) and Open MPI's ``mpirun --tag-output`` tag ``[1,3]<stderr>:`` (job, then rank);
* a timestamp: ISO 8601 (``kubectl logs --timestamps``: ``2024-11-23T00:52:57.664949121Z``), the Python logging
  default ``2024-11-23 00:52:57,664``, bracketed ``[2024-11-23 00:52:57]``, syslog/journalctl ``Nov 23 00:52:57
  host kernel:`` and dmesg's seconds since boot ``[  179.437933]``.

`strip_prefixes` removes them from the start and returns what they said: the rank (``[rankN]:``; Slurm's task id
is the global rank under ``srun``), the local rank (torchrun's ``[defaultN]:``), the host (journalctl) and a
wall-clock time (POSIX seconds, or seconds since the start of an unknown year when the prefix names no year;
dmesg seconds since boot are kept apart as ``uptime``). Pure standard library; linear in the line.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov",
                                       "dec"), 1)}
# German/French month abbreviations journalctl prints under those locales (e.g. "Okt 06 17:59:27")
_MONTHS.update({"mär": 3, "mai": 5, "okt": 10, "dez": 12, "janv": 1, "févr": 2, "avr": 4, "juil": 7, "déc": 12})

_VIEWER = re.compile(r"\[\d{1,9}\] |\s{0,8}\d{1,9} \| ")
_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:\s?")
_ROLE = re.compile(r"\[(?P<role>[A-Za-z_]\w*?)(?P<lr>\d+)\]:\s?")
# a Markdown quote marker: ">" with at most one blank after it, repeated for a nested quote ("> > ", ">>> ")
_QUOTE = re.compile(r"(?:>[ \t]?)+")
# SGR colour codes with their escape byte, and (only on a line that also resets, "[0m") the same codes whose escape
# byte a copy from a terminal or a web page dropped: "[36m(TaskRunner pid=980072)[0m step:3 - ..."
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ANSI_BARE = re.compile(r"\x1b?\[[0-9;]{0,12}m")
# Ray's log prefix of a worker's line: "(ClassName pid=N)" or "(ClassName pid=N, ip=A.B.C.D)", "(pid=N)" for a task,
# "(raylet)" for the raylet's own lines
_RAY = re.compile(r"\((?:(?:[A-Za-z_][\w.:-]*) )?pid=\d+(?:, ip=(?P<ip>[0-9a-fA-F.:]+))?\)\s"
                  r"|\((?:raylet|gcs_server)\) ")
# Compose's label: the service name, "-" (v2) or "_" (v1) and the replica number, padding, "|"
_COMPOSE = re.compile(r"[A-Za-z0-9][\w.-]*[-_]\d{1,3} +\|(?: |$)")
_MPI = re.compile(r"\[\d+,(?P<rank>\d+)\]<std(?:out|err|diag)>:")
_SLURM = re.compile(r"\s{0,6}(?P<task>\d{1,5}): ")
_POD = re.compile(r"\[pod/(?P<pod>[^/\]\s]+)/[^\]\s]*\] ")
_ISO = re.compile(r"\[?(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))?"
                  r"(?:Z|[+-]\d\d:?\d\d)?\]?\s")
_SYSLOG = re.compile(r"(?P<mon>[A-Za-zéä]{3,4})\.? {1,2}(?P<d>\d{1,2}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                     r"(?:\.(?P<f>\d+))? (?P<host>[\w.-]+) (?:kernel|\w[\w.-]*(?:\[\d+\])?): ")
_DMESG = re.compile(r"\[\s*(?P<up>\d+\.\d+)\] ")
# pdsh's label (pdsh -R ssh, the runner of `deepspeed --hostfile` across nodes: deepspeed/launcher/multinode_runner.py
# PDSHRunner) puts "host: " before every line of a remote process; a host name here holds a digit and no "_"
# ("gpu-node-2", "node01", "10.0.0.7"), so the "loss: " / "INFO: " / "wandb: " of a line are not taken for one;
# pdsh labels a blank line of the remote process too ("node01: " and nothing after it)
_PDSH = re.compile(r"(?P<host>(?=[A-Za-z0-9.-]*\d)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?: (?=\D)| ?$)")


@dataclass(frozen=True)
class Prefix:
    """What the stripped prefixes said. `wall` is POSIX seconds (or seconds within an unknown year, see the
    module docstring); `uptime` dmesg's seconds since boot."""

    rank: int | None = None
    local_rank: int | None = None
    task: int | None = None
    host: str | None = None
    wall: float | None = None
    uptime: float | None = None
    has_year: bool = False


NONE = Prefix()


def _wall_iso(m: re.Match) -> float:
    secs = calendar.timegm((int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"])))
    return secs + (float("0." + m["f"]) if m["f"] else 0.0)


def wall_in_year(month: int, day: int, h: int, mi: int, s: float) -> float:
    """Seconds since 1 January 00:00 of a non-leap year: what a prefix without a year (syslog, glog ``E1003
    18:37:01``) still orders within one run."""
    return calendar.timegm((1970, month, day, h, mi, 0)) + s


def strip_prefixes(text: str) -> tuple[str, Prefix]:
    """`text` without its leading prefixes (and without any colour code, wherever on the line), and what they
    said. At most 8 prefixes are taken off."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "[0m" in text:
        text = _ANSI_BARE.sub("", text)
    rank = lr = task = wall = up = None
    host = None
    has_year = False
    pos = 0
    for _ in range(8):
        m = _VIEWER.match(text, pos)
        if m:
            pos = m.end()
            continue
        m = _RANK.match(text, pos)
        if m:
            rank, pos = int(m["rank"]), m.end()
            continue
        m = _ISO.match(text, pos)
        if m:
            wall, has_year, pos = _wall_iso(m), True, m.end()
            continue
        m = _SYSLOG.match(text, pos)
        if m and m["mon"].lower().rstrip(".") in _MONTHS:
            mon = _MONTHS[m["mon"].lower().rstrip(".")]
            wall = wall_in_year(mon, int(m["d"]), int(m["h"]), int(m["mi"]),
                                int(m["s"]) + (float("0." + m["f"]) if m["f"] else 0.0))
            host, pos = m["host"], m.end()
            continue
        m = _QUOTE.match(text, pos) if text.startswith(">", pos) else None
        if m:
            pos = m.end()
            continue
        m = _RAY.match(text, pos) if text.startswith("(", pos) else None
        if m:
            host, pos = m["ip"] or host, m.end()
            continue
        m = _DMESG.match(text, pos)
        if m:
            up, pos = float(m["up"]), m.end()
            continue
        m = _POD.match(text, pos)
        if m:
            host, pos = m["pod"], m.end()
            continue
        m = _ROLE.match(text, pos)
        if m and m["role"] != "rank":
            lr, pos = int(m["lr"]), m.end()
            continue
        m = _MPI.match(text, pos) if text.startswith("[", pos) else None
        if m:
            rank, pos = int(m["rank"]), m.end()
            continue
        m = _COMPOSE.match(text, pos) if pos == 0 and "|" in text[:80] else None
        if m:
            pos = m.end()
            continue
        m = _SLURM.match(text, pos)
        if m and pos == 0:
            task, pos = int(m["task"]), m.end()
            continue
        m = _PDSH.match(text, pos) if pos == 0 and ": " in text[:64] else None
        if m and not m["host"].isdigit():
            host, pos = m["host"], m.end()
            continue
        break
    if pos == 0:
        return text, NONE
    return text[pos:], Prefix(rank, lr, task, host, wall, up, has_year)
