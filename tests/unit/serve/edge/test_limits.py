"""Per-tenant admission on this process's store (the fallback), the fail-open path, and the 429s the ingress
answers. Against a real Redis shared by two limiters: tests/integration/test_limits.py; over HTTP on the
Serve app: tests/integration/test_query_service.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from cluster.config import LimitsConfig, RagcConfig
from serve.edge.limits import REDIS_RETRY_S, LocalLimitStore, TenantLimiter
from serve.errors import RateLimitedError
from tests.fakes import FakeStages, fake_stages
from tests.unit.serve.test_pipeline import passages


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limiter(limits: dict[str, Any], clock: Clock, shared: Any = None) -> TenantLimiter:
    return TenantLimiter(LimitsConfig.model_validate(limits), 30.0, shared=shared, clock=clock)


def admit(limiter: TenantLimiter, tenant: str = "t1") -> Any:
    return asyncio.run(limiter.admit(tenant))


def test_the_rate_admits_a_burst_then_says_when_to_retry() -> None:
    clock = Clock()
    limited = limiter({"default": {"requests_per_s": 0.5, "burst": 2}}, clock)
    admit(limited), admit(limited)
    with pytest.raises(RateLimitedError, match=r"rate of 0\.5 requests/s") as refused:
        admit(limited)
    assert refused.value.status_code == 429 and refused.value.retry_after_s == pytest.approx(2.0)
    admit(limited, "t2")  # another tenant has its own bucket
    clock.now += 2.0
    admit(limited)
    with pytest.raises(RateLimitedError):
        admit(limited)


def test_requests_in_flight_are_leased_and_released() -> None:
    clock = Clock()
    limited = limiter({"default": {"concurrent": 1}}, clock)
    lease = admit(limited)
    with pytest.raises(RateLimitedError, match="1 requests in flight"):
        admit(limited)
    asyncio.run(lease.release())
    asyncio.run(lease.release())  # twice is harmless
    lost = admit(limited)  # never released: expires with the request deadline (30 s here)
    assert lost.lease_id
    clock.now += 31.0
    admit(limited)


def test_a_tenant_override_keeps_the_default_where_unset_and_zero_lifts_a_limit() -> None:
    limits = {
        "default": {"requests_per_s": 10, "concurrent": 4},
        "tenants": {"gamma": {"concurrent": 1}, "free": {"requests_per_s": 0, "concurrent": 0}},
    }
    limited = limiter(limits, Clock())
    gamma = limited.limits_for("gamma")
    assert (gamma.requests_per_s, gamma.concurrent, gamma.rate()) == (10, 1, (10, 10.0))
    assert limited.limits_for("free").rate() is None and not limited.limits_for("free").concurrent
    assert limited.limits_for("other") == limited.limits_for("default-tenant")
    for _ in range(50):
        admit(limited, "free")
    assert limited.active and not TenantLimiter(LimitsConfig(), 30.0, shared=None).active


class BrokenStore(LocalLimitStore):
    """Redis down: every call fails."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def take(self, tenant: str, rate: float, size: float) -> float:
        self.calls += 1
        raise ConnectionError("Redis is down")


def test_a_failing_shared_store_fails_open_to_the_replicas_own_limits() -> None:
    clock, broken = Clock(), BrokenStore()
    limited = limiter({"default": {"requests_per_s": 1, "burst": 2}}, clock, shared=broken)
    admit(limited), admit(limited)  # no error: this replica's own bucket answered
    with pytest.raises(RateLimitedError):
        admit(limited)  # and it still limits
    assert broken.calls == 1  # skipped while presumed down, instead of paying its timeout per request
    clock.now += REDIS_RETRY_S
    admit(limited)
    assert broken.calls == 2


def ingress_with(limits: dict[str, Any]) -> Any:
    from serve.edge.ingress import Ingress

    cfg = RagcConfig.model_validate({"serve": {"limits": limits, "llm": {"enabled": False}}})
    cfg.serve.auth.enabled = False

    async def ready() -> tuple[bool, None]:
        return True, None

    return Ingress(cfg.model_dump(mode="json"), fake_stages(FakeStages(passages("demo"))), ready)


def app_with(limits: dict[str, Any]) -> TestClient:
    ingress = ingress_with(limits)
    api = FastAPI()

    async def query(request: Request) -> Any:
        return await ingress.handle_query(request)

    async def chat(request: Request) -> Any:
        return await ingress.handle_chat(request)

    api.post("/v1/query")(query)
    api.post("/v1/chat/completions")(chat)
    return TestClient(api)


def test_the_mcp_tools_are_limited_like_the_http_apis() -> None:
    from tests.unit.serve.edge.test_mcp_tools import call

    ingress = ingress_with({"default": {"requests_per_s": 0.01, "burst": 1}})
    assert not call("search", {"query": "q"}, ingress).is_error
    refused = call("ask", {"question": "q"}, ingress)
    assert refused.is_error and "429: tenant 'demo' is over its rate" in refused.content[0].text


def test_the_ingress_answers_429_with_retry_after_on_both_apis() -> None:
    client = app_with({"default": {"requests_per_s": 0.01, "burst": 1}})
    assert client.post("/v1/query", json={"query": "q"}).status_code == 200
    refused = client.post("/v1/query", json={"query": "q"})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 60
    assert "rate of 0.01 requests/s" in refused.json()["error"]
    chat = client.post("/v1/chat/completions", json={"model": "ragc", "messages": [{"role": "user", "content": "q"}]})
    assert chat.status_code == 429 and chat.headers["retry-after"] == refused.headers["retry-after"]
    assert (chat.json()["error"]["type"], chat.json()["error"]["code"]) == ("rate_limit_error", "rate_limit_exceeded")


def test_a_streamed_answer_holds_its_lease_until_it_ends() -> None:
    client = app_with({"default": {"concurrent": 1}})
    with client.stream("POST", "/v1/query", json={"query": "q", "stream": True}) as stream:
        assert client.post("/v1/query", json={"query": "q"}).status_code == 429  # the stream is in flight
        events = "".join(stream.iter_text())
    assert "event: final" in events
    assert client.post("/v1/query", json={"query": "q"}).status_code == 200  # released at its end


def test_a_refused_request_spends_neither_a_token_nor_a_place() -> None:
    local = LocalLimitStore(clock=Clock())
    limited = TenantLimiter(
        LimitsConfig.model_validate({"default": {"requests_per_s": 0.01, "burst": 2, "concurrent": 1}}),
        30.0,
        shared=None,
        local=local,
    )
    first = admit(limited)
    with pytest.raises(RateLimitedError, match="in flight"):
        admit(limited)
    asyncio.run(first.release())
    asyncio.run(admit(limited).release())  # the second token: the refusal above spent none
    with pytest.raises(RateLimitedError, match="rate"):
        admit(limited)
    assert local.leases["t1"] == {}  # the place it took is given back
