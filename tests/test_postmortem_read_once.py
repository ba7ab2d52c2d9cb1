"""Each log is read once (issue #25, the speed bound of 256 x 50 MB rank logs): only the readers open it, and the
bytes Python reads of it are one pass plus the bounded looks at its head and tail (the duplicate fingerprint: 1 MiB
at each end, readers/runlogs/runlayout.py; sniff and the own-report test: 64 KiB each; the reader's first read:
64 KiB; the line feeds after grep's last hit). Analyzers read what the reader kept (readers/runlogs/logkept.py):
the frame lines above an exception, the text of a paste, the world sizes of a log's head.

The opens are counted with `open` / `io.open` wrapped by monkeypatch; grep's own pass (readers/runlogs/loggrep.py,
a subprocess) is not a Python read and is not counted.
"""

from __future__ import annotations

import builtins
import io
import traceback
from collections import Counter

import pytest

from finetune_doctor.pipeline import postmortem as pm
from finetune_doctor.settings import Options

# LLaMA-Factory's INFO line (extras/logging.py format "[LEVEL|time] module:line >> msg"); no trigger word in it
_FILLER = ("[INFO|2025-06-01 10:00:00] llamafactory.data.loader:143 >> Converting format of dataset (num_proc=16): "
           "12000 examples\n")
# a paste cut above its "Traceback" header, ending in xtuner's table of supported models (InternLM/xtuner#812)
_TAIL = ('  File "/home/u/xtuner/xtuner/model/modules/dispatch/__init__.py", line 261, in check\n'
         "    assert TRANSFORMERS_VERSION >= LOWEST_TRANSFORMERS_VERSION[\n"
         "KeyError: 'BaichuanForCausalLM'\n")
HEADS = (2 << 20) + 4 * 65536   # bytes: the fingerprint's two MiB and the head reads (module docstring)


def _counting(monkeypatch, target: str):
    opens: Counter = Counter()
    nbytes = Counter()
    real = io.open

    class Counted:
        def __init__(self, fh):
            self._fh = fh

        def read(self, *a):
            b = self._fh.read(*a)
            nbytes["read"] += len(b)
            return b

        def __iter__(self):
            for ln in self._fh:
                nbytes["read"] += len(ln)
                yield ln

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self._fh.close()

        def __getattr__(self, k):
            return getattr(self._fh, k)

    def counted_open(file, *a, **k):
        fh = real(file, *a, **k)
        if str(file) != target:
            return fh
        caller = traceback.extract_stack()[-2].filename.replace("\\", "/")
        opens[caller.split("finetune_doctor/")[-1].split("/")[0]] += 1
        return Counted(fh)

    monkeypatch.setattr(builtins, "open", counted_open)
    monkeypatch.setattr(io, "open", counted_open)
    return opens, nbytes


def test_a_50_mb_log_is_read_once_and_only_by_the_readers(tmp_path, monkeypatch):
    log = tmp_path / "train.log"
    n = (50 << 20) // len(_FILLER)
    with log.open("w", encoding="utf-8") as fh:
        fh.write(_FILLER * n)
        fh.write(_TAIL)
    size = log.stat().st_size
    opens, nbytes = _counting(monkeypatch, str(log))
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    # the exception's frame lines were kept by the reader: the trainer's table is still named
    assert r.findings[0].name == "run-crashed"
    assert "the KeyError is raised in xtuner's own code" in r.findings[0].message
    assert set(opens) == {"readers"}, opens
    assert size <= nbytes["read"] <= size + HEADS, (nbytes["read"], size)


@pytest.mark.parametrize("banner", ["Fatal Python error: Segmentation fault", None])
def test_a_native_crash_paste_is_not_read_again_by_the_analyzers(tmp_path, monkeypatch, banner):
    # a DeepSpeed launcher paste of a segfaulted rank (launcher/launch.py "exits with return code = -11"), with and
    # without CPython's fault-handler banner above it (Python/faulthandler.c)
    lines = ([banner, "", "Current thread 0x00007f3c2a1fd740 (most recent call first):",
              '  File "/usr/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 51 in _flash_attn_forward',
              ""] if banner else []) + [
        "[2024-05-02 10:11:12,345] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 41234",
        "[2024-05-02 10:11:12,346] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'src/train.py', "
        "'--local_rank=0'] exits with return code = -11"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    opens, _ = _counting(monkeypatch, str(log))
    r = pm.run(str(tmp_path), [], None, Options(command="postmortem"))
    f = next(x for x in r.findings if x.name == "native-crash")
    assert set(opens) == {"readers"}, opens
    # the words of the paste reached the analyzer through FileEvidence.text
    assert ("_flash_attn_forward (flash_attn_interface.py:51)" in f.message) == bool(banner)
    assert ("PYTHONFAULTHANDLER=1" in f.message) != bool(banner)
