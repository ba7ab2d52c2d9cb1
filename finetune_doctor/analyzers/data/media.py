"""Media tokens of a sample: how many language-model tokens each ``<image>`` / ``<video>`` placeholder becomes, as
LLaMA-Factory's multimodal plugin expands it (``data/mm_plugin.py``), from the image's size read in its header.

Flow per image: the file's width × height (Pillow reads the header only; no pixel is decoded) → LF's resize within
``image_min_pixels``/``image_max_pixels`` → the model family's processor rule (`FAMILIES`) → tokens. For the
Qwen2-VL / Qwen2.5-VL / Qwen3-VL plugins that rule is the processor's smart_resize (one home:
analyzers/memory/vision.py) and ``(h/patch)·(w/patch)/merge²`` ``<|image_pad|>`` tokens plus ``<|vision_start|>``
and ``<|vision_end|>`` (LF mm_plugin.py:2581-2597).

Videos given as MP4/MOV files are counted from their header (duration and frame size, readers/data/mp4.py; no
frame is decoded); any other video counts as ``video_maxlen`` frames at ``video_max_pixels`` — the most LF lets
through — and that is an assumption of the scan.
A video given as a list of frame images (LF's "already sampled" form, mm_plugin.py:2283-2290) is counted from its
frames. Every image that cannot be read here is counted at ``image_max_pixels`` and named as an assumption too.

Families without a rule here (LLaVA, InternVL, Gemma 3, Llama 4, ...) add no media tokens; the scan says so once.
"""

from __future__ import annotations

import io
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

from finetune_doctor.analyzers.memory.vision import PROCESSOR_MAX_PIXELS, PROCESSOR_MIN_PIXELS, image_tokens, \
    lf_resize, qwen_lf_resize, smart_resize, video_smart_resize
from finetune_doctor.readers.data.mp4 import video_header

IMAGE, VIDEO, AUDIO = "<image>", "<video>", "<audio>"   # LF extras/constants.py IMAGE_PLACEHOLDER etc.
_SIZE_CACHE_MAX = 50_000      # image paths whose header size is remembered (one tuple each)


@dataclass(frozen=True)
class MediaRule:
    """How one family's processors turn media into tokens: a ``patch`` × ``merge`` grid, images within the image
    processor's ``[proc_min, proc_max]`` pixels and video frames within the video processor's ``[video_min,
    video_max]`` (for Qwen3-VL over all frames together, `vision.video_smart_resize`); ``wrap`` tokens around each
    image or temporal group (vision start/end); ``temporal`` frames per video patch; ``timestamps``: each temporal
    group is preceded by a ``<t seconds>`` text (LF Qwen3VLPlugin, mm_plugin.py:2750-2762). `source` names where
    the processor values came from."""

    family: str
    patch: int
    merge: int
    proc_min: int
    proc_max: int
    video_min: int
    video_max: int
    wrap: int = 2
    temporal: int = 2
    timestamps: bool = False
    source: str = "transformers defaults"


# LF template name -> family: template.py registers qwen2_vl with the qwen2_vl plugin and qwen3_vl /
# qwen3_vl_nothink with the qwen3_vl plugin. Per family (patch, merge, image min/max, video min/max) when the
# model's own configs are not read: Qwen2-VL: the Qwen2-VL-7B-Instruct preprocessor_config.json (as the memory term)
# and transformers 5.6.0 Qwen2VLVideoProcessor (128·28², 768·28², video_processing_qwen2_vl.py:74); Qwen3-VL:
# patch 16, transformers' Qwen2VLImageProcessor defaults (56², 1280·28²) and Qwen3VLVideoProcessor (128·32²,
# 768·32², video_processing_qwen3_vl.py:88).
FAMILIES = {"qwen2_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_nothink": "qwen3_vl"}
_DEFAULTS = {"qwen2_vl": (14, 2, PROCESSOR_MIN_PIXELS, PROCESSOR_MAX_PIXELS, 128 * 28 * 28, 768 * 28 * 28),
             "qwen3_vl": (16, 2, 56 * 56, 1280 * 28 * 28, 128 * 32 * 32, 768 * 32 * 32)}


def media_rule(template: str | None, preprocessor: dict[str, Any] | None,
               video_preprocessor: dict[str, Any] | None = None) -> MediaRule | None:
    """The `MediaRule` for LF template `template`, with the values of the model's preprocessor_config.json and
    video_preprocessor_config.json (already parsed) where they have them (``patch_size``, ``merge_size``,
    ``min_pixels``/``max_pixels`` or ``size.shortest_edge``/``size.longest_edge``, as transformers reads them);
    None for a family the doctor does not model."""
    family = FAMILIES.get(template or "")
    if family is None:
        return None
    patch, merge, lo, hi, vlo, vhi = _DEFAULTS[family]
    read = []
    got = _proc_values(preprocessor)
    if got:
        patch, merge, lo, hi = got
        read.append("preprocessor_config.json")
    vgot = _proc_values(video_preprocessor)
    if vgot:
        vlo, vhi = vgot[2], vgot[3]
        read.append("video_preprocessor_config.json")
    source = ("the model's " + " and ".join(read)) if len(read) == 2 else \
        f"{family} defaults (transformers 5.6.0 / the reference checkpoint)" + \
        (f"; the model's {read[0]}" if read else "")
    return MediaRule(family, patch, merge, lo, hi, vlo, vhi, timestamps=family == "qwen3_vl", source=source)


def _proc_values(p: Any) -> tuple[int, int, int, int] | None:
    if not isinstance(p, dict):
        return None
    size = p.get("size") if isinstance(p.get("size"), dict) else {}
    vals = (p.get("patch_size"), p.get("merge_size"), p.get("min_pixels", size.get("shortest_edge")),
            p.get("max_pixels", size.get("longest_edge")))
    return vals if all(_pos_int(v) for v in vals) else None  # type: ignore[return-value]


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**40


class MediaCounter:
    """Tokens of the media of one sample for one `MediaRule` and the run's media arguments (`settings`: a
    DataSettings). `issues` counts what was assumed: ``unreadable`` images counted at the bound, ``video_file``
    videos counted at ``video_maxlen`` frames; `examples` keeps the first message of each."""

    def __init__(self, rule: MediaRule, settings: Any, media_dir: str | None, cwd: str | None = None):
        self.rule = rule
        self.s = settings
        self.media_dir = media_dir
        self.cwd = cwd or os.getcwd()
        self._sizes: dict[str, tuple[int, int] | str] = {}
        self._tok: dict[tuple[int, int, int, int], int] = {}
        self._bomb = bomb_limit()
        self.too_large: list[str] = []    # images LF cannot open, since the last `sample`

    # -- one image ------------------------------------------------------------------------------------------------

    def image(self, item: Any, max_pixels: int, min_pixels: int) -> tuple[int, str | None]:
        """(tokens, why it was assumed or None) of one image entry (a path, ``{"path"|"bytes"}``, or bytes).
        An image over Pillow's decompression-bomb limit is counted clamped and remembered in `too_large`."""
        size = self.size_of(item)
        if isinstance(size, str):
            side = math.isqrt(max_pixels)             # unreadable: the largest square LF lets through
            return self._tokens(side, side, max_pixels, min_pixels), size
        limit = self._bomb
        if limit is not None and size[0] * size[1] > limit:
            self.too_large.append(f"{str(item)[:80]} is {size[0]}x{size[1]} = {size[0] * size[1]} pixels, over "
                                  f"Pillow's decompression-bomb limit ({limit}): Image.open in LLaMA-Factory's "
                                  "mm_plugin raises DecompressionBombError")
        return self._tokens(size[0], size[1], max_pixels, min_pixels), None

    def _tokens(self, w: int, h: int, max_pixels: int, min_pixels: int) -> int:
        key = (w, h, max_pixels, min_pixels)
        n = self._tok.get(key)
        if n is None:
            r = self.rule
            n = image_tokens(w, h, max_pixels, min_pixels, patch=r.patch, merge=r.merge, proc_min=r.proc_min,
                             proc_max=r.proc_max)
            if len(self._tok) >= _SIZE_CACHE_MAX:
                self._tok.clear()
            self._tok[key] = n
        return n

    def size_of(self, item: Any) -> tuple[int, int] | str:
        """(width, height) from the image's header, or the reason it could not be read."""
        if isinstance(item, dict):
            data, path = item.get("bytes"), item.get("path")
            if isinstance(data, (bytes, bytearray)):
                return header_size(io.BytesIO(data), "<bytes>")
            item = path
        if isinstance(item, (bytes, bytearray)):
            return header_size(io.BytesIO(item), "<bytes>")
        if not isinstance(item, str) or not item:
            return f"not an image path ({type(item).__name__})"
        hit = self._sizes.get(item)
        if hit is None:
            path = self.resolve(item)
            hit = header_size(path, item) if path else f"{item}: not found (media_dir {self.media_dir or '-'})"
            if len(self._sizes) >= _SIZE_CACHE_MAX:
                self._sizes.clear()
            self._sizes[item] = hit
        return hit

    def resolve(self, name: str) -> str | None:
        """LF's converter (data/converter.py `_find_medias`): ``media_dir/name`` when that is a file, else the name
        as given (relative to where LF is launched)."""
        for base in (self.media_dir, self.cwd):
            if base is None:
                continue
            try:
                p = os.path.join(base, name)
                if os.path.isfile(p):
                    return p
            except (ValueError, OSError):       # NUL bytes, over-long names
                return None
        return None

    def video_file(self, v: Any) -> tuple[int, float | None, tuple[int, int] | None, str | None]:
        """(frames LF samples, duration in seconds or None, (width, height) or None, why it was assumed or None)
        of a video file. From the MP4/MOV header: ``min(video_maxlen, max(1, floor(duration × video_fps)))``
        frames (LF mm_plugin.py:237-247; the stream's frame count, a further cap there, is not read: it binds only
        below ``video_fps`` frames per second) at the track's frame size. Otherwise ``video_maxlen`` frames of
        unknown size (counted at ``video_max_pixels``)."""
        s = self.s
        path = self.resolve(v) if isinstance(v, str) and v else None
        got = video_header(path) if path else None
        if got is not None and math.isfinite(got[0]):
            dur = min(got[0], 1e9)
            return min(s.video_maxlen, max(1, math.floor(dur * s.video_fps))), dur, (got[1], got[2]), None
        why = f"video {str(v)[:80]}: {'no MP4/MOV header read' if path else 'not found'}, counted at " \
              f"video_maxlen={s.video_maxlen} frames of video_max_pixels"
        return s.video_maxlen, None, None, why

    def video_tokens(self, frames: int, size: tuple[int, int] | None, step: float) -> tuple[int, str]:
        """(media tokens, timestamp text) of one video of `frames` sampled frames of `size` (None: the largest
        square ``video_max_pixels`` lets through). LF repeats the last frame to an even count (mm_plugin.py:2313,
        :2451), resizes each frame within ``video_min_pixels``/``video_max_pixels``, and the video processor fits
        it to its own bounds; ``ceil(frames / 2)`` temporal groups of ``(h/patch)·(w/patch)/merge²`` tokens.
        Qwen2-VL wraps the whole video in vision start/end; Qwen3-VL wraps each group and puts a ``<t seconds>``
        text before it: the mean time of the group's first and last frame, frame k at ``k × step`` seconds and the
        repeated frame at the last one's time (transformers ``Qwen3VLProcessor._calculate_timestamps``); for a
        file LF's frames are spread over the whole stream, so the text can differ by a digit from LF's."""
        s, r = self.s, self.rule
        times = [k * step for k in range(frames)]
        frames += frames % r.temporal
        times += times[-1:] * (frames - len(times))
        if size is None:
            side = math.isqrt(s.video_max_pixels)
            size = (side, side)
        w, h = qwen_lf_resize(*lf_resize(size[0], size[1], s.video_max_pixels, s.video_min_pixels))
        if r.timestamps:
            hh, ww = video_smart_resize(frames, h, w, r.video_min, r.video_max, r.patch * r.merge, r.temporal)
        else:
            hh, ww = smart_resize(h, w, r.video_min, r.video_max, r.patch * r.merge)
        groups = -(-frames // r.temporal)
        per = (hh // r.patch) * (ww // r.patch) // (r.merge * r.merge)
        if not r.timestamps:
            return groups * per + r.wrap, ""
        text = "".join(f"<{(times[i] + times[i + r.temporal - 1]) / 2:.1f} seconds>"
                       for i in range(0, frames, r.temporal))
        return groups * (per + r.wrap), text

    # -- one sample -----------------------------------------------------------------------------------------------

    def sample(self, images: list[Any], videos: list[Any]) -> tuple[list[int], list[tuple[int, str]], list[str]]:
        """(tokens per image, (tokens, timestamp text) per video, what was assumed) for one sample's media lists,
        each count with the vision start/end tokens."""
        s, r = self.s, self.rule
        notes: list[str] = []
        self.too_large = []
        img = []
        for it in images:
            n, why = self.image(it, s.image_max_pixels, s.image_min_pixels)
            if why:
                notes.append("image " + why)
            img.append(n + r.wrap)
        vid = []
        for v in videos:
            if isinstance(v, list) and v:                  # frames already sampled (mm_plugin.py:2283-2290)
                size = self.size_of(v[0])
                if isinstance(size, str):
                    notes.append("video frame " + size)
                    size = None
                vid.append(self.video_tokens(len(v), size, 1 / s.video_fps))
            else:
                frames, dur, size, why = self.video_file(v)
                if why:
                    notes.append(why)
                vid.append(self.video_tokens(frames, size, dur / (frames - 1) if dur and frames > 1
                                             else 1 / s.video_fps))
        return img, vid, notes


def bomb_limit() -> int | None:
    """The pixel count above which ``PIL.Image.open`` raises DecompressionBombError (2 × ``MAX_IMAGE_PIXELS``,
    PIL/Image.py ``_decompression_bomb_check``; 178,956,970 by default), None without Pillow or with the check
    switched off. LLaMA-Factory and transformers leave it at the default."""
    try:
        from PIL import Image
    except ImportError:
        return None
    m = Image.MAX_IMAGE_PIXELS
    return 2 * int(m) if m else None


def header_size(src: Any, name: str) -> tuple[int, int] | str:
    """(width, height) of an image file or binary stream from its header (Pillow's lazy open decodes no pixel),
    or the reason in words. A header above Pillow's decompression-bomb limit still gives its size (read through the
    format's plugin directly): LF would fail to open it, and `MediaCounter` counts it clamped."""
    quick = _quick_size(src)
    if quick is not None:
        w, h = quick
        return (w, h) if w > 0 and h > 0 else f"{name}: header gives {w}x{h}"
    try:
        from PIL import Image
    except ImportError:
        return f"{name}: Pillow is not installed (pip install pillow), size not read"
    try:
        with Image.open(src) as im:
            w, h = im.size
    except Image.DecompressionBombError:
        got = _size_past_bomb_check(src)
        if got is None:
            return f"{name}: over Pillow's size limit and unreadable"
        w, h = got
    except (OSError, ValueError, SyntaxError, EOFError) as err:   # UnidentifiedImageError is an OSError
        return f"{name}: not a readable image ({type(err).__name__})"
    if not (isinstance(w, int) and isinstance(h, int)) or w <= 0 or h <= 0:
        return f"{name}: header gives {w}x{h}"
    return w, h


def _quick_size(src: Any) -> tuple[int, int] | None:
    """(width, height) of a PNG or WebP from its first 30 bytes, None for another format or a short read.

    Pillow's own open is not bounded for these two: its PNG reader reads every chunk before the image data whole
    (a private chunk of 1 GiB is read into memory), its WebP reader the whole file. The fields: PNG's IHDR
    (width, height u32 big-endian at bytes 16-23, PNG spec §11.2.2); WebP (RFC 9649): ``VP8X`` canvas size - 1
    (24-bit little-endian at 24 and 27), ``VP8L`` 14-bit width - 1 and height - 1 after the 0x2f signature at 20,
    ``VP8 `` 14-bit width and height after the start code 9d 01 2a at 23."""
    try:
        if isinstance(src, str):
            with open(src, "rb") as f:
                head = f.read(30)
        else:
            src.seek(0)
            head = src.read(30)
            src.seek(0)
    except (OSError, ValueError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        return struct.unpack(">II", head[16:24])
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP" or len(head) < 30:
        return None
    kind = head[12:16]
    if kind == b"VP8X":
        return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
    if kind == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        return struct.unpack("<H", head[26:28])[0] & 0x3FFF, struct.unpack("<H", head[28:30])[0] & 0x3FFF
    return None


def _size_past_bomb_check(src: Any) -> tuple[int, int] | None:
    """The size from the first Pillow plugin that accepts the file, without ``Image.open``'s bomb check (which
    would raise before the size is returned). Plugins only parse the header in their constructor."""
    from PIL import Image

    Image.preinit()
    try:
        fp = open(src, "rb") if isinstance(src, str) else src
    except OSError:
        return None
    try:
        fp.seek(0)
        prefix = fp.read(16)
        for fmt in list(Image.ID):
            factory, accept = Image.OPEN[fmt]
            if accept is not None and not accept(prefix):
                continue
            fp.seek(0)
            try:
                im = factory(fp, "")
            except (OSError, ValueError, SyntaxError, EOFError, TypeError):
                continue
            return im.size
    finally:
        if isinstance(src, str):
            fp.close()
    return None


def read_preprocessor(folder: str | None, name: str = "preprocessor_config.json") -> dict[str, Any] | None:
    """The model folder's preprocessor_config.json (what transformers' AutoImageProcessor reads; `name`
    video_preprocessor_config.json for the video processor), or None when there is none, it is over 1 MiB or not
    a JSON object."""
    if not folder:
        return None
    import json

    path = os.path.join(str(folder), name)
    try:
        if os.path.getsize(path) > 1 << 20:
            return None
        with open(path, encoding="utf-8") as f:
            got = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    return got if isinstance(got, dict) else None


def media_facts(rule: MediaRule | None, settings: Any, facts: dict[str, Any]) -> dict[str, Any]:
    """``data.media``: the family rule used (or None), where its processor values came from, the samples with
    media, how many had a size assumed, and the `note` the report prints (one line, or None without media)."""
    samples = (facts.get("overall") or {}).get("with_media") or 0
    assumed = sum(p["count"] for p in facts.get("problems") or () if p.get("kind") == "media_assumed")
    limits = (f"image_max_pixels={settings.image_max_pixels}, image_min_pixels={settings.image_min_pixels}, "
              f"video_max_pixels={settings.video_max_pixels}, video_maxlen={settings.video_maxlen}")
    note = None
    if samples and rule is None:
        note = (f"{samples} samples carry images/videos/audios, but the media tokens of template "
                f"{settings.template!r} are not modelled: lengths count the text only (LLaMA-Factory adds the "
                "processor's tokens per image, from one to thousands)")
    elif samples:
        note = (f"{samples} samples carry images/videos: media tokens counted as LLaMA-Factory's {rule.family} "
                f"plugin expands them ({limits}; processor {rule.patch}x{rule.merge} patches within "
                f"{rule.proc_min}..{rule.proc_max} pixels, from {rule.source}); audios are not counted")
        if assumed:
            note += f"; {assumed} samples with media sizes assumed (see the media_assumed problem)"
    return {"family": rule.family if rule else None, "template": settings.template,
            "processor_source": rule.source if rule else None, "samples": samples, "assumed_samples": assumed,
            "limits": {"image_max_pixels": settings.image_max_pixels, "image_min_pixels": settings.image_min_pixels,
                       "video_max_pixels": settings.video_max_pixels, "video_min_pixels": settings.video_min_pixels,
                       "video_maxlen": settings.video_maxlen},
            "note": note}


def media_assumptions(media: dict[str, Any] | None) -> list:
    """The `Assumption`s behind ``data.media`` (finetune_doctor/types.py): media tokens not modelled for a family,
    processor values not read from the model, media sizes not read. Empty without media."""
    from finetune_doctor.types import Assumption

    if not isinstance(media, dict) or not media.get("samples"):
        return []
    out = []
    if media.get("family") is None:
        out.append(Assumption(
            "media-tokens", 0, f"template {media.get('template')!r}: its plugin's token rule is not modelled",
            alternatives=("the processor's tokens per image (LLaVA 576, Qwen-VL up to image_max_pixels/784, ...)",),
            resolve_with="a Qwen-VL template (qwen2_vl, qwen3_vl), or measure one batch with LLaMA-Factory"))
        return out
    if not str(media.get("processor_source") or "").startswith("the model's"):
        out.append(Assumption(
            "media-processor-pixels", media.get("processor_source"),
            "the model folder's preprocessor_config.json / video_preprocessor_config.json were not both read "
            "(min_pixels/max_pixels, patch_size)",
            alternatives=("the checkpoint's own min_pixels/max_pixels",),
            resolve_with="the model's folder with preprocessor_config.json on this machine"))
    if media.get("assumed_samples"):
        lim = media.get("limits") or {}
        out.append(Assumption(
            "media-sizes", f"image_max_pixels={lim.get('image_max_pixels')}, "
                           f"video_maxlen={lim.get('video_maxlen')} frames",
            f"{media['assumed_samples']} samples with images not found/unreadable here or videos without an MP4/MOV header: "
            "counted at the largest size LLaMA-Factory lets through",
            alternatives=("smaller images or shorter videos (fewer tokens)",),
            resolve_with="the media files under media_dir on this machine; videos as frame lists"))
    return out
