"""The one error type that bad input raises. The CLI turns it into a one-line message and exit code 2."""

from __future__ import annotations


class InputError(Exception):
    """Bad input: a file that cannot be read, parsed or understood.

    `file` and `line` (1-based, or None) name where; `message` says what is wrong, in one line.
    ``str(err)`` gives ``file:line: message`` as the CLI prints it.
    """

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"


DISTRIBUTION = "lf-finetune-doctor"
"""The name pip knows this project by (pyproject.toml). ``finetune-doctor`` on the package index is an unrelated
project, so no install line may name it."""


def install_hint(extra: str) -> str:
    """The pip line that adds `extra` to this installation, e.g. ``pip install '/home/me/src/doctor-clone[plot]'``.

    pip records where a package was installed from (PEP 610 ``direct_url.json``): a clone installed with
    ``pip install .`` or ``-e .`` is named by its path, one installed from a git URL by that URL. Without that
    record (a wheel from an index) the line names the distribution. Never raises.
    """
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        raw = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        url = json.loads(raw).get("url", "") if raw else ""
    except (metadata.PackageNotFoundError, ValueError, OSError):
        url = ""
    if url.startswith("file://"):
        return f"pip install '{unquote(urlparse(url).path)}[{extra}]'"
    if url:
        return f"pip install '{DISTRIBUTION}[{extra}] @ {url}'"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtra(Exception):
    """A command needs an optional dependency that is not installed; the message names the install line."""

    def __init__(self, what: str, extra: str):
        super().__init__(f"{what} needs the '{extra}' extra: {install_hint(extra)}")
        self.extra = extra
