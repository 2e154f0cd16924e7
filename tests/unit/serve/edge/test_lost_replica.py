"""Serve's proxy sends nothing for a request whose replica was lost; the middleware answers it with a 503."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Receive, Scope, Send

from serve.edge.lost_replica import PROXY_CALLBACK, LostReplicaAs503, proxy_env, proxy_middlewares


async def replica_lost(scope: Scope, receive: Receive, send: Send) -> None:
    """What Serve's proxy does when the replica dies before answering: it returns without a message."""


async def answered(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def stream_cut(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"event: stage\n\n", "more_body": True})


def call(app: Any, path: str = "/v1/query", headers: list[tuple[bytes, bytes]] | None = None) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers or []}
    asyncio.run(LostReplicaAs503(app)(scope, receive, send))
    return sent


def test_a_request_that_got_no_response_is_a_503_with_retry_after_and_a_message() -> None:
    start, body = call(replica_lost, headers=[(b"x-request-id", b"abc123")])
    assert start["status"] == 503
    assert dict(start["headers"])[b"retry-after"] == b"1"
    assert json.loads(body["body"]) == {
        "error": "the replica handling this request was lost (a node failure or a restart); retry it",
        "request_id": "abc123",
    }


def test_the_chat_api_gets_the_loss_in_openais_error_shape() -> None:
    _, body = call(replica_lost, path="/v1/chat/completions")
    error = json.loads(body["body"])["error"]
    assert error["type"] == "service_unavailable" and "lost" in error["message"] and error["request_id"]


def test_answers_and_streams_already_started_pass_unchanged() -> None:
    assert [m.get("status") for m in call(answered)] == [200, None]
    cut = call(stream_cut)
    assert len(cut) == 2 and cut[0]["status"] == 200  # nothing may follow a started response


def test_serve_loads_it_from_the_proxy_environment() -> None:
    from ray.serve._private.http_util import validate_http_proxy_callback_return

    assert proxy_env() == {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_CALLBACK}
    module, name = PROXY_CALLBACK.split(":")
    loaded = getattr(__import__(module, fromlist=[name]), name)
    assert [m.cls for m in validate_http_proxy_callback_return(loaded())] == [m.cls for m in proxy_middlewares()]
    assert proxy_middlewares()[0].cls is LostReplicaAs503


def test_a_not_ready_refusal_says_when_to_retry() -> None:
    import pickle

    from serve.edge.ingress import retry_headers
    from serve.errors import NotReadyError

    refusal = pickle.loads(pickle.dumps(NotReadyError("service not ready: retrieval stage unreachable")))
    assert refusal.status_code == 503 and retry_headers(refusal) == {"Retry-After": "1"}
