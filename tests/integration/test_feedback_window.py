"""`ragc feedback --since` on a real Redis stream: the window is the stream's own ids (the time each rating
was added), so Redis reads only the ratings inside it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from serve.edge.feedback import RedisFeedbackStore, read_feedback, stream_key
from tests.fakes import feedback_entry

HOUR_MS = 3_600_000


def test_since_keeps_the_ratings_given_inside_the_window(
    redis_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import redis

    tenant, now_ms = f"since-{time.time_ns()}", int(time.time() * 1000)
    client = redis.Redis.from_url(redis_server["url"])
    for request_id, hours_ago in (("r-3d", 72), ("r-2h", 2)):  # given earlier: their ids carry their time
        given = feedback_entry(request_id, "down", (now_ms - hours_ago * HOUR_MS) / 1000, tenant=tenant)
        client.xadd(stream_key(tenant), {"entry": given.model_dump_json()}, id=f"{now_ms - hours_ago * HOUR_MS}-0")
    client.close()
    store = RedisFeedbackStore(redis_server["url"], None, timeout_s=2.0)  # as the ingress adds one now
    asyncio.run(store.add(feedback_entry("r-now", "up", time.time(), tenant=tenant), max_entries=100))

    def read(**window: Any) -> list[str]:
        return [e.request_id for e in read_feedback(redis_server["url"], None, tenant, **window)]

    assert read() == ["r-3d", "r-2h", "r-now"]
    assert read(since_ms=now_ms - 24 * HOUR_MS) == ["r-2h", "r-now"]
    assert read(since_ms=now_ms - HOUR_MS) == ["r-now"]
    assert read(since_ms=now_ms - 24 * HOUR_MS, newest=1) == ["r-now"]

    monkeypatch.setenv("RAGC_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RAGC_REDIS__URL", redis_server["url"])
    assert main(["feedback", "--tenant", tenant, "--since", "1d", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [e["request_id"] for e in report["feedback"]] == ["r-2h", "r-now"]
    assert report["ratings"] == {"up": 1, "down": 1} and report["since"].endswith("+00:00")
