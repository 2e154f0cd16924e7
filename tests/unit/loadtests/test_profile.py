"""Load profiles as data: every shipped profile loads, and the SLO check fails what it should."""

from __future__ import annotations

import pytest

from loadtests.profile import PROFILES_DIR, answer_outcome, load_profile, shed_timing, slo_violations

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


def test_shedding_is_timed_against_the_profiles_stages() -> None:
    """limits: ramp 0-15 s, push 15-105 s, recover 105-150 s."""
    limits = load_profile("limits")
    assert shed_timing(limits, []) is None
    timing = shed_timing(limits, [17.5, 40.0, 104.0, 106.0, 109.25])
    assert timing == {
        "first_shed_stage": "push",
        "time_to_shed_s": 2.5,
        "last_stage": "recover",
        "time_to_recover_s": 4.2,
        "shed_in_last_stage": 2,
    }
    assert shed_timing(limits, [3.0, 50.0])["time_to_recover_s"] == 0.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("stages", "outcome"),
    [
        ({"cache": {"status": "hit_l1"}, "synthesize": {"status": "cached"}}, "cache hit_l1"),
        ({"cache": {"status": "miss"}, "synthesize": {"status": "ok"}}, "llm"),
        (
            {"synthesize": {"status": "fallback", "detail": "circuit open after 3 failures; trying again"}},
            "fallback: circuit open",
        ),
        (
            {"synthesize": {"status": "fallback", "detail": "engine busy: 4 requests in flight"}},
            "fallback: engine busy",
        ),
        ({"synthesize": {"status": "fallback", "detail": "timed out after 25s"}}, "fallback: timed out"),
        ({"synthesize": {"status": "skipped", "detail": "abstained: below the floor"}}, "abstained"),
        ({"synthesize": {"status": "fallback", "detail": "degenerate: repeated lines"}}, "fallback: degenerate"),
        (
            {
                "synthesize": {
                    "status": "fallback",
                    "detail": "extractive answer: uncited claim: 'The passages' (2 sent)",
                }
            },
            "fallback: uncited claim",
        ),
    ],
)
def test_each_answer_is_counted_by_how_it_was_made(stages: dict, outcome: str) -> None:
    assert answer_outcome(stages) == outcome
