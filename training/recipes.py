"""Reranker recipe search: which training recipe makes our cross-encoder beat hybrid retrieval, and at
what training budget. Two halves, so the training can run on a bare GPU box (torch + sentence-transformers):

  python -m training.recipes prepare --dataset DIR --out DIR   # here: mine data with our retriever
  python -m training.recipes run --data DIR --out DIR          # anywhere: train recipes, score test
  python -m training.recipes score --data DIR --scores FILE    # here: nDCG@10 per recipe vs hybrid

`prepare` stores each train query's hybrid candidates (up to 30 chunks) with the relevant ones marked,
each test query's hybrid top-50, and a float16 copy of the base weights."""

from __future__ import annotations

import argparse
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.config import RerankTrainingConfig
from cluster.models import sleep_at_barriers

POOL = 30
TEST_DEPTH = 50


# The first rounds were written against this base; everything else is `train_reranker`'s own default, so a
# recipe can never drift from the config the job trains with.
FIRST_ROUND_BASE: dict[str, Any] = {"epochs": 1, "learning_rate": 3e-5, "max_length": 192, "dropout": None}


@dataclass(frozen=True)
class Recipe:
    name: str
    config: RerankTrainingConfig


def named_recipe(name: str, **overrides: Any) -> Recipe:
    return Recipe(name, RerankTrainingConfig(**(FIRST_ROUND_BASE | overrides)))


RECIPES = [
    named_recipe("bce_n3_e1", loss="bce", negatives=3, groups_per_step=4, learning_rate=5e-5),
    named_recipe("list_n3_e1", negatives=3),
    named_recipe("list_n7_e1", negatives=7),
    named_recipe("list_n7_e1_lr6", negatives=7, learning_rate=6e-5),
    named_recipe("list_n7_e1_len128", negatives=7, max_length=128),
    named_recipe("list_n15_e1", negatives=15, groups_per_step=2),
    named_recipe("list_n7_e3", negatives=7, epochs=3),
    named_recipe("list_n15_e4", negatives=15, epochs=4, groups_per_step=2),
    # second round: what a CPU budget (~5-7k pairs, ~10 min on 2 cores) can reach with a larger step
    named_recipe("list_n3_e1_lr1e4", negatives=3, learning_rate=1e-4),
    named_recipe("list_n3_e1_lr2e4", negatives=3, learning_rate=2e-4),
    named_recipe("list_n7_e1_lr1e4", negatives=7, learning_rate=1e-4),
    named_recipe("list_n7_e1_lr2e4", negatives=7, learning_rate=2e-4),
    named_recipe("list_n7_e1_len128_lr1e4", negatives=7, max_length=128, learning_rate=1e-4),
    named_recipe("list_n7_e1_len128_lr2e4", negatives=7, max_length=128, learning_rate=2e-4),
    named_recipe("list_n3_e2_lr1e4", negatives=3, epochs=2, learning_rate=1e-4),
    named_recipe("list_n7_e3_lr1e4", negatives=7, epochs=3, learning_rate=1e-4),
    # third round, on 2 CPU cores: is the CI recipe's gain steady across seeds, and does averaging its tail help
    *(
        named_recipe(
            f"cpu_len128_lr2e4_avg{int(avg * 100)}_s{seed}",
            max_length=128,
            learning_rate=2e-4,
            average_tail=avg,
            seed=seed,
        )
        for avg in (0.0, 0.5)
        for seed in (13, 14, 15)
    ),
    # fourth round, for CI's time budget (2 CPU cores, holdout 0.2, depth 30, rrf order; hybrid 0.7197 there):
    # the job's previous default (n7, 2 epochs, lr 1e-4; 10,544 pairs) +0.0124, half its pairs (n3) +0.0045,
    # a quarter (n3, 1 epoch, lr 2e-4; 2,636 pairs) +0.0129. That quarter then failed the gate on SciFact TEST
    # (hybrid_rerank 0.6025 against hybrid 0.7067 in the 2026-12-02 CI run): one epoch at lr 2e-4 is unstable
    # across training sets, so the job's default became the half (n3, 2 epochs at the previous lr 1e-4). Its
    # SciFact TEST lift in the gate was +0.009 on average over eight fresh-clone runs and below hybrid in one CI
    # run, so the job went back to n7 (job_default; +0.025 in the gate, 2026-12-05)
    Recipe("job_n3_e1_lr2e4", RerankTrainingConfig(negatives=3, epochs=1, learning_rate=2e-4, dropout=None)),
    Recipe("job_n3", RerankTrainingConfig(negatives=3, epochs=2, learning_rate=1e-4, dropout=None)),
    Recipe("job_default", RerankTrainingConfig(negatives=7, epochs=2, learning_rate=1e-4, dropout=None)),
    # fifth round, for CI's time: the job's recipe with its lowest weights kept as pretrained (frozen_layers;
    # holdout 0.2, depth 20, rrf; n3, the job's negatives then): 3 frozen layers train 1.4x faster for +0.020 mean
    # lift against +0.025, and with n7 in the gate +0.008 against +0.025, so the job trains everything
    *(
        Recipe(
            f"job_frozen{frozen}_s{seed}",
            RerankTrainingConfig(negatives=3, frozen_layers=frozen, seed=seed, dropout=None),
        )
        for frozen in (-1, 0, 2, 3)
        for seed in (13, 14, 15)
    ),
    # sixth round, for CI's time: the job's recipe at 96 tokens per pair (1.2-1.4x the pairs/s alone) against 128,
    # holdout 0.2, depth 20, rrf (hybrid 0.7132 there), 2026-12-06 on 2 AVX512-BF16 cores: lift +0.0129 / +0.0147 /
    # +0.0029 (seeds 13 / 14 / 15) against +0.0174 / +0.0149 / +0.0022. Rejected by the rule set before the runs
    # (mean within 0.003 of 128's and every seed above +0.010): seed 15 is below it, at either length
    *(
        Recipe(f"job_len{length}_s{seed}", RerankTrainingConfig(max_length=length, seed=seed, dropout=None))
        for seed in (13, 14, 15)
        for length in (96, 128)
    ),
    # seventh round, for CI's time: the job's recipe with every dropout layer at 0 (1.4x the pairs/s alone on 2
    # AVX2 cores in fp32: no masks drawn, attention on its fused kernel) against the checkpoint's 0.1, holdout 0.2,
    # depth 20, rrf (hybrid 0.7189 there), 2026-12-07: lift +0.0307 / +0.0212 (seeds 13 / 14) against +0.0088 /
    # +0.0228. The rule, set before the runs: adopt 0 if its mean lift is within 0.003 of 0.1's and each seed lifts
    # by more than 0.010. It passed, then its first two gate runs failed the answerability clause (25 and 20 false
    # abstentions against the floor's 19 at the TRAIN-chosen threshold); with that threshold held at the Wilson
    # bound (training/abstention.py) the third passed it (10 against 19) and the fourth failed it (23 against 19), so
    # the job keeps the checkpoint's dropout
    *(
        Recipe(f"job_dropout{'0' if p == 0.0 else '_kept'}_s{seed}", RerankTrainingConfig(dropout=p, seed=seed))
        for seed in (13, 14)
        for p in (0.0, None)
    ),
    # eighth round, for CI's time: dropout off and one epoch (half the pairs at 1.4x the pairs/s: ~2.8x less training
    # CPU than two epochs with the checkpoint's dropout), holdout 0.2, depth 20, rrf (hybrid 0.7189 there),
    # 2026-12-07 on 2 AVX2 cores in fp32: lift +0.0098 / -0.0026 (seeds 13 / 14). Rejected by the seventh round's
    # rule (each seed above +0.010): one epoch is too little, with or without dropout
    *(Recipe(f"job_dropout0_e1_s{seed}", RerankTrainingConfig(dropout=0.0, epochs=1, seed=seed)) for seed in (13, 14)),
]
HOLDOUT_SEED = 7


def split_holdout(records: list[Any], fraction: float) -> tuple[list[Any], list[Any]]:
    """Recipe choice must not look at TEST: train on part of TRAIN, validate on the rest."""
    import random

    ids = sorted(r["qid"] for r in records)
    held = set(random.Random(HOLDOUT_SEED).sample(ids, round(fraction * len(ids))))
    return [r for r in records if r["qid"] not in held], [r for r in records if r["qid"] in held]


def prepare(dataset: Path, out: Path) -> None:
    from safetensors.torch import load_file, save_file

    from cluster.config import load_config
    from cluster.models import resolve_model_path
    from evals.beir import EvalSet
    from evals.pipelines import PIPELINES, PipelineRunner
    from evals.runner import EVAL_TENANT, eval_collection, ingest_dataset
    from local.cluster import sidecars_running
    from serve.stages.rerank import pair_text

    cfg = eval_collection(load_config(None), dataset)
    out.mkdir(parents=True, exist_ok=True)
    texts: dict[str, str] = {}
    records: dict[str, Any] = {"train": [], "test": []}
    with sidecars_running(cfg):
        ingest_dataset(cfg, dataset)
        runner = PipelineRunner(cfg, EVAL_TENANT)
        for split, depth in (("train", POOL), ("test", TEST_DEPTH)):
            data = EvalSet.load(dataset, split)
            for qid, query in data.queries.items():
                passages = runner.passages(PIPELINES["hybrid"], query)[:depth]
                for p in passages:
                    texts[p.chunk_id] = pair_text(p.title, p.text)
                records[split].append(
                    {
                        "qid": qid,
                        "query": query,
                        "candidates": [[p.chunk_id, p.doc_id] for p in passages],
                        "relevant": data.qrels[qid],
                    }
                )
    with gzip.open(out / "data.json.gz", "wt", encoding="utf-8") as handle:
        json.dump({"texts": texts, **records}, handle)
    base = Path(resolve_model_path(cfg.train_reranker.base_model))
    model_dir = out / "base_model"
    model_dir.mkdir(exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (base / name).exists():
            (model_dir / name).write_bytes((base / name).read_bytes())
    weights = load_file(str(base / "model.safetensors"))
    save_file({k: v.half() for k, v in weights.items()}, str(model_dir / "model.safetensors"))
    print(json.dumps({"texts": len(texts), "train": len(records["train"]), "test": len(records["test"])}))


def groups_for(data: dict[str, Any], recipe: RerankTrainingConfig) -> list[Any]:
    import random

    from training.loop import query_groups

    rng = random.Random(recipe.seed)
    texts = data["texts"]
    out = []
    for record in data["train"]:
        relevant = {d for d, g in record["relevant"].items() if g > 0}
        candidates = [(doc_id, texts[chunk_id]) for chunk_id, doc_id in record["candidates"]]
        out += query_groups(record["query"], candidates, relevant, recipe.negatives, rng)
    return out


def run(
    data_dir: Path,
    out: Path,
    only: list[str],
    smoke: bool = False,
    holdout: float = 0.0,
    depth: int = TEST_DEPTH,
    holdout_only: bool = False,
) -> None:
    import torch

    from cluster.models import pick_dtype
    from training.loop import train_cross_encoder

    with gzip.open(data_dir / "data.json.gz", "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    if smoke:  # a few records, to check the script before spending accelerator time on it
        data["train"], data["test"] = data["train"][:12], data["test"][:3]
        data["texts"] = dict(list(data["texts"].items())[:64]) | {
            c: data["texts"][c] for r in data["train"] + data["test"] for c, _ in r["candidates"]
        }
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model_path = str(data_dir / "base_model")
    data["train"], data["holdout"] = split_holdout(data["train"], holdout)
    if holdout_only:  # choosing a recipe needs only the holdout; TEST scores are for reporting
        data["test"] = []
    for record in data["holdout"] + data["test"]:
        record["candidates"] = record["candidates"][:depth]
    scored = data["holdout"] + data["test"]
    pairs = [(r["query"], data["texts"][c]) for r in scored for c, _ in r["candidates"]]
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    results["holdout"] = {"fraction": holdout, "qids": [r["qid"] for r in data["holdout"]]}
    results["depth"] = depth
    results["holdout_only"] = holdout_only
    if not only:
        results["embedding"] = embed_throughput(data_dir, list(data["texts"].values()))
        print("embedding", json.dumps(results["embedding"]), flush=True)
    for named in RECIPES:
        if only and named.name not in only:
            continue
        groups = groups_for(data, named.config)
        bf16 = pick_dtype(named.config.dtype, device) == "bfloat16"
        encoder, outcome = train_cross_encoder(model_path, groups, named.config, device, autocast_bf16=bf16)
        started = time.perf_counter()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            scores = encoder.predict(pairs, batch_size=128, show_progress_bar=False, convert_to_numpy=True)
        results[named.name] = {
            "recipe": named.config.model_dump(mode="json"),
            "groups": len(groups),
            "training": outcome.summary(),
            "score_s": round(time.perf_counter() - started, 2),
            "scores": [round(float(s), 4) for s in scores],
        }
        print(named.name, json.dumps(outcome.summary()), flush=True)
        (out / "scores.json").write_text(json.dumps(results), encoding="utf-8")


def embed_throughput(data_dir: Path, texts: list[str]) -> dict[str, float]:
    """The base MiniLM as a sentence embedder over the stored chunk texts (the ingestion job's model)."""
    import torch
    from sentence_transformers import SentenceTransformer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = SentenceTransformer(str(data_dir / "base_model"), device=device, model_kwargs={"dtype": torch.float32})
    model.max_seq_length = 256
    model.encode(texts[:512], batch_size=256)
    out = {}
    for dtype in ("float32", "bfloat16"):
        model.to(getattr(torch, dtype))
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        model.encode(texts, batch_size=256, normalize_embeddings=True)
        if device == "cuda":
            torch.cuda.synchronize()
        out[f"chunks_per_s_{dtype}"] = round(len(texts) / (time.perf_counter() - started), 1)
    return out | {"chunks": len(texts)}


def score(data_dir: Path, scores_file: Path, depths: list[int]) -> None:
    from cluster.config import RerankConfig
    from evals.metrics import mean_metrics, per_query
    from serve.stages.rerank import rerank_order
    from serve.types import Passage

    with gzip.open(data_dir / "data.json.gz", "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    results = json.loads(scores_file.read_text(encoding="utf-8"))
    held = set(results.get("holdout", {}).get("qids", []))
    test = [] if results.get("holdout_only") else data["test"]
    sets = {"holdout": [r for r in data["train"] if r["qid"] in held], "test": test}
    scored = sets["holdout"] + sets["test"]
    for record in scored:
        record["candidates"] = record["candidates"][: results.get("depth", TEST_DEPTH)]

    def docs(candidates: list[list[str]]) -> list[str]:
        return list(dict.fromkeys(d for _, d in candidates))

    def ndcg(records: list[Any], rankings: dict[str, list[str]]) -> float:
        qrels = {r["qid"]: r["relevant"] for r in records}
        return mean_metrics(per_query({q: rankings[q] for q in qrels}, qrels))["ndcg@10"]

    base = {r["qid"]: docs(r["candidates"]) for r in scored}
    baseline = {name: ndcg(records, base) for name, records in sets.items() if records}
    print("hybrid:", "  ".join(f"{k} {v:.4f}" for k, v in baseline.items()))
    for name, result in results.items():
        if name in ("device", "embedding", "holdout", "depth", "holdout_only"):
            continue
        flat = iter(result["scores"])
        per_record = [[next(flat) for _ in r["candidates"]] for r in scored]
        t = result["training"]
        for depth in depths:
            for order in ("scores", "rrf"):
                cfg = RerankConfig(order=order)  # type: ignore[arg-type]
                rankings = {}
                for record, scores in zip(scored, per_record, strict=True):
                    cands = record["candidates"]
                    head = [Passage(c, d, "", "") for c, d in cands[:depth]]
                    ranked = rerank_order(head, scores[:depth], depth, cfg)
                    rankings[record["qid"]] = docs([[p.chunk_id, p.doc_id] for p in ranked] + cands[depth:])
                figures = "  ".join(
                    f"{k} {ndcg(records, rankings):.4f} ({ndcg(records, rankings) - baseline[k]:+.4f})"
                    for k, records in sets.items()
                    if records
                )
                print(
                    f"{name:24s} depth {depth:2d} {order:6s} {figures}  [{result['groups']} groups, "
                    f"{t['pairs']} pairs, {t['pairs_per_s']} pairs/s, loss {t['loss_by_tenth'][-1]}]"
                )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--smoke", action="store_true")
    r.add_argument("--holdout", type=float, default=0.0, help="share of TRAIN queries held out for validation")
    r.add_argument("--depth", type=int, default=TEST_DEPTH, help="candidates scored per held-out / test query")
    r.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    r.add_argument("--holdout-only", action="store_true", help="score only the holdout (recipe choice)")
    s = sub.add_parser("score")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--scores", type=Path, required=True)
    s.add_argument("--depths", type=int, nargs="+", default=[20, 50])
    args = parser.parse_args()
    sleep_at_barriers()
    if args.cmd == "prepare":
        prepare(args.dataset, args.out)
    elif args.cmd == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        run(args.data, args.out, args.only, args.smoke, args.holdout, args.depth, args.holdout_only)
    else:
        score(args.data, args.scores, args.depths)


if __name__ == "__main__":
    main()
