"""Media tokens in the data scan (issue 27 item 5): images read from their headers, clamped by LF's pixel limits and
expanded as LLaMA-Factory's Qwen-VL plugins expand ``<image>`` (data/mm_plugin.py). Datasets are written in LF's
multimodal formats (the ``mllm_demo`` sharegpt entry and an alpaca entry with an ``images`` column) and every
expected count is worked by hand from the processor formula in the comments."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import pytest

from finetune_doctor.analyzers.data.datascan import collect
from finetune_doctor.analyzers.data.media import header_size, media_rule
from finetune_doctor.facts import data as data_facts

PIL = pytest.importorskip("PIL.Image")

# LF's own entry for its multimodal demo data (data/dataset_info.json, kept in the fixtures)
MLLM_DEMO = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "llamafactory" / "data_examples" /
                        "dataset_info.excerpt.json").read_text())["mllm_demo"]
ALPACA_MM = {"file_name": "alpaca_mm.json", "columns": {"prompt": "instruction", "query": "input",
                                                        "response": "output", "images": "images"}}


def png_header_only(w: int, h: int) -> bytes:
    """A PNG whose IHDR claims w × h and holds no pixel data: what a hostile or truncated file looks like."""
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def scan(tmp_path, rows, entry=MLLM_DEMO, name="mm", **cfg):
    data = tmp_path / "data"
    (data / "imgs").mkdir(parents=True, exist_ok=True)
    PIL.new("RGB", (640, 480)).save(data / "imgs" / "a.png")
    PIL.new("RGB", (10, 10)).save(data / "imgs" / "tiny.jpg")
    (data / "imgs" / "huge.png").write_bytes(png_header_only(100_000, 100_000))
    (data / "dataset_info.json").write_text(json.dumps({name: entry}))
    (data / entry["file_name"]).write_text(json.dumps(rows))
    config = tmp_path / "cfg.yaml"
    config.write_text("stage: sft\n")
    values = {"model_name_or_path": "nowhere/none", "stage": "sft", "dataset": name, "template": "qwen2_vl",
              "cutoff_len": 100_000, **cfg}
    facts = collect(values, str(config), approximate=True, cwd=str(tmp_path), workers=1)
    return facts


def totals(facts):
    return [e["total"] for e in facts["overall"]["longest"]]


def conv(user, images):
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": "They are two."}],
            "images": images}


# Hand computation (Qwen2-VL: patch 14, merge 2, processor pixels 3136..12845056; LF image_max_pixels 768·768,
# image_min_pixels 32·32):
#  640×480: 307,200 px within LF's limits; smart_resize rounds 480 → 17·28 = 476 and 640 → 23·28 = 644:
#           (476/14)·(644/14) = 34·46 = 1564 patches → 1564/4 = 391 <|image_pad|> + vision start/end = 393
#  100000×100000: LF shrinks by sqrt(589824/10^10) → 768×768; 768 → 27·28 = 756: 54² = 2916 patches → 729 + 2 = 731
#  10×10: below 1024 px LF enlarges by sqrt(1024/100) = 3.2 → 32×32; smart_resize 32 → 28, 28·28 = 784 < 3136 so
#         beta = sqrt(3136/1024) = 1.75, ceil(32·1.75/28)·28 = 56: 4² = 16 patches → 4 + 2 = 6
A, HUGE, TINY = 393, 731, 6


def test_image_tokens_join_the_sample_length_sharegpt(tmp_path):
    base = scan(tmp_path, [conv("Who are they?", [])])
    with_img = scan(tmp_path, [conv("<image>Who are they?", ["imgs/a.png"])])
    # the placeholder text is replaced by the media tokens: the text part is the same as without it
    assert totals(with_img)[0] - totals(base)[0] == A
    assert with_img["media"]["family"] == "qwen2_vl" and with_img["media"]["samples"] == 1
    assert not any(p["kind"] == "media_assumed" for p in with_img["problems"])


def test_huge_header_is_clamped_not_31_tokens(tmp_path):
    base = scan(tmp_path, [conv("Who are they?", [])])
    facts = scan(tmp_path, [conv("<image>Who are they?", ["imgs/huge.png"]),
                            conv("<image><image>Who are they?", ["imgs/tiny.jpg", "imgs/a.png"])])
    got = sorted(t - totals(base)[0] for t in totals(facts))
    assert got == sorted([HUGE, TINY + A])
    # and LF cannot open it: 10^10 pixels is over Pillow's decompression-bomb limit (2 × 89,478,485)
    prob = next(p for p in facts["problems"] if p["kind"] == "bad_value")
    assert prob["fatal"] and prob["count"] == 1 and "DecompressionBombError" in prob["message"]
    assert "10000000000 pixels" in prob["message"] and "178956970" in prob["message"]


def test_image_limits_from_the_config_are_used(tmp_path):
    base = scan(tmp_path, [conv("Who are they?", [])], image_max_pixels=256 * 256)
    facts = scan(tmp_path, [conv("<image>Who are they?", ["imgs/huge.png"])], image_max_pixels=256 * 256)
    # 256×256; 256 → round(256/28)·28 = 252: 18² = 324 patches → 81 + 2
    assert totals(facts)[0] - totals(base)[0] == 83


def test_alpaca_images_column_and_cutoff_truncation(tmp_path):
    row = {"instruction": "<image>Describe.", "input": "", "output": "A photo.", "images": ["imgs/a.png"]}
    plain = {"instruction": "Describe.", "input": "", "output": "A photo.", "images": []}
    base = scan(tmp_path, [plain], ALPACA_MM, name="amm")
    facts = scan(tmp_path, [row], ALPACA_MM, name="amm")
    assert totals(facts)[0] - totals(base)[0] == A
    # with cutoff_len below the image's tokens the sample is truncated, as LF truncates the expanded ids
    short = scan(tmp_path, [row], ALPACA_MM, name="amm", cutoff_len=256)
    assert short["overall"]["truncated"] == 1


def test_missing_image_is_an_assumption_counted_at_the_bound(tmp_path):
    base = scan(tmp_path, [conv("Who are they?", [])])
    facts = scan(tmp_path, [conv("<image>Who are they?", ["imgs/nowhere.png"])])
    # counted as the largest square LF lets through: 768×768 → 731 (as the huge image), never silently 0
    assert totals(facts)[0] - totals(base)[0] == HUGE
    prob = next(p for p in facts["problems"] if p["kind"] == "media_assumed")
    assert prob["count"] == 1 and not prob["fatal"] and "nowhere.png" in prob["message"]
    names = [a.name for a in data_facts.assumptions(facts)]
    assert "media-sizes" in names and "media-processor-pixels" in names
    assert "1 samples with media sizes assumed" in " ".join(facts["notes"])


def box(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", 8 + len(body)) + kind + body


def mp4(seconds_x1000: int, w: int, h: int) -> bytes:
    """A minimal MP4 as muxers write it: ftyp, moov (mvhd v0 with timescale 1000, an audio trak with 0×0 and a
    video trak with w×h in 16.16), then mdat."""
    mvhd = box(b"mvhd", bytes(4) + struct.pack(">IIII", 0, 0, 1000, seconds_x1000) + bytes(80))

    def trak(tw: int, th: int) -> bytes:
        tkhd = bytes(4) + struct.pack(">IIIII", 0, 0, 1, 0, seconds_x1000) + bytes(8 + 8 + 36) + \
            struct.pack(">II", tw << 16, th << 16)
        return box(b"trak", box(b"tkhd", tkhd) + box(b"mdia", bytes(16)))
    return box(b"ftyp", b"isom" + bytes(4) + b"isommp41") + box(b"moov", mvhd + trak(0, 0) + trak(w, h)) + \
        box(b"mdat", bytes(64))


VIDEO_ENTRY = {**MLLM_DEMO, "columns": {"messages": "messages", "videos": "videos"}}


def vconv(user, videos):
    return {"messages": conv(user, [])["messages"], "videos": videos}


def test_video_file_is_assumed_at_video_maxlen(tmp_path):
    base = scan(tmp_path, [vconv("Why?", [])], VIDEO_ENTRY)
    facts = scan(tmp_path, [vconv("<video>Why?", ["v.mp4"])], VIDEO_ENTRY, video_maxlen=8)
    # not found: 8 frames (even) at video_max_pixels 256·256. The video processor's bounds are 128·28²..768·28²
    # (Qwen2VLVideoProcessor): 256 → 252, 252² = 63,504 < 100,352, beta = sqrt(100352/65536) = 1.2374,
    # ceil(256·1.2374/28)·28 = 336: 24² = 576 patches → 144 tokens per group of 2 frames: 4·144 + 2
    assert totals(facts)[0] - totals(base)[0] == 4 * 144 + 2
    assert any(a.name == "media-sizes" for a in data_facts.assumptions(facts))


def test_mp4_duration_and_size_from_the_header(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "clip.mp4").write_bytes(mp4(10_500, 640, 360))
    base = scan(tmp_path, [vconv("Why?", [])], VIDEO_ENTRY)
    facts = scan(tmp_path, [vconv("<video>Why?", ["clip.mp4"])], VIDEO_ENTRY)
    # 10.5 s at video_fps 2: floor(21) frames (< video_maxlen 128), even → 22: 11 groups. 640×360 = 230,400 px
    # over video_max_pixels: × sqrt(65536/230400) → 341×192; smart_resize: 196×336 = 65,856 < 100,352, beta =
    # sqrt(100352/65472) = 1.2381 → ceil(192·1.2381/28)·28 = 252, ceil(341·1.2381/28)·28 = 448:
    # 18·32 = 576 patches → 144 per group: 11·144 + 2
    assert totals(facts)[0] - totals(base)[0] == 11 * 144 + 2
    assert not any(p["kind"] == "media_assumed" for p in facts["problems"])


def test_qwen3_vl_video_frames_with_timestamps(tmp_path):
    from finetune_doctor.analyzers.data.dataargs import DataSettings
    from finetune_doctor.analyzers.data.media import MediaCounter

    data = tmp_path / "f"
    data.mkdir()
    for i in range(3):
        PIL.new("RGB", (640, 480)).save(data / f"{i}.png")
    m = MediaCounter(media_rule("qwen3_vl", None), DataSettings(template="qwen3_vl"), str(data))
    (img, vid, notes) = m.sample([], [[f"{i}.png" for i in range(3)]])
    # 3 frames → 4 (the last repeated); 640×480 over 65,536 px: × sqrt(65536/307200) → 295×221; Qwen3-VL's video
    # resize (factor 32, bounds 128·32²..768·32² over all 4 frames): 224×288, 4·224·288 = 258,048 within: 7·9·4 =
    # 252 patches → 63 tokens per group, each group wrapped: 2·(63 + 2); timestamps of frames [0, 1, 2, 2] at 2 fps
    # averaged per group: 0.25 → "0.2", 1.0
    assert vid == [(2 * (63 + 2), "<0.2 seconds><1.0 seconds>")] and not notes


def test_placeholder_count_mismatch_is_what_lf_raises(tmp_path):
    facts = scan(tmp_path, [conv("Who are they?", ["imgs/a.png"])])
    prob = next(p for p in facts["problems"] if p["kind"] == "bad_value")
    assert prob["fatal"] and "The number of images does not match" in prob["message"]


def test_unmodelled_family_says_so_once(tmp_path):
    facts = scan(tmp_path, [conv("<image>Who are they?", ["imgs/a.png"])], template="llava")
    assert facts["media"]["family"] is None
    assert sum("media tokens of template 'llava' are not modelled" in n for n in facts["notes"]) == 1
    (asm,) = data_facts.assumptions(facts)
    assert asm.name == "media-tokens" and asm.value == 0


def test_preprocessor_config_values_are_used():
    rule = media_rule("qwen3_vl", {"patch_size": 16, "merge_size": 2,
                                   "size": {"shortest_edge": 65536, "longest_edge": 16777216}})
    assert (rule.patch, rule.merge, rule.proc_min, rule.proc_max) == (16, 2, 65536, 16777216)
    assert rule.source.endswith("the model's preprocessor_config.json")   # the video values are defaults
    assert (rule.video_min, rule.video_max) == (128 * 32 * 32, 768 * 32 * 32)
    both = media_rule("qwen3_vl", {"patch_size": 16, "merge_size": 2, "min_pixels": 3136, "max_pixels": 10 ** 7},
                      {"patch_size": 16, "merge_size": 2, "size": {"shortest_edge": 4096, "longest_edge": 25165824}})
    assert (both.proc_min, both.proc_max, both.video_min, both.video_max) == (3136, 10 ** 7, 4096, 25165824)
    assert both.source == "the model's preprocessor_config.json and video_preprocessor_config.json"
    # a value transformers would not take (a string, a bool) leaves the defaults in place
    assert media_rule("qwen2_vl", {"patch_size": "14", "merge_size": 2, "min_pixels": 1, "max_pixels": 2}).proc_min \
        == 3136
    assert media_rule("llava", None) is None


def test_header_size_reads_no_pixels_and_survives_bombs(tmp_path):
    p = tmp_path / "x.png"
    p.write_bytes(png_header_only(100_000, 100_000))
    assert header_size(str(p), "x.png") == (100_000, 100_000)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    assert "not a readable image" in header_size(str(tmp_path / "bad.png"), "bad.png")
    (tmp_path / "zero.png").write_bytes(png_header_only(0, 5))
    assert isinstance(header_size(str(tmp_path / "zero.png"), "zero.png"), str)
    # what LF meets at Image.open for that header
    with pytest.raises(PIL.DecompressionBombError):
        PIL.open(str(p))
    # a format Pillow parses itself (GIF, 60000×60000 in its logical screen and image descriptor): read past
    # Image.open's bomb check through the GIF plugin
    gif = (b"GIF89a" + struct.pack("<HH", 60000, 60000) + b"\x00\x00\x00" + b",\x00\x00\x00\x00"
           + struct.pack("<HH", 60000, 60000) + b"\x00\x02\x02\x4c\x01\x00;")
    with pytest.raises(PIL.DecompressionBombError):
        PIL.open(io.BytesIO(gif))
    assert header_size(io.BytesIO(gif), "<bytes>") == (60000, 60000)


@pytest.mark.parametrize("ext,kw", [("png", {}), ("webp", {"lossless": True}), ("webp", {"quality": 80}),
                                    ("gif", {}), ("jpg", {}), ("bmp", {})])
def test_header_size_agrees_with_pillow(tmp_path, ext, kw):
    from PIL import features

    if ext == "webp" and not features.check("webp"):
        pytest.skip("this Pillow has no WebP")
    p = tmp_path / f"x.{ext}"
    PIL.new("RGB", (1001, 37)).save(p, **kw)
    with PIL.open(p) as im:
        assert header_size(str(p), p.name) == im.size == (1001, 37)
    assert header_size(io.BytesIO(p.read_bytes()), "<bytes>") == (1001, 37)


def test_png_with_a_huge_chunk_is_read_from_its_first_bytes(tmp_path):
    # IHDR, then a private chunk claiming 1 GiB: only the first 30 bytes are read (no MemoryError, no 1 GiB read)
    head = png_header_only(4000, 3000)[:33] + struct.pack(">I", 1 << 30) + b"prIv"
    (tmp_path / "c.png").write_bytes(head)
    assert header_size(str(tmp_path / "c.png"), "c.png") == (4000, 3000)


def test_mp4_reader_is_bounded_and_refuses_lies(tmp_path):
    from finetune_doctor.readers.data.mp4 import video_header

    good = tmp_path / "g.mp4"
    good.write_bytes(mp4(3000, 1920, 1080))
    assert video_header(str(good)) == (3.0, 1920, 1080)
    lie = tmp_path / "lie.mp4"
    lie.write_bytes(struct.pack(">I", 2**31) + b"moov" + bytes(32))   # a box claiming 2 GiB in a 40-byte file
    assert video_header(str(lie)) is None
    many = tmp_path / "many.mp4"
    many.write_bytes(box(b"free", b"") * 100_000)                       # 100k empty boxes: stops at the budget
    assert video_header(str(many)) is None
    assert video_header(str(tmp_path / "absent.mp4")) is None
