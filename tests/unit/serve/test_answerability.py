import json
import math
from pathlib import Path

import pytest

from cluster.config import RagcConfig
from serve.answerability import (
    CALIBRATION_FILE,
    FEATURES,
    AnswerabilityModel,
    OperatingPoint,
    abstain_below,
    answerability_features,
    calibration_path,
    load_answerability,
)


def model(**changes: object) -> AnswerabilityModel:
    n = len(FEATURES)
    fields: dict = {
        "features": list(FEATURES),
        "mean": [1.0] * n,
        "scale": [2.0] * n,
        "coef": [0.5, 0.0, 0.0, 1.0],
        "intercept": -0.25,
        "operating_point": OperatingPoint(threshold=0.4, abstention=0.6, false_abstention=0.05),
        "reranker": "r",
    }
    return AnswerabilityModel(**(fields | changes))


def test_features_read_the_best_logits_whatever_their_order() -> None:
    assert answerability_features([1.0, 5.0, 2.0, 4.0], 0.5) == [5.0, 1.0, 11 / 3, 0.5]
    assert answerability_features([3.0], None) == [3.0, 0.0, 3.0, -1.0]
    assert answerability_features([], 0.9) is None


def test_probability_is_the_logistic_of_the_standardised_features() -> None:
    z = -0.25 + 0.5 * (5.0 - 1) / 2 + 1.0 * (0.5 - 1) / 2
    assert model().probability([5.0, 1.0, 3.0, 0.5]) == pytest.approx(1 / (1 + math.exp(-z)))
    assert 0.0 < model(coef=[1e6, 0, 0, 0]).probability([-5.0, 0, 0, 0]) < 1e-20, "no overflow"


def reranker_dir(tmp_path: Path, calibrated: bool) -> Path:
    folder = tmp_path / "reranker"
    folder.mkdir()
    if calibrated:
        (folder / CALIBRATION_FILE).write_text(model().model_dump_json())
    return folder


@pytest.mark.parametrize(
    ("calibrated", "setting", "rerank", "expected"),
    [
        (True, "auto", True, "beside"),
        (False, "auto", True, None),
        (True, None, True, None),
        (True, "auto", False, None),  # no reranker: no logits to read
        (False, "explicit", True, "explicit"),
    ],
)
def test_the_calibration_is_found_beside_the_reranker_or_where_configured(
    tmp_path: Path, calibrated: bool, setting: str | None, rerank: bool, expected: str | None
) -> None:
    folder = reranker_dir(tmp_path, calibrated)
    explicit = tmp_path / "elsewhere.json"
    answerability = {"calibration": str(explicit) if setting == "explicit" else setting}
    cfg = RagcConfig.model_validate(
        {"serve": {"rerank": {"model": str(folder) if rerank else None}, "answerability": answerability}}
    ).serve
    want = {"beside": folder / CALIBRATION_FILE, "explicit": explicit, None: None}[expected]
    assert calibration_path(cfg) == want


def test_a_calibration_for_other_features_is_refused(tmp_path: Path) -> None:
    folder = reranker_dir(tmp_path, calibrated=False)
    stale = model().model_dump() | {"features": ["top_logit"]}
    (folder / CALIBRATION_FILE).write_text(json.dumps(stale))
    cfg = RagcConfig.model_validate({"serve": {"rerank": {"model": str(folder)}}}).serve
    with pytest.raises(ValueError, match="fitted on features"):
        load_answerability(cfg)


def test_the_configured_probability_wins_over_the_calibrated_one(tmp_path: Path) -> None:
    cfg = RagcConfig.model_validate({"serve": {"answerability": {"min_probability": 0.7}}}).serve
    assert abstain_below(cfg, model()) == 0.7
    assert abstain_below(RagcConfig().serve, model()) == 0.4
