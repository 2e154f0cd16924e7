"""The reranker training loop: training groups, tail averaging, the precision it runs at."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_training_groups_take_the_best_positive_chunk_and_sample_only_non_relevant_negatives() -> None:
    import random

    from training.loop import query_groups

    candidates = [("d1", "neg a"), ("p1", "pos 1 best"), ("p1", "pos 1 worse"), ("d2", "neg b"), ("d3", "neg c")]
    fetched: list[list[str]] = []

    def missing(doc_ids: list[str]) -> dict[str, str]:
        fetched.append(doc_ids)
        return {d: f"chunk 0 of {d}" for d in doc_ids}

    groups = query_groups("q", candidates, {"p1", "p2"}, 2, random.Random(1), missing)
    assert fetched == [["p2"]]  # only the relevant document the retriever missed
    assert [g.positive for g in groups] == ["pos 1 best", "chunk 0 of p2"]
    assert all(len(g.negatives) == 2 and set(g.negatives) <= {"neg a", "neg b", "neg c"} for g in groups)
    assert query_groups("q", candidates, {"p1"}, 4, random.Random(1)) == []  # too few negatives


def test_tail_average_is_the_mean_of_the_weights_over_the_tail_steps() -> None:
    import torch

    from training.loop import TailAverage

    model = torch.nn.Linear(2, 1)
    averaged = TailAverage(first_step=3)
    for step, value in enumerate([10.0, 20.0, 1.0, 2.0, 6.0], start=1):
        with torch.no_grad():
            model.weight.fill_(value)
        averaged.add(model, step)
    averaged.load_into(model)
    assert model.weight.tolist() == [[3.0, 3.0]]  # steps 3-5 only
    last = torch.nn.Linear(2, 1)
    untouched = TailAverage(first_step=5)
    with torch.no_grad():
        last.weight.fill_(7.0)
    untouched.add(last, 5)
    untouched.load_into(last)
    assert last.weight.tolist() == [[7.0, 7.0]]  # no tail: the last step's weights


def test_training_runs_in_fp32_where_bf16_is_not_native(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Emulated bf16 autocast is an order of magnitude slower than fp32: `dtype: auto` must not pick it there."""
    import cluster.models
    from cluster.config import RerankTrainingConfig
    from cluster.models import resolve_model_path
    from training.loop import TrainingGroup
    from training.train_reranker import train_and_save

    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: False)
    groups = [TrainingGroup("what is a tenant", "a tenant owns its documents", ("the sky is blue",))] * 2
    recipe = RerankTrainingConfig(max_length=16, groups_per_step=2, epochs=1)
    summary = train_and_save(resolve_model_path(recipe.base_model), groups, recipe, "cpu", str(tmp_path / "m"))
    assert summary["precision"] == "float32"
    assert summary["threads"] >= 1 and summary["pairs"] == 4
    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: True)
    assert (
        train_and_save(resolve_model_path(recipe.base_model), groups, recipe, "cpu", str(tmp_path / "b"))["precision"]
        == "bfloat16"
    )


@pytest.mark.parametrize("frozen_layers", [-1, 0, 2])
def test_frozen_layers_keep_their_pretrained_weights_and_the_rest_train(frozen_layers: int) -> None:
    import torch

    from cluster.config import RerankTrainingConfig
    from cluster.models import resolve_model_path
    from training.loop import TrainingGroup, train_cross_encoder

    path = resolve_model_path(RerankTrainingConfig().base_model)
    groups = [TrainingGroup("what is a tenant", "a tenant owns its documents", ("the sky is blue",))] * 2
    recipe = RerankTrainingConfig(max_length=16, groups_per_step=2, epochs=1, frozen_layers=frozen_layers)
    before = {n: p.detach().clone() for n, p in _base_parameters(path)}
    encoder, _ = train_cross_encoder(path, groups, recipe, "cpu")
    after = dict(encoder.model.base_model.named_parameters())
    moved = {n for n, p in before.items() if not torch.equal(p, after[n].detach())}
    for name in before:
        frozen = frozen_layers >= 0 and (
            name.startswith("embeddings.") or any(name.startswith(f"encoder.layer.{i}.") for i in range(frozen_layers))
        )
        assert (name not in moved) == frozen, name


def test_freezing_more_layers_than_the_model_has_is_refused() -> None:
    from cluster.config import RerankTrainingConfig
    from cluster.models import resolve_model_path
    from training.loop import train_cross_encoder

    recipe = RerankTrainingConfig(frozen_layers=7)
    with pytest.raises(ValueError, match="6 transformer layers"):
        train_cross_encoder(resolve_model_path(recipe.base_model), [], recipe, "cpu")


@pytest.mark.parametrize(("dropout", "expected"), [(None, 0.1), (0.0, 0.0), (0.2, 0.2)])
def test_dropout_is_set_on_every_dropout_layer_or_kept_as_the_checkpoint_has_it(
    dropout: float | None, expected: float
) -> None:
    import torch

    from cluster.config import RerankTrainingConfig
    from cluster.models import resolve_model_path
    from training.loop import train_cross_encoder

    recipe = RerankTrainingConfig(dropout=dropout)
    encoder, _ = train_cross_encoder(resolve_model_path(recipe.base_model), [], recipe, "cpu")
    layers = [m for m in encoder.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(layers) > 6 and {m.p for m in layers} == {expected}  # attention's too: its sdpa call reads its p


def _base_parameters(path: str) -> list[tuple[str, object]]:
    from sentence_transformers import CrossEncoder

    return list(CrossEncoder(path, num_labels=1).model.base_model.named_parameters())
