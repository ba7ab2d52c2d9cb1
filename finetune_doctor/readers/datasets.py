"""Find the datasets a LLaMA-Factory config names and stream their rows, keeping file and line of each row.

Resolution follows LLaMA-Factory's ``data/parser.py`` (``get_dataset_list``, ``DatasetAttr.join``; LF_FACTS.md §4):
``dataset_info.json`` in ``dataset_dir`` maps each name to a source (``hf_hub_url`` / ``ms_hub_url`` /
``om_hub_url``, then ``script_url``, then ``cloud_file_name``, then ``file_name``), a ``formatting`` (alpaca,
sharegpt, openai), ``ranking``, ``columns`` and ``tags``. Local files are read the way ``datasets.load_dataset``
reads them for LF's file types (``extras/constants.py`` FILEEXT2TYPE: arrow, csv, json, jsonl, parquet, txt): a
``.json`` file may hold a JSON array or JSON Lines; a ``.txt`` file is one sample per line in a ``text`` column.

Everything here streams: rows come out in chunks and nothing holds a whole file. A JSON array is split with the
standard library's C scanner (``json.JSONDecoder.raw_decode``) over a sliding buffer. Bad rows do not stop a scan:
they become `RowError` values with file and line, and the caller marks its results partial.

Hub datasets are looked up only in local caches (the HF hub cache ``datasets--org--name`` snapshots and the
``datasets`` library's Arrow cache); no network access is ever made. Readers judge nothing: they report what they
found, and analyzers/pipelines decide what it means.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from finetune_doctor.errors import InputError

DATA_CONFIG = "dataset_info.json"
FILEEXT2TYPE = {"arrow": "arrow", "csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet", "txt": "text"}

# DatasetAttr defaults (LF data/parser.py).
DEFAULT_COLUMNS: dict[str, str | None] = {
    "prompt": "instruction", "query": "input", "response": "output", "history": None, "messages": "conversations",
    "system": None, "tools": None, "images": None, "videos": None, "audios": None, "chosen": None,
    "rejected": None, "kto_tag": None,
}
DEFAULT_TAGS: dict[str, str | None] = {
    "role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
    "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system",
}


class DatasetDirNotFound(InputError):
    """No dataset_info.json where the config's ``dataset_dir`` points: the data is not on this machine."""


@dataclass(frozen=True)
class DatasetSpec:
    """One entry of ``dataset`` as LLaMA-Factory resolves it.

    `load_from` is file | hf_hub | ms_hub | om_hub | script | cloud_file | online. `files` are the local files
    that hold its rows (empty when none were found; `unavailable` then says why). `columns`/`tags` are the
    resolved LF mappings (defaults filled in; ``columns`` in dataset_info.json *replaces* every column, so a
    mapping that omits ``query`` leaves it None exactly as ``DatasetAttr.join`` does). `info_line` is the line of
    the entry in dataset_info.json (1-based) for findings.
    """

    name: str
    load_from: str
    source: str
    formatting: str = "alpaca"
    ranking: bool = False
    subset: str | None = None
    split: str = "train"
    folder: str | None = None
    num_samples: int | None = None
    columns: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULT_COLUMNS))
    tags: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULT_TAGS))
    files: tuple[str, ...] = ()
    file_type: str | None = None
    info_path: str | None = None
    info_line: int | None = None
    unavailable: str | None = None
    cached_from: str | None = None

    def location(self) -> dict[str, Any]:
        """Where a finding about this dataset as a whole should point: its dataset_info.json entry."""
        if self.info_path:
            return {"file": self.info_path, "line": self.info_line, "column": None, "key": self.name}
        return {"file": self.files[0] if self.files else None, "line": None, "column": None, "key": self.name}


@dataclass(frozen=True)
class RowError:
    """A row that could not be read: `file`, 1-based `line` (or None), `index` of the row when known."""

    kind: str          # malformed_json | bad_row | unreadable
    file: str
    line: int | None
    message: str
    index: int | None = None
    fatal: bool = False  # the rest of the file could not be read


@dataclass
class Chunk:
    """A batch of rows from one file. Either `rows` (parsed dicts) or `raw` (JSON Lines text, parsed later by
    `parse_json_lines` so that parsing can run in worker processes); `lines[i]` is the 1-based line of row i
    (None for columnar files), `first_index` the 0-based row index of the first row within the dataset."""

    file: str
    first_index: int
    rows: list[dict[str, Any]] | None = None
    raw: list[str] | None = None
    lines: list[int | None] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)
    bytes_done: int = 0
    keys: set[str] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.rows if self.rows is not None else self.raw or ())


# --- dataset_info.json ----------------------------------------------------------------------------------------------


def find_dataset_dir(dataset_dir: str, *, cwd: str | None = None, config_dir: str | None = None) -> tuple[str, str]:
    """Locate `dataset_dir` the way a user most likely ran ``llamafactory-cli`` from.

    LLaMA-Factory opens ``os.path.join(dataset_dir, "dataset_info.json")`` relative to the working directory
    (data/parser.py). We try that first, then the config's folder and each folder above it (an LF checkout runs
    ``examples/train_lora/x.yaml`` from its root). Returns (directory, how) where `how` is ``cwd`` | ``config`` |
    ``absolute``; raises InputError naming every place tried when none holds dataset_info.json.
    """
    if os.path.isabs(dataset_dir):
        if os.path.isfile(os.path.join(dataset_dir, DATA_CONFIG)):
            return dataset_dir, "absolute"
        raise DatasetDirNotFound(f"no {DATA_CONFIG} in dataset_dir {dataset_dir}", file=dataset_dir)
    tried = []
    cwd = cwd or os.getcwd()
    cand = os.path.normpath(os.path.join(cwd, dataset_dir))
    tried.append(cand)
    if os.path.isfile(os.path.join(cand, DATA_CONFIG)):
        return cand, "cwd"
    if config_dir:
        d = Path(config_dir).resolve()
        for base in [d, *d.parents]:
            cand = os.path.normpath(os.path.join(str(base), dataset_dir))
            if cand in tried:
                continue
            tried.append(cand)
            if os.path.isfile(os.path.join(cand, DATA_CONFIG)):
                return cand, "config"
    raise DatasetDirNotFound(f"cannot find {dataset_dir}/{DATA_CONFIG} (looked in: {', '.join(tried[:4])}"
                     + (" …" if len(tried) > 4 else "") + ")", file=os.path.join(dataset_dir, DATA_CONFIG))


def load_dataset_info(path: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse dataset_info.json; returns (mapping, {dataset name: 1-based line of its key}).

    Raises InputError with the line of a JSON syntax error, or when the top level is not an object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=path) from None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"malformed JSON: {err.msg} (column {err.colno})", file=path, line=err.lineno) from None
    if not isinstance(info, dict):
        raise InputError("top level must be an object of dataset entries", file=path, line=1)
    lines: dict[str, int] = {}
    # The key of an entry is the first `"name":` at the shallowest indentation; enough for a finding's line.
    for m in re.finditer(r'^([ \t]*)"((?:[^"\\]|\\.)*)"\s*:', text, re.M):
        name = json.loads(f'"{m.group(2)}"')
        if name in info and name not in lines:
            lines[name] = text.count("\n", 0, m.start()) + 1
    return info, lines


def _join_attr(spec_kw: dict[str, Any], attr: dict[str, Any]) -> None:
    """``DatasetAttr.join``: formatting/ranking/subset/split/folder/num_samples, then columns and tags.

    When ``columns`` is present every column is set from it (absent ones become None); same for ``tags``.
    """
    spec_kw["formatting"] = attr.get("formatting", "alpaca")
    spec_kw["ranking"] = attr.get("ranking", False)
    spec_kw["subset"] = attr.get("subset")
    spec_kw["split"] = attr.get("split", "train")
    spec_kw["folder"] = attr.get("folder")
    spec_kw["num_samples"] = attr.get("num_samples")
    cols = dict(DEFAULT_COLUMNS)
    if "columns" in attr and isinstance(attr["columns"], dict):
        for k in cols:
            cols[k] = attr["columns"].get(k)
    tags = dict(DEFAULT_TAGS)
    if "tags" in attr and isinstance(attr["tags"], dict):
        for k in tags:
            tags[k] = attr["tags"].get(k)
    spec_kw["columns"] = cols
    spec_kw["tags"] = tags


def resolve_datasets(names: list[str], dataset_dir: str, *, cwd: str | None = None, config_dir: str | None = None,
                     cache_dir: str | None = None, env: dict[str, str] | None = None) -> tuple[list[DatasetSpec], str]:
    """Resolve dataset names to `DatasetSpec` values; returns (specs, resolved dataset_dir).

    ``dataset_dir: ONLINE`` makes every name a hub id (LF parser.py); ``REMOTE:repo`` needs the hub and is
    reported unavailable. Raises InputError when dataset_info.json is missing or malformed, or a name is not
    defined in it (LF raises ``ValueError("Undefined dataset X in dataset_info.json.")``).
    A spec whose data is not on this machine gets `unavailable` set instead of raising.
    """
    env = dict(os.environ if env is None else env)
    if dataset_dir == "ONLINE":
        specs = [_locate(DatasetSpec(name=n, load_from="hf_hub", source=n), dataset_dir, cache_dir, env)
                 for n in names]
        return specs, dataset_dir
    if dataset_dir.startswith("REMOTE:"):
        return [DatasetSpec(name=n, load_from="remote", source=dataset_dir[7:],
                            unavailable=f"dataset_info.json lives on the hub ({dataset_dir}); not read offline")
                for n in names], dataset_dir
    ddir, how = find_dataset_dir(dataset_dir, cwd=cwd, config_dir=config_dir)
    info_path = os.path.join(ddir, DATA_CONFIG)
    info, lines = load_dataset_info(info_path)
    if how == "config" and not any(n in info for n in names):
        # found by walking up from the config, not where LLaMA-Factory looks (the working directory), and it
        # defines none of the run's datasets: an unrelated dataset_info.json, not the run's
        raise DatasetDirNotFound(f"no {DATA_CONFIG} defining {', '.join(names)} under {dataset_dir} (the one at "
                                 f"{info_path} is unrelated)", file=info_path)
    use_ms = env.get("USE_MODELSCOPE_HUB", "0").lower() in ("true", "1")
    use_om = env.get("USE_OPENMIND_HUB", "0").lower() in ("true", "1")
    specs = []
    for n in names:
        if n not in info:
            raise InputError(f"dataset {n!r} is not defined in {DATA_CONFIG} (LLaMA-Factory: 'Undefined dataset')",
                             file=info_path)
        attr = info[n]
        if not isinstance(attr, dict):
            raise InputError(f"entry {n!r} must be an object", file=info_path, line=lines.get(n))
        kw: dict[str, Any] = {"name": n, "info_path": info_path, "info_line": lines.get(n)}
        has_hf, has_ms, has_om = "hf_hub_url" in attr, "ms_hub_url" in attr, "om_hub_url" in attr
        if has_hf or has_ms or has_om:
            if has_ms and (use_ms or not has_hf):
                kw.update(load_from="ms_hub", source=attr["ms_hub_url"])
            elif has_om and (use_om or not has_hf):
                kw.update(load_from="om_hub", source=attr["om_hub_url"])
            else:
                kw.update(load_from="hf_hub", source=attr["hf_hub_url"])
        elif "script_url" in attr:
            kw.update(load_from="script", source=attr["script_url"])
        elif "cloud_file_name" in attr:
            kw.update(load_from="cloud_file", source=attr["cloud_file_name"])
        elif "file_name" in attr:
            kw.update(load_from="file", source=attr["file_name"])
        else:
            raise InputError(f"entry {n!r} names no source (file_name, hf_hub_url, ...)", file=info_path,
                             line=lines.get(n))
        _join_attr(kw, attr)
        specs.append(_locate(DatasetSpec(**kw), ddir, cache_dir, env))
    return specs, ddir


def _file_type(path: str) -> str | None:
    return FILEEXT2TYPE.get(os.path.splitext(path)[1][1:])


def _locate(spec: DatasetSpec, ddir: str, cache_dir: str | None, env: dict[str, str]) -> DatasetSpec:
    from dataclasses import replace

    if spec.load_from == "file":
        local = os.path.join(ddir, spec.source)
        if os.path.isdir(local):
            files = sorted(os.path.join(local, f) for f in os.listdir(local))
            if not files:
                return replace(spec, unavailable=f"folder {local} is empty")
        elif os.path.isfile(local):
            files = [local]
        else:
            return replace(spec, unavailable=f"file {local} not found (LLaMA-Factory: 'File ... not found.')")
        types = {_file_type(f) for f in files}
        if None in types:
            bad = next(f for f in files if _file_type(f) is None)
            return replace(spec, files=tuple(files),
                           unavailable=f"{bad}: not a type LLaMA-Factory loads (arrow, csv, json, jsonl, parquet, txt)")
        if len(types) > 1:
            return replace(spec, files=tuple(files), unavailable=f"{local}: mixed file types "
                           f"({', '.join(sorted(t for t in types if t))}); LLaMA-Factory requires one type")
        return replace(spec, files=tuple(files), file_type=types.pop())
    if spec.load_from == "script":
        return replace(spec, unavailable="loaded by a dataset script; scripts are never run by the doctor")
    if spec.load_from == "cloud_file":
        return replace(spec, unavailable=f"cloud file {spec.source} is not read offline")
    if spec.load_from in ("hf_hub", "ms_hub", "om_hub"):
        found = find_cached_hub_dataset(spec.source, spec.split, subset=spec.subset, folder=spec.folder,
                                        cache_dir=cache_dir, env=env)
        if found is None:
            return replace(spec, unavailable=f"hub dataset {spec.source} is not in the local HF cache "
                                             "(not available offline)")
        files, ftype, where = found
        return replace(spec, files=tuple(files), file_type=ftype, cached_from=where)
    return replace(spec, unavailable=f"cannot load {spec.load_from} datasets offline")


# --- hub caches -----------------------------------------------------------------------------------------------------


def hf_hub_cache(env: dict[str, str] | None = None) -> Path:
    """The HF hub cache folder: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub (huggingface_hub
    constants.py)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                              "huggingface")
    return Path(home).expanduser() / "hub"


def hub_snapshot(repo_id: str, kind: str, cache: Path) -> Path | None:
    """The snapshot folder of a cached hub repo (``{kind}s--org--name/snapshots/<rev>``): the revision
    ``refs/main`` names, else the newest snapshot. `kind` is ``model`` or ``dataset``."""
    root = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    snaps = root / "snapshots"
    if not snaps.is_dir():
        return None
    ref = root / "refs" / "main"
    if ref.is_file():
        rev = ref.read_text().strip()
        if (snaps / rev).is_dir():
            return snaps / rev
    cands = sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    return cands[0] if cands else None


def find_cached_hub_dataset(repo_id: str, split: str = "train", *, subset: str | None = None,
                            folder: str | None = None, cache_dir: str | None = None,
                            env: dict[str, str] | None = None) -> tuple[list[str], str, str] | None:
    """Data files of a hub dataset already on disk, or None: (files, file type, where found).

    Looks in (1) the ``datasets`` Arrow cache (``HF_DATASETS_CACHE`` or ``HF_HOME/datasets``, or `cache_dir`
    which LF passes as ``cache_dir=model_args.cache_dir``): ``org___name/<config>/<version>/<hash>/
    name-<split>*.arrow``; (2) the hub cache snapshot: files of a loadable type whose path names the split
    (``train``), else all of them. Never touches the network.
    """
    env = os.environ if env is None else env
    org_name = repo_id.replace("/", "___")
    short = repo_id.split("/")[-1]
    roots = []
    if cache_dir:
        roots.append(Path(cache_dir).expanduser())
    if env.get("HF_DATASETS_CACHE"):
        roots.append(Path(env["HF_DATASETS_CACHE"]).expanduser())
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                              "huggingface")
    roots.append(Path(home).expanduser() / "datasets")
    for root in roots:
        base = root / org_name
        if not base.is_dir():
            continue
        configs = [base / subset] if subset else sorted(p for p in base.iterdir() if p.is_dir())
        for cfg in configs:
            arrows = sorted(cfg.glob(f"*/*/{short}-{split}*.arrow")) or sorted(cfg.glob(f"*/*/*-{split}*.arrow"))
            if arrows:
                return [str(p) for p in arrows], "arrow", str(cfg)
    snap = hub_snapshot(repo_id, "dataset", Path(cache_dir).expanduser() if cache_dir else hf_hub_cache(env))
    if snap is None:
        return None
    root = snap / folder if folder else snap
    if subset and (root / subset).is_dir():
        root = root / subset
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and _file_type(str(p))]
    if not files:
        return None
    with_split = [p for p in files if split in p.relative_to(root).as_posix()]
    files = with_split or files
    types = {_file_type(str(p)) for p in files}
    ftype = "parquet" if "parquet" in types else sorted(t for t in types if t)[0]
    return [str(p) for p in files if _file_type(str(p)) == ftype], ftype, str(snap)


# --- row streaming --------------------------------------------------------------------------------------------------

CHUNK_ROWS = 1000
_READ_BYTES = 1 << 20
_MAX_ELEMENT = 64 << 20    # a single JSON array element larger than this is reported, not buffered further


def iter_chunks(spec: DatasetSpec, *, chunk_rows: int = CHUNK_ROWS, max_rows: int | None = None,
                raw_jsonl: bool = False) -> Iterator[Chunk]:
    """Stream the rows of every file of `spec` in chunks of about `chunk_rows`.

    `max_rows` stops after that many rows in total (LF's ``max_samples``). With `raw_jsonl`, JSON Lines files
    yield unparsed lines (`Chunk.raw`) for `parse_json_lines`. Read problems come out as `Chunk.errors`; a file
    that cannot be opened at all yields one chunk carrying a fatal `RowError`.
    """
    index = 0
    for path in spec.files:
        if max_rows is not None and index >= max_rows:
            return
        left = None if max_rows is None else max_rows - index
        reader = {"json": _json_chunks, "csv": _csv_chunks, "parquet": _parquet_chunks, "arrow": _arrow_chunks,
                  "text": _text_chunks}[spec.file_type or "json"]
        try:
            for ch in reader(path, index, chunk_rows, left, raw_jsonl):
                index += len(ch)
                yield ch
        except OSError as err:
            yield Chunk(path, index, rows=[], errors=[RowError("unreadable", path, None,
                                                               f"cannot read: {err.strerror or err}", fatal=True)])


def _trim(ch: Chunk, left: int | None) -> Chunk:
    if left is not None and len(ch) > left:
        if ch.rows is not None:
            ch.rows = ch.rows[:left]
        if ch.raw is not None:
            ch.raw = ch.raw[:left]
        ch.lines = ch.lines[:left]
    return ch


def _peek_kind(path: str) -> str:
    """'array' when the first non-blank character of a .json file is '[', else 'lines' (JSON Lines)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    s = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return "array" if s[:1] == b"[" else "lines"


def _json_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    if _peek_kind(path) == "array":
        yield from _json_array_chunks(path, first, n, left)
    else:
        yield from _jsonl_chunks(path, first, n, left, raw)


def _jsonl_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    index = first
    taken = 0
    with open(path, "r", encoding="utf-8-sig", errors="replace", newline="") as f:
        lines: list[str] = []
        nums: list[int | None] = []
        lineno = 0
        pos = 0
        for line in f:
            lineno += 1
            pos += len(line)
            if not line.strip():
                continue  # datasets' JSON Lines reader skips blank lines
            lines.append(line)
            nums.append(lineno)
            if len(lines) >= n or (left is not None and taken + len(lines) >= left):
                ch = _lines_chunk(path, index, lines, nums, raw, pos)
                ch = _trim(ch, None if left is None else left - taken)
                taken += len(ch)
                index += len(ch)
                yield ch
                lines, nums = [], []
                if left is not None and taken >= left:
                    return
        if lines:
            yield _trim(_lines_chunk(path, index, lines, nums, raw, pos), None if left is None else left - taken)


def _lines_chunk(path: str, index: int, lines: list[str], nums: list[int | None], raw: bool, pos: int) -> Chunk:
    if raw:
        return Chunk(path, index, raw=lines, lines=nums, bytes_done=pos)
    rows, errors, keys = parse_json_lines(path, lines, nums, index)
    return Chunk(path, index, rows=rows, lines=nums, errors=errors, bytes_done=pos, keys=keys)


def parse_json_lines(path: str, lines: list[str], nums: list[int | None], first_index: int
                     ) -> tuple[list[dict[str, Any] | None], list[RowError], set[str]]:
    """Parse JSON Lines text. A malformed line gives None in its slot and a `RowError` with file:line:column;
    a line that is valid JSON but not an object gives None and a ``bad_row`` error. Returns (rows, errors,
    union of keys)."""
    rows: list[dict[str, Any] | None] = []
    errors: list[RowError] = []
    keys: set[str] = set()
    loads = json.loads
    for i, line in enumerate(lines):
        try:
            obj = loads(line.rstrip("\r\n"))  # without the newline an error reports this line's column
        except json.JSONDecodeError as err:
            rows.append(None)
            errors.append(RowError("malformed_json", path, nums[i], f"malformed JSON: {err.msg} (column "
                                   f"{err.colno})", index=first_index + i))
            continue
        if not isinstance(obj, dict):
            rows.append(None)
            errors.append(RowError("bad_row", path, nums[i], f"a row must be a JSON object, found "
                                   f"{type(obj).__name__}", index=first_index + i))
            continue
        keys.update(obj)
        rows.append(obj)
    return rows, errors, keys


def _json_array_chunks(path: str, first: int, n: int, left: int | None) -> Iterator[Chunk]:
    """Stream the elements of a top-level JSON array with bounded memory.

    ``raw_decode`` parses one element at a time from a sliding text buffer; when an element runs past the
    buffer end the buffer grows by another read (an element may be at most `_MAX_ELEMENT` characters). A
    syntax error inside the array ends the file (an array cannot be resynchronised) with a fatal `RowError`
    at its line.
    """
    decoder = json.JSONDecoder()
    ws = re.compile(r"[ \t\r\n]*")
    st = {"index": first, "taken": 0}
    with open(path, "r", encoding="utf-8-sig", errors="replace", newline="") as f:
        buf = f.read(_READ_BYTES)
        eof = len(buf) < _READ_BYTES
        dropped = 0                 # characters dropped from the front of the file so far
        line_no, line_pos = 1, 0    # line number at buf[line_pos]
        pos = ws.match(buf, 0).end() + 1   # past the '['
        rows: list[dict[str, Any] | None] = []
        nums: list[int | None] = []
        errors: list[RowError] = []
        keys: set[str] = set()
        expect_value = True

        def line_at(p: int) -> int:
            nonlocal line_no, line_pos
            line_no += buf.count("\n", line_pos, p)
            line_pos = p
            return line_no

        def refill() -> bool:
            nonlocal buf, pos, eof, dropped, line_pos
            if eof:
                return False
            line_at(pos)
            more = f.read(max(_READ_BYTES, len(buf) - pos))
            eof = len(more) == 0
            dropped += pos
            buf = buf[pos:] + more
            pos = line_pos = 0
            return bool(more)

        def flush() -> Chunk:
            nonlocal rows, nums, errors, keys
            ch = Chunk(path, st["index"], rows=rows, lines=nums, errors=errors, bytes_done=dropped + pos, keys=keys)
            ch = _trim(ch, None if left is None else left - st["taken"])
            st["index"] += len(ch)
            st["taken"] += len(ch)
            rows, nums, errors, keys = [], [], [], set()
            return ch

        while True:
            pos = ws.match(buf, pos).end()
            if pos >= len(buf):
                if refill():
                    continue
                errors.append(RowError("malformed_json", path, line_at(len(buf)), "unexpected end of file inside "
                                       "the JSON array", index=st["index"] + len(rows), fatal=True))
                break
            c = buf[pos]
            if c == "]" and (not expect_value or not rows):
                break
            if c == "," and not expect_value:
                pos += 1
                expect_value = True
                continue
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as err:
                incomplete = err.msg.startswith("Unterminated") or err.pos >= len(buf) - 16
                if incomplete and not eof and len(buf) - pos < _MAX_ELEMENT and refill():
                    continue
                errors.append(RowError("malformed_json", path, line_at(err.pos), f"malformed JSON: {err.msg} "
                                       "(the rest of this JSON array cannot be read)",
                                       index=st["index"] + len(rows), fatal=True))
                break
            if end >= len(buf) and not eof and refill():
                continue  # a number or literal may continue past the buffer end: decode again with more text
            line = line_at(pos)
            nums.append(line)
            if isinstance(obj, dict):
                rows.append(obj)
                keys.update(obj)
            else:
                rows.append(None)
                errors.append(RowError("bad_row", path, line, f"a row must be a JSON object, found "
                                       f"{type(obj).__name__}", index=st["index"] + len(rows) - 1))
            pos = end
            expect_value = False
            if len(rows) >= n:
                yield flush()
                if left is not None and st["taken"] >= left:
                    return
            if pos > _READ_BYTES and not eof:
                refill()
        if rows or errors:
            yield flush()


def _csv_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    index, taken = first, 0
    with open(path, "r", encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.DictReader(f)
        rows: list[dict[str, Any] | None] = []
        nums: list[int | None] = []
        errors: list[RowError] = []
        _ = reader.fieldnames  # reads the header, so line_num counts it
        start = reader.line_num + 1
        try:
            for row in reader:
                if None in row:
                    errors.append(RowError("bad_row", path, start, "more fields than header columns",
                                           index=index + len(rows)))
                    row.pop(None)
                rows.append(row)
                nums.append(start)
                start = reader.line_num + 1
                if len(rows) >= n:
                    ch = _trim(Chunk(path, index, rows=rows, lines=nums, errors=errors, bytes_done=f.tell(),
                                     keys=set(reader.fieldnames or ())), None if left is None else left - taken)
                    index += len(ch)
                    taken += len(ch)
                    yield ch
                    rows, nums, errors = [], [], []
                    if left is not None and taken >= left:
                        return
        except csv.Error as err:
            errors.append(RowError("malformed_json", path, reader.line_num, f"malformed CSV: {err}", fatal=True))
        if rows or errors:
            yield _trim(Chunk(path, index, rows=rows, lines=nums, errors=errors, bytes_done=os.path.getsize(path),
                              keys=set(reader.fieldnames or ())), None if left is None else left - taken)


def _text_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    """``datasets``' text builder: every line (blank ones too) is a row ``{"text": line}`` without its newline."""
    index, taken = first, 0
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        rows: list[dict[str, Any] | None] = []
        nums: list[int | None] = []
        pos = 0
        for lineno, line in enumerate(f, 1):
            pos += len(line)
            rows.append({"text": line.rstrip("\n").rstrip("\r")})
            nums.append(lineno)
            if len(rows) >= n:
                ch = _trim(Chunk(path, index, rows=rows, lines=nums, bytes_done=pos, keys={"text"}),
                           None if left is None else left - taken)
                index += len(ch)
                taken += len(ch)
                yield ch
                rows, nums = [], []
                if left is not None and taken >= left:
                    return
        if rows:
            yield _trim(Chunk(path, index, rows=rows, lines=nums, bytes_done=pos, keys={"text"}),
                        None if left is None else left - taken)


def _need_pyarrow(path: str) -> Any:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise OSError(f"reading {os.path.splitext(path)[1]} files needs pyarrow (pip install pyarrow)") from None
    import pyarrow as pa

    return pa


def _batches_to_chunks(path: str, batches: Iterator[Any], first: int, n: int, left: int | None,
                       total_rows: int | None) -> Iterator[Chunk]:
    index, taken = first, 0
    size = os.path.getsize(path)
    rows_done, nbytes = 0, 0
    for batch in batches:
        rows = batch.to_pylist()
        nbytes += batch.nbytes
        for s in range(0, len(rows), n):
            part = rows[s:s + n]
            rows_done += len(part)
            # progress in bytes: by row fraction when the row count is known, else by decoded batch size
            done = int(size * rows_done / total_rows) if total_rows else min(size, nbytes)
            ch = _trim(Chunk(path, index, rows=part, lines=[None] * len(part), bytes_done=done,
                             keys=set(batch.schema.names)), None if left is None else left - taken)
            index += len(ch)
            taken += len(ch)
            yield ch
            if left is not None and taken >= left:
                return


def _parquet_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    _need_pyarrow(path)
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    yield from _batches_to_chunks(path, pf.iter_batches(batch_size=n), first, n, left, pf.metadata.num_rows)


def _arrow_chunks(path: str, first: int, n: int, left: int | None, raw: bool) -> Iterator[Chunk]:
    """Arrow IPC: the stream format (what ``datasets`` writes to its cache), else the file format."""
    pa = _need_pyarrow(path)
    src = pa.memory_map(path, "r")
    try:
        reader = pa.ipc.open_stream(src)
        batches = iter(reader)
    except pa.ArrowInvalid:
        src = pa.memory_map(path, "r")
        freader = pa.ipc.open_file(src)
        batches = (freader.get_batch(i) for i in range(freader.num_record_batches))
    yield from _batches_to_chunks(path, batches, first, n, left, None)


def total_bytes(spec: DatasetSpec) -> int:
    """Sum of the sizes of the dataset's files (progress bars measure bytes)."""
    tot = 0
    for f in spec.files:
        try:
            tot += os.path.getsize(f)
        except OSError:
            pass
    return tot
