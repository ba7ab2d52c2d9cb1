"""Find the datasets a LLaMA-Factory config names: dataset_info.json, its entries, and the files that hold the rows.

Resolution follows LLaMA-Factory's ``data/parser.py`` (``get_dataset_list``, ``DatasetAttr.join``; LF_FACTS.md §4)
and ``data/loader.py`` (``_load_single_dataset``) at the project's LF commit ff6d4d12: ``dataset_info.json`` in
``dataset_dir`` maps each name to a source (``hf_hub_url`` / ``ms_hub_url`` / ``om_hub_url``, then ``script_url``,
then ``cloud_file_name``, then ``file_name``), a ``formatting`` (alpaca, sharegpt, openai), ``ranking``,
``columns`` and ``tags``. Every field is checked for the type LF uses it as before it is used: a wrong one is an
InputError naming dataset_info.json, the line of the entry and what LF would do with it.

dataset_info.json is read under the decoding policy of readers/data/datarows.py: only a regular file, UTF-8 strictly
(LF opens it with ``open()`` in the locale's encoding, UTF-8 on Linux, and ``json.load``s it); a byte-order mark,
on which ``json.load`` fails ("Unexpected UTF-8 BOM"), is read past and reported (`DatasetSpec.info_problem`).

Rows are streamed by readers/data/datarows.py (re-exported here); hub datasets are looked up only in the local caches
(readers/data/hubcache.py). Readers judge nothing: they report what they found, and analyzers decide what it means.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from finetune_doctor.errors import InputError
from finetune_doctor.readers.data.datarows import CHUNK_ROWS, FILEEXT2TYPE, Chunk, RowError, Unreadable, file_problem, \
    file_type, iter_chunks, not_utf8, open_regular, os_reason, parse_json_lines, total_bytes
from finetune_doctor.readers.data.hubcache import find_cached_hub_dataset, hf_hub_cache, hub_snapshot
from finetune_doctor.readers.lfenv import env_enabled

__all__ = ["CHUNK_ROWS", "DATA_CONFIG", "DEFAULT_COLUMNS", "DEFAULT_TAGS", "FILEEXT2TYPE", "Chunk",
           "DatasetDirNotFound", "DatasetSpec", "RowError", "find_cached_hub_dataset", "find_dataset_dir", "hf_hub_cache", "hub_snapshot",
           "iter_chunks", "load_dataset_info", "parse_json_lines", "resolve_datasets", "total_bytes"]

DATA_CONFIG = "dataset_info.json"
MAX_INFO_BYTES = 64 << 20   # LF's own dataset_info.json is ~30 KB; a larger file is not a dataset registry
FORMATTINGS = ("alpaca", "sharegpt", "openai")   # DATASET_CONVERTERS in LF data/converter.py
SOURCES = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name", "file_name")
INT64_MAX = 2**63 - 1

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
    """No dataset_info.json defining the run's datasets where the config's ``dataset_dir`` points: the data is not on
    this machine. `tried` lists the folders looked in; `unrelated` a dataset_info.json found on the way that
    defines none of the datasets."""

    def __init__(self, message: str, file: str | None = None, *, tried: tuple[str, ...] = (),
                 unrelated: str | None = None):
        super().__init__(message, file=file)
        self.tried = tried
        self.unrelated = unrelated


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
    info_problem: str | None = None   # what LLaMA-Factory fails on in dataset_info.json although it was read

    def location(self) -> dict[str, Any]:
        """Where a finding about this dataset as a whole should point: its dataset_info.json entry."""
        if self.info_path:
            return {"file": self.info_path, "line": self.info_line, "column": None, "key": self.name}
        return {"file": self.files[0] if self.files else None, "line": None, "column": None, "key": self.name}


# --- dataset_info.json ----------------------------------------------------------------------------------------------


def not_found_message(names: list[str], dataset_dir: str, tried: list[str] | tuple[str, ...],
                      unrelated: str | None = None) -> str:
    """What was looked for, where, and how to point at it: the one wording ``doctor data`` and ``doctor check``
    share when a run's dataset_info.json is not on this machine."""
    where = ", ".join(tried[:4]) + (" …" if len(tried) > 4 else "")
    default = " (the default)" if dataset_dir == "data" else ""
    extra = f"; {unrelated} defines none of them" if unrelated else ""
    what = (f"dataset{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "the datasets")
    return (f"cannot find the {DATA_CONFIG} that defines {what}: LLaMA-Factory reads dataset_dir "
            f"'{dataset_dir}'{default} relative to the folder it is launched from, and the doctor looked in "
            f"{where}{extra}. Run the doctor from the folder you launch training from, or set dataset_dir in the "
            f"config to the folder that holds {DATA_CONFIG} (an absolute path works from anywhere)")


def _has_info(folder: str) -> bool:
    """Something is at folder/dataset_info.json (reading it then says what is wrong with it: a FIFO, a symlink loop,
    a folder, bytes that are not UTF-8)."""
    try:
        os.lstat(os.path.join(folder, DATA_CONFIG))
        return True
    except (OSError, ValueError):
        return False


def find_dataset_dir(dataset_dir: str, *, cwd: str | None = None, config_dir: str | None = None,
                     names: list[str] | None = None) -> tuple[str, str]:
    """Locate `dataset_dir` the way a user most likely ran ``llamafactory-cli`` from.

    LLaMA-Factory opens ``os.path.join(dataset_dir, "dataset_info.json")`` relative to the working directory
    (data/parser.py). We try that first, then the config's folder and each folder above it (an LF checkout runs
    ``examples/train_lora/x.yaml`` from its root). Returns (directory, how) where `how` is ``cwd`` | ``config`` |
    ``absolute``; raises DatasetDirNotFound naming every place tried when none holds dataset_info.json.
    """
    names = names or []
    if os.path.isabs(dataset_dir):
        if _has_info(dataset_dir):
            return dataset_dir, "absolute"
        raise DatasetDirNotFound(not_found_message(names, dataset_dir, [dataset_dir]), file=dataset_dir,
                                 tried=(dataset_dir,))
    tried = []
    cwd = cwd or os.getcwd()
    cand = os.path.normpath(os.path.join(cwd, dataset_dir))
    tried.append(cand)
    if _has_info(cand):
        return cand, "cwd"
    if config_dir:
        d = Path(config_dir).resolve()
        for base in [d, *d.parents]:
            cand = os.path.normpath(os.path.join(str(base), dataset_dir))
            if cand in tried:
                continue
            tried.append(cand)
            if _has_info(cand):
                return cand, "config"
    raise DatasetDirNotFound(not_found_message(names, dataset_dir, tried), file=os.path.join(dataset_dir, DATA_CONFIG),
                             tried=tuple(tried))


def _read_info_text(path: str) -> tuple[str, str | None]:
    """The text of dataset_info.json under the decoding policy, and what LF fails on although it was read."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_INFO_BYTES + 1)
    except Unreadable as err:
        raise InputError(err.message, file=path) from None
    except OSError as err:
        raise InputError(f"cannot read: {os_reason(err)}", file=path) from None
    if len(data) > MAX_INFO_BYTES:
        raise InputError(f"exceeds {MAX_INFO_BYTES >> 20} MiB, the most the doctor reads of a {DATA_CONFIG}",
                         file=path)
    problem = None
    if data.startswith(codecs.BOM_UTF8):
        data = data[3:]
        problem = (f"{DATA_CONFIG} starts with a UTF-8 byte-order mark (BOM): LLaMA-Factory's json.load fails on it "
                   f"('Cannot open {path} due to Unexpected UTF-8 BOM'); the doctor read on past it. Save it as UTF-8 "
                   "without BOM")
    try:
        return data.decode("utf-8"), problem
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        who = "LLaMA-Factory opens it in the locale's encoding (UTF-8 on Linux) and json.load fails here"
        raise InputError(not_utf8(data[:4096], err.start + (3 if problem else 0), line, who), file=path,
                         line=line) from None


def load_dataset_info(path: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse dataset_info.json; returns (mapping, {dataset name: 1-based line of its key}).

    Raises InputError with the line of a JSON syntax error, for a file that is not a regular file, not UTF-8,
    nested past Python's recursion limit or holding an integer of over 4,300 digits (both also stop LF's
    ``json.load``), or when the top level is not an object. See `read_dataset_info` for the BOM.
    """
    info, lines, _ = read_dataset_info(path)
    return info, lines


def read_dataset_info(path: str) -> tuple[dict[str, Any], dict[str, int], str | None]:
    """`load_dataset_info` plus what LLaMA-Factory fails on in a file the doctor could read (a BOM), or None."""
    text, problem = _read_info_text(path)
    try:
        info = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"malformed JSON: {err.msg} (column {err.colno}); LLaMA-Factory's json.load fails too",
                         file=path, line=err.lineno) from None
    except RecursionError:
        raise InputError("JSON nested too deeply to read (over ~1,000 levels); LLaMA-Factory's json.load fails too",
                         file=path) from None
    except ValueError as err:   # an integer literal over sys.get_int_max_str_digits() digits
        m = re.search(r"\d{4301,}", text)
        raise InputError(f"a number exceeds what JSON readers take ({err}); LLaMA-Factory's json.load fails too",
                         file=path, line=text.count("\n", 0, m.start()) + 1 if m else None) from None
    if not isinstance(info, dict):
        raise InputError("top level must be an object of dataset entries", file=path, line=1)
    return info, _key_lines(text, info), problem


# The last file's text and its key lines. One dataset_info.json usually serves every config of a run (LF's data/
# for all its examples; 4,321 configs of the parity corpus, tests/parity): scanning it again cost ~0.9 ms of the
# ~4.3 ms `doctor lint` took per config there (300 corpus configs, median of 3 interleaved runs, load 5.7, issue 22,
# 2026-12-07). The same text parses to the same mapping, so the text alone is the key; callers get a copy.
_LAST_KEY_LINES: list[Any] = [None, {}]


def _key_lines(text: str, info: dict[str, Any]) -> dict[str, int]:
    if _LAST_KEY_LINES[0] == text:
        return dict(_LAST_KEY_LINES[1])
    lines = _scan_key_lines(text, info)
    _LAST_KEY_LINES[:] = [text, dict(lines)]
    return lines


def _scan_key_lines(text: str, info: dict[str, Any]) -> dict[str, int]:
    lines: dict[str, int] = {}
    # The key of an entry is the first `"name":` at the start of a line; enough for a finding's line.
    for m in re.finditer(r'^([ \t]*)"((?:[^"\\]|\\.)*)"\s*:', text, re.M):
        try:
            name = json.loads(f'"{m.group(2)}"')
        except ValueError:
            continue
        if name in info and name not in lines:
            lines[name] = text.count("\n", 0, m.start()) + 1
    return lines


def _bad(name: str, key: str, want: str, got: Any, lf: str, path: str, line: int | None) -> InputError:
    shown = type(got).__name__ if not isinstance(got, (int, float, str)) or isinstance(got, bool) else repr(got)
    if isinstance(got, str) and len(shown) > 60:
        shown = shown[:57] + "...'"
    return InputError(f"entry {name!r}: {key} must be {want}, not {shown}; {lf}", file=path, line=line)


def check_entry(name: str, attr: Any, path: str, line: int | None) -> None:
    """Raise InputError when an entry of dataset_info.json has a field of a type LLaMA-Factory cannot use.

    What LF does with each (data/parser.py, data/loader.py, data/converter.py at ff6d4d12): a source that is not a
    string reaches ``os.path.join`` or ``load_dataset`` (TypeError); ``formatting`` indexes DATASET_CONVERTERS
    (KeyError); ``columns``/``tags`` are read with ``.get`` (AttributeError on a list), their values name columns;
    ``subset``/``split``/``folder`` go to ``load_dataset``; ``num_samples`` slices ``np.random.permutation`` and
    feeds ``np.random.choice``: a float is a TypeError, a negative count fails LF's "Sample num mismatched" assert,
    and numpy's int64 cannot hold more than 2^63 - 1.
    """
    if not isinstance(attr, dict):
        raise _bad(name, "the entry", "an object", attr, "LLaMA-Factory reads its fields with 'in' and []", path, line)
    src = next((k for k in SOURCES if k in attr), None)
    if src is None:
        raise InputError(f"entry {name!r} names no source ({', '.join(SOURCES)}); LLaMA-Factory raises KeyError "
                         "'file_name'", file=path, line=line)
    value = attr[src]
    if not isinstance(value, str) or not value:
        hint = (" (for several files, put them in one folder and name the folder)" if isinstance(value, list) else "")
        raise _bad(name, src, "a non-empty string" + hint, value,
                   "LLaMA-Factory fails on it (TypeError in os.path.join / load_dataset)", path, line)
    fmt = attr.get("formatting", "alpaca")
    if fmt not in FORMATTINGS:
        raise _bad(name, "formatting", " | ".join(FORMATTINGS), fmt,
                   "LLaMA-Factory looks its converter up by name (KeyError)", path, line)
    for key in ("subset", "split", "folder"):
        if attr.get(key) is not None and not isinstance(attr[key], str):
            raise _bad(name, key, "a string", attr[key], "LLaMA-Factory passes it to datasets.load_dataset", path,
                       line)
    for key in ("columns", "tags"):
        block = attr.get(key)
        if key in attr and not isinstance(block, dict):
            raise _bad(name, key, "an object", block, f"LLaMA-Factory reads {key}.get(...) (AttributeError)", path,
                       line)
        for k, v in (block or {}).items():
            if v is not None and not isinstance(v, str):
                raise _bad(name, f"{key}.{k}", "a string (a column name)" if key == "columns" else "a string", v,
                           "LLaMA-Factory looks rows up with it (KeyError)", path, line)
    n = attr.get("num_samples")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= INT64_MAX):
        raise _bad(name, "num_samples", "an integer from 0 to 2^63 - 1", n,
                   "LLaMA-Factory resamples with numpy (TypeError for a float, its 'Sample num mismatched' assert "
                   "for a negative count, an int64 overflow past 2^63 - 1)", path, line)


def _join_attr(spec_kw: dict[str, Any], attr: dict[str, Any]) -> None:
    """``DatasetAttr.join``: formatting/ranking/subset/split/folder/num_samples, then columns and tags.

    When ``columns`` is present every column is set from it (absent ones become None); same for ``tags``.
    """
    spec_kw["formatting"] = attr.get("formatting", "alpaca")
    spec_kw["ranking"] = bool(attr.get("ranking", False))   # LF tests it for truth (``if dataset_attr.ranking``)
    spec_kw["subset"] = attr.get("subset")
    spec_kw["split"] = attr.get("split", "train")
    spec_kw["folder"] = attr.get("folder")
    spec_kw["num_samples"] = attr.get("num_samples")
    cols = dict(DEFAULT_COLUMNS)
    if "columns" in attr:
        for k in cols:
            cols[k] = attr["columns"].get(k)
    tags = dict(DEFAULT_TAGS)
    if "tags" in attr:
        for k in tags:
            tags[k] = attr["tags"].get(k)
    spec_kw["columns"] = cols
    spec_kw["tags"] = tags


def resolve_datasets(names: list[str], dataset_dir: str, *, cwd: str | None = None, config_dir: str | None = None,
                     cache_dir: str | None = None, env: dict[str, str] | None = None) -> tuple[list[DatasetSpec], str]:
    """Resolve dataset names to `DatasetSpec` values; returns (specs, resolved dataset_dir).

    ``dataset_dir: ONLINE`` makes every name a hub id (LF parser.py); ``REMOTE:repo`` needs the hub and is
    reported unavailable. Raises DatasetDirNotFound when no dataset_info.json defining the names is found,
    InputError when it is malformed, an entry has a field LF cannot use (`check_entry`), or a name is not
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
    ddir, how = find_dataset_dir(dataset_dir, cwd=cwd, config_dir=config_dir, names=names)
    info_path = os.path.join(ddir, DATA_CONFIG)
    info, lines, problem = read_dataset_info(info_path)
    if how == "config" and not any(n in info for n in names):
        # found by walking up from the config, not where LLaMA-Factory looks (the working directory), and it
        # defines none of the run's datasets: not the run's dataset_info.json
        cwd_dir = os.path.normpath(os.path.join(cwd or os.getcwd(), dataset_dir))
        raise DatasetDirNotFound(not_found_message(names, dataset_dir, [cwd_dir, ddir], unrelated=info_path),
                                 file=info_path, tried=(cwd_dir, ddir), unrelated=info_path)
    use_ms, use_om = env_enabled("USE_MODELSCOPE_HUB", env), env_enabled("USE_OPENMIND_HUB", env)
    specs = []
    for n in names:
        if n not in info:
            raise InputError(f"dataset {n!r} is not defined in {DATA_CONFIG} (LLaMA-Factory: 'Undefined dataset')",
                             file=info_path)
        attr = info[n]
        check_entry(n, attr, info_path, lines.get(n))
        kw: dict[str, Any] = {"name": n, "info_path": info_path, "info_line": lines.get(n), "info_problem": problem}
        kw.update(_source(attr, use_ms, use_om))
        _join_attr(kw, attr)
        specs.append(_locate(DatasetSpec(**kw), ddir, cache_dir, env))
    return specs, ddir


def _source(attr: dict[str, Any], use_ms: bool, use_om: bool) -> dict[str, str]:
    """LF's choice of source (get_dataset_list): a hub URL (ModelScope / openMind when enabled or alone), then a
    script, a cloud file, a local file."""
    has_hf, has_ms, has_om = "hf_hub_url" in attr, "ms_hub_url" in attr, "om_hub_url" in attr
    if has_hf or has_ms or has_om:
        if has_ms and (use_ms or not has_hf):
            return {"load_from": "ms_hub", "source": attr["ms_hub_url"]}
        if has_om and (use_om or not has_hf):
            return {"load_from": "om_hub", "source": attr["om_hub_url"]}
        return {"load_from": "hf_hub", "source": attr["hf_hub_url"]}
    for key, how in (("script_url", "script"), ("cloud_file_name", "cloud_file"), ("file_name", "file")):
        if key in attr:
            return {"load_from": how, "source": attr[key]}
    raise AssertionError("check_entry ensures a source")  # pragma: no cover


def _local_files(local: str) -> tuple[list[str], str | None]:
    """The files LF would pass to load_dataset for a local ``file_name`` (loader.py: the folder's entries, or the
    file), or ([], why not). Only regular files are taken; anything else is named with the OS's reason."""
    not_found = f"(LLaMA-Factory: 'File {local} not found.')"
    try:
        st = os.stat(local)
    except (OSError, ValueError) as err:
        if isinstance(err, OSError) and err.errno == errno.ENOENT:
            return [], f"file {local} not found {not_found}"
        return [], f"{local}: {os_reason(err) if isinstance(err, OSError) else err} {not_found}"
    if stat.S_ISREG(st.st_mode):
        return [local], None
    if not stat.S_ISDIR(st.st_mode):
        return [], f"{local} {file_problem(local)}; LLaMA-Factory's os.path.isfile is False for it {not_found}"
    try:
        files = sorted(os.path.join(local, f) for f in os.listdir(local))
    except OSError as err:
        return [], f"folder {local}: {os_reason(err)}"
    if not files:
        return [], f"folder {local} is empty"
    for f in files:
        why = file_problem(f)
        if why:
            return files, f"{f} {why}" if why.startswith("is ") else f"{f}: {why}"
    return files, None


def _locate(spec: DatasetSpec, ddir: str, cache_dir: str | None, env: dict[str, str]) -> DatasetSpec:
    if spec.load_from == "file":
        local = os.path.join(ddir, spec.source)
        files, why = _local_files(local)
        if why:
            return replace(spec, files=tuple(files), unavailable=why)
        types = {file_type(f) for f in files}
        if None in types:
            bad = next(f for f in files if file_type(f) is None)
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
