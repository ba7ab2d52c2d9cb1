"""The console scripts ``doctor`` and ``finetune-doctor`` (pyproject.toml) and ``python -m finetune_doctor``.

`entry` sets up the process (startup.py: dataclass methods compiled once) and runs ``doctor lint`` without
importing click when lintcli.py can read its arguments exactly as click would; every other command, and any
lint command line it does not model (help, usage errors), goes to the click CLI (cli.py).
"""

import sys


def entry() -> None:
    """Run the command line in ``sys.argv`` and exit with its code (DESIGN.md exit codes)."""
    from finetune_doctor import startup

    if sys.argv[1:2] == ["lint"]:
        # A lint allocates many short-lived objects and few cycles: with CPython's default first-generation
        # threshold (700) the collector ran ~70 times in a lint of LLaMA-Factory's 95 examples, ~9 ms of ~370 ms
        # of CPU, most of it while modules import; at 50,000 it runs about once per 50,000 net allocations and the
        # peak memory (29 MB) is unchanged (issue #22). Reference counting still frees all acyclic garbage.
        import gc

        gc.set_threshold(50_000, *gc.get_threshold()[1:])
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
