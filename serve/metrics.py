"""Metrics of the query path, recorded through Ray Serve's metrics API.

Every replica's figures reach Ray's metrics agent on its node, which Prometheus scrapes (port
`local.metrics_port` for `ragc up`, the Ray pods' `metrics` port on Kubernetes): a scrape sees every replica,
each series tagged with its deployment and replica. Names gain Ray's `ray_` prefix (`ray_ragc_requests_total`).
The objects are made on first use inside the replica, so Serve's tags are attached; outside Ray recording is a
no-op (unit tests)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from ray.serve.metrics import Counter, Histogram

# Ray annotates `tag_keys` as a one-element tuple (`Tuple[str]`); any tuple of names is what it takes.
STAGE_TAGS: Any = ("stage", "status")
CHECK_TAGS: Any = ("outcome", "attempts")
BREAKER_TAGS: Any = ("stage", "event")
USAGE_TAGS: Any = ("tenant", "model")
FEEDBACK_TAGS: Any = ("tenant", "rating")
# label values that alert rules match on (helm/ragc/templates/prometheusrule.yaml; tests/unit/helm/test_alerts.py)
BreakerEvent = Literal["opened", "refused"]
KeyReloadOutcome = Literal["reloaded", "refused"]
IncidentKind = Literal["tenant_mismatch", "access_mismatch"]
UsageOutcome = Literal["cache_hit", "abstained", "fallback"]
STAGE_BOUNDARIES_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]


@dataclass(frozen=True)
class QueryMetrics:
    stage_seconds: Histogram
    fallbacks: Counter
    abstentions: Counter
    requests: Counter
    incidents: Counter
    cache: Counter
    removed_citations: Counter
    answer_checks: Counter
    limited: Counter
    limiter_fallbacks: Counter
    key_reloads: Counter
    breakers: Counter
    tenant_requests: Counter
    tenant_tokens: Counter
    tenant_outcomes: Counter
    feedback: Counter
    feedback_receipts: Counter


@cache
def query_metrics() -> QueryMetrics:
    return QueryMetrics(
        stage_seconds=Histogram(
            "ragc_stage_seconds",
            "Stage latency as seen by the ingress",
            boundaries=STAGE_BOUNDARIES_S,
            tag_keys=STAGE_TAGS,
        ),
        fallbacks=Counter("ragc_stage_fallbacks", "Stage fallbacks and errors", tag_keys=STAGE_TAGS),
        abstentions=Counter(
            "ragc_abstentions", "Queries answered with an abstention, by the signal that decided", tag_keys=("signal",)
        ),
        requests=Counter("ragc_requests", "Query requests by HTTP status", tag_keys=("code",)),
        incidents=Counter("ragc_incidents", "Isolation incidents (dropped foreign passages)", tag_keys=("kind",)),
        cache=Counter("ragc_cache_lookups", "Response cache lookups by outcome", tag_keys=("status",)),
        removed_citations=Counter(
            "ragc_removed_citations", "Citations in generated answers that pointed at no passage sent"
        ),
        answer_checks=Counter(
            "ragc_answer_checks",
            "Generated answers by check outcome (passed, degenerate, uncited, unsupported, unchecked) and attempts",
            tag_keys=CHECK_TAGS,
        ),
        limited=Counter("ragc_limited_requests", "Requests refused with 429, by the limit hit", tag_keys=("limit",)),
        limiter_fallbacks=Counter(
            "ragc_limiter_fallbacks", "Times an ingress replica fell back to its own limiter because Redis failed"
        ),
        key_reloads=Counter(
            "ragc_api_key_reloads",
            "Changed API key files an ingress replica read: reloaded, or refused (kept the keys it had)",
            tag_keys=("outcome",),
        ),
        breakers=Counter(
            "ragc_breaker_events",
            "Circuit breaker events per stage: opened, refused (a request took the fallback at once)",
            tag_keys=BREAKER_TAGS,
        ),
        tenant_requests=Counter(
            "ragc_tenant_requests", "Answered queries per tenant and answering model", tag_keys=USAGE_TAGS
        ),
        tenant_tokens=Counter(
            "ragc_tenant_tokens",
            "LLM tokens per tenant and model, by kind (prompt, completion), as the engine counted them",
            tag_keys=(*USAGE_TAGS, "kind"),
        ),
        tenant_outcomes=Counter(
            "ragc_tenant_outcomes",
            "Answered queries per tenant and model that were a cache hit, an abstention or a fallback answer",
            tag_keys=(*USAGE_TAGS, "outcome"),
        ),
        feedback=Counter("ragc_feedback", "Ratings of served answers per tenant (up, down)", tag_keys=FEEDBACK_TAGS),
        feedback_receipts=Counter(
            "ragc_feedback_receipts",
            "Answers whose receipt was not kept (Redis failed): they cannot be rated",
            tag_keys=("outcome",),
        ),
    )


def observe_stage(stage: str, status: str, seconds: float) -> None:
    metrics = query_metrics()
    metrics.stage_seconds.observe(seconds, tags={"stage": stage, "status": status})
    if status in ("fallback", "error"):
        metrics.fallbacks.inc(tags={"stage": stage, "status": status})


def count_request(code: int | str) -> None:
    query_metrics().requests.inc(tags={"code": str(code)})


def count_limited(limit: str) -> None:
    query_metrics().limited.inc(tags={"limit": limit})


def count_limiter_fallback() -> None:
    query_metrics().limiter_fallbacks.inc()


def count_key_reload(outcome: KeyReloadOutcome) -> None:
    query_metrics().key_reloads.inc(tags={"outcome": outcome})


def count_usage(tenant: str, model: str, tokens: dict[str, int], outcomes: list[UsageOutcome]) -> None:
    """One answered query: its tokens by kind and its outcomes (cache_hit, abstained, fallback)."""
    metrics = query_metrics()
    tags = {"tenant": tenant, "model": model}
    metrics.tenant_requests.inc(tags=tags)
    for kind, count in tokens.items():
        if count > 0:  # a Ray counter refuses a zero increment
            metrics.tenant_tokens.inc(count, tags=tags | {"kind": kind})
    for outcome in outcomes:
        metrics.tenant_outcomes.inc(tags=tags | {"outcome": outcome})


def count_breaker(stage: str, event: BreakerEvent) -> None:
    query_metrics().breakers.inc(tags={"stage": stage, "event": event})


def count_feedback(tenant: str, rating: str) -> None:
    query_metrics().feedback.inc(tags={"tenant": tenant, "rating": rating})


def count_feedback_receipt(outcome: str) -> None:
    query_metrics().feedback_receipts.inc(tags={"outcome": outcome})
