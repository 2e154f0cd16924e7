"""A request whose ingress replica is lost mid-request (its node fails, the replica is killed) ends in Serve's
HTTP proxy without any response: Ray 2.60 retries only requests that no replica has accepted yet, and for the
rest the proxy sends nothing and its server answers an empty 500. This middleware runs in the proxy and
answers such a request as the service answers every other transient refusal: 503 with `Retry-After` and a
message, in the API's own error shape. A response already started (a stream cut mid-way) cannot be changed.

Serve loads it from `RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH` in the proxy's environment (`proxy_env`):
the local host sets it before Ray starts, the chart on every Ray pod."""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "serve.edge.lost_replica:proxy_middlewares"
RETRY_AFTER_S = 1
MESSAGE = "the replica handling this request was lost (a node failure or a restart); retry it"


def lost_body(path: str, request_id: str) -> dict[str, Any]:
    """The ingress's error shape for its API: OpenAI's on the chat API, `{error, request_id}` elsewhere."""
    if path.rstrip("/").endswith("/chat/completions"):
        return {
            "error": {
                "message": MESSAGE,
                "type": "service_unavailable",
                "param": None,
                "code": None,
                "request_id": request_id,
            }
        }
    return {"error": MESSAGE, "request_id": request_id}


class LostReplicaAs503:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, receive, tracking_send)
        if started:
            return
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1") or uuid.uuid4().hex
        body = json.dumps(lost_body(scope.get("path", ""), request_id)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"retry-after", str(RETRY_AFTER_S).encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def proxy_middlewares() -> list[Middleware]:
    """Serve's proxy callback: the middlewares it wraps its HTTP server in."""
    return [Middleware(LostReplicaAs503)]


def proxy_env() -> dict[str, str]:
    """What the Ray cluster's processes need in their environment for the proxy to load the middleware."""
    return {PROXY_CALLBACK_ENV: PROXY_CALLBACK}
