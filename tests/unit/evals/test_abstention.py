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


class WithholdingRunner:
    """The best cosine falls to 0.3 when a question's relevant documents are withheld from its candidates."""

    def __init__(self) -> None:
        self.withheld: dict[str, frozenset[str]] = {}

    def answerability_features(self, query: str, withheld: frozenset[str] = frozenset()) -> list[float] | None:
        self.withheld[query] = withheld
        return [0.0, 0.0, 0.0, 0.3 if withheld else 0.9]


def test_withheld_copies_add_an_unanswerable_example_per_answerable_question() -> None:
    from evals.beir import EvalSet
    from evals.runner import withheld_copies_section

    questions = EvalSet("s", "test", {"a1": "q a1", "a2": "q a2", "u1": "q u1"}, {})
    questions.qrels.update({"a1": {"d1": 1, "d9": 0}, "a2": {"d2": 2}, "u1": {"gone": 1}})
    features: dict[str, list[float] | None] = {"a1": [0.0, 0.0, 0.0, 0.9], "a2": None, "u1": [0.0, 0.0, 0.0, 0.4]}
    runner = WithholdingRunner()
    section = withheld_copies_section(runner, questions, features, cosine_only(), {"u1"}, 0.5)  # type: ignore[arg-type]
    assert runner.withheld == {"q a1": frozenset({"d1"}), "q a2": frozenset({"d2"})}  # judged 0 stays in
    assert section["withheld_copies"] == 2 and "curves" not in section
    # u1 and both copies abstain (cosine < 0.5); a2 had no candidate at all: a false abstention
    assert section["test"]["signal"] | {"floor": 0} == {
        "floor": 0,
        "abstention": 1.0,
        "false_abstention": 0.5,
        "abstained": 3,
        "falsely_abstained": 1,
    }
