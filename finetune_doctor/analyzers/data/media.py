"""Media tokens of a sample: how many language-model tokens each ``<image>`` / ``<video>`` placeholder becomes, as
LLaMA-Factory's multimodal plugin expands it (``data/mm_plugin.py``), from the image's size read in its header.

Flow per image: the file's width × height (Pillow reads the header only; no pixel is decoded) → LF's resize within
``image_min_pixels``/``image_max_pixels`` → the model family's processor rule (`FAMILIES`) → tokens. For the
Qwen2-VL / Qwen2.5-VL / Qwen3-VL plugins that rule is the processor's smart_resize (one home:
analyzers/memory/vision.py) and ``(h/patch)·(w/patch)/merge²`` ``<|image_pad|>`` tokens plus ``<|vision_start|>``
and ``<|vision_end|>`` (LF mm_plugin.py:2581-2597).

Videos given as files are not opened (reading their duration needs a container parser): each counts as
``video_maxlen`` frames at ``video_max_pixels`` — the most LF lets through — and that is an assumption of the scan.
A video given as a list of frame images (LF's "already sampled" form, mm_plugin.py:2283-2290) is counted from its
frames. Every image that cannot be read here is counted at ``image_max_pixels`` and named as an assumption too.

Families without a rule here (LLaVA, InternVL, Gemma 3, Llama 4, ...) add no media tokens; the scan says so once.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from typing import Any

from finetune_doctor.analyzers.memory.vision import PROCESSOR_MAX_PIXELS, PROCESSOR_MIN_PIXELS, image_tokens

IMAGE, VIDEO, AUDIO = "<image>", "<video>", "<audio>"   # LF extras/constants.py IMAGE_PLACEHOLDER etc.
_SIZE_CACHE_MAX = 50_000      # image paths whose header size is remembered (one tuple each)


@dataclass(frozen=True)
class MediaRule:
    """How one family's processor turns an image into tokens: ``patch`` × ``merge`` grid within the processor's
    ``[proc_min, proc_max]`` pixels, ``wrap`` tokens around each image (vision start/end), ``temporal`` frames per
    video patch. `source` names where the processor values came from (a preprocessor_config.json or a default)."""

    family: str
    patch: int
    merge: int
    proc_min: int
    proc_max: int
    wrap: int = 2
    temporal: int = 2
    source: str = "transformers defaults"


# LF template name -> (family, patch, merge): template.py registers qwen2_vl with the qwen2_vl plugin and qwen3_vl /
# qwen3_vl_nothink with the qwen3_vl plugin; transformers 5.6.0 Qwen2VLImageProcessor: patch 14, merge 2,
# min 56·56, max 28·28·1280; Qwen3-VL checkpoints use patch 16 (factor 32) with the same processor class.
FAMILIES = {"qwen2_vl": ("qwen2_vl", 14, 2), "qwen3_vl": ("qwen3_vl", 16, 2), "qwen3_vl_nothink": ("qwen3_vl", 16, 2)}


def media_rule(template: str | None, preprocessor: dict[str, Any] | None) -> MediaRule | None:
    """The `MediaRule` for LF template `template`, with the processor values of the model's
    preprocessor_config.json (`preprocessor`, already parsed) where it has them; None for a family the doctor does
    not model. Qwen2-VL without a preprocessor_config.json uses the Qwen2-VL-7B-Instruct checkpoint's values
    (min 3136, max 12,845,056), the ones the memory term uses."""
    fam = FAMILIES.get(template or "")
    if fam is None:
        return None
    family, patch, merge = fam
    lo, hi = (PROCESSOR_MIN_PIXELS, PROCESSOR_MAX_PIXELS) if family == "qwen2_vl" else (56 * 56, 28 * 28 * 1280)
    source = "Qwen2-VL-7B-Instruct preprocessor_config.json" if family == "qwen2_vl" else \
        "transformers Qwen2VLImageProcessor defaults (no preprocessor_config.json read)"
    p = preprocessor if isinstance(preprocessor, dict) else {}
    size = p.get("size") if isinstance(p.get("size"), dict) else {}
    vals = {"patch": p.get("patch_size"), "merge": p.get("merge_size"),
            "lo": p.get("min_pixels", size.get("shortest_edge")), "hi": p.get("max_pixels", size.get("longest_edge"))}
    if all(_pos_int(v) for v in vals.values()):
        patch, merge, lo, hi = vals["patch"], vals["merge"], vals["lo"], vals["hi"]
        source = "the model's preprocessor_config.json"
    return MediaRule(family, patch, merge, lo, hi, source=source)


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

    # -- one image ------------------------------------------------------------------------------------------------

    def image(self, item: Any, max_pixels: int, min_pixels: int) -> tuple[int, str | None]:
        """(tokens, why it was assumed or None) of one image entry (a path, ``{"path"|"bytes"}``, or bytes)."""
        size = self.size_of(item)
        if isinstance(size, str):
            side = math.isqrt(max_pixels)             # unreadable: the largest square LF lets through
            return self._tokens(side, side, max_pixels, min_pixels), size
        return self._tokens(size[0], size[1], max_pixels, min_pixels), None

    def _tokens(self, w: int, h: int, max_pixels: int, min_pixels: int) -> int:
        r = self.rule
        return image_tokens(w, h, max_pixels, min_pixels, patch=r.patch, merge=r.merge, proc_min=r.proc_min,
                            proc_max=r.proc_max)

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

    # -- one sample -----------------------------------------------------------------------------------------------

    def sample(self, images: list[Any], videos: list[Any]) -> tuple[list[int], list[int], list[str]]:
        """(tokens per image, tokens per video, what was assumed) for one sample's media lists, each count with the
        vision start/end tokens."""
        s, r = self.s, self.rule
        notes: list[str] = []
        img = []
        for it in images:
            n, why = self.image(it, s.image_max_pixels, s.image_min_pixels)
            if why:
                notes.append("image " + why)
            img.append(n + r.wrap)
        vid = []
        for v in videos:
            if isinstance(v, list) and v:
                frames = len(v)
                per, why = self.image(v[0], s.video_max_pixels, s.video_min_pixels)
                if why:
                    notes.append("video frame " + why)
            else:
                frames = s.video_maxlen
                side = math.isqrt(s.video_max_pixels)
                per = self._tokens(side, side, s.video_max_pixels, s.video_min_pixels)
                notes.append(f"video {str(v)[:80]}: not opened, counted at video_maxlen={frames} frames")
            frames += frames % r.temporal                  # LF repeats the last frame to an even count (:2313)
            vid.append(per * (frames // r.temporal) + r.wrap)
        return img, vid, notes


def header_size(src: Any, name: str) -> tuple[int, int] | str:
    """(width, height) of an image file or binary stream from its header (Pillow's lazy open decodes no pixel),
    or the reason in words. A header above Pillow's decompression-bomb limit still gives its size (read through the
    format's plugin directly): LF would fail to open it, and `MediaCounter` counts it clamped."""
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


def read_preprocessor(folder: str | None) -> dict[str, Any] | None:
    """The model folder's preprocessor_config.json (what transformers' AutoImageProcessor reads), or None when
    there is none, it is over 1 MiB or not a JSON object."""
    if not folder:
        return None
    import json

    path = os.path.join(str(folder), "preprocessor_config.json")
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
    if media.get("processor_source") != "the model's preprocessor_config.json":
        out.append(Assumption(
            "media-processor-pixels", media.get("processor_source"),
            "the model folder's preprocessor_config.json was not read (min_pixels/max_pixels, patch_size)",
            alternatives=("the checkpoint's own min_pixels/max_pixels",),
            resolve_with="the model's folder with preprocessor_config.json on this machine"))
    if media.get("assumed_samples"):
        lim = media.get("limits") or {}
        out.append(Assumption(
            "media-sizes", f"image_max_pixels={lim.get('image_max_pixels')}, "
                           f"video_maxlen={lim.get('video_maxlen')} frames",
            f"{media['assumed_samples']} samples with images not found/unreadable here or video files not opened: "
            "counted at the largest size LLaMA-Factory lets through",
            alternatives=("smaller images or shorter videos (fewer tokens)",),
            resolve_with="the media files under media_dir on this machine; videos as frame lists"))
    return out
