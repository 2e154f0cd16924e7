"""`ragc eval --output FILE`: the JSON result, a markdown report with a table, and PNG charts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evals.metrics import METRICS


def write_report(result: dict[str, Any], output: Path) -> list[Path]:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    written = [output]
    lines = [f"# Retrieval evaluation: {result['dataset']} ({result['split']}, {result['queries']} queries)", ""]
    pipelines: dict[str, dict[str, float]] = result.get("pipelines", {})
    if pipelines:
        chart = output.with_name(output.stem + "_pipelines.png")
        _bar_chart(pipelines, chart, f"{result['dataset']} {result['split']}")
        written.append(chart)
        lines += ["| pipeline | " + " | ".join(METRICS) + " | s/query |", "|---" * (len(METRICS) + 2) + "|"]
        for name, m in pipelines.items():
            marker = " (default)" if name == result.get("default_pipeline") else ""
            cells = " | ".join(f"{m[k]:.4f}" for k in METRICS)
            lines.append(f"| {name}{marker} | {cells} | {m.get('seconds_per_query', 0):.3f} |")
        lines += ["", f"![pipelines]({chart.name})", ""]
    abstention = result.get("abstention")
    if abstention:
        chart = output.with_name(output.stem + "_abstention.png")
        _curve_chart(abstention, chart)
        written.append(chart)
        chosen, test = abstention["chosen_on_train"], abstention["test"]
        lines += [
            "## Abstention",
            "",
            f"Floor chosen on {abstention['floor_split']}: {chosen['floor']} (abstention {chosen['abstention']}, "
            f"false abstention {chosen['false_abstention']}).",
            f"On {result['split']} through the retriever with that floor: abstention {test['abstention']} over "
            f"{test['unanswerable']} unanswerable questions, false abstention {test['false_abstention']} over "
            f"{test['answerable']} answerable ones (targets >= {abstention['targets']['abstention']} and "
            f"<= {abstention['targets']['false_abstention']}: {'met' if abstention['targets_met'] else 'NOT met'}).",
            "",
            f"![abstention trade-off]({chart.name})",
            "",
        ]
        if "answerability" in abstention:
            lines += _signal_table(abstention)
    report = output.with_suffix(".md")
    report.write_text("\n".join(lines), encoding="utf-8")
    written.append(report)
    return written


def _signal_table(abstention: dict[str, Any]) -> list[str]:
    signal, test = abstention["answerability"], abstention["test"]
    rows = [
        "### Answerability signal beside the cosine floor",
        "",
        f"Calibration: `{signal['calibration']}`; the service answers at probability >= {signal['threshold']:.4f} "
        f"(the operating point chosen on TRAIN: {signal['chosen_on_train']['threshold']:.4f}); "
        f"{signal['seconds_per_query'] * 1000:.0f} ms per question to score here"
        f" ({signal.get('pairs_reused', 0)} pairs' scores reused from an earlier run of this reranker).",
        "",
        "| decides | abstention | false abstention | area under the curve |",
        "|---|---|---|---|",
        f"| cosine floor {abstention['chosen_on_train']['floor']} | {test['abstention']} | "
        f"{test['false_abstention']} | {signal['auc']['cosine']} |",
    ]
    for name, rates in signal["test"].items():
        rows.append(f"| {name} | {rates['abstention']} | {rates['false_abstention']} | {signal['auc'][name]} |")
    enlarged = signal.get("with_withheld_copies")
    if enlarged:
        ours, matched = enlarged["test"]["signal"], enlarged["cosine_at_the_same_false_abstention"]
        rows += [
            "",
            f"With each answerable question also withheld from its relevant documents ({enlarged['withheld_copies']}"
            f" more unanswerable examples): the signal abstains on {ours['abstained']} at false abstention "
            f"{ours['false_abstention']}, the best cosine floor at no more false abstention on {matched['abstained']}"
            f" ({enlarged['ratio_to_cosine']}x); areas under the curve {enlarged['auc']['signal']} and "
            f"{enlarged['auc']['cosine']}.",
        ]
    return [*rows, ""]


def _bar_chart(pipelines: dict[str, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(pipelines)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(names)), 4.0))
    width = 0.8 / len(METRICS)
    for n, metric in enumerate(METRICS):
        xs = [i + (n - (len(METRICS) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, [pipelines[p][metric] for p in names], width, label=metric)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _curve_chart(abstention: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for split, points in abstention["curves"].items():
        ax.plot([p["false_abstention"] for p in points], [p["abstention"] for p in points], label=f"cosine, {split}")
    chosen, test = abstention["chosen_on_train"], abstention["test"]
    ax.scatter([chosen["false_abstention"]], [chosen["abstention"]], marker="o", color="black", label="chosen floor")
    ax.scatter([test["false_abstention"]], [test["abstention"]], marker="x", color="black", label="floor on test")
    signal = abstention.get("answerability")
    if signal:
        for name, points in signal["curves"].items():
            if name != "cosine":
                ax.plot([p["false_abstention"] for p in points], [p["abstention"] for p in points], label=name)
        at = signal["test"]["signal"]
        ax.scatter([at["false_abstention"]], [at["abstention"]], marker="*", s=90, color="red", label="signal on test")
    ax.axhline(abstention["targets"]["abstention"], linestyle=":", color="grey")
    ax.axvline(abstention["targets"]["false_abstention"], linestyle=":", color="grey")
    ax.set_xlabel("false abstention (answerable questions)")
    ax.set_ylabel("abstention (unanswerable questions)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
