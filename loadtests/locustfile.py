"""Locust users that behave like clients of the query API.

    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:8000   (`make loadtest`)
    RAGC_LOADTEST_PROFILE=smoke|steady|spike|chat|limits|path.yaml   users, load shape, SLOs (loadtests/profiles/)
    RAGC_LOADTEST_KEYS='{"key": "tenant", ...}' or a file   several tenants; unset = auth off (demo)

The shape walks the profile's stages; when the run ends the SLOs are checked, a JSON summary is printed
and the exit code is 1 if one was missed. The same file runs distributed (`--master` / `--worker`)."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from typing import Any

import httpx
from httpx_sse import EventSource
from locust import HttpUser, LoadTestShape, between, events, task
from locust.env import Environment

from loadtests.profile import Profile, answer_outcome, load_profile, shed_timing, slo_violations
from loadtests.questions import DEMO_QUESTIONS, FILTERS, FOLLOW_UPS, api_keys, labelled_questions, paraphrase

logger = logging.getLogger("ragc.loadtest")
PROFILE: Profile = load_profile(os.environ.get("RAGC_LOADTEST_PROFILE", "steady"))
KEYS = api_keys()
LABELLED = labelled_questions()
HOT = list(DEMO_QUESTIONS[:4])  # asked again and again: the cache's share of real traffic


SHED: Counter[int] = Counter()  # responses the service shed (the profile's shed statuses, with Retry-After)
SHED_AT_S: list[float] = []  # run time of each
ANSWERS: Counter[str] = Counter()  # how the query API's answers were made: llm, cache, or the fallback's reason
STARTED = [time.monotonic()]


@events.test_start.add_listener
def started(**_: Any) -> None:
    STARTED[0] = time.monotonic()


def judged(response: Any) -> bool:
    """Marks a response shed (counted, not failed), failed (another status, or slower than the profile allows)
    or leaves it to the caller's checks (True: a 200 in time)."""
    limit = PROFILE.slos.max_response_ms
    if limit is not None and response.elapsed.total_seconds() * 1000 > limit:
        response.failure(f"answered after {response.elapsed.total_seconds():.1f} s: past the deadline")
        return False
    if response.status_code in PROFILE.shed_statuses:
        if "retry-after" in {k.lower() for k in response.headers}:
            SHED[response.status_code] += 1
            SHED_AT_S.append(time.monotonic() - STARTED[0])
            response.success()
        else:
            response.failure(f"HTTP {response.status_code} without Retry-After")
        return False
    if response.status_code != 200:
        response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
        return False
    return True


def json_of(response: Any) -> dict[str, Any] | None:
    try:
        out = response.json()
    except ValueError:
        response.failure("not JSON")
        return None
    return out if isinstance(out, dict) else None


class KeyedUser(HttpUser):
    abstract = True
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        self.headers: dict[str, str] = {}
        if KEYS:
            key = random.choice(sorted(KEYS))
            self.headers["Authorization"] = f"Bearer {key}"
        self.asked = 0

    def fresh_question(self) -> str:
        pool = LABELLED if LABELLED and random.random() < 0.5 else list(DEMO_QUESTIONS)
        return random.choice(pool)


class RagClient(KeyedUser):
    def ask(self, name: str, body: dict[str, Any]) -> None:
        with self.client.post(
            "/v1/query", json=body, headers=self.headers, name=name, catch_response=True, timeout=120
        ) as response:
            if not judged(response):
                return
            out = json_of(response)
            if out is not None and (not isinstance(out.get("answer"), str) or "stages" not in out):
                response.failure("response without answer/stages")
            elif out is not None:
                ANSWERS[answer_outcome(out["stages"])] += 1

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
            if not judged(response):
                return
            events_seen = [event.event for event in sse_events(response.text)]
            if not events_seen or events_seen[-1] != "final":
                response.failure(f"stream ended without a final event: {events_seen[-3:]}")

    @task(1)
    def health(self) -> None:
        self.client.get("/healthz", name="healthz")


class ChatClient(KeyedUser):
    """What an OpenAI client sends to the chat API (`openai`'s request shapes: model, messages, stream)."""

    def chat(self, name: str, messages: list[dict[str, str]], stream: bool = False) -> None:
        body = {"model": "ragc", "messages": messages, "stream": stream}
        with self.client.post(
            "/v1/chat/completions", json=body, headers=self.headers, name=name, catch_response=True, timeout=120
        ) as response:
            if not judged(response):
                return
            if stream:
                data = [event.data for event in sse_events(response.text)]
                if not data or data[-1] != "[DONE]":
                    response.failure(f"stream did not end with [DONE]: {data[-2:]}")
                return
            out = json_of(response)
            if out is not None and not isinstance(out.get("choices", [{}])[0].get("message", {}).get("content"), str):
                response.failure("completion without choices[0].message.content")

    @task(4)
    def ask(self) -> None:
        self.chat("chat:ask", [{"role": "user", "content": self.fresh_question()}])

    @task(2)
    def conversation(self) -> None:
        first = random.choice(DEMO_QUESTIONS)
        messages = [
            {"role": "system", "content": "Answer from the documents."},
            {"role": "user", "content": first},
            {"role": "assistant", "content": "It depends on the config."},
            {"role": "user", "content": random.choice(FOLLOW_UPS)},
        ]
        self.chat("chat:conversation", messages)

    @task(1)
    def streaming(self) -> None:
        self.chat("chat:stream", [{"role": "user", "content": self.fresh_question()}], stream=True)


def choose_users(profile: Profile) -> None:
    """The profile's users run; Locust skips abstract classes. (A module-level loop variable would be one more
    user class to Locust, which refuses two of one name.)"""
    for user_class in (RagClient, ChatClient):
        user_class.abstract = user_class.__name__ not in profile.users


choose_users(PROFILE)


def sse_events(body: str) -> list[Any]:
    """The events of a whole SSE body, parsed by httpx-sse (Locust's own client is requests-based)."""
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)
    return list(EventSource(response).iter_sse())


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
    problems = slo_violations(PROFILE, stats, sum(SHED.values()))
    shed = {str(status): count for status, count in sorted(SHED.items())}
    print(
        json.dumps(
            {
                "loadtest": "summary",
                "slo_ok": not problems,
                "violations": problems,
                "shed": shed,
                "shed_timing": shed_timing(PROFILE, SHED_AT_S),
                "answers": dict(ANSWERS.most_common()),
                "stats": stats,
            }
        )
    )
    # Locust exits 1 on any failed request; the profile's failure-ratio SLO decides instead.
    environment.process_exit_code = 1 if problems else 0
