"""One SSE client for the tests: httpx-sse over httpx, as the CLI uses it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import connect_sse


@dataclass
class Stream:
    status: int
    content_type: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    arrivals_s: list[float] = field(default_factory=list)  # seconds from the request to each event

    def kinds(self) -> list[str]:
        return [event for event, _ in self.events]

    def data(self, kind: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == kind]


def post_stream(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> Stream:
    started = time.perf_counter()
    headers = dict(headers)  # connect_sse adds its Accept header to the mapping it is given
    with httpx.Client(timeout=timeout_s) as client, connect_sse(client, "POST", url, json=body, headers=headers) as src:
        stream = Stream(src.response.status_code, src.response.headers.get("content-type", ""))
        if stream.status != 200:
            return stream
        for sse in src.iter_sse():
            stream.events.append((sse.event, sse.json()))
            stream.arrivals_s.append(time.perf_counter() - started)
    return stream
