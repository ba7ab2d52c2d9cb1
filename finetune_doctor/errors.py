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


class MissingExtra(Exception):
    """A command needs an optional dependency that is not installed; the message names the install line."""

    def __init__(self, what: str, extra: str):
        super().__init__(f"{what} needs the '{extra}' extra: pip install 'finetune-doctor[{extra}]'")
        self.extra = extra
