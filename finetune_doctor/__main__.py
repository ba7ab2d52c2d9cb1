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
    startup.install("lint" if sys.argv[1:2] == ["lint"] else "")
    try:
        if sys.argv[1:2] == ["lint"]:
            from finetune_doctor import lintcli

            try:
                lintcli.main(sys.argv[2:])   # returns only when click must read the arguments
            except SystemExit as done:
                startup.save()
                _end(done)
        from finetune_doctor.cli import entry as click_entry

        click_entry()
    finally:
        startup.save()


def _end(done: SystemExit) -> None:
    """End a finished lint now: run the atexit handlers, flush stdout and stderr, and leave with the exit code,
    without the interpreter's finalization (tearing down every module and freeing every object one by one:
    ~25-30 ms of CPU after a lint of LLaMA-Factory's 95 examples, 7-8 % of the run, issue #22; os._exit, as
    mypy's command line ends). The output files are closed by then (fsutil writes them whole) and the forked
    workers waited for. A message as the code, or a stream that cannot be flushed (a closed pipe), takes
    the ordinary exit, which reports it as before."""
    import atexit
    import os

    code = done.code
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise done
    try:
        atexit._run_exitfuncs()   # what the interpreter runs first at exit; it clears them, so they run once
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        raise done from None
    os._exit(code or 0)


if __name__ == "__main__":
    entry()
