from pathlib import Path

from evals.abstention import curve, signal_section
from evals.report import write_report
from tests.unit.evals.test_abstention import cosine_only

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_abstention_report_tables_and_draws_the_floor_and_the_signal(tmp_path: Path) -> None:
    features = {"a1": [0.0, 0.0, 0.0, 0.9], "a2": [0.0, 0.0, 0.0, 0.6], "u1": [0.0, 0.0, 0.0, 0.4]}
    signal = signal_section(features, cosine_only(), {"u1"}, {"service_floor": 0.3})
    signal |= {"calibration": "r/answerability.json", "chosen_on_train": {"threshold": 0.5}, "seconds_per_query": 0.1}
    enlarged = signal_section(
        features | {"a1/withheld": [0.0, 0.0, 0.0, 0.45]}, cosine_only(), {"u1", "a1/withheld"}, {}
    )
    signal["with_withheld_copies"] = enlarged | {"withheld_copies": 1, "ratio_to_cosine": 1.0}
    cosines = {"a1": 0.9, "a2": 0.6, "u1": 0.4}
    rates = {"floor": 0.5, "abstention": 1.0, "false_abstention": 0.0}
    abstention = {
        "floor_split": "train",
        "chosen_on_train": rates,
        "test": rates | {"unanswerable": 1, "answerable": 2},
        "targets": {"abstention": 0.9, "false_abstention": 0.05},
        "targets_met": True,
        "curves": {"test": [r.as_dict() for r in curve(cosines, {"u1"})]},
        "answerability": signal,
    }
    result = {"dataset": "d", "split": "test", "queries": 3, "abstention": abstention}
    written = write_report(result, tmp_path / "abstention.json")
    report = next(p for p in written if p.suffix == ".md").read_text()
    assert "Answerability signal beside the cosine floor" in report
    assert "| signal | 1.0 | 0.0 | 1.0 |" in report and "| signal+service_floor |" in report
    assert "probability >= 0.5000 (the operating point chosen on TRAIN: 0.5000)" in report
    assert "(1 more unanswerable examples): the signal abstains on 2 at false abstention 0.0" in report
    chart = next(p for p in written if p.name == "abstention_abstention.png")
    assert chart.read_bytes()[:8] == PNG
