"""Locust users that behave like clients of the query API.

    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:8000   (`make loadtest`)
    RAGC_LOADTEST_PROFILE=smoke|steady|spike|path.yaml   load shape + SLOs (loadtests/profiles/)
    RAGC_LOADTEST_KEYS='{"key": "tenant", ...}' or a file   several tenants; unset = auth off (demo)

The shape walks the profile's stages; when the run ends the SLOs are checked, a JSON summary is printed
and the exit code is 1 if one was missed. The same file runs distributed (`--master` / `--worker`)."""

from __future__ import annotations

import json
import logging
import os
import random
from typing import Any

import httpx
from httpx_sse import EventSource
from locust import HttpUser, LoadTestShape, between, events, task
from locust.env import Environment

from loadtests.profile import Profile, load_profile, slo_violations
from loadtests.questions import DEMO_QUESTIONS, FILTERS, FOLLOW_UPS, api_keys, labelled_questions, paraphrase

logger = logging.getLogger("ragc.loadtest")
PROFILE: Profile = load_profile(os.environ.get("RAGC_LOADTEST_PROFILE", "steady"))
KEYS = api_keys()
LABELLED = labelled_questions()
HOT = list(DEMO_QUESTIONS[:4])  # asked again and again: the cache's share of real traffic


class RagClient(HttpUser):
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        self.headers: dict[str, str] = {}
        if KEYS:
            key = random.choice(sorted(KEYS))
            self.headers["Authorization"] = f"Bearer {key}"
        self.asked = 0

    def ask(self, name: str, body: dict[str, Any]) -> None:
        with self.client.post(
            "/v1/query", json=body, headers=self.headers, name=name, catch_response=True, timeout=120
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return
            try:
                out = response.json()
            except ValueError:
                response.failure("not JSON")
                return
            if not isinstance(out.get("answer"), str) or "stages" not in out:
                response.failure("response without answer/stages")

    def fresh_question(self) -> str:
        pool = LABELLED if LABELLED and random.random() < 0.5 else list(DEMO_QUESTIONS)
        return random.choice(pool)

    @task(4)
    def fresh(self) -> None:
        self.ask("query:fresh", {"query": self.fresh_question()})

    @task(3)
    def repeated(self) -> None:
        question = random.choice(HOT)
        if random.random() < 0.3:
            question = paraphrase(question, self.asked)
        self.asked += 1
        self.ask("query:cached", {"query": question})

    @task(2)
    def conversation(self) -> None:
        first = random.choice(DEMO_QUESTIONS)
        history = [{"role": "user", "content": first}, {"role": "assistant", "content": "It depends on the config."}]
        self.ask("query:conversation", {"query": random.choice(FOLLOW_UPS), "history": history})

    @task(1)
    def filtered(self) -> None:
        self.ask("query:filtered", {"query": self.fresh_question(), "filters": random.choice(FILTERS)})

    @task(1)
    def streaming(self) -> None:
        body = {"query": self.fresh_question(), "stream": True}
        with self.client.post(
            "/v1/query", json=body, headers=self.headers, name="query:stream", catch_response=True, timeout=120
        ) as response:
            events_seen = sse_event_names(response.text)
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
            elif not events_seen or events_seen[-1] != "final":
                response.failure(f"stream ended without a final event: {events_seen[-3:]}")

    @task(1)
    def health(self) -> None:
        self.client.get("/healthz", name="healthz")


def sse_event_names(body: str) -> list[str]:
    """The event names of a whole SSE body, parsed by httpx-sse (Locust's own client is requests-based)."""
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)
    return [event.event for event in EventSource(response).iter_sse()]


class ProfileShape(LoadTestShape):
    """Stages of the profile: users and spawn rate per stage; the run ends after the last."""

    def tick(self) -> tuple[int, float] | None:
        stage = PROFILE.at(self.get_run_time())
        return None if stage is None else (stage.users, stage.spawn_rate)


def summarize(environment: Environment) -> dict[str, dict[str, float]]:
    stats = environment.stats
    rows = {entry.name: entry for entry in stats.entries.values()}
    rows["Aggregated"] = stats.total
    return {
        name: {
            "requests": entry.num_requests,
            "failures": entry.num_failures,
            "rps": round(entry.total_rps, 2),
            "p50_ms": entry.get_response_time_percentile(0.5) or 0,
            "p95_ms": entry.get_response_time_percentile(0.95) or 0,
            "p99_ms": entry.get_response_time_percentile(0.99) or 0,
        }
        for name, entry in rows.items()
    }


@events.quitting.add_listener
def check_slos(environment: Environment, **_: Any) -> None:
    if environment.runner is None or type(environment.runner).__name__ == "WorkerRunner":
        return
    stats = summarize(environment)
    problems = slo_violations(PROFILE, stats)
    print(json.dumps({"loadtest": "summary", "slo_ok": not problems, "violations": problems, "stats": stats}))
    # Locust exits 1 on any failed request; the profile's failure-ratio SLO decides instead.
    environment.process_exit_code = 1 if problems else 0
