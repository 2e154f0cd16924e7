"""Circuit breakers in front of the stages that have a fallback (rewrite, rerank, synthesize).

After `failures` consecutive failures (timeouts, errors, full queues) within `window_s`, a stage's breaker
opens: for `open_s` its callers take the fallback at once instead of each waiting out the stage's timeout.
Then it half-opens: exactly one trial request goes through while the others still take the fallback; its
success closes the breaker, its failure opens it again. State is per ingress replica (each replica learns
of an outage from its own calls within a few requests). Written here rather than taken from `purgatory`
(evaluated): its half-open state lets every request through instead of one trial, and its clock cannot be
injected for tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from cluster.config import BreakerConfig

BreakerState = Literal["closed", "open", "half_open"]


@dataclass
class CircuitBreaker:
    failures: int
    window_s: float
    open_s: float
    clock: Callable[[], float] = time.monotonic
    state: BreakerState = "closed"
    recent: list[float] = field(default_factory=list)  # times of the consecutive failures in the window
    opened_at: float = 0.0
    trial_in_flight: bool = False

    def refusal(self) -> str | None:
        """None when this call may go to the stage (and is then recorded), else why it takes the fallback."""
        if self.state == "open":
            wait = self.opened_at + self.open_s - self.clock()
            if wait > 0:
                return f"circuit open after {len(self.recent)} failures; trying the stage again in {wait:.0f}s"
            self.state, self.trial_in_flight = "half_open", False
        if self.state == "half_open":
            if self.trial_in_flight:
                return "circuit half-open: a trial request is in flight"
            self.trial_in_flight = True
        return None

    def succeeded(self) -> BreakerState:
        self.state, self.trial_in_flight, self.recent = "closed", False, []
        return self.state

    def failed(self) -> BreakerState:
        now = self.clock()
        self.recent = [t for t in self.recent if now - t <= self.window_s] + [now]
        if self.state == "half_open" or len(self.recent) >= self.failures:
            self.state, self.opened_at, self.trial_in_flight = "open", now, False
        return self.state


def breakers(cfg: BreakerConfig, clock: Callable[[], float] = time.monotonic) -> dict[str, CircuitBreaker]:
    if not cfg.enabled:
        return {}
    return {stage: CircuitBreaker(cfg.failures, cfg.window_s, cfg.open_s, clock) for stage in cfg.stages}
