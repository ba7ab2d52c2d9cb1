"""Hostile media in a multimodal dataset (issue 27, the media class of the fuzz suite): image and video files whose
headers lie (sizes of 0, 1 and 2^32 - 1, a PNG cut inside IHDR, a JPEG of markers only, MP4 boxes claiming more
than the file holds, random bytes under an image suffix, a folder where a file should be) must each be counted by
a bounded rule or recorded as an assumption: the data scan never raises anything but the one-line InputError, and
every count stays an int within LLaMA-Factory's pixel limits. Deterministic (a seeded generator), fast lane."""

from __future__ import annotations

import json
import random
import struct
import zlib
from pathlib import Path

import pytest

from finetune_doctor.analyzers.data.datascan import collect
from finetune_doctor.errors import InputError

MLLM_DEMO = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "data_examples" /
                        "dataset_info.excerpt.json").read_text())["mllm_demo"]
MAX_TOKENS_PER_IMAGE = 16_384 + 2   # Qwen2-VL's processor cap (12,845,056 px / 28²) plus the vision start/end tokens


def _chunk(t: bytes, d: bytes) -> bytes:
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))


def _png(w: int, h: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + _chunk(b"IEND", b"")


def _mp4(claim: int) -> bytes:
    # an ftyp box, then a moov box that says it is `claim` bytes long (far past the end of the file)
    ftyp = struct.pack(">I4s4sI", 16, b"ftyp", b"isom", 0)
    return ftyp + struct.pack(">I4s", claim & 0xFFFFFFFF, b"moov") + b"\x00" * 8


def _hostile(rng: random.Random) -> list[tuple[str, bytes | None]]:
    big = 2**32 - 1
    out: list[tuple[str, bytes | None]] = [
        ("zero.png", _png(0, 0)), ("one.png", _png(1, 1)), ("wide.png", _png(big, 1)), ("huge.png", _png(big, big)),
        ("cut.png", _png(64, 64)[:20]), ("markers.jpg", b"\xff\xd8" + b"\xff\xe0\x00\x02" * 50),
        ("webp.webp", b"RIFF\xff\xff\xff\xffWEBPVP8X" + b"\xff" * 10), ("gif.gif", b"GIF89a\xff\xff\xff\xff"),
        ("empty.png", b""), ("folder.png", None), ("bomb.mp4", _mp4(big)), ("tiny.mp4", _mp4(1)),
    ]
    for i in range(12):
        suffix = rng.choice([".png", ".jpg", ".webp", ".gif", ".bmp", ".mp4"])
        out.append((f"rand{i}{suffix}", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hostile_media_is_counted_within_bounds_or_assumed(tmp_path, seed):
    pytest.importorskip("PIL.Image")
    rng = random.Random(seed)
    data = tmp_path / "data"
    (data / "m").mkdir(parents=True)
    rows = []
    for name, blob in _hostile(rng):
        p = data / "m" / name
        if blob is None:
            p.mkdir()
        else:
            p.write_bytes(blob)
        key, tag = ("videos", "<video>") if name.endswith(".mp4") else ("images", "<image>")
        rows.append({"messages": [{"role": "user", "content": f"{tag}What is it?"},
                                  {"role": "assistant", "content": "A thing."}], key: [f"m/{name}"]})
    rows.append({"messages": [{"role": "user", "content": "<image>Missing?"}, {"role": "assistant", "content": "."}],
                 "images": ["m/not-there.png"]})
    (data / "dataset_info.json").write_text(json.dumps({"mm": MLLM_DEMO}))
    (data / MLLM_DEMO["file_name"]).write_text(json.dumps(rows))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("stage: sft\n")
    values = {"model_name_or_path": "nowhere/none", "stage": "sft", "dataset": "mm", "template": "qwen2_vl",
              "cutoff_len": 1_000_000, "video_maxlen": 4}
    try:
        facts = collect(values, str(cfg), approximate=True, cwd=str(tmp_path), workers=1)
    except InputError as err:   # the one allowed failure: a one-line message naming the file
        assert err.file and "\n" not in str(err)
        return
    longest = facts["overall"]["longest"]
    assert longest and all(isinstance(e["total"], int) for e in longest)
    # one image row is text plus at most one image's tokens; a 4-frame video at most 4 frames' worth
    assert max(e["total"] for e in longest) < 4 * MAX_TOKENS_PER_IMAGE + 200
