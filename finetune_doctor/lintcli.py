"""`doctor lint` without click: the command's body, its output and error policy, and a parser of its argv.

Why: pre-commit starts a fresh ``doctor lint`` for every commit, so start-up is most of its cost; importing click
(its core, types and their imports) is ~13 ms of a one-file lint that should take ~0.1 s (issue #22,
benchmarks/results/lint.md). `parse` reads lint's arguments exactly as click reads them for the command declared
in cli.py (long options, ``--opt=value``, options among the files, ``--`` ending options, a value taken from the
next word even when it starts with a dash, the last value of a repeated option, ``click.Path``'s checks of a path
that exists). Anything else (``--help``, ``-h``, an unknown or misspelt option, a bad choice or number, a missing
value, a flag given a value, a path click would refuse) returns None and the console script hands the same argv to
click, so every message, exit code and help text stays click's (tests/test_lintcli.py compares the two parsers on
the declared options and on many command lines).

`lint_command` is the one body of ``doctor lint``: cli.py's click command calls it too. `echo` writes as
``click.echo`` does (text, newline, flush) and hands the text to click when it holds ANSI escapes (click strips
them when the stream is not a terminal) or when the stream is not UTF-8 (click re-wraps a misconfigured one).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from typing import Any, Callable

from finetune_doctor.errors import InputError, MissingExtra

FORMATS = ("text", "json", "sarif", "github", "concise")
FAIL_ON = ("error", "warning", "info", "never")

# option -> (parameter name, kind, detail, multiple); kind: flag, str, int, choice (detail: the choices) or path
# (detail: (file_okay, dir_okay) as declared with click.Path in cli.py)
OPTIONS: dict[str, tuple[str, str, Any, bool]] = {
    "--gpu": ("gpu", "str", None, False),
    "--nnodes": ("nnodes", "int", None, False),
    "--format": ("fmt", "choice", FORMATS, False),
    "--output-format": ("fmt", "choice", FORMATS, False),
    "--output": ("output", "path", (True, False), False),
    "--select": ("select", "str", None, False),
    "--ignore": ("ignore", "str", None, False),
    "--fail-on": ("fail_on", "choice", FAIL_ON, False),
    "--rules": ("rules_dirs", "path", (False, True), True),
    "--torch": ("torch_version", "str", None, False),
    "--transformers": ("transformers_version", "str", None, False),
    "--llamafactory": ("lf_version", "str", None, False),
    "--model-config": ("model_config", "path", (True, True), False),
    "--offline": ("offline", "flag", None, False),
    "--env": ("env_file", "path", (True, False), False),
    "--accelerate-config": ("accelerate_config", "path", (True, True), False),
    "--launch": ("launch", "path", (True, True), False),
    "--host-ram": ("host_ram", "str", None, False),
    "--fix": ("fix", "flag", None, False),
    "--unsafe-fixes": ("unsafe_fixes", "flag", None, False),
    "--diff": ("diff", "flag", None, False),
    "--strict": ("strict", "flag", None, False),
    "--context": ("context", "path", (True, False), False),
    "--statistics": ("statistics", "flag", None, False),
    "--exit-zero": ("exit_zero", "flag", None, False),
    "--config": ("config_file", "path", (True, False), False),
    "--stdin-filename": ("stdin_filename", "str", None, False),
    "--force-exclude": ("force_exclude", "flag", None, False),
}
FILES_PATH = (True, True)
"""The FILES argument's click.Path(): files and directories."""


def _path_ok(value: str, spec: tuple[bool, bool]) -> bool:
    """Whether click.Path(file_okay, dir_okay) (exists=False, readable=True) accepts `value` unchanged."""
    file_okay, dir_okay = spec
    try:
        st = os.stat(value)
    except OSError:   # click accepts a path that is not there
        return True
    except ValueError:   # an embedded NUL: click's own error
        return False
    if (not file_okay and stat.S_ISREG(st.st_mode)) or (not dir_okay and stat.S_ISDIR(st.st_mode)):
        return False
    return os.access(value, os.R_OK)


_BAD = object()


def _convert(kind: str, detail: Any, word: str) -> Any:
    if kind == "int":
        try:
            return int(word)
        except ValueError:
            return _BAD
    if kind == "choice":
        return word if word in detail else _BAD
    if kind == "path":
        return word if _path_ok(word, detail) else _BAD
    return word


def defaults() -> dict[str, Any]:
    """The parameters click passes to lint's callback when no option is given."""
    out: dict[str, Any] = {"files": ()}
    for dest, kind, _, multiple in OPTIONS.values():
        out[dest] = () if multiple else (False if kind == "flag" else None)
    return out


def parse(argv: list[str]) -> dict[str, Any] | None:
    """lint's parameters from `argv` (the words after ``lint``), as click would pass them to the command; None
    when click must read `argv` itself (help, any usage error, anything this parser does not model)."""
    values = defaults()
    files: list[str] = []
    only_files = False
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if only_files or len(word) < 2 or not word.startswith("-"):
            files.append(word)
            continue
        if word == "--":
            only_files = True
            continue
        name, eq, value = word.partition("=")
        spec = OPTIONS.get(name)
        if spec is None:
            return None
        dest, kind, detail, multiple = spec
        if kind == "flag":
            if eq:
                return None
            got: Any = True
        else:
            if not eq:
                if i >= len(argv):
                    return None
                value = argv[i]
                i += 1
            got = _convert(kind, detail, value)
            if got is _BAD:
                return None
        if multiple:
            values[dest] = (*values[dest], got)
        else:
            values[dest] = got
    if not all(_path_ok(f, FILES_PATH) for f in files):
        return None
    values["files"] = tuple(files)
    return values


def _plain_stream(stream: Any) -> bool:
    return (getattr(stream, "encoding", None) or "").lower().replace("_", "-") in ("utf-8", "utf8")


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Write `text` (and a newline) to stdout or stderr and flush, as ``click.echo`` does for text."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:   # no console (pythonw): click writes nothing either
        return
    if "\x1b" in text or not _plain_stream(stream):
        import click

        click.echo(text, err=err, nl=nl)
        return
    stream.write(text + "\n" if nl else text)
    stream.flush()


def fail_input(err: Exception) -> None:
    """Bad input: one line ``doctor: file:line: what`` on stderr, exit 2 (DESIGN.md)."""
    from finetune_doctor.reporters.safe import safe_str

    echo(safe_str(f"doctor: {err}"), err=True)
    sys.exit(2)


def guard(fn: Callable, passthrough: tuple[type[BaseException], ...] = ()) -> Callable:
    """Turn bad input into one line and exit 2, never a traceback; `passthrough` exceptions (click's own exits
    and usage errors, when click runs the command) propagate unchanged."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (InputError, MissingExtra) as err:
            fail_input(err)
        except passthrough:
            raise
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as err:  # an internal error: one line, exit 2 (ruff's convention); debug re-raises
            if os.environ.get("FINETUNE_DOCTOR_DEBUG") == "1":
                raise
            from finetune_doctor.reporters.safe import safe_str

            echo(safe_str(f"doctor: internal error: {type(err).__name__}: {err} "
                          "(set FINETUNE_DOCTOR_DEBUG=1 for the traceback)"), err=True)
            sys.exit(2)

    return wrapper


def options(**kw: Any) -> Any:
    """settings.Options from the parsed flags."""
    from finetune_doctor.settings import Options

    return Options.from_cli(**kw)


def emit(report: Any, opts: Any) -> None:
    """Render with the chosen reporter and exit with the DESIGN.md exit code."""
    from finetune_doctor.reporters import render

    extra: dict[str, Any] = {}
    if opts.output:
        extra["color"] = False   # no escape codes in a file, even when stdout is a terminal
    if opts.format == "sarif":
        from finetune_doctor.engine.loader import load_rules

        extra["rules"] = load_rules(opts.rules_dirs)
    write(render(report, opts.format, **extra), opts, input_files(report))
    sys.exit(exit_code(report, opts.fail_on))


def input_files(report: Any) -> list[str]:
    """The files a report was made from (its `inputs` and the postmortem's read list), for the output policy."""
    out: list[str] = []
    for v in (report.inputs or {}).values():
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, str))
    for rec in (report.sections or {}).get("read") or []:
        if isinstance(rec, dict) and isinstance(rec.get("file") or rec.get("path"), str):
            out.append(rec.get("file") or rec.get("path"))
    return out


def write(text: str, opts: Any, inputs: Any = ()) -> None:
    """The report to ``--output`` (fsutil.py's output policy) or stdout."""
    if opts.output:
        from finetune_doctor.fsutil import write_output

        # the output policy (fsutil.py): stdout for - and /dev/stdout, regular files only, never an input
        write_output(opts.output, text, "--output", [*opts.paths, *inputs])
    elif text:   # a clean run in the concise format prints nothing at all, as flake8 does
        echo(text, nl=not text.endswith("\n"))


def exit_code(report: Any, fail_on: str) -> int:
    """1 when a finding is at or above `fail_on` (``never``: 0), else 0. A postmortem whose logs show the run
    crashed (its ``postmortem`` section's ``crashed``, not a stop from outside) is 1 whatever the severity of the
    finding that names the cause: a cause identified at warning (FD416) is still a crashed run to a CI wrapper
    (trial 14 case 09); a crash only described in words is not shown, and follows the findings."""
    from finetune_doctor.types import SEVERITY_RANK

    if fail_on == "never":
        return 0
    pm = (getattr(report, "sections", None) or {}).get("postmortem") or {}
    if getattr(report, "command", None) == "postmortem" and pm.get("crashed") and not pm.get("stopped_outside"):
        return 1
    floor = SEVERITY_RANK[fail_on]
    return 1 if any(SEVERITY_RANK.get(f.severity, 0) >= floor for f in report.findings) else 0


def lint_command(files: tuple[str, ...], fix: bool, unsafe_fixes: bool, diff: bool, statistics: bool,
                 exit_zero: bool, config_file: str | None, stdin_filename: str | None, force_exclude: bool,
                 **kw: Any) -> None:
    """``doctor lint``'s body (cli.py declares its options); ends the process with its exit code."""
    from finetune_doctor.pipeline import lint as pipe
    from finetune_doctor.pipeline.lintinputs import collect

    files_given = tuple(files)
    files = tuple(collect(files, stdin_filename=stdin_filename, config_file=config_file,
                          force_exclude=force_exclude))
    if exit_zero:
        kw["fail_on"] = "never"
    opts = options(command="lint", paths=list(files), config_file=config_file, **kw)
    if diff:
        # a raw diff on stdout, nothing else (pipe it to `patch -p0`); exit 1 when it is not empty, as ruff does
        text, notes, hidden = pipe.diff(list(files), opts, unsafe_fixes=unsafe_fixes)
        echo(text, nl=False)
        for n in notes:
            echo(f"doctor: {n}", err=True)
        if hidden:
            echo(f"doctor: {hidden} more fix(es) change training semantics and are shown only with "
                 "--unsafe-fixes", err=True)
        if not text and not hidden:
            echo("doctor: no fixes to show", err=True)
        sys.exit(1 if text else 0)
    report = pipe.run(list(files), opts, fix=fix, unsafe_fixes=unsafe_fixes, jobs=pipe.default_jobs())
    # a file named on the command line is never skipped silently; files a directory walk found that are no
    # configs are dropped without a word, as ruff drops the files of a folder it does not lint
    named = {os.path.normpath(f) for f in files_given if not os.path.isdir(f)}
    for path, why in (report.sections.get("skip_reasons") or {}).items():
        if os.path.normpath(path) in named or path == "-":
            echo(f"doctor: skipped {path}: {why}", err=True)
    if statistics:
        from finetune_doctor.reporters.statistics import render_statistics

        write(render_statistics(pipe.statistics(report), opts.format), opts)
        sys.exit(exit_code(report, opts.fail_on))
    emit(report, opts)


def completing() -> bool:
    """Whether the shell asks for completions (click's ``_<PROG>_COMPLETE``): click answers those."""
    return any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ)


def main(argv: list[str]) -> None:
    """Run ``doctor lint`` from the words after ``lint`` and end the process; return only when click must read
    `argv` (see `parse`)."""
    params = None if completing() else parse(argv)
    if params is None:
        return
    try:
        guard(lint_command)(**params)
    except OSError as err:   # stdout closed under us (`doctor lint ... | head`): quiet exit 1, as click does
        import errno

        if err.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    sys.exit(0)
