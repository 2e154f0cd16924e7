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


def shed_timing(profile: Profile, shed_at_s: list[float]) -> dict[str, Any] | None:
    """When the service began and stopped shedding, against the profile's stages (`shed_at_s`: run time of
    each shed response). `time_to_shed_s`: from the start of the stage of the first shed to it;
    `time_to_recover_s`: from the start of the last stage (the load dropping back) to its last shed, 0 when
    it shed nothing; None when nothing was shed."""
    if not shed_at_s:
        return None
    starts = [sum(s.duration_s for s in profile.stages[:n]) for n in range(len(profile.stages))]
    first = min(shed_at_s)
    stage = max(n for n, start in enumerate(starts) if start <= first)
    in_last = [t for t in shed_at_s if t >= starts[-1]]
    return {
        "first_shed_stage": profile.stages[stage].name,
        "time_to_shed_s": round(first - starts[stage], 1),
        "last_stage": profile.stages[-1].name,
        "time_to_recover_s": round(max(in_last) - starts[-1], 1) if in_last else 0.0,
        "shed_in_last_stage": len(in_last),
    }


def answer_outcome(stages: dict[str, Any]) -> str:
    """`llm`, `cache hit_*`, `abstained`, or the fallback's reason (circuit open, engine busy, timeout, ...)."""
    cache = str(stages.get("cache", {}).get("status", ""))
    if cache.startswith("hit"):
        return f"cache {cache}"
    synthesize = stages.get("synthesize", {})
    status, detail = synthesize.get("status", "none"), str(synthesize.get("detail") or "")
    if status == "ok":
        return "llm"
    for reason in ("abstained", "circuit open", "engine busy", "timed out", "timeout"):
        if reason in detail:
            return reason if reason == "abstained" else f"fallback: {reason}"
    reason = detail.removeprefix("extractive answer: ").split(":")[0].split("(")[0].strip()
    return f"{status}: {reason[:40]}"
