import pytest

from evals.abstention import signal_section, trade_off_auc
from serve.answerability import FEATURES, AnswerabilityModel, OperatingPoint

UNANSWERABLE = {"u1", "u2"}


def test_the_area_is_the_chance_an_unanswerable_question_scores_lower() -> None:
    assert trade_off_auc({"a1": 0.9, "a2": 0.8, "u1": 0.1, "u2": 0.2}, UNANSWERABLE) == 1.0
    assert trade_off_auc({"a1": 0.1, "a2": 0.2, "u1": 0.9, "u2": 0.8}, UNANSWERABLE) == 0.0
    assert trade_off_auc({"a1": 0.5, "a2": 0.1, "u1": 0.3, "u2": None}, UNANSWERABLE) == 0.75
    with pytest.raises(ValueError, match="both"):
        trade_off_auc({"a1": 0.5}, UNANSWERABLE)


def cosine_only() -> AnswerabilityModel:
    """p = sigmoid(10 * (cosine - 0.5)): abstains below a cosine of 0.5 at the threshold 0.5."""
    return AnswerabilityModel(
        features=list(FEATURES),
        mean=[0.0] * 4,
        scale=[1.0] * 4,
        coef=[0.0, 0.0, 0.0, 10.0],
        intercept=-5.0,
        operating_point=OperatingPoint(threshold=0.5, abstention=1.0, false_abstention=0.0),
        reranker="r",
    )


def test_the_signal_is_scored_alone_and_behind_each_floor() -> None:
    features = {
        "a1": [0.0, 0.0, 0.0, 0.9],
        "a2": [0.0, 0.0, 0.0, 0.6],
        "a3": None,  # nothing retrieved: abstains whatever decides
        "u1": [0.0, 0.0, 0.0, 0.4],
        "u2": [0.0, 0.0, 0.0, 0.55],
    }
    section = signal_section(features, cosine_only(), UNANSWERABLE, {"floor": 0.7})
    shares = {"floor": 0.5, "abstention": 0.5, "false_abstention": 0.3333}
    assert section["test"]["signal"] == shares | {"abstained": 1, "falsely_abstained": 1}
    shares = {"floor": 0.5, "abstention": 1.0, "false_abstention": 0.6667}
    assert section["test"]["signal+floor"] == shares | {"abstained": 2, "falsely_abstained": 2}
    assert section["auc"]["signal"] == section["auc"]["cosine"], "a monotone function of the cosine ranks alike"
    assert set(section["curves"]) == {"cosine", "signal", "signal+floor"}
    # the best any cosine floor does on these questions without more false abstention than the signal's
    assert section["cosine_at_the_same_false_abstention"]["false_abstention"] <= 0.3333
    assert section["cosine_at_the_same_false_abstention"]["abstention"] == 1.0  # a floor of 0.6 beats it here


def test_the_configured_operating_point_is_the_one_reported() -> None:
    features = {"a1": [0.0, 0.0, 0.0, 0.9], "u1": [0.0, 0.0, 0.0, 0.4]}
    section = signal_section(features, cosine_only(), {"u1"}, {}, threshold=0.99)
    assert section["threshold"] == 0.99 and section["test"]["signal"]["false_abstention"] == 1.0
