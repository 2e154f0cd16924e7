"""What an answered query cost, per tenant and answering model (Prometheus counters through Ray, so every
ingress replica counts), and the one structured log line per answered query."""

from __future__ import annotations

import json
import logging
import sys

from cluster.config import RequestLogConfig, ServeConfig
from serve import metrics
from serve.types import QueryResponse

REQUEST_LOG = logging.getLogger("ragc.requests")


def answering_model(cfg: ServeConfig) -> str:
    """The engine that answers (its served name), or `extractive` when the service runs without an LLM."""
    if not cfg.llm.enabled:
        return "extractive"
    engine = cfg.llm.engines[cfg.synthesize.engine]
    return engine.served_name or engine.model


def outcomes(response: QueryResponse) -> list[metrics.UsageOutcome]:
    found: list[metrics.UsageOutcome] = []
    cache = response.stages.get("cache")
    if cache is not None and str(cache.status).startswith("hit_"):
        found.append("cache_hit")
    if response.abstained:
        found.append("abstained")
    if any(s.status == "fallback" for name, s in response.stages.items() if name != "cache"):
        found.append("fallback")
    return found


def log_line(response: QueryResponse, question: str, cfg: RequestLogConfig) -> str:
    cache = response.stages.get("cache")
    record = {
        "request_id": response.request_id,
        "tenant": response.tenant,
        "cache": cache.status if cache is not None else None,
        "stages": {name: {"status": s.status, "ms": s.ms} for name, s in response.stages.items() if name != "cache"},
        "chunk_ids": [p.chunk_id for p in response.passages],
        "abstained": response.abstained,
        "grounded": response.grounded,
        "usage": response.usage.model_dump(),
    }
    if cfg.question_text:
        record["question"] = question
    return json.dumps(record)


def account(response: QueryResponse, question: str, cfg: ServeConfig) -> None:
    usage = response.usage
    tokens = {"prompt": usage.prompt_tokens, "completion": usage.completion_tokens}
    metrics.count_usage(response.tenant, answering_model(cfg), tokens, outcomes(response))
    if cfg.request_log.enabled:
        REQUEST_LOG.info(log_line(response, question, cfg.request_log))


def send_request_log_to_stderr() -> None:
    """In a Serve replica only Ray's own loggers have handlers: the request log gets one of its own, bare JSON."""
    if not REQUEST_LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        REQUEST_LOG.addHandler(handler)
        REQUEST_LOG.setLevel(logging.INFO)
        REQUEST_LOG.propagate = False
