"""`POST /v1/feedback` on the ingress over fake stages and an in-memory store: an answer leaves a receipt, its
tenant's key rates it, no other tenant can, and every bad rating is a 4xx that stores nothing. Against the real
Serve app and Redis: tests/integration/test_query_service.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from cli.feedback_text import feedback_text
from cli.main import EXIT_UNREACHABLE, EXIT_USAGE, main
from cluster.config import FeedbackConfig, RagcConfig
from serve.edge.feedback import Feedback, feedback_report
from serve.types import Passage
from tests.fakes import FakeStages, MemoryFeedbackStore, fake_stages, feedback_entry

KEYS = {"key-a": "acme", "key-b": "globex"}
QUESTION = "How are tenants kept apart?"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Rig:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, **feedback: Any) -> None:
        from serve.edge.ingress import Ingress

        monkeypatch.setenv("TEST_FEEDBACK_KEYS", json.dumps(KEYS))
        cfg = RagcConfig.model_validate(
            {
                "redis": {"enabled": False},
                "serve": {
                    "llm": {"enabled": False},
                    "cache": {"enabled": False},
                    "auth": {"api_keys": {"env_var": "TEST_FEEDBACK_KEYS"}},
                    "feedback": feedback,
                },
            }
        )

        async def ready() -> tuple[bool, None]:
            return True, None

        passages = [Passage("c0", "tenancy.md", "acme", "Tenants are isolated by a partition key.", score=0.9)]
        self.ingress = Ingress(cfg.model_dump(mode="json"), fake_stages(FakeStages(passages)), ready)
        self.clock = Clock()
        self.store = MemoryFeedbackStore(self.clock)
        self.ingress._feedback = Feedback(cfg.serve.feedback, self.store, self.clock)
        api = FastAPI()

        async def query(request: Request) -> Any:
            return await self.ingress.handle_query(request)

        async def rate(request: Request) -> Any:
            return await self.ingress.handle_feedback(request)

        api.post("/v1/query")(query)
        api.post("/v1/feedback")(rate)
        self.client = TestClient(api)

    def ask(self, key: str = "key-a") -> Any:
        out = self.client.post("/v1/query", json={"query": QUESTION}, headers={"Authorization": f"Bearer {key}"})
        assert out.status_code == 200, out.text
        return out.json()

    def rate(self, body: Any, key: str | None = "key-a", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if isinstance(body, dict):
            return self.client.post("/v1/feedback", json=body, headers=headers)
        return self.client.post("/v1/feedback", content=body, headers=headers | kw.get("headers", {}))


def test_an_answer_is_rated_by_its_request_id_with_what_was_served(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(monkeypatch)
    answer = rig.ask()
    out = rig.rate({"request_id": answer["request_id"], "rating": "down", "comment": "it cites the wrong page"})
    assert out.status_code == 200, out.text
    assert out.json() == {"request_id": answer["request_id"], "rating": "down", "recorded": True}
    [entry] = rig.store.entries
    assert (entry.rating, entry.comment, entry.at) == ("down", "it cites the wrong page", rig.clock.now)
    receipt = entry.receipt
    assert (receipt.tenant, receipt.question, receipt.answer) == ("acme", QUESTION, answer["answer"])
    assert [c.doc_id for c in receipt.cited] == [c["doc_id"] for c in answer["citations"]] == ["tenancy.md"]
    assert receipt.synthesize == answer["stages"]["synthesize"]["status"] and not receipt.abstained
    # the OpenAI-compatible API's completion id names the same answer
    again = rig.rate({"request_id": f"chatcmpl-{answer['request_id']}", "rating": "up"})
    assert again.status_code == 200 and again.json()["request_id"] == answer["request_id"]


def test_only_the_answers_tenant_rates_it_and_only_within_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(monkeypatch, window_s=60)
    answer = rig.ask()
    foreign = rig.rate({"request_id": answer["request_id"], "rating": "down"}, key="key-b")
    unknown = rig.rate({"request_id": "never-served", "rating": "down"}, key="key-b")
    assert foreign.status_code == unknown.status_code == 404
    assert "was served to this key's tenant in the last 60 s" in foreign.json()["error"]
    assert foreign.json()["error"].replace(answer["request_id"], "X") == unknown.json()["error"].replace(
        "never-served", "X"
    ), "another tenant's answer reads as one never served"
    rig.clock.now += 61
    assert rig.rate({"request_id": answer["request_id"], "rating": "up"}).status_code == 404
    assert rig.store.entries == []


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"request_id": "r", "rating": "meh"}, 400, "rating"),
        ({"rating": "up"}, 400, "request_id"),
        ({"request_id": "r", "rating": "up", "score": 5}, 400, "score"),
        ({"request_id": "r", "rating": "up", "comment": "x" * 2001}, 400, "comment too long"),
        ({"request_id": "r", "rating": "up", "comment": "a\x00b"}, 400, "NUL"),
        ({"request_id": "a b", "rating": "up"}, 400, "not one this service gives"),
        ({"request_id": 7, "rating": "up"}, 400, "request_id"),
        (b"[1, 2]", 400, "JSON object"),
        (b"{nope", 400, "malformed JSON"),
    ],
)
def test_a_bad_rating_is_a_400_that_stores_nothing(
    monkeypatch: pytest.MonkeyPatch, body: Any, status: int, says: str
) -> None:
    rig = Rig(monkeypatch)
    rig.ask()
    out = rig.rate(body)
    assert out.status_code == status and says in out.json()["error"], out.text
    assert rig.store.entries == []


def test_no_key_wrong_content_type_and_a_down_store(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(monkeypatch)
    answer = rig.ask()
    body = {"request_id": answer["request_id"], "rating": "up"}
    assert rig.rate(body, key=None).status_code == 401
    assert rig.rate(b"rating=up", headers={"content-type": "text/plain"}).status_code == 415
    rig.store.down = True
    refused = rig.rate(body)
    assert refused.status_code == 503 and "feedback store unavailable" in refused.json()["error"]
    later = rig.ask()  # answers go on without a receipt
    rig.store.down = False
    assert rig.rate({"request_id": later["request_id"], "rating": "up"}).status_code == 404
    assert rig.store.entries == []


@pytest.mark.parametrize(
    ("feedback", "store", "why"),
    [({"enabled": False}, True, "serve.feedback.enabled is false"), ({}, False, "runs without Redis")],
)
def test_feedback_off_says_why(
    monkeypatch: pytest.MonkeyPatch, feedback: dict[str, Any], store: bool, why: str
) -> None:
    rig = Rig(monkeypatch, **feedback)
    rig.ingress._feedback = Feedback(FeedbackConfig.model_validate(feedback), rig.store if store else None)
    answer = rig.ask()
    out = rig.rate({"request_id": answer["request_id"], "rating": "up"})
    assert out.status_code == 404 and why in out.json()["error"]
    assert rig.store.receipts == {}, "nothing is kept when feedback is off"


def test_without_keep_text_the_receipt_holds_ids_and_outcomes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(monkeypatch, keep_text=False)
    answer = rig.ask()
    assert rig.rate({"request_id": answer["request_id"], "rating": "up"}).status_code == 200
    receipt = rig.store.entries[0].receipt
    assert (receipt.question, receipt.answer) == ("", "") and [c.doc_id for c in receipt.cited] == ["tenancy.md"]


def test_the_report_counts_each_answer_once_by_its_latest_rating() -> None:
    entries = [
        feedback_entry("r1", "down", 10),
        feedback_entry("r2", "up", 20),
        feedback_entry("r1", "up", 30, "fine after all"),
    ]
    report = feedback_report("acme", entries)
    assert (report["rated"], report["ratings"], report["revised"]) == (2, {"up": 2, "down": 0}, 1)
    assert [(e["request_id"], e["rating"]) for e in report["feedback"]] == [("r2", "up"), ("r1", "up")]
    assert feedback_report("acme", entries, "down")["feedback"] == []
    text = feedback_text(report)
    assert text.splitlines()[0] == "tenant acme: 2 rated answers, 2 up, 0 down (1 ratings revised)"
    assert "fine after all" in text and "question r1" in text and "tenancy.md" in text and "grounded" in text
    since = feedback_text(report | {"since": "2026-12-05T12:00:00+00:00"}).splitlines()[0]
    assert since == "tenant acme since 2026-12-05 12:00 UTC: 2 rated answers, 2 up, 0 down (1 ratings revised)"
    passages_only = feedback_entry("r3", "up", 40)
    passages_only.receipt.synthesize, passages_only.receipt.grounded = "skipped", False  # the no_text mode
    assert "passages only" in feedback_text(feedback_report("acme", [passages_only]))


def test_the_cli_refuses_a_bad_tenant_and_names_a_missing_or_unreachable_redis(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    monkeypatch.setenv("RAGC_STATE_DIR", str(tmp_path))
    assert main(["feedback", "--tenant", "no such/tenant"]) == EXIT_USAGE
    monkeypatch.setenv("RAGC_REDIS__ENABLED", "false")
    assert main(["feedback", "--tenant", "acme"]) == EXIT_USAGE
    assert "feedback is kept in Redis, and this configuration has none" in capsys.readouterr().err
    monkeypatch.setenv("RAGC_REDIS__ENABLED", "true")
    monkeypatch.setenv("RAGC_REDIS__URL", "redis://127.0.0.1:1/0")  # nothing listens on port 1
    assert main(["feedback", "--tenant", "acme"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "Redis at redis://127.0.0.1:1/0 is unreachable" in err and "Traceback" not in err
    assert main(["feedback", "--tenant", "acme", "--since", "last week"]) == EXIT_USAGE
    assert "--since 'last week': give a span back from now" in capsys.readouterr().err
