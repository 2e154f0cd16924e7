"""`ragc eval`: ingest a BEIR dataset through the normal ingestion job, run named pipelines through the
service's stage classes in this process (or a running service over HTTP), and score them."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cluster.config import ChunkingConfig, EmbeddingConfig, RagcConfig
from evals.abstention import (
    TARGET_ABSTENTION,
    TARGET_FALSE_ABSTENTION,
    Rates,
    choose_floor,
    curve,
    rates_at,
    read_ids,
    signal_section,
    split_members,
)
from evals.beir import EvalSet, corpus_files
from evals.hyde import InProcessHyde
from evals.metrics import METRICS, Ranking, mean_metrics, per_query
from evals.pair_store import pair_store_for
from evals.pipelines import (
    NO_LLM_PIPELINES,
    PIPELINES,
    SERVICE_HYBRID,
    PipelineRunner,
    PipelineSpec,
    pipeline_spec,
)
from evals.report import write_report
from evals.reranker_checks import check_entry, record_check
from serve.answerability import CALIBRATION_FILE, AnswerabilityModel, abstain_below
from serve.rerank_domain import RerankDomain

EVAL_TENANT = "eval"
EVAL_COLLECTION_PREFIX = "ragc_eval_"


@dataclass
class EvalRequest:
    dataset: Path
    split: str = "test"
    pipelines: list[str] | None = None
    limit: int = 0
    output: Path | None = None
    reranker: str | None = None
    unanswerable: Path | None = None
    floor_split: str = "train"
    answerability: Path | None = None
    endpoint: str | None = None
    api_key: str | None = None
    history_user_turns: int = 0  # earlier user turns searched with a conversational query (0: as the service does)


def eval_collection(cfg: RagcConfig, dataset: Path) -> RagcConfig:
    """The dataset's evaluation collection; chunked otherwise than by default (`..._c128o16`, sentence windows
    `..._w2`), embedded by another model (`..._all_mpnet_base_v2`) or enriched (`..._q3`, `..._q3s`, summaries
    only `..._s`), a collection of its
    own, so that a sweep keeps every variant and re-embeds only chunks it has not seen."""
    out = cfg.model_copy(deep=True)
    name = EVAL_COLLECTION_PREFIX + _identifier(dataset.resolve().name)
    chunking = cfg.chunking
    if chunking != ChunkingConfig():
        if chunking.sentence_window:
            name += f"_w{chunking.sentence_window}"
        else:
            name += f"_c{chunking.chunk_size}o{chunking.chunk_overlap}"
        name += "" if chunking.markdown_headers else "_nomd"
    if cfg.embedding.model_id != EmbeddingConfig().model_id:
        name += "_" + _identifier(cfg.embedding.model_id.rsplit("/", 1)[-1])
    enrichment = cfg.ingest.enrichment
    if enrichment.enabled:
        name += (f"_q{enrichment.questions}" if enrichment.questions else "_") + ("s" if enrichment.summary else "")
    out.milvus.collection = name
    return out


def _identifier(text: str) -> str:
    return re.sub(r"[^0-9a-zA-Z_]", "_", text).lower()


def corpus_source(cfg: RagcConfig, dataset: Path) -> Path:
    """A folder holding only the dataset's corpus files (links), so queries and qrels are never ingested."""
    source = cfg.state_dir.resolve() / "eval" / cfg.milvus.collection
    source.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p.resolve() for p in corpus_files(dataset)}
    for link in source.iterdir():
        if link.name not in wanted or link.resolve() != wanted[link.name]:
            link.unlink()
    for name, target in wanted.items():
        if not (source / name).exists():
            (source / name).symlink_to(target)
    return source


def sibling_eval_collections(cfg: RagcConfig) -> tuple[str, ...]:
    """Other datasets' evaluation collections embedded with the same model: a variant of a dataset
    (same document ids and texts, hence the same chunk ids) reuses their vectors instead of embedding."""
    from cluster.store.client import connect
    from cluster.store.collections import Collections, ledger_name
    from ingest_jobs.enrich_stage import ENRICHMENT_SUFFIX
    from ingest_jobs.reindex import same_vectors

    collections = Collections(connect(cfg), cfg)
    own = set(collections.generations())
    wanted = collections.wanted_identity()
    names = [
        n
        for n in collections.client.list_collections()
        if n.startswith(EVAL_COLLECTION_PREFIX)
        and n not in own
        and not n.endswith((ledger_name(""), ENRICHMENT_SUFFIX))
    ]
    reusable = tuple(n for n in names if same_vectors(collections.identity_of(n), wanted))
    for name in reusable:
        collections.client.load_collection(name)
    return reusable


def ingest_dataset(cfg: RagcConfig, dataset: Path) -> dict[str, Any]:
    """The normal ingestion job into the dataset's evaluation collection; an index built with other
    settings (BM25 text, chunker, model) is rebuilt, reusing its vectors where the model is the same."""
    from cluster.store.collections import CollectionMismatchError
    from ingest_jobs.reindex import TenantSource, run_reindex
    from ingest_jobs.sync import run_sync

    source = corpus_source(cfg, dataset)
    try:
        report = run_sync(cfg, source, EVAL_TENANT, True, sibling_eval_collections(cfg))
    except CollectionMismatchError as exc:
        print(f"eval: rebuilding {cfg.milvus.collection}: {exc}", file=sys.stderr, flush=True)
        rebuilt = run_reindex(cfg, [TenantSource(EVAL_TENANT, source)])
        report = rebuilt.tenants[0]
        report.seconds, report.index_version = rebuilt.seconds, rebuilt.index_version
    if report.failed:
        reasons = "; ".join(f"{f.doc_id}: {f.reason}" for f in report.failures[:5])
        raise RuntimeError(f"{report.failed} documents of {dataset} failed to ingest: {reasons}")
    return {k: v for k, v in report.summary().items() if k not in ("failures",)}


def choose_pipelines(requested: list[str] | None, cfg: RagcConfig) -> list[PipelineSpec]:
    if requested:
        return [pipeline_spec(n) for n in requested]
    names = [n for n in NO_LLM_PIPELINES if cfg.serve.rerank.model or not PIPELINES[n].rerank]
    return [PIPELINES[n] for n in names]


def default_pipeline(cfg: RagcConfig) -> str:
    """What the service runs for a plain query (rewrite and HyDE off by default, rerank when configured)."""
    hyde = "_hyde" if cfg.serve.rewrite.hyde_default and cfg.serve.llm.enabled else ""
    rerank = "_rerank" if cfg.serve.rerank.model and cfg.serve.rerank.rerank_default else ""
    return f"hybrid{hyde}{rerank}"


def score_pipeline(rank: Callable[[str], Ranking], eval_set: EvalSet) -> dict[str, Any]:
    started = time.perf_counter()
    rankings = {qid: rank(text) for qid, text in eval_set.queries.items()}
    seconds = time.perf_counter() - started
    metrics: dict[str, Any] = mean_metrics(per_query(rankings, eval_set.qrels))
    metrics["seconds_per_query"] = round(seconds / max(1, len(rankings)), 4)
    metrics["empty"] = sum(not r for r in rankings.values())
    return metrics


def calibration_for(req: EvalRequest, cfg: RagcConfig) -> Path | None:
    """`--answerability`, else the calibration beside the reranker when there is one."""
    if req.answerability is not None:
        return req.answerability
    beside = Path(cfg.serve.rerank.model) / CALIBRATION_FILE if cfg.serve.rerank.model else None
    return beside if beside is not None and beside.is_file() else None


def abstention_section(runner: PipelineRunner, req: EvalRequest, eval_set: EvalSet, cfg: RagcConfig) -> dict[str, Any]:
    """The cosine floor chosen on TRAIN (or, for a dataset without a TRAIN split, the one the calibration
    chose), and with a calibration, the answerability signal beside it on the same questions."""
    assert req.unanswerable is not None
    unanswerable = read_ids(req.unanswerable)
    calibration = calibration_for(req, cfg)
    model = AnswerabilityModel.load(calibration) if calibration else None
    curves: dict[str, Any] = {}
    if (req.dataset / "qrels" / f"{req.floor_split}.tsv").exists():
        tune = EvalSet.load(req.dataset, req.floor_split)
        if set(tune.queries) & set(eval_set.queries):
            raise ValueError(f"split {req.floor_split!r} shares questions with {req.split!r}: the floor would see it")
        best_tune = runner.best_cosines(tune.queries)  # choosing the floor needs only each question's nearest chunk
        chosen, floor_from = choose_floor(best_tune, unanswerable), req.floor_split
        curves[req.floor_split] = [r.as_dict() for r in curve(best_tune, unanswerable)]
    elif model is not None and model.cosine_floor is not None:
        chosen, floor_from = Rates.of(model.cosine_floor), f"calibration ({model.recipe.get('dataset')})"
    else:
        raise ValueError(f"{req.dataset} has no {req.floor_split!r} split to choose a floor on: pass --answerability")
    runner.prefetch(list(eval_set.queries.values()), service_depth=True)
    best_eval = {q: runner.max_cosine(text) for q, text in eval_set.queries.items()}
    # the test figures come from the retriever itself with that floor, not from the cosines above
    empty = {q for q, text in eval_set.queries.items() if not runner.passages(SERVICE_HYBRID, text, chosen.floor)}
    answerable, unanswered = split_members(eval_set.qrels, unanswerable)
    caught, lost = sum(q in empty for q in unanswered), sum(q in empty for q in answerable)
    abstention = round(caught / max(1, len(unanswered)), 4)
    false_abstention = round(lost / max(1, len(answerable)), 4)
    test = {
        "abstention": abstention,
        "false_abstention": false_abstention,
        "abstained": caught,
        "falsely_abstained": lost,
        "unanswerable": len(unanswered),
        "answerable": len(answerable),
        "predicted_from_cosines": rates_at(chosen.floor, best_eval, unanswerable).as_dict(),
    }
    met = abstention >= TARGET_ABSTENTION and false_abstention <= TARGET_FALSE_ABSTENTION
    curves[req.split] = [r.as_dict() for r in curve(best_eval, unanswerable)]
    section = {
        "floor_split": floor_from,
        "chosen_on_train": chosen.as_dict(),
        "test": test,
        "targets": {"abstention": TARGET_ABSTENTION, "false_abstention": TARGET_FALSE_ABSTENTION},
        "targets_met": met,
        "curves": curves,
    }
    if model is not None:
        started = time.perf_counter()
        reused = runner.pairs_reused
        features = {q: runner.answerability_features(text) for q, text in eval_set.queries.items()}
        floors = {"chosen_floor": chosen.floor, "service_floor": cfg.serve.retrieve.similarity_floor}
        # the operating point the service uses: serve.answerability.min_probability, else the calibrated one
        signal = signal_section(features, model, unanswerable, floors, abstain_below(cfg.serve, model))
        signal["calibration"] = str(calibration)
        signal["chosen_on_train"] = model.operating_point.model_dump()
        signal["seconds_per_query"] = round((time.perf_counter() - started) / max(1, len(features)), 4)
        signal["pairs_reused"] = runner.pairs_reused - reused  # scored by an earlier run of this reranker
        signal["with_withheld_copies"] = withheld_copies_section(
            runner, eval_set, features, model, unanswerable, signal["threshold"]
        )
        section["answerability"] = signal
    return section


def withheld_copies_section(
    runner: PipelineRunner,
    eval_set: EvalSet,
    features: dict[str, list[float] | None],
    model: AnswerabilityModel,
    unanswerable: set[str],
    threshold: float,
) -> dict[str, Any]:
    """The same comparison over more unanswerable examples: each answerable question again with its relevant
    documents withheld from the candidates, as calibration builds them on TRAIN. The variant alone has a few
    dozen unanswerable TEST questions, where one question moves a share by 1.5 points."""
    copies = {}
    for qid in split_members(eval_set.qrels, unanswerable)[0]:
        relevant = frozenset(d for d, grade in eval_set.qrels[qid].items() if grade > 0)
        copies[f"{qid}/withheld"] = runner.answerability_features(eval_set.queries[qid], relevant)
    section = signal_section(features | copies, model, unanswerable | set(copies), {}, threshold)
    ours, matched = section["test"]["signal"]["abstained"], section["cosine_at_the_same_false_abstention"]["abstained"]
    ratio = round(ours / matched, 2) if matched else None
    return {k: v for k, v in section.items() if k != "curves"} | {
        "withheld_copies": len(copies),
        "ratio_to_cosine": ratio,
    }


def run_eval(cfg: RagcConfig, req: EvalRequest) -> dict[str, Any]:
    from local.cluster import sidecars_running

    if req.reranker:
        cfg = cfg.model_copy(deep=True)
        cfg.serve.rerank.model = req.reranker
    eval_set = EvalSet.load(req.dataset, req.split, req.limit, req.history_user_turns)
    specs = choose_pipelines(req.pipelines, cfg)
    result: dict[str, Any] = {"dataset": req.dataset.name, "split": req.split, "queries": len(eval_set.queries)}
    if req.endpoint:
        from evals.remote import remote_ranker

        rank = remote_ranker(req.endpoint, req.api_key, cfg.serve.limits.max_top_k)
        result["pipelines"] = {"endpoint": score_pipeline(rank, eval_set)}
        result["pipeline"] = "endpoint"
        result.update({k: result["pipelines"]["endpoint"][k] for k in METRICS})
        return result
    ecfg = eval_collection(cfg, req.dataset)
    with sidecars_running(ecfg) as ephemeral:
        result["ephemeral_cluster"] = ephemeral
        result["ingest"] = ingest_dataset(ecfg, req.dataset)
        hyde = _hyde(ecfg, specs)
        signal = req.unanswerable is not None and calibration_for(req, ecfg) is not None
        scorer = _scorer(ecfg, specs, signal)
        store = pair_store_for(ecfg) if scorer is not None else None
        paraphrase = hyde.paraphrases if hyde is not None else None
        domain = _domain(ecfg) if scorer is not None else None
        runner = PipelineRunner(
            ecfg, EVAL_TENANT, scorer=scorer, hyde=hyde, pair_store=store, paraphrase=paraphrase, domain=domain
        )
        for spec in specs:
            runner.check(spec)
        pipelines: dict[str, Any] = {}
        runner.prefetch(list(eval_set.queries.values()))
        try:
            for spec in specs:
                print(f"eval: {spec.name} over {len(eval_set.queries)} queries", file=sys.stderr, flush=True)
                pipelines[spec.name] = score_pipeline(partial(runner.ranking, spec), eval_set)
                if spec.rerank and runner.reranked_share(spec) is not None:
                    pipelines[spec.name]["reranked_share"] = runner.reranked_share(spec)
        finally:
            if hyde is not None:
                hyde.close()
        if hyde is not None:
            result["hyde"] = hyde.statuses
            result["multi_query"] = hyde.paraphrase_statuses
        result["pipelines"] = pipelines
        entry = check_entry(result, req.history_user_turns) if scorer is not None else None
        if entry is not None and ecfg.serve.rerank.model:
            written = record_check(ecfg.serve.rerank.model, entry)
            result["reranker_check"] = str(written) if written else None
        if req.unanswerable:
            result["abstention"] = abstention_section(runner, req, eval_set, ecfg)
    result["chunking"] = cfg.chunking.model_dump()
    result["embedding"] = {"model_id": cfg.embedding.model_id, "dim": cfg.embedding.dim}
    result["enrichment"] = cfg.enrichment_fingerprint()
    result["default_pipeline"] = default_pipeline(cfg)
    result["similarity_floor"] = cfg.serve.retrieve.similarity_floor
    result["reranker"] = cfg.serve.rerank.model
    # the top-level figures are the default pipeline's when it ran, else the first pipeline's
    headline = result["default_pipeline"] if result["default_pipeline"] in pipelines else specs[0].name
    result["pipeline"] = headline
    result.update({k: pipelines[headline][k] for k in METRICS})
    if req.output:
        result["written"] = [str(p) for p in write_report(result, req.output)]
    return result


def _scorer(cfg: RagcConfig, specs: list[PipelineSpec], answerability: bool) -> Any:
    if answerability and not cfg.serve.rerank.model:
        raise ValueError("the answerability calibration reads a reranker's scores: pass --reranker")
    if not (answerability or any(s.rerank for s in specs)) or not cfg.serve.rerank.model:
        return None
    from serve.stages.rerank import CrossEncoderScorer

    return CrossEncoderScorer(cfg.serve.rerank)


def _domain(cfg: RagcConfig) -> RerankDomain | None:
    """The reranker's domain when the service would check it (serve.rerank.domain_check)."""
    model = cfg.serve.rerank.model
    if not (model and cfg.serve.rerank.domain_check):
        return None
    from cluster.models import resolve_model_path

    return RerankDomain.load(resolve_model_path(model))


def _hyde(cfg: RagcConfig, specs: list[PipelineSpec]) -> InProcessHyde | None:
    if not any(s.needs_llm for s in specs) or not cfg.serve.llm.enabled:
        return None
    return InProcessHyde(cfg)


def stdout_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The last line of stdout: everything but the trade-off curves (those are in --output)."""
    out = dict(result)
    if "abstention" in out:
        out["abstention"] = {k: v for k, v in out["abstention"].items() if k != "curves"}
        if "answerability" in out["abstention"]:
            signal = out["abstention"]["answerability"]
            out["abstention"]["answerability"] = {k: v for k, v in signal.items() if k != "curves"}
    return out
