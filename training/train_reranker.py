"""`ragc train-reranker`: fine-tune a cross-encoder from the packaged MiniLM weights on a labelled split,
with hard negatives mined by our own hybrid retriever. The test split is refused: it is the gate's.

The training itself runs as a Ray task with GPUs when the cluster has any, else in this process."""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from dataclasses import astuple, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig, RerankTrainingConfig
from cluster.models import (
    Embedder,
    SentenceTransformerEmbedder,
    pick_device,
    pick_dtype,
    resolve_model_path,
    set_torch_threads,
)
from cluster.store.client import connect
from cluster.store.expr import all_of, eq, is_in
from cluster.store.schema import ChunkFields
from evals.beir import EvalSet, load_qrels
from evals.pipelines import SERVICE_HYBRID, PipelineRunner
from evals.reranker_checks import TRAINING_RECORD
from evals.runner import EVAL_TENANT, eval_collection, ingest_dataset
from serve.rerank_domain import RerankDomain
from serve.stages.rerank import pair_text
from training.loop import TrainingGroup, query_groups, train_cross_encoder

HELD_OUT_SPLITS = ("test",)


@dataclass
class TrainRequest:
    dataset: Path
    out: Path
    split: str = "train"
    limit: int = 0


def held_for_calibration(query_id: str, share: float, seed: int) -> bool:
    """A fixed `share` of questions, chosen by a hash of their id: the same ones on every run and machine."""
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < share * 2**64


def training_queries(req: TrainRequest, recipe: RerankTrainingConfig) -> tuple[EvalSet, dict[str, str]]:
    """The split's questions the reranker trains on, and those kept for calibration (never trained on)."""
    if req.split in HELD_OUT_SPLITS:
        raise ValueError(f"the {req.split!r} split is held out for evaluation; train on another split")
    train = EvalSet.load(req.dataset, req.split, req.limit)
    held_out: set[str] = set()
    for split in HELD_OUT_SPLITS:
        if (req.dataset / "qrels" / f"{split}.tsv").exists():
            held_out |= set(load_qrels(req.dataset, split))
    kept = {q: t for q, t in train.queries.items() if q not in held_out}
    calibration = sorted(q for q in kept if held_for_calibration(q, recipe.calibration_share, recipe.seed))
    trained = {q: t for q, t in kept.items() if q not in set(calibration)}
    return EvalSet(train.name, train.split, trained, {q: train.qrels[q] for q in trained}), {
        q: kept[q] for q in calibration
    }


def first_chunks(client: Any, cfg: RagcConfig, doc_ids: list[str]) -> dict[str, str]:
    """Chunk 0 of documents the retriever did not bring back (positives still need a text)."""
    if not doc_ids:
        return {}
    rows = client.query(
        cfg.milvus.collection,
        filter=all_of(
            eq(ChunkFields.TENANT, EVAL_TENANT), is_in(ChunkFields.DOC_ID, doc_ids), f"{ChunkFields.CHUNK_INDEX} == 0"
        ),
        output_fields=[ChunkFields.DOC_ID, ChunkFields.TITLE, ChunkFields.TEXT],
    )
    return {r[ChunkFields.DOC_ID]: pair_text(r[ChunkFields.TITLE], r[ChunkFields.TEXT]) for r in rows}


def mine_groups(
    cfg: RagcConfig, runner: PipelineRunner, train: EvalSet, recipe: RerankTrainingConfig
) -> list[TrainingGroup]:
    """Per TRAIN question, negatives from the hybrid candidates the service's reranker would see."""
    rng = random.Random(recipe.seed)
    client = connect(cfg)
    missing = partial(first_chunks, client, cfg)
    groups: list[TrainingGroup] = []
    try:
        runner.prefetch(list(train.queries.values()), service_depth=True)
        for qid, query in train.queries.items():
            relevant = {d for d, grade in train.qrels[qid].items() if grade > 0}
            passages = runner.passages(SERVICE_HYBRID, query, floor=-1.0)[: recipe.negative_pool]
            candidates = [(p.doc_id, pair_text(p.title, p.text)) for p in passages]
            groups += query_groups(query, candidates, relevant, recipe.negatives, rng, missing)
    finally:
        client.close()
    return groups


def groups_digest(groups: list[TrainingGroup]) -> str:
    return hashlib.sha256(json.dumps([astuple(g) for g in groups]).encode()).hexdigest()[:16]


PROGRESS_PREFIX = "train-reranker: "


def _progress(line: str) -> None:
    print(f"{PROGRESS_PREFIX}{line}", file=sys.stderr, flush=True)


def train_and_save(
    model_path: str, groups: list[TrainingGroup], recipe: RerankTrainingConfig, device: str, out: str
) -> dict[str, Any]:
    set_torch_threads()
    bf16 = pick_dtype(recipe.dtype, device) == "bfloat16"
    encoder, outcome = train_cross_encoder(model_path, groups, recipe, device, _progress, autocast_bf16=bf16)
    encoder.save(out)
    return outcome.summary() | {"device": device}


def record_domain(
    cfg: RagcConfig, trained: list[str], held_out: list[str], out: Path, embedder: Embedder | None = None
) -> dict[str, Any]:
    """Saves the questions the reranker knows beside it (serve.rerank_domain), read from the held-out ones."""
    if not held_out:
        return {"recorded": False, "why": "no question was held out of training (calibration_share 0)"}
    recipe = cfg.train_reranker
    embedder = embedder or SentenceTransformerEmbedder(cfg.embedding)
    domain = RerankDomain.build(
        embedder.embed(trained),
        embedder.embed(held_out),
        recipe.domain_neighbours,
        recipe.domain_coverage,
        cfg.embedding.model_id,
    )
    domain.save(out)
    return {"recorded": True} | domain.summary()


def run_training(cfg: RagcConfig, req: TrainRequest) -> dict[str, Any]:
    import ray

    from cluster.ray_runtime import ensure_ray
    from local.cluster import sidecars_running

    recipe = cfg.train_reranker
    train, calibration = training_queries(req, recipe)
    ecfg = eval_collection(cfg, req.dataset)
    with sidecars_running(ecfg):
        ingest = ingest_dataset(ecfg, req.dataset)
        started = time.perf_counter()  # mining only: the ingest reports its own seconds
        runner = PipelineRunner(ecfg, EVAL_TENANT)
        groups = mine_groups(ecfg, runner, train, recipe)
    if not groups:
        raise RuntimeError(f"no training groups from split {req.split!r}: nothing retrieved to mine negatives from")
    mining_s = time.perf_counter() - started
    print(f"train-reranker: {len(groups)} groups from {len(train.queries)} queries", file=sys.stderr, flush=True)
    req.out.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model_path(recipe.base_model)
    ensure_ray(cfg)
    if ray.cluster_resources().get("GPU", 0) >= recipe.gpus > 0:
        task = ray.remote(num_gpus=recipe.gpus)(train_and_save)
        outcome = ray.get(task.remote(model_path, groups, recipe, "cuda", str(req.out)))
    else:
        outcome = train_and_save(model_path, groups, recipe, pick_device("auto"), str(req.out))
    record = {
        "dataset": req.dataset.name,
        "split": req.split,
        "queries": len(train.queries),
        "calibration_queries": sorted(calibration),
        "groups": len(groups),
        # two runs that mined the same negatives have the same digest (a run-to-run difference in the reranker
        # is then the training's, not the mining's)
        "groups_sha256": groups_digest(groups),
        "recipe": recipe.model_dump(mode="json"),
        "ingest": {k: ingest[k] for k in ("chunks_embedded", "chunks_total", "seconds")},
        "mining_s": round(mining_s, 1),
        "training": outcome,
        "model": str(req.out.resolve()),
        "domain": record_domain(cfg, list(train.queries.values()), list(calibration.values()), req.out),
    }
    (req.out / TRAINING_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def run_domain_only(cfg: RagcConfig, req: TrainRequest, embedder: Embedder | None = None) -> dict[str, Any]:
    """Records the domain of a reranker already in `req.out`, trained on this split before domains existed:
    the same questions trained on and held out as its training chose (the recipe's share and seed)."""
    record_path = req.out / TRAINING_RECORD
    if not record_path.is_file():
        raise ValueError(f"{req.out} holds no reranker trained by `ragc train-reranker` ({TRAINING_RECORD} missing)")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    train, calibration = training_queries(req, cfg.train_reranker)
    if sorted(calibration) != sorted(record.get("calibration_queries", [])):
        raise ValueError("this split and recipe hold out other questions than the reranker's training did")
    record["domain"] = record_domain(cfg, list(train.queries.values()), list(calibration.values()), req.out, embedder)
    record_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record["domain"]
