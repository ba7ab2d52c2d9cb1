"""readers/runlogs/logs.py `_reads_as_keys`: a file that failed as YAML and holds a log trigger word is a config when
its lines are keys (LF's YAML and JSON configs), a log when they are messages (torchrun's failure paste). Both
sides, through `looks_like_log` (what `doctor check` asks before naming `postmortem`), and the two shapes the
80 % line heuristic judges the other way, pinned so a change to it is seen."""

from __future__ import annotations

import pytest

from finetune_doctor.readers.runlogs.logs import _KEY_LINE, _reads_as_keys, looks_like_log

# LF's examples/train_lora/llama3_lora_sft.yaml in shape, with a trigger word in a comment and `report_to` twice
# (the repeated key of trial 8 / LlamaFactory#8150 that made the YAML fail to load)
YAML_CONFIG = b"""### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
# NCCL_P2P_DISABLE=1 was needed on the 4090 box
report_to: none

### output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
report_to: tensorboard
"""

# the same run as a JSON config (read_args: .json), one key per line as json.dump(indent=2) writes it
JSON_CONFIG = b"""{
  "model_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct",
  "stage": "sft",
  "do_train": true,
  "finetuning_type": "lora",
  "lora_target": "all",
  "dataset": "identity,alpaca_en_demo",
  "template": "llama3",
  "cutoff_len": 2048,
  "output_dir": "saves/llama3-8b/lora/sft",
  "run_name": "NCCL ring test",
  "report_to": "none"
}
"""

# torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors/__init__.py's format) after a rank
# was SIGKILLed: its six `time      : ...` lines are key-shaped, the rest are messages
TORCHRUN_PASTE = b"""W1207 08:11:02.123000 3301 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 3386 closing signal SIGTERM
E1207 08:11:03.456000 3301 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 3385) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
src/train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-08_10:31:49
  host      : gpu01
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 3385)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 3385
============================================================
"""


@pytest.mark.parametrize(("name", "text", "keys"), [
    ("config.yaml", YAML_CONFIG, True),
    ("config.json", JSON_CONFIG, True),
    ("train.log", TORCHRUN_PASTE, False),
])
def test_keys_against_a_log(tmp_path, name, text, keys):
    assert _reads_as_keys(text) is keys
    p = tmp_path / name
    p.write_bytes(text)
    assert looks_like_log(str(p)) is (not keys)   # each holds a trigger word: the key test alone decides


def test_the_share_of_key_lines_decides_at_80_percent():
    lines = [ln for ln in TORCHRUN_PASTE.splitlines() if ln.strip()]
    keyish = [ln for ln in lines if _KEY_LINE.match(ln)]
    # ChildFailedError's line, "Failures:" and the six lines of the root-cause block; 8 of 18 (44 %): a log
    assert len(keyish) == 8 and len(lines) == 18, keyish
    # four messages among 16 keys is 80 %: keys; five is 76 %: a log
    keys = [b"k%d: v" % i for i in range(16)]
    assert _reads_as_keys(b"\n".join(keys + [b"a message"] * 4))
    assert not _reads_as_keys(b"\n".join(keys + [b"a message"] * 5))


def test_the_shapes_judged_the_other_way():
    # a YAML whose lines are mostly a block scalar's text (a long `system` prompt) reads as a log ...
    block = b"template: qwen\nsystem: |\n" + b"".join(b"  You are a helpful assistant, line %d.\n" % i for i in range(8))
    assert not _reads_as_keys(block)
    # ... and a log of `name: value` lines only (a DeepSpeed config dump) reads as keys
    dump = b"".join(b"  %s: %d\n" % (k, i) for i, k in enumerate((b"train_batch_size", b"stage", b"overlap_comm",
                                                                   b"reduce_bucket_size", b"allgather_bucket_size")))
    assert _reads_as_keys(dump)
