"""Prometheus metrics of the query path, exposed by the ingress at GET /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry()
STAGE_SECONDS = Histogram(
    "ragc_stage_seconds",
    "Stage latency as seen by the ingress",
    ["stage", "status"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
FALLBACKS = Counter("ragc_stage_fallbacks_total", "Stage fallbacks and errors", ["stage", "status"], registry=REGISTRY)
ABSTENTIONS = Counter("ragc_abstentions_total", "Queries answered with an abstention", registry=REGISTRY)
REQUESTS = Counter("ragc_requests_total", "Query requests by HTTP status", ["code"], registry=REGISTRY)
INCIDENTS = Counter(
    "ragc_incidents_total", "Isolation incidents (dropped foreign passages)", ["kind"], registry=REGISTRY
)


def observe_stage(stage: str, status: str, seconds: float) -> None:
    STAGE_SECONDS.labels(stage=stage, status=status).observe(seconds)
    if status in ("fallback", "error"):
        FALLBACKS.labels(stage=stage, status=status).inc()


CACHE = Counter("ragc_cache_lookups_total", "Response cache lookups by outcome", ["status"], registry=REGISTRY)
REMOVED_CITATIONS = Counter(
    "ragc_removed_citations_total", "Citations in generated answers that pointed at no passage sent", registry=REGISTRY
)
UNGROUNDED = Counter("ragc_ungrounded_answers_total", "Generated answers with no valid citation", registry=REGISTRY)
