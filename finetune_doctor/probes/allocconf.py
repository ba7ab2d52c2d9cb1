"""PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF parsed as PyTorch parses them, into a frozen `AllocatorConfig`.

Pure Python (no torch): the settings come from a user's environment, a run folder's launch script or ``--env``.

Sources (pytorch/pytorch):

* tokenizer: ``c10/core/AllocatorConfig.h`` ``ConfigTokenizer`` (torch ≥ 2.9; the same lexing is
  ``AllocatorConfig::lexArgs`` in 2.8 and ``CUDAAllocatorConfig::lexArgs`` in 2.3-2.7): every ``,`` ``:`` ``[``
  ``]`` is a token of its own, whitespace is dropped, everything else accumulates into words.
* options: ``c10/core/AllocatorConfig.cpp`` ``AcceleratorAllocatorConfig::parseArgs`` and its ``parse*`` helpers
  (2.9+), ``c10/cuda/CUDAAllocatorConfig.cpp`` ``parseArgs`` (2.3-2.8; CUDA-only keys such as
  ``release_lock_on_cudamalloc`` and ``pinned_*`` stay there in 2.9+):

  - ``max_split_size_mb:N`` — integer MiB, at least 20 (``kLargeBuffer / kMB``), else "CachingAllocator option
    max_split_size_mb too small, must be >= 20"; stored as N MiB. Default: unlimited.
  - ``max_non_split_rounding_mb:N`` (2.5+) — same bounds; default 20 MiB (``kLargeBuffer``).
  - ``garbage_collection_threshold:F`` — a float in (0, 1), else "garbage_collect_threshold is invalid, set it
    in (0.0, 1.0)". Acts only with a per-process memory fraction (``set_fraction`` in ``malloc``).
  - ``roundup_power2_divisions:N`` (one power of 2 for every size) or ``[A:N,B:N,...,>:N]`` (A, B sizes in MiB,
    powers of 2; N a power of 2 or 0): 16 intervals from 1 MiB to 64 GiB, interval index log2(MiB); the first
    entry also fills the intervals below it; ``>`` fills the rest (from the last named interval on in 2.3-2.8,
    from the one after it in 2.9+, ``std::next(begin, last_index + 1)``).
  - ``expandable_segments:True|False`` — exactly ``True`` or ``False``.
  - ``backend:native|cudaMallocAsync``; ``release_lock_on_cudamalloc:True|False``;
    ``pinned_use_cuda_host_register:True|False``; ``pinned_num_register_threads:N``;
    ``pinned_use_background_threads``, ``pinned_reserve_segment_size_mb``, ``graph_capture_record_stream_reuse``
    (accepted, no effect on the device pools modelled here).
  - any other key: "Unrecognized CachingAllocator option" (2.3-2.8) / "Unrecognized key ... in CUDA allocator
    config" (2.9+).

Which variable is read: from torch 2.8 on ``AcceleratorAllocatorConfig::instance`` reads ``PYTORCH_ALLOC_CONF``
first and falls back to ``PYTORCH_CUDA_ALLOC_CONF`` (with a deprecation warning, 2.8 ≤ torch < 2.12;
PriorLabs/TabPFN#608); earlier versions read ``PYTORCH_CUDA_ALLOC_CONF`` only. On 2.9.1 ``expandable_segments``
given through ``PYTORCH_ALLOC_CONF`` did not reach the CUDA allocator (pytorch/pytorch#183387); that bug is not
modelled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from finetune_doctor.errors import InputError
from finetune_doctor.numbers import parse_version

MIB = 1 << 20
K_LARGE_BUFFER = 20 * MIB          # kLargeBuffer: 20 MiB
ROUNDUP_INTERVALS = 16             # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB
PRIMARY_VAR = "PYTORCH_ALLOC_CONF"
LEGACY_VAR = "PYTORCH_CUDA_ALLOC_CONF"

_BOOL_KEYS = ("expandable_segments", "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
              "pinned_use_cuda_host_register", "pinned_use_hip_host_register", "pinned_use_background_threads",
              "graph_capture_record_stream_reuse")
_INT_KEYS = ("pinned_num_register_threads", "pinned_reserve_segment_size_mb")


@dataclass(frozen=True)
class AllocatorConfig:
    """The caching allocator's settings (bytes where a size).

    `max_split_size`: blocks of this size or larger are never split (None: unlimited, the default).
    `max_non_split_rounding`: how much larger than the request an unsplittable cached block may be (20 MiB).
    `garbage_collection_threshold`: 0.0 = off. `roundup_power2_divisions`: 16 entries, one per power-of-two
    interval from 1 MiB to 64 GiB (0 = plain 512-byte rounding). `expandable_segments`: grow one segment per
    stream and pool instead of cudaMalloc per segment. `backend`: "native" or "cudaMallocAsync" (the replay models
    "native" only). `text` and `variable`: what was parsed and from where ("" / None for the defaults).
    """

    max_split_size: int | None = None
    max_non_split_rounding: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    expandable_segments: bool = False
    backend: str = "native"
    release_lock_on_cudamalloc: bool = False
    text: str = ""
    variable: str | None = None
    extra: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def divisions_for(self, size: int) -> int:
        """``roundup_power2_divisions(size)``: the interval index is log2(size) − 20, clamped to [0, 15]."""
        log_size = size.bit_length() - 1
        index = min(max(log_size - 20, 0), ROUNDUP_INTERVALS - 1)
        return self.roundup_power2_divisions[index]

    def describe(self) -> str:
        return self.text or "defaults"


def tokenize(text: str) -> list[str]:
    """ConfigTokenizer: separators are tokens, whitespace is dropped (``"a:1, b:[2,3]"`` → a : 1 , b : [ 2 , 3 ])."""
    out: list[str] = []
    buf = ""
    for ch in text:
        if ch in ",:[]":
            if buf:
                out.append(buf)
                buf = ""
            out.append(ch)
        elif not ch.isspace():
            buf += ch
    if buf:
        out.append(buf)
    return out


def _version_tuple(v: str | tuple[int, int] | None) -> tuple[int, int] | None:
    if v is None or isinstance(v, tuple):
        return v
    got = parse_version(str(v), parts=2)   # numbers.py, the one reader of release strings
    return got if got is not None and len(got) == 2 else None


class _Parser:
    def __init__(self, text: str, variable: str, version: tuple[int, int] | None):
        self.tokens, self.variable, self.version = tokenize(text), variable, version
        self.i = 0

    def fail(self, msg: str) -> InputError:
        return InputError(f"{self.variable}={self.text_for_error()}: {msg}")

    def text_for_error(self) -> str:
        return "".join(self.tokens)

    def take(self, what: str) -> str:
        if self.i >= len(self.tokens):
            raise self.fail(f"expected {what} at the end of the setting")
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, sep: str, key: str) -> None:
        tok = self.take(f"'{sep}' after {key}")
        if tok != sep:
            raise self.fail(f"expected '{sep}' after {key}, got {tok!r}")

    def integer(self, key: str) -> int:
        tok = self.take(f"a value for {key}")
        if not re.fullmatch(r"\d+", tok):
            raise self.fail(f"{key} takes a whole number, got {tok!r}")
        return int(tok)

    def boolean(self, key: str) -> bool:
        tok = self.take(f"True or False for {key}")
        if tok not in ("True", "False"):
            raise self.fail(f"expected a single True/False argument for {key}, got {tok!r}")
        return tok == "True"


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _parse_divisions(p: _Parser, key: str) -> tuple[int, ...]:
    """``roundup_power2_divisions`` in either form (AcceleratorAllocatorConfig::parseRoundUpPower2Divisions)."""
    div = [0] * ROUNDUP_INTERVALS
    if p.i < len(p.tokens) and p.tokens[p.i] == "[":
        p.i += 1
        first, last = True, 0
        newer = p.version is None or p.version >= (2, 9)
        while True:
            tok = p.take("']' closing roundup_power2_divisions")
            if tok == "]":
                break
            p.expect(":", f"{key} interval {tok}")
            value = p.integer(key)
            if value != 0 and not _power_of_two(value):
                raise p.fail("for roundups, the divisions has to be power of 2 or 0 to disable roundup")
            if tok == ">":
                start = last + 1 if newer else last
                for j in range(min(start, ROUNDUP_INTERVALS), ROUNDUP_INTERVALS):
                    div[j] = value
            else:
                if not re.fullmatch(r"\d+", tok) or not _power_of_two(int(tok)):
                    raise p.fail(f"for roundups, the intervals have to be power of 2, got {tok!r}")
                index = min(int(tok).bit_length() - 1, ROUNDUP_INTERVALS - 1)
                if first:
                    for j in range(index):
                        div[j] = value
                    first = False
                div[index] = value
                last = index
            if p.i < len(p.tokens) and p.tokens[p.i] == ",":
                p.i += 1
        return tuple(div)
    value = p.integer(key)
    if not _power_of_two(value):
        raise p.fail("for roundups, the divisions has to be power of 2")
    return (value,) * ROUNDUP_INTERVALS


def parse_alloc_conf(text: str, *, variable: str = LEGACY_VAR,
                     torch_version: str | tuple[int, int] | None = None) -> AllocatorConfig:
    """Parse an allocator setting string as torch does (module docstring) into an `AllocatorConfig`.

    `variable` names the source in error messages; `torch_version` ("2.11.0" or (2, 11); None: the newest rules)
    selects the version-dependent details. Raises InputError (naming `variable`) for an unknown key, a missing
    ``:``/``,``, a non-boolean ``expandable_segments``, ``max_split_size_mb`` < 20, a threshold outside (0, 1), or
    divisions that are not powers of 2.
    """
    version = _version_tuple(torch_version)
    p = _Parser(text or "", variable, version)
    kw: dict = {}
    extra: list[tuple[str, str]] = []
    while p.i < len(p.tokens):
        key = p.take("an option name")
        p.expect(":", key)
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            if key == "max_non_split_rounding_mb" and version is not None and version < (2, 5):
                raise p.fail(f"unrecognized CachingAllocator option {key!r} (added in torch 2.5)")
            mb = p.integer(key)
            if mb < K_LARGE_BUFFER // MIB:
                raise p.fail(f"CachingAllocator option {key} too small, must be >= {K_LARGE_BUFFER // MIB}")
            kw["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding"] = mb * MIB
        elif key == "garbage_collection_threshold":
            tok = p.take(f"a value for {key}")
            try:
                value = float(tok)
            except ValueError:
                raise p.fail(f"{key} takes a number, got {tok!r}") from None
            if not 0.0 < value < 1.0:
                raise p.fail("garbage_collect_threshold is invalid, set it in (0.0, 1.0)")
            kw["garbage_collection_threshold"] = value
        elif key == "roundup_power2_divisions":
            kw["roundup_power2_divisions"] = _parse_divisions(p, key)
        elif key == "backend":
            tok = p.take("a value for backend")
            if tok not in ("native", "cudaMallocAsync"):
                raise p.fail(f"unknown allocator backend {tok!r}, options are native and cudaMallocAsync")
            kw["backend"] = tok
        elif key in _BOOL_KEYS:
            value = p.boolean(key)
            if key == "expandable_segments":
                kw["expandable_segments"] = value
            elif key.startswith("release_lock"):
                kw["release_lock_on_cudamalloc"] = value
            else:
                extra.append((key, str(value)))
        elif key in _INT_KEYS:
            extra.append((key, str(p.integer(key))))
        else:
            raise p.fail(f"unrecognized CachingAllocator option {key!r}")
        if p.i < len(p.tokens):
            p.expect(",", key + "'s value")
    return AllocatorConfig(**kw, text=text or "", variable=variable, extra=tuple(extra))


def find_alloc_conf(env: Mapping[str, str], torch_version: str | tuple[int, int] | None = None
                    ) -> tuple[str | None, str | None]:
    """(variable, text) of the allocator setting torch would read from `env`, or (None, None).

    torch ≥ 2.8 (or an unknown version): ``PYTORCH_ALLOC_CONF`` first, then ``PYTORCH_CUDA_ALLOC_CONF``; older
    torch: ``PYTORCH_CUDA_ALLOC_CONF`` only (module docstring).
    """
    version = _version_tuple(torch_version)
    names = (PRIMARY_VAR, LEGACY_VAR) if version is None or version >= (2, 8) else (LEGACY_VAR,)
    for name in names:
        if name in env:
            return name, env[name]
    return None, None


def alloc_conf_from_env(env: Mapping[str, str], torch_version: str | tuple[int, int] | None = None
                        ) -> AllocatorConfig:
    """The `AllocatorConfig` torch would use for a process started with environment `env` (defaults when the
    variables are absent). Raises InputError naming the variable when its value does not parse."""
    name, text = find_alloc_conf(env, torch_version)
    if name is None:
        return AllocatorConfig()
    return parse_alloc_conf(text or "", variable=name, torch_version=torch_version)


def with_expandable(config: AllocatorConfig, on: bool) -> AllocatorConfig:
    """`config` with expandable_segments switched (for what-if replays)."""
    text = f"{config.text},expandable_segments:{on}" if config.text else f"expandable_segments:{on}"
    return replace(config, expandable_segments=on, text=text)
