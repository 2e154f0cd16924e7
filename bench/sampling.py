"""A measurement taken every `interval_s` in a background thread while a benchmark's load runs."""

from __future__ import annotations

import threading
from typing import Self


class BackgroundSampler:
    """Subclasses say what one sample does (`sample`); `with` runs them from entry to exit."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
