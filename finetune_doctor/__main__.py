"""The console scripts ``doctor`` and ``finetune-doctor`` (pyproject.toml) and ``python -m finetune_doctor``.

`entry` sets up the process (startup.py: dataclass methods compiled once) and runs ``doctor lint`` without
importing click when lintcli.py can read its arguments exactly as click would; every other command, and any
lint command line it does not model (help, usage errors), goes to the click CLI (cli.py).
"""

import sys


def entry() -> None:
    """Run the command line in ``sys.argv`` and exit with its code (DESIGN.md exit codes)."""
    from finetune_doctor import startup

    startup.install()
    try:
        if sys.argv[1:2] == ["lint"]:
            from finetune_doctor import lintcli

            lintcli.main(sys.argv[2:])   # returns only when click must read the arguments
        from finetune_doctor.cli import entry as click_entry

        click_entry()
    finally:
        startup.save()


if __name__ == "__main__":
    entry()
