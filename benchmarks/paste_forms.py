"""How many of the real-thread pastes the doctor gets right stay right when the same paste reaches it in another
form (issue #25: pastes are the weakest form on held-out rounds). Each right paste of rounds 1-11 (a traceback, a
frame, a clock or a progress bar in at least four lines; round 12 is held out and never loaded) is re-judged after
one transformation: a Markdown quote, an indented code block, a fence, terminal colours (with and without the
escape byte), the line labels of Ray, pdsh, Docker Compose, Open MPI, Kubernetes and torchrun, a terminal's hard
wrap at 80/120/200 columns, and a launcher's or another rank's failure appended below (torchrun's exit-code-1 tail,
LLaMA-Factory's CalledProcessError under it, rank 1's NCCL watchdog lines). The appended tails can contradict a
paste (a SIGKILL summary, a hang, a stop from outside), so their counts are an upper bound on what is wrong.

    python benchmarks/paste_forms.py [FORM ...]
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _each(prefix: str):
    return lambda s: "\n".join(prefix + ln for ln in s.split("\n"))


def _wrap(width: int):
    def f(s: str) -> str:
        out = []
        for ln in s.split("\n"):
            while len(ln) > width:
                out, ln = out + [ln[:width]], ln[width:]
            out.append(ln)
        return "\n".join(out)
    return f


_SITE = "/usr/local/lib/python3.10/site-packages/torch/distributed"
TORCHRUN_TAIL = f"""W0611 00:25:00.871000 140234 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 3457 closing signal SIGTERM
E0611 00:25:01.123000 140234 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 3456) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "{_SITE}/run.py", line 919, in main
    run(args)
  File "{_SITE}/run.py", line 910, in run
    elastic_launch(
  File "{_SITE}/launcher/api.py", line 138, in __call__
    return launch_agent(self._config, self._entrypoint, list(args))
  File "{_SITE}/launcher/api.py", line 269, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
src/train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-06-11_00:25:01
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 3456)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""
LF_TAIL = """Traceback (most recent call last):
  File "/usr/local/bin/llamafactory-cli", line 8, in <module>
    sys.exit(main())
  File "/workspace/LLaMA-Factory/src/llamafactory/cli.py", line 95, in main
    process = subprocess.run(
  File "/usr/lib/python3.10/subprocess.py", line 526, in run
    raise CalledProcessError(retcode, process.args,
subprocess.CalledProcessError: Command '['torchrun', '--nproc_per_node', '2', 'launcher.py', 'train.yaml']' returned non-zero exit status 1."""
NCCL_TAIL = """[rank1]:[E1203 15:22:51.310417 48171 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4127, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800043 milliseconds before timing out.
[rank1]:[E1203 15:22:51.311109 48171 ProcessGroupNCCL.cpp:636] [Rank 1] To avoid data inconsistency, we are taking the entire process down."""

FORMS = {
    "quoted": _each("> "), "indented": _each("    "), "fenced": lambda s: "```text\n" + s + "\n```\n",
    "details": lambda s: "<details>\n<summary>Error log</summary>\n\n" + s + "\n</details>\n",
    "ansi": lambda s: "\n".join("\x1b[31m" + ln + "\x1b[0m" for ln in s.split("\n")),
    "ray-colour-lost": _each("[36m(TaskRunner pid=980072)[0m "), "ray-ip": _each("(RayTrainWorker pid=1790, ip=10.0.3.17) "),
    "pdsh": _each("worker-0: "), "compose": _each("trainer-1  | "), "mpi": _each("[1,0]<stderr>:"),
    "k8s": _each("[pod/trainer-0/pytorch] "), "torchrun-tee": _each("[default0]:"),
    "wrap-80": _wrap(80), "wrap-120": _wrap(120), "wrap-200": _wrap(200),
    "torchrun-tail": lambda s: s.rstrip("\n") + "\n" + TORCHRUN_TAIL + "\n",
    "lf-tail": lambda s: s.rstrip("\n") + "\n" + TORCHRUN_TAIL + "\n" + LF_TAIL + "\n",
    "watchdog-tail": lambda s: s.rstrip("\n") + "\n" + NCCL_TAIL + "\n",
}


def main() -> int:
    spec = importlib.util.spec_from_file_location("real_threads", ROOT / "benchmarks" / "real_threads.py")
    assert spec and spec.loader
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    sys.path.insert(0, str(ROOT))
    cases = [c for c in rt.load_cases() if c["log"].count("\n") >= 3 and (
        "Traceback" in c["log"] or 'File "' in c["log"] or "it/s" in c["log"]
        or re.search(r"\d\d:\d\d:\d\d", c["log"]))]
    right = [c for c in cases if rt.judge_case(c)["right"]]
    print(f"{len(cases)} pastes, {len(right)} right as given\n\n| form | turned wrong | which |\n|---|---|---|")
    for name in sys.argv[1:] or list(FORMS):
        turned = [c["id"] for c in right if not rt.judge_case({**c, "log": FORMS[name](c["log"])})["right"]]
        print(f"| {name} | {len(turned)} | {', '.join(turned)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
