"""The ``doctor gpus --watch`` live view: a rich Live on stderr redrawn from the pipeline's progress callback,
so ``--format json`` on stdout stays clean. Transient: the final report replaces it instead of printing the cards
twice."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live

from finetune_doctor.reporters.sections.gpus import render


class LiveView:
    """`update(section_data)` redraws the card table; `stop()` clears it. Starts drawing on the first update."""

    def __init__(self, console: Console | None = None, refresh_per_second: float = 4):
        self._live = Live(console=console or Console(stderr=True), refresh_per_second=refresh_per_second,
                          transient=True)
        self._started = False

    def update(self, data: dict[str, Any]) -> None:
        if not self._started:
            self._live.start()
            self._started = True
        self._live.update(render(data))

    def stop(self) -> None:
        if self._started:
            self._live.stop()
            self._started = False
