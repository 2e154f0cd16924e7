from __future__ import annotations

import json
from pathlib import Path

from cluster.config import EmbeddingConfig, RagcConfig
from evals.chunk_sweep import main
from evals.runner import eval_collection


def test_a_chunking_other_than_the_default_gets_a_collection_of_its_own() -> None:
    cfg = RagcConfig()
    assert eval_collection(cfg, Path("/data/SciFact")).milvus.collection == "ragc_eval_scifact"
    cfg.chunking.chunk_size, cfg.chunking.chunk_overlap = 128, 16
    assert eval_collection(cfg, Path("/data/SciFact")).milvus.collection == "ragc_eval_scifact_c128o16"
    cfg.chunking.markdown_headers = False
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_c128o16_nomd"


def result(size: int, overlap: int, hybrid: float, vectors: int) -> dict[str, object]:
    figures = {"ndcg@10": hybrid, "recall@100": 0.9, "mrr@10": 0.5, "hit_rate@10": 0.8}
    return {
        "dataset": "scifact",
        "split": "train",
        "queries": 809,
        "chunking": {"chunk_size": size, "chunk_overlap": overlap, "markdown_headers": True},
        "ingest": {"chunks_total": vectors, "chunks_embedded": vectors // 2, "seconds": 12.4},
        "pipelines": {"bm25": figures | {"ndcg@10": 0.7}, "hybrid": figures},
    }


def sweep_report(tmp_path: Path, named: dict[str, dict[str, object]]) -> str:
    """The sweep's report over these results, each written as `<name>.json`."""
    paths = []
    for name, r in named.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
        paths.append(str(tmp_path / f"{name}.json"))
    out = tmp_path / "report.md"
    assert main([str(out), *paths]) == 0
    return out.read_text(encoding="utf-8")


def test_the_sweep_table_orders_sizes_and_names_the_best_on_hybrid(tmp_path: Path) -> None:
    paths = []
    for size, overlap, hybrid, vectors in ((256, 32, 0.74, 9636), (128, 16, 0.75, 18000), (384, 48, 0.73, 7000)):
        path = tmp_path / f"size_{size}.json"
        path.write_text(json.dumps(result(size, overlap, hybrid, vectors)), encoding="utf-8")
        paths.append(str(path))
    out = tmp_path / "report.md"
    assert main([str(out), *paths]) == 0
    text = out.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| - |")]
    assert [row.split(" | ")[1] for row in rows] == ["128 / 16", "256 / 32", "384 / 48"]
    assert "| - | 128 / 16 | - | 18000 | - | 9000 | 12 | 0.7000 | 0.9000 | 0.7500 | 0.9000 |" in text
    assert "Best hybrid nDCG@10: -, chunk size 128, overlap 16." in text
    assert main([str(out)]) == 2


def test_dense_models_get_collections_and_rows_of_their_own(tmp_path: Path) -> None:
    cfg = RagcConfig()
    cfg.embedding = EmbeddingConfig(model="packaged:all-mpnet-base-v2")
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_all_mpnet_base_v2"
    paths = []
    models = (("sentence-transformers/all-mpnet-base-v2", 768, 0.76), ("x/all-MiniLM-L6-v2", 384, 0.74))
    for name, dim, hybrid in models:
        path = tmp_path / f"{dim}.json"
        path.write_text(json.dumps(result(256, 32, hybrid, 9636) | {"embedding": {"model_id": name, "dim": dim}}))
        paths.append(str(path))
    out = tmp_path / "report.md"
    assert main([str(out), *paths]) == 0
    text = out.read_text(encoding="utf-8")
    minilm, mpnet = (
        "| all-MiniLM-L6-v2 (384-d) | 256 / 32 | - | 9636 | 14.8 |",
        "| all-mpnet-base-v2 (768-d) | 256 / 32 | - | 9636 | 29.6 |",
    )
    assert text.index(minilm) < text.index(mpnet)
    assert "Best hybrid nDCG@10: all-mpnet-base-v2 (768-d), chunk size 256, overlap 32." in text


def test_sentence_windows_are_rows_of_their_own(tmp_path: Path) -> None:
    cfg = RagcConfig()
    cfg.chunking.sentence_window = 2
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_w2"
    windows = result(256, 32, 0.73, 44000)
    windows["chunking"]["sentence_window"] = 2
    text = sweep_report(tmp_path, {"w": windows, "c": result(256, 32, 0.71, 9636)})
    assert text.index("| - | 256 / 32 | - | 9636 |") < text.index("| - | sentence window 2 | - | 44000 |")
    assert "Best hybrid nDCG@10: -, sentence window 2." in text


def test_enriched_chunks_are_rows_of_their_own(tmp_path: Path) -> None:
    cfg = RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 3}}})
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_q3"
    cfg.ingest.enrichment.summary = True
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_q3s"
    cfg.ingest.enrichment.questions = 0
    assert eval_collection(cfg, Path("/data/scifact")).milvus.collection == "ragc_eval_scifact_s"
    three = RagcConfig.model_validate({"ingest": {"enrichment": {"questions": 3}}}).enrichment_fingerprint()
    enriched = result(256, 32, 0.76, 9636) | {"enrichment": three}
    text = sweep_report(tmp_path, {"q": enriched, "c": result(256, 32, 0.74, 9636)})
    assert text.index("| - | 256 / 32 | - | 9636 |") < text.index("| - | 256 / 32 | 3 questions | 9636 |")
    assert "Best hybrid nDCG@10: -, chunk size 256, overlap 32, 3 questions per chunk." in text
