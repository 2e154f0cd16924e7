"""`ragc`: the command-line surface. Every command takes `--config FILE`; `RAGC_*` variables override it.

Commands that support `--json` end stdout with exactly one JSON object on the last line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pymilvus import MilvusException

from cluster.config import RESPONSE_MODES, RagcConfig, load_config
from cluster.models import sleep_at_barriers

EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def emit(payload: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], str]) -> None:
    if as_json:
        print(json.dumps(payload, default=str))
    else:
        print(human(payload))


def cmd_up(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from local import cluster as local

    state = local.up_sidecars(cfg)
    if args.demo:
        from ingest_jobs.sync import run_sync

        report = run_sync(cfg, local.DEMO_CORPUS, local.DEMO_TENANT, prune=True)
        print(
            f"demo corpus: {report.added} added, {report.changed} changed, {report.unchanged} unchanged, "
            f"{report.chunks_embedded} chunks embedded",
            file=sys.stderr,
        )
    if args.nodes is not None:
        cfg.local.nodes = args.nodes
    if not args.no_app:
        state = local.up_app(cfg, args.config, args.demo)
    info = local.status(cfg)
    emit(
        info, args.json, lambda s: f"up: http {s['http']}  milvus {s['milvus']}  redis {s['redis'] or s['redis_note']}"
    )
    return EXIT_OK if state else EXIT_PARTIAL


def cmd_down(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from local import cluster as local

    stopped = local.down(cfg)
    emit({"stopped": stopped}, args.json, lambda p: "stopped: " + (", ".join(p["stopped"]) or "nothing was running"))
    return EXIT_OK


def answer_budget_line(budget: dict[str, Any] | None) -> str:
    if budget is None:
        return "answers: extractive (no LLM)"
    prompt = budget["max_prompt_tokens"] or budget["max_model_len"] - budget["max_tokens"]
    retry = ", one strict retry" if budget["retry"] else ""
    return (
        f"answers: LLM within {budget['timeout_s']:g} s{retry}; up to {budget['passages']} passages of "
        f"{budget['passage_max_chars']} characters in a prompt of at most {prompt} tokens, "
        f"{budget['max_tokens']} tokens generated (context {budget['max_model_len']})"
    )


def _index_status(cfg: RagcConfig) -> dict[str, Any]:
    from cluster.store.client import connection_failed
    from ingest_jobs.inventory import index_overview

    try:
        return index_overview(cfg)
    except MilvusException as exc:  # status reports what it finds; it does not fail on it
        if not connection_failed(exc):
            raise
        return {"unreachable": exc.message}


def index_line(index: dict[str, Any] | None) -> str:
    if index is None:
        return "index: milvus is not running"
    if "unreachable" in index:
        return f"index: milvus unreachable ({index['unreachable']})"
    if index["collection"] is None:
        return f"index: empty (nothing ingested into {index['alias']!r} yet: `ragc ingest PATH --tenant T`)"
    line = (
        f"index: {index['collection']} serving {index['alias']!r}, version {index['index_version']}: "
        f"{index['documents']} documents, {index['chunks']} chunks"
    )
    if index["missing_fields"]:
        line += f"; built before {', '.join(index['missing_fields'])} were stored: `ragc reindex` adds them"
    return line


def cmd_status(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from local import cluster as local

    info = local.status(cfg)
    info["index"] = _index_status(cfg) if info["processes"]["milvus"]["running"] or cfg.milvus.uri else None

    def human(s: dict[str, Any]) -> str:
        procs = "  ".join(f"{n}={'up' if p['running'] else 'down'}" for n, p in s["processes"].items())
        lines = [procs, f"http {s['http']}", f"milvus {s['milvus']}", f"redis {s['redis'] or s['redis_note'] or 'off'}"]
        return "\n".join([*lines, index_line(s["index"]), answer_budget_line(s["answer_budget"])])

    emit(info, args.json, human)
    return EXIT_OK if info["running"] else EXIT_PARTIAL


def _sync_human(s: dict[str, Any]) -> str:
    lines = [
        f"tenant {s['tenant']}, source {s['source']}: added {s['added']}, changed {s['changed']}, "
        f"unchanged {s['unchanged']}, "
        f"deleted {s['deleted']}, failed {s['failed']}",
        f"chunks embedded {s['chunks_embedded']}, enriched {s['chunks_enriched']}, upserted {s['chunks_upserted']}, "
        f"total {s['chunks_total']} "
        f"({s['chunks_per_s']} chunks/s, {s['seconds']}s); index version {s['index_version']}",
    ]
    lines += [f"  failed: {f['doc_id']}: {f['reason']}" for f in s["failures"]]
    if s.get("missing"):
        lines.append(f"  {s['missing']} documents are gone from the source (run with --prune to delete them)")
    return "\n".join(lines)


def cmd_ingest(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from ingest_jobs.sync import run_sync

    report = run_sync(cfg, args.path, args.tenant, prune=args.prune, source_name=args.source)
    summary = report.summary()
    emit(summary, args.json, _sync_human)
    return EXIT_PARTIAL if report.failed else EXIT_OK


def cmd_delete(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from ingest_jobs.delete import run_delete

    summary = run_delete(cfg, args.tenant, args.source).summary()
    emit(
        summary,
        args.json,
        lambda s: (
            f"deleted tenant {s['tenant']}'s sources {', '.join(s['sources']) or '(none recorded)'}: "
            f"{s['documents']} documents, {s['chunks']} chunks over {s['generations']} generation(s), "
            f"{s['enrichment_rows']} enrichment rows; {s['chunks_left']} chunks left, index version "
            f"{s['index_version']}"
        ),
    )
    return EXIT_OK


def cmd_docs(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from cli.inventory_text import index_text, tenant_text
    from ingest_jobs.inventory import index_inventory, tenant_inventory

    if args.tenant is None:
        if args.source is not None:
            raise ValueError("--source names one of a tenant's sources: give --tenant too")
        emit(index_inventory(cfg).summary(), args.json, index_text)
    else:
        emit(tenant_inventory(cfg, args.tenant, args.source).summary(), args.json, tenant_text)
    return EXIT_OK


def cmd_feedback(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from redis.exceptions import ConnectionError as RedisConnectionError

    from cli.feedback_text import feedback_text
    from cli.since import parse_since
    from cluster.redis_conn import redis_url
    from cluster.tenancy import check_tenant
    from serve.edge.feedback import feedback_report, read_feedback

    tenant = check_tenant(args.tenant)
    url = redis_url(cfg)
    if url is None:
        raise ValueError(
            "feedback is kept in Redis, and this configuration has none (redis.enabled, redis.url, "
            "or the local sidecar `ragc up` starts)"
        )
    since = None if args.since is None else parse_since(args.since, datetime.now(UTC))
    try:
        since_ms = None if since is None else int(since.timestamp() * 1000)
        entries = read_feedback(url, cfg.redis.password.resolve(), tenant, args.last, since_ms)
    except RedisConnectionError as exc:
        print(f"ragc feedback: Redis at {url} is unreachable ({exc})", file=sys.stderr)
        return EXIT_UNREACHABLE
    report = feedback_report(tenant, entries, args.rating)
    emit(report | {"since": None if since is None else since.isoformat(timespec="seconds")}, args.json, feedback_text)
    return EXIT_OK


def cmd_reindex(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from ingest_jobs.reindex import TenantSource, rollback, run_reindex

    if args.rollback:
        if args.tenant:
            raise ValueError("--rollback takes no --tenant: it moves the alias for every tenant")
        back = rollback(cfg).summary()
        emit(
            back,
            args.json,
            lambda s: f"rolled back to {s['collection']} (was {s['previous']}), index version {s['index_version']}",
        )
        return EXIT_OK
    sources = [TenantSource(t, p) for t, p in args.tenant] if args.tenant else None
    report = run_reindex(cfg, sources)
    summary = report.summary()
    emit(
        summary,
        args.json,
        lambda s: (
            f"reindexed into {s['collection']} (was {s['previous']}), "
            f"{s['chunks_total']} chunks, dropped {s['dropped']}, index version {s['index_version']}"
        ),
    )
    return EXIT_PARTIAL if summary["failed"] else EXIT_OK


def cmd_serve_config(cfg: RagcConfig, args: argparse.Namespace) -> int:
    import yaml

    from serve.serve_config import serve_deploy_config

    if args.helm_chart:
        from serve.serve_config import write_helm_chart

        for written in write_helm_chart(cfg, Path(args.helm_chart)):
            print(f"updated {written}", file=sys.stderr)
        return EXIT_OK
    text = yaml.safe_dump(serve_deploy_config(cfg, args.http_host, args.port), sort_keys=False)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return EXIT_OK


def cmd_query(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from cli.query_client import run_query

    return run_query(cfg, args)


def cmd_bench(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from bench import run_bench

    return run_bench(cfg, args)


def cmd_eval(cfg: RagcConfig, args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout ends with the JSON line
    sleep_at_barriers()
    from evals.runner import EvalRequest, run_eval, stdout_summary

    request = EvalRequest(
        dataset=args.dataset,
        split=args.split,
        pipelines=[p for group in args.pipeline for p in group.split(",")] if args.pipeline else None,
        limit=args.limit,
        output=args.output,
        reranker=args.reranker,
        unanswerable=args.unanswerable,
        floor_split=args.floor_split,
        answerability=args.answerability,
        endpoint=args.endpoint,
        api_key=args.api_key,
        history_user_turns=args.history_user_turns,
    )
    result = run_eval(cfg, request)
    for name, metrics in result["pipelines"].items():
        figures = "  ".join(f"{k} {metrics[k]:.4f}" for k in ("ndcg@10", "recall@100", "mrr@10", "hit_rate@10"))
        print(f"{name:20s} {figures}", file=sys.stderr)
    print(json.dumps(stdout_summary(result), default=str))
    return EXIT_OK


def cmd_eval_answers(cfg: RagcConfig, args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout ends with the JSON line
    from evals.answer_eval import AnswerEvalRequest, run_eval_answers_many

    datasets: list[Path] = args.dataset
    names = [d.name for d in datasets]
    if len(set(names)) < len(names):
        raise ValueError(f"--dataset names a dataset twice: {', '.join(names)}")
    if len(datasets) > 1 and args.output is not None and "{dataset}" not in str(args.output):
        raise ValueError("with several --dataset, --output must hold {dataset} (e.g. out/{dataset}_answers.json)")
    requests = [
        AnswerEvalRequest(
            dataset=dataset,
            split=args.split,
            limit=args.limit,
            mode=args.mode,
            endpoint=args.endpoint,
            api_key=args.api_key,
            reranker=args.reranker,
            output=Path(str(args.output).replace("{dataset}", dataset.name)) if args.output else None,
        )
        for dataset in datasets
    ]
    results = run_eval_answers_many(cfg, requests)
    if len(results) == 1:
        print(json.dumps(results[0], default=str))
    else:  # the last line holds every dataset's result, keyed by its name
        print(json.dumps({"datasets": {r["dataset"]: r for r in results}}, default=str))
    return EXIT_OK


def cmd_eval_variant(cfg: RagcConfig, args: argparse.Namespace) -> int:
    from evals.abstention import build_variant

    summary = build_variant(args.dataset, args.out, args.fraction, args.seed)
    print(json.dumps(summary))
    return EXIT_OK


def cmd_train_reranker(cfg: RagcConfig, args: argparse.Namespace) -> int:
    sleep_at_barriers()
    from training.train_reranker import TrainRequest, run_domain_only, run_training

    request = TrainRequest(dataset=args.dataset, split=args.split, out=args.out, limit=args.limit)
    run = run_domain_only if args.domain_only else run_training
    print(json.dumps(run(cfg, request), default=str))
    return EXIT_OK


def cmd_calibrate_abstention(cfg: RagcConfig, args: argparse.Namespace) -> int:
    sleep_at_barriers()
    from training.abstention import CalibrationRequest, run_calibration

    reranker = args.reranker or cfg.serve.rerank.model
    if not reranker:
        raise ValueError("calibration needs the reranker it is for: pass --reranker or set serve.rerank.model")
    request = CalibrationRequest(dataset=args.dataset, reranker=reranker, out=args.out, split=args.split)
    print(json.dumps(run_calibration(cfg, request), default=str))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, default=None, help="YAML config file (RAGC_* env vars override it)")
    common.add_argument("--json", action="store_true", help="end stdout with one JSON object")
    common.add_argument("-v", "--verbose", action="store_true")

    parser = argparse.ArgumentParser(prog="ragc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", parents=[common], help="start the local embedded cluster")
    up.add_argument("--demo", action="store_true", help="ingest the bundled demo corpus; single tenant, auth off")
    up.add_argument("--no-app", action="store_true", help="start only the sidecars (Milvus, Redis)")
    up.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="the app's Ray as a head and N worker nodes on this machine (`local.nodes`; `local.cpus_per_node` each)",
    )
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", parents=[common], help="stop what `up` started").set_defaults(func=cmd_down)
    sub.add_parser("status", parents=[common], help="describe the local cluster").set_defaults(func=cmd_status)

    ingest = sub.add_parser("ingest", parents=[common], help="incremental sync of a folder for one tenant")
    ingest.add_argument(
        "path", help="a folder, a file, or an object-store URL (s3://bucket/prefix; credentials from AWS_* variables)"
    )
    ingest.add_argument("--tenant", required=True)
    ingest.add_argument(
        "--prune", action="store_true", help="delete this source's documents that are gone from it (never another's)"
    )
    ingest.add_argument(
        "--source",
        metavar="NAME",
        help="which of the tenant's sources this is (default: the one recorded for this path, else a new one "
        "named after the folder); name it to keep a moved folder's documents",
    )
    ingest.set_defaults(func=cmd_ingest)

    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="remove a tenant's documents (or one of its sources') from every generation, and forget them",
    )
    delete.add_argument("--tenant", required=True)
    delete.add_argument(
        "--source", metavar="NAME", help="only this source's documents (default: all of the tenant's, enrichment too)"
    )
    delete.set_defaults(func=cmd_delete)

    docs = sub.add_parser(
        "docs", parents=[common], help="what the index holds: every tenant, or one tenant's documents and metadata"
    )
    docs.add_argument("--tenant", help="list this tenant's documents (default: every tenant, counted)")
    docs.add_argument("--source", metavar="NAME", help="with --tenant: only this source's documents")
    docs.set_defaults(func=cmd_docs)

    feedback = sub.add_parser(
        "feedback", parents=[common], help="a tenant's ratings of served answers (POST /v1/feedback), with each answer"
    )
    feedback.add_argument("--tenant", required=True)
    feedback.add_argument("--rating", choices=("up", "down"), help="only the answers rated so")
    feedback.add_argument("--last", type=int, metavar="N", help="read only the newest N ratings")
    feedback.add_argument(
        "--since",
        metavar="WHEN",
        help="only ratings given since then: a span back from now (90m, 24h, 7d, 2w) or a UTC date or time",
    )
    feedback.set_defaults(func=cmd_feedback)

    reindex = sub.add_parser("reindex", parents=[common], help="rebuild into a new collection, then swap the alias")
    reindex.add_argument(
        "--tenant",
        nargs=2,
        action="append",
        metavar=("TENANT", "PATH"),
        help="sources to rebuild (default: every recorded source of every tenant)",
    )
    reindex.add_argument(
        "--rollback",
        action="store_true",
        help="point the alias back at the generation the last reindex swapped away from (milvus.keep_old_collections)",
    )
    reindex.set_defaults(func=cmd_reindex)

    query = sub.add_parser("query", parents=[common], help="ask the running service")
    query.add_argument("question")
    query.add_argument("--tenant", help="only with auth off: informational (the key decides the tenant)")
    query.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="repeatable; FIELD=VALUE, FIELD>=N, FIELD<=N",
    )
    query.add_argument("--top-k", type=int)
    query.add_argument("--stream", action="store_true")
    query.add_argument("--no-rerank", action="store_true")
    query.add_argument("--mode", choices=RESPONSE_MODES, help="response mode (default: the service's)")
    query.add_argument("--url", help="service base URL (default: the local cluster's)")
    query.add_argument("--api-key", default=os.environ.get("RAGC_API_KEY"), help="default: $RAGC_API_KEY")
    query.set_defaults(func=cmd_query)

    serve_config = sub.add_parser("serve-config", parents=[common], help="write the Serve YAML for this config")
    serve_config.add_argument("--output", "-o")
    serve_config.add_argument("--http-host")
    serve_config.add_argument("--port", type=int)
    serve_config.add_argument(
        "--helm-chart",
        metavar="CHART_DIR",
        help="rewrite the generated parts of a chart: values.yaml's serve block and values.schema.json's ragcConfig",
    )
    serve_config.set_defaults(func=cmd_serve_config)

    bench = sub.add_parser("bench", parents=[common], help="performance harness (ratios against baselines)")
    targets = ["ingest", "query", "cache", "llm", "tracing", "profile", "prefix", "rerank", "embed", "access"]
    bench.add_argument("target", choices=targets)
    bench.add_argument(
        "--dataset",
        type=Path,
        required=True,
        help="BEIR folder (corpus*.jsonl); llm: the TREC CAsT folder; prefix: markdown documents (local/demo_corpus)",
    )
    bench.add_argument("--limit", type=int, default=0, help="first N documents (llm: follow-up turns); 0 = all")
    bench.add_argument(
        "--clients", type=int, help="concurrent closed-loop clients (query, tracing: 16; rerank: 8 requests at once)"
    )
    bench.add_argument(
        "--duration",
        type=float,
        default=120.0,
        help="query: measured seconds of load per system (after a 20 s warm-up)",
    )
    bench.add_argument("--questions", type=int, default=100, help="cache, access: labelled questions asked")
    bench.add_argument("--url", help="profile: the service (default: the local cluster's); key in $RAGC_API_KEY")
    bench.add_argument("--concurrency", default="1,2,4,8,16", help="profile: closed-loop client counts")
    bench.add_argument(
        "--variants",
        default="default,top_k=10,no_rerank,no_text,cached",
        help="profile: request variants (default, top_k=10, no_rerank, no_text, cached: a few repeated questions)",
    )
    bench.add_argument("--point-s", type=float, default=30.0, help="profile: seconds of load per point")
    bench.add_argument("--output", type=Path, help="profile: folder for profile.csv and the charts")
    bench.set_defaults(func=cmd_bench)

    evaluate = sub.add_parser("eval", parents=[common], help="retrieval metrics on a BEIR-format dataset")
    evaluate.add_argument("--dataset", type=Path, required=True, help="corpus*.jsonl, queries.jsonl, qrels/<split>.tsv")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument(
        "--pipeline",
        action="append",
        help="repeatable or comma-separated: baseline_top2, dense, bm25, hybrid, hybrid_rerank, hybrid_hyde, "
        "hybrid_hyde_rerank, hybrid_multiquery, hybrid_multiquery_rerank (default: every pipeline that needs no "
        "LLM); a re-weighting after @: hybrid_rerank@0.5, hybrid@bm25=2",
    )
    evaluate.add_argument("--limit", type=int, default=0, help="first N judged queries; 0 = all")
    evaluate.add_argument("--output", type=Path, help="write the JSON here, plus a markdown report and PNG charts")
    evaluate.add_argument("--reranker", help="cross-encoder path or id (default: serve.rerank.model)")
    evaluate.add_argument(
        "--unanswerable", type=Path, help="file of query ids whose answer is not in the corpus: abstention rates"
    )
    evaluate.add_argument("--floor-split", default="train", help="split the similarity floor is chosen on")
    evaluate.add_argument(
        "--history-user-turns",
        type=int,
        default=0,
        help="a conversational query (metadata.history) is searched with this many earlier user turns before it "
        "(0: the utterance alone, as the service searches it with rewrite off)",
    )
    evaluate.add_argument(
        "--answerability",
        type=Path,
        help="with --unanswerable: the calibration to compare with the cosine floor (default: the one beside "
        "the reranker, when there is one)",
    )
    evaluate.add_argument("--endpoint", help="evaluate a running service over HTTP instead")
    evaluate.add_argument("--api-key", default=os.environ.get("RAGC_API_KEY"), help="with --endpoint")
    evaluate.set_defaults(func=cmd_eval)

    answers = sub.add_parser(
        "eval-answers", parents=[common], help="answer quality against human answers: extractive, LLM, served"
    )
    answers.add_argument(
        "--dataset",
        type=Path,
        required=True,
        action="append",
        help="BEIR layout; answers.jsonl when it has them. Several: asked in turn, the engines started once",
    )
    answers.add_argument("--split", default="test", help="qrels split whose questions are asked")
    answers.add_argument("--limit", type=int, default=0, help="N questions spread evenly over the split; 0 = all")
    answers.add_argument("--mode", help="response mode (default: serve.synthesize.response_mode)")
    answers.add_argument("--reranker", help="cross-encoder path or id (default: serve.rerank.model)")
    answers.add_argument("--endpoint", help="ask a running service over HTTP (the served arm and extractive only)")
    answers.add_argument("--api-key", default=os.environ.get("RAGC_API_KEY"), help="with --endpoint")
    answers.add_argument(
        "--output",
        type=Path,
        help="write the JSON with every answer here, plus a markdown report ({dataset}: the dataset's name)",
    )
    answers.set_defaults(func=cmd_eval_answers)

    variant = sub.add_parser(
        "eval-variant", parents=[common], help="copy a BEIR dataset without the answers of some questions"
    )
    variant.add_argument("--dataset", type=Path, required=True)
    variant.add_argument("--out", type=Path, required=True)
    variant.add_argument("--fraction", type=float, default=0.1, help="share of each split's questions")
    variant.add_argument("--seed", type=int, default=13)
    variant.set_defaults(func=cmd_eval_variant)

    train = sub.add_parser("train-reranker", parents=[common], help="fine-tune a cross-encoder on a labelled split")
    train.add_argument("--dataset", type=Path, required=True)
    train.add_argument("--split", default="train")
    train.add_argument("--out", type=Path, required=True)
    train.add_argument("--limit", type=int, default=0, help="first N training queries; 0 = all")
    train.add_argument(
        "--domain-only",
        action="store_true",
        help="train nothing: record the questions the reranker in --out knows (one trained before it did)",
    )
    train.set_defaults(func=cmd_train_reranker)

    calibrate = sub.add_parser(
        "calibrate-abstention",
        parents=[common],
        help="fit the answerability model on the TRAIN split of an abstention variant (ragc eval-variant)",
    )
    calibrate.add_argument("--dataset", type=Path, required=True, help="an abstention variant")
    calibrate.add_argument("--reranker", help="the cross-encoder it is for (default: serve.rerank.model)")
    calibrate.add_argument("--out", type=Path, help="default: answerability.json beside the reranker")
    calibrate.add_argument("--split", default="train")
    calibrate.set_defaults(func=cmd_calibrate_abstention)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        cfg = load_config(args.config)
    except (ValidationError, ValueError, OSError) as exc:
        print(f"ragc: bad configuration: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(cfg, args))
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"ragc {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MilvusException as exc:
        from cluster.store.client import connection_failed, milvus_uri

        if not connection_failed(exc):
            raise
        print(
            f"ragc {args.command}: Milvus at {milvus_uri(cfg)} is unreachable ({exc.message}); `ragc up` starts "
            "the local one, and milvus.uri (RAGC_MILVUS__URI) names another",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE


if __name__ == "__main__":
    sys.exit(main())
