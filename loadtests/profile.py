"""Load profiles as data: the stages a `LoadTestShape` walks through and the SLOs a run must meet."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

PROFILES_DIR = Path(__file__).parent / "profiles"


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    duration_s: float = Field(gt=0)
    users: int = Field(ge=0)
    spawn_rate: float = Field(gt=0)


class SLOs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_failure_ratio: float = Field(ge=0, le=1)
    p95_ms: dict[str, float] = Field(description="per request name; `default` for the others")
    max_response_ms: float | None = Field(
        default=None, description="a response slower than this failed (it hung past the deadline)"
    )
    min_shed: int = Field(default=0, ge=0, description="at least this many shed responses (the limits were reached)")

    def p95_limit(self, name: str) -> float:
        return self.p95_ms.get(name, self.p95_ms.get("default", float("inf")))


UserName = Literal["RagClient", "ChatClient"]
DEFAULT_USERS: tuple[UserName, ...] = ("RagClient",)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    users: list[UserName] = Field(default_factory=lambda: list(DEFAULT_USERS), min_length=1)
    stages: list[Stage] = Field(min_length=1)
    # answered with one of these and a Retry-After: shed by the service (limits, overload), counted, not failed
    shed_statuses: list[int] = Field(default_factory=list)
    slos: SLOs

    def at(self, elapsed_s: float) -> Stage | None:
        """The stage running `elapsed_s` into the run; None once every stage is over."""
        end = 0.0
        for stage in self.stages:
            end += stage.duration_s
            if elapsed_s < end:
                return stage
        return None

    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.stages)


def load_profile(name_or_path: str) -> Profile:
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return Profile.model_validate(data)


def slo_violations(profile: Profile, stats: dict[str, dict[str, float]], shed: int = 0) -> list[str]:
    """`stats`: request name -> {requests, failures, p95_ms}; "Aggregated" holds the totals; `shed`: responses
    the service refused with a shed status."""
    problems = []
    if shed < profile.slos.min_shed:
        problems.append(f"{shed} responses shed < {profile.slos.min_shed}: the limits were never reached")
    total = stats.get("Aggregated", {})
    if not total.get("requests"):
        return ["no requests were made"]
    ratio = total["failures"] / total["requests"]
    if ratio > profile.slos.max_failure_ratio:
        problems.append(f"failure ratio {ratio:.3f} > {profile.slos.max_failure_ratio}")
    for name, row in stats.items():
        if name == "Aggregated" or not row.get("requests"):
            continue
        limit = profile.slos.p95_limit(name)
        if row["p95_ms"] > limit:
            problems.append(f"{name}: p95 {row['p95_ms']:.0f} ms > {limit:.0f} ms")
    return problems
