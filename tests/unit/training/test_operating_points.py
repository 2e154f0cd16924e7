import random

from serve.answerability import FEATURES
from training.abstention import Examples
from training.operating_points import RULES, half_splits, judge, table


def synthetic(questions: int, seed: int = 1) -> Examples:
    """Each answerable question with its withheld copy (unanswerable), and a few unanswerable questions; the
    features separate the classes with overlap, the cosine (last feature) less well than the rest."""
    rng = random.Random(seed)
    ids: list[str] = []
    features: list[list[float]] = []
    unanswerable: set[str] = set()

    def add(example: str, answerable: bool) -> None:
        shift = 1.0 if answerable else 0.0
        ids.append(example)
        features.append([rng.gauss(shift, 0.8) for _ in FEATURES[:-1]] + [rng.gauss(0.5 + 0.1 * shift, 0.1)])
        if not answerable:
            unanswerable.add(example)

    for n in range(questions):
        if n % 8 == 0:
            add(f"q{n}", False)
        else:
            add(f"q{n}", True)
            add(f"q{n}/withheld", False)
    return Examples(ids, features, unanswerable)


def test_a_question_and_its_withheld_copy_stay_in_one_half() -> None:
    examples = synthetic(80)
    for chosen_on, judged_on in half_splits(examples, 5, seed=3):
        assert set(chosen_on.ids).isdisjoint(judged_on.ids)
        assert sorted(chosen_on.ids + judged_on.ids) == sorted(examples.ids)
        for half in (chosen_on, judged_on):
            assert all(f"{i}/withheld" in half.ids for i in half.ids if "/" not in i and i not in half.unanswerable)
            assert half.unanswerable <= set(half.ids) and len(half.ids) - len(half.unanswerable) >= 30


def test_a_confident_rule_oversteps_the_budget_less_often_and_abstains_less() -> None:
    results = judge(synthetic(240), splits=4, seed=13)
    assert set(results) == set(RULES)
    today, confident = results["observed share (calibration's rule)"], results["Wilson bound, z = 1"]
    # its threshold is never above today's on a half (a bound is never below the share), and here always below
    assert confident["signal_false_abstention"] <= today["signal_false_abstention"]
    assert confident["signal_abstention"] < today["signal_abstention"]
    assert today["signal_abstention"] > today["cosine_abstention"]  # the synthetic signal separates better
    assert all(0.0 <= v <= 1.0 for row in results.values() for v in row.values())
    assert table(results).count("\n") == len(RULES) + 1
