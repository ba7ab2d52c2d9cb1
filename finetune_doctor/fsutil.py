"""File helpers: the one output policy, atomic writes, the doctor's cache folder, and paths as users type them.

Output policy (issue 27), for ``--output``, ``--fix``, ``gpus --record`` and ``postmortem --plot`` alike:

* ``-`` and ``/dev/stdout`` (or any path that is this process's standard output) mean standard output;
* only a regular file the user named is written, or a new one created: a FIFO, a device (``/dev/full``, even as
  root), a socket or a folder is refused;
* a report never replaces a file this run reads (``--output cfg.yaml`` of ``doctor check cfg.yaml``);
* a read-only file is refused, not replaced behind its mode; a file with several hard links is written in place
  (after the whole text was first written to a temporary file, so a full disk leaves the original intact), so
  every link still sees the new content;
* every OS error (ENOSPC, EACCES, EROFS, ...) is one line naming the file, exit 2.

Atomic writes: a temporary file in the target's directory, then ``os.replace``, so that a crash or a full disk never
leaves a half-written report or config.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import sys
from pathlib import Path
from typing import Iterable

from finetune_doctor.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically; InputError on OS errors.

    An existing file keeps its mode; a new file gets 0666 less the umask, as ``open()`` would create it (mkstemp's
    0600 would hide a report from the rest of a team). A symlink is followed: its target is rewritten and the link
    stays a link (editors and pre-commit do the same). A file with several hard links is written in place.
    """
    target = os.path.realpath(path) if os.path.islink(path) else path
    write_bytes(target, text.encode(encoding), shown=path)


STDOUT = "-"
"""`output_target`'s answer for standard output."""

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def _is_stdout(path: str) -> bool:
    if path in ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):
        return False


def output_target(path: str, flag: str = "--output", inputs: Iterable[str] = ()) -> str:
    """Where a write of `flag` to `path` goes under the output policy (module docstring): STDOUT, or the path of
    a regular file to write (the target of a symlink). Raises InputError (one line: the file and why) for a FIFO,
    device, socket or folder, a file among `inputs`, or a read-only file."""
    if _is_stdout(path):
        return STDOUT
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path   # created; a missing folder or a read-only one is the write's own one-line error
    except OSError as err:
        raise InputError(f"cannot write {flag}: {err.strerror or err}", file=path) from None
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise InputError(f"is {kind}: {flag} writes only regular files (name a file)", file=path)
    for other in inputs:
        try:
            if other and other != "-" and os.path.samestat(st, os.stat(other)):
                raise InputError(f"is an input of this run: {flag} would overwrite it (name another file)",
                                 file=path)
        except OSError:
            continue
    if is_read_only(path, st):
        raise InputError(f"read-only file: {flag} does not replace it (make it writable, or name another file)",
                         file=path)
    return os.path.realpath(path)


def output_sinks(output: str | None = None) -> frozenset[tuple[int, int]]:
    """(st_dev, st_ino) of the regular files this command's report is being written to, so that a reader of a
    run folder can leave them alone (trial 7 c01: ``doctor postmortem DIR | tee DIR/postmortem.txt`` read its own
    half-written output): `output` (``--output``) when it exists; standard output when redirected to a file
    (``> DIR/out.txt``); and, on Linux, when standard output is a pipe, the files that the process reading that
    pipe holds open for writing (``| tee FILE``: proc(5), ``/proc/PID/fd/0`` is the same pipe, ``fdinfo``'s
    ``flags`` carry the O_WRONLY/O_RDWR access mode). Processes that cannot be inspected (another user's, no
    /proc) are passed over: the set is what could be seen, possibly empty."""
    out: set[tuple[int, int]] = set()
    if output:
        try:
            st = os.stat(output)
            out.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return frozenset(out)
    if stat.S_ISREG(st.st_mode):
        out.add((st.st_dev, st.st_ino))
    elif stat.S_ISFIFO(st.st_mode) and os.path.isdir("/proc"):
        out.update(_pipe_readers_files((st.st_dev, st.st_ino)))
    return frozenset(out)


def _pipe_readers_files(pipe: tuple[int, int]) -> set[tuple[int, int]]:
    """The regular files open for writing in the processes whose standard input is `pipe` (output_sinks)."""
    found: set[tuple[int, int]] = set()
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    except OSError:
        return found
    for pid in pids:
        try:
            s0 = os.stat(f"/proc/{pid}/fd/0")
            if (s0.st_dev, s0.st_ino) != pipe:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                sf = os.stat(f"/proc/{pid}/fd/{fd}")
                if not stat.S_ISREG(sf.st_mode):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as fh:
                    flags = next((int(ln.split()[1], 8) for ln in fh if ln.startswith("flags:")), 0)
            except (OSError, ValueError, IndexError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                found.add((sf.st_dev, sf.st_ino))
    return found


def is_read_only(path: str, st: os.stat_result | None = None) -> bool:
    """A file nobody may write (no w bit: root's access() would still say yes) or this user may not."""
    try:
        st = st or os.stat(path)
    except OSError:
        return False
    return not (st.st_mode & 0o222) or not os.access(path, os.W_OK)


def write_output(path: str, text: str, flag: str = "--output", inputs: Iterable[str] = ()) -> None:
    """Write a report under the output policy: standard output, or the regular file `path` (atomically; in
    place after a complete temporary copy when the file has other hard links). InputError on refusal or OS error."""
    target = output_target(path, flag, inputs)
    if target == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_bytes(target, text.encode("utf-8"), shown=path)


def write_bytes(target: str, data: bytes, shown: str | None = None, mode: int | None = None) -> None:
    """`data` into the regular file `target`: a temporary file in its folder first (so a full disk fails before
    the original is touched), then ``os.replace`` — or, when `target` has other hard links, a copy into the file
    itself so the links stay one file. Keeps an existing file's mode (else `mode`, else 0666 less the umask).
    Raises InputError naming `shown` (default `target`) for every OS error."""
    shown = shown or target
    directory = os.path.dirname(target) or "."
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(f"cannot write: {err.strerror or err}", file=shown) from None
    tmp = None
    import tempfile   # only when writing: it pulls in shutil, bz2 and lzma (the lint path's import time)

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None and st.st_nlink > 1:
            with open(target, "r+b") as fh:
                fh.write(data)
                fh.truncate()
                fh.flush()
                os.fsync(fh.fileno())
            os.unlink(tmp)
            tmp = None
            return
        os.chmod(tmp, (st.st_mode & 0o7777) if st is not None else (mode if mode is not None else 0o666 & ~_umask()))
        os.replace(tmp, target)
        tmp = None
    except OSError as err:
        raise InputError(f"cannot write: {_why(err)}", file=shown) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _why(err: OSError) -> str:
    """The OS error in words, with what to do for the usual ones."""
    text = err.strerror or str(err)
    hint = {errno.ENOSPC: "free space on that device or write elsewhere",
            errno.EACCES: "no permission to write in that folder",
            errno.EROFS: "that file system is mounted read-only",
            errno.EDQUOT: "disk quota exceeded"}.get(err.errno or 0)
    return f"{text} ({hint})" if hint else text


def cache_dir() -> Path | None:
    """The doctor's own cache folder: ``$XDG_CACHE_HOME/finetune-doctor``, else ``~/.cache/finetune-doctor``.
    None when ``FINETUNE_DOCTOR_NO_CACHE=1`` (nothing is read from or written to it then). Kept per process for
    the variables it reads (``HOME`` for ``~``): a lint asks it twice per config (issue #22)."""
    key = (os.environ.get("FINETUNE_DOCTOR_NO_CACHE"), os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))
    if key in _CACHE_DIR:
        return _CACHE_DIR[key]
    if key[0] == "1":
        found = None
    else:
        base = key[1] or os.path.join(os.path.expanduser("~"), ".cache")
        found = Path(base) / "finetune-doctor"
    if len(_CACHE_DIR) < 64:
        _CACHE_DIR[key] = found
    return found


_CACHE_DIR: dict[tuple[str | None, ...], Path | None] = {}


def write_cache(path: Path, text: str) -> None:
    """Write a cache file atomically, best effort: a failed write (read-only home, full disk) leaves no cache
    rather than a bad one, and is never an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(path), text)
    except (InputError, OSError):
        pass


CACHE_KEEP = 8
"""Files of one family (``rules-``, ``exprs-``, ``json-``...) `prune_cache` leaves in the cache folder: the one just
written and the most recently written others (and any written in the last `CACHE_FRESH_S` seconds). A family's file
is named by what it was built from (the rule files' sizes and mtimes, an interpreter, a module's mtime), so every
edit, upgrade or second install adds one and none is read again once its sources change: 587 rule packs (72 MB) and
170 JSON copies had piled up on a development machine with several checkouts (issue #22). A few are kept, not one, so
that two installs used in turn (a virtualenv per project) do not rebuild each other's files on every run."""

CACHE_FRESH_S = 600.0
"""A file of the cache written this recently is never pruned: several checkouts tested at once (each its own rule
pack) would otherwise evict each other's files and rebuild them on every run."""


def prune_cache(written: Path, prefix: str, keep: int = CACHE_KEEP,
                legacy: tuple[tuple[str, str], ...] = ()) -> None:
    """Bound one family of the cache folder after `written` (a file of it) was written: delete the files named
    ``{prefix}*`` other than `written`, the `keep` - 1 most recently modified others and those modified in the last
    `CACHE_FRESH_S` seconds, and every file matching a `legacy` (prefix, suffix) pair of a format no longer written.
    Best effort: a file another process removes or holds first is skipped; never raises. Deleting a file a running
    process still reads is harmless on POSIX (it reads its open copy), and a process that finds its file gone
    rebuilds it: a cache miss, never a changed answer."""
    folder = written.parent
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale: list[tuple[float, str]] = []
    for name in names:
        if name == written.name:
            continue
        if any(name.startswith(p) and name.endswith(s) for p, s in legacy):
            stale.append((-1.0, name))   # always removed
        elif name.startswith(prefix):
            try:
                stale.append((os.stat(os.path.join(folder, name)).st_mtime, name))
            except OSError:
                continue
    stale.sort(reverse=True)
    kept = 0
    import time

    fresh = time.time() - CACHE_FRESH_S
    for mtime, name in stale:
        if mtime >= 0 and (kept < keep - 1 or mtime > fresh):
            kept += 1
            continue
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            continue


def display_path(path: str | None, base: str | None = None) -> str | None:
    """`path` relative to `base` (default: the working directory) when it lies below it, else unchanged.

    CI annotations and SARIF want repository-relative paths (GitHub relativises against the checkout);
    a path outside the base stays absolute rather than growing ``../`` chains.
    """
    if not path:
        return path
    base = base or os.getcwd()
    try:
        absolute = os.path.abspath(path)
        rel = os.path.relpath(absolute, base)
    except ValueError:  # different drives on Windows
        return path
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return path
    return rel.replace(os.sep, "/")


def format_bytes(n: int | None) -> str:
    """A byte count for people, in binary units with one decimal: "0 B", "512 B", "1.5 KiB", "20.0 MiB", "2.3 GiB".
    The one size formatter of reports and messages (the PyTorch-worded OOM text keeps c10's own format_size,
    probes/replay.py)."""
    if not n:
        return "0 B"
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"



def bundled_json(path: str) -> object:
    """The JSON data of a file shipped with the package (catalog/*.json), read through a marshal copy in the cache
    folder (`cache_dir`) keyed by the file's path, size and mtime.

    Why: ``json.loads`` of the model catalog and the key schema (300 and 220 kB) costs ~2-8 ms per process on a
    2-core machine and ``marshal.loads`` of the same data about a third of it; a ``doctor lint`` of one file is
    started by pre-commit on every commit (issue #22, benchmarks/results/lint.md). The copy holds the key and is
    used only when it holds this file's; any failure to read or write it falls back to the JSON itself, so a bad
    cache can cost time, never change an answer. Raises OSError / ValueError (json.JSONDecodeError) only for a
    broken install, as reading the JSON would. Callers treat the data as read-only (it may be shared)."""
    import json
    import marshal

    st = os.stat(path)
    key = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"
    base = cache_dir()
    copy = None
    if base is not None:
        import binascii

        copy = base / f"json-{binascii.crc32(key.encode('utf-8', 'surrogatepass')):08x}.marshal"
        try:
            kept = marshal.loads(copy.read_bytes())
            if isinstance(kept, tuple) and len(kept) == 2 and kept[0] == key:
                return kept[1]
        except (OSError, ValueError, EOFError, TypeError):
            pass
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if copy is not None:
        try:
            copy.parent.mkdir(parents=True, exist_ok=True)
            write_bytes(str(copy), marshal.dumps((key, data)))
            # each bundled file has its own copy: keep room for every catalog file of a few installs
            prune_cache(copy, "json-", keep=4 * CACHE_KEEP)
        except (InputError, OSError, ValueError):
            pass
    return data


def real_parent(path: str) -> Path:
    """The folder holding `path` with symlinks resolved (``Path(path).resolve().parent``), kept per absolute path
    for the process: a lint of many configs asks it of every file 4-5 times (the context file, an accelerate
    config beside it, relative model paths, the folder's options), each a walk of ``lstat`` over every component
    (issue #22). Raises what ``Path.resolve`` raises (RuntimeError for a symlink loop), uncached."""
    return _real_parent(os.path.abspath(path))


@functools.lru_cache(maxsize=4096)
def _real_parent(absolute: str) -> Path:
    if os.path.islink(absolute):   # the file's own link decides its folder
        return Path(absolute).resolve().parent
    # else the folder's resolved path, resolved once per folder (a file that is no link adds no component to
    # resolve: ``realpath(dir/name) == realpath(dir)/name``)
    return _real_dir(os.path.dirname(absolute))


@functools.lru_cache(maxsize=1024)
def _real_dir(folder: str) -> Path:
    return Path(folder).resolve()
