"""How long a new request would take on an engine now, for admission: an answer that cannot finish within
its stage's timeout is refused at once (the extractive answer follows) instead of waiting the timeout out.

On CPU the engine shares its cores among the requests in flight, so a request takes about its time alone
times the number of requests it shared the engine with. The model learns "time alone" from the requests the
engine finished (an exponentially weighted mean of duration / requests in flight) and predicts
`time alone x (in flight now + 1)`."""

from __future__ import annotations

from dataclasses import dataclass

SMOOTHING = 0.2  # weight of the newest finished request
MIN_SAMPLES = 3  # no prediction before this many finished requests


@dataclass(frozen=True)
class EngineLoad:
    in_flight: int
    predicted_s: float | None  # None: not enough finished requests to say


@dataclass
class LoadModel:
    alone_s: float | None = None
    samples: int = 0

    def observe(self, seconds: float, in_flight: float) -> None:
        """A finished request: how long it took, and how many requests (itself included) it ran beside on average."""
        alone = seconds / max(1.0, in_flight)
        self.alone_s = alone if self.alone_s is None else (1 - SMOOTHING) * self.alone_s + SMOOTHING * alone
        self.samples += 1

    def load(self, in_flight: int) -> EngineLoad:
        if self.alone_s is None or self.samples < MIN_SAMPLES:
            return EngineLoad(in_flight, None)
        return EngineLoad(in_flight, self.alone_s * (in_flight + 1))
