"""Load profiles as data: every shipped profile loads, and the SLO check fails what it should."""

from __future__ import annotations

import pytest

from loadtests.profile import PROFILES_DIR, load_profile, slo_violations

STATS = {"Aggregated": {"requests": 100, "failures": 0, "p95_ms": 900}, "chat:ask": {"requests": 100, "p95_ms": 900}}


@pytest.mark.parametrize("name", sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
def test_every_profile_loads(name: str) -> None:
    profile = load_profile(name)
    assert profile.duration_s() > 0 and profile.users


def test_the_limits_profile_must_reach_the_limits_and_counts_only_shed_statuses() -> None:
    limits = load_profile("limits")
    assert set(limits.shed_statuses) == {429, 503} and {"RagClient", "ChatClient"} == set(limits.users)
    assert slo_violations(limits, STATS, shed=0) == ["0 responses shed < 1: the limits were never reached"]
    assert slo_violations(limits, STATS, shed=12) == []
    failed = {**STATS, "Aggregated": {"requests": 100, "failures": 1, "p95_ms": 900}}
    assert slo_violations(limits, failed, shed=12) == ["failure ratio 0.010 > 0.0"]


def test_the_default_profile_runs_the_query_api_users() -> None:
    assert load_profile("smoke").users == ["RagClient"] and load_profile("chat").users == ["ChatClient"]
