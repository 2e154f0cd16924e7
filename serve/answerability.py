"""Whether the retrieved passages answer the question: a small calibrated model over what retrieval and
rerank already computed (no extra model call), fitted by `ragc calibrate-abstention` on TRAIN questions the
reranker never saw. Cross-encoder logits are never thresholded raw: they are features of a logistic model
whose output is a probability, and the service abstains below a configured one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from cluster.config import ServeConfig

CALIBRATION_FILE = "answerability.json"  # written beside the reranker it was calibrated for
TOP_SCORES = 3
FEATURES = ("top_logit", "top_gap", "top3_mean_logit", "max_cosine")


def answerability_features(top_scores: list[float], max_cosine: float | None) -> list[float] | None:
    """`top_scores`: the cross-encoder's best logits over the scored candidates, best first.
    None when there is nothing to score (no candidate, or no reranker)."""
    if not top_scores:
        return None
    best = sorted(top_scores, reverse=True)[:TOP_SCORES]
    gap = best[0] - best[1] if len(best) > 1 else 0.0
    return [best[0], gap, sum(best) / len(best), -1.0 if max_cosine is None else max_cosine]


class OperatingPoint(BaseModel):
    threshold: float
    abstention: float = Field(description="share of unanswerable calibration questions abstained on")
    false_abstention: float = Field(description="share of answerable calibration questions abstained on")


class AnswerabilityModel(BaseModel):
    """Logistic regression on standardised features; the file also carries its recipe and TRAIN curve."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    operating_point: OperatingPoint = Field(description="chosen on the calibration questions (cross-validated)")
    reranker: str = Field(description="the cross-encoder whose logits the model was fitted on")
    cosine_floor: OperatingPoint | None = Field(
        default=None, description="the cosine floor chosen on the same questions, for comparison"
    )
    recipe: dict[str, Any] = Field(default_factory=dict)
    train_curve: list[OperatingPoint] = Field(default_factory=list)

    def probability(self, features: list[float]) -> float:
        z = self.intercept + sum(
            c * (x - m) / s for c, x, m, s in zip(self.coef, features, self.mean, self.scale, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    @classmethod
    def load(cls, path: Path) -> AnswerabilityModel:
        model = cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        if model.features != list(FEATURES):
            raise ValueError(f"{path}: fitted on features {model.features}, this version computes {list(FEATURES)}")
        return model


def calibration_path(cfg: ServeConfig) -> Path | None:
    """The configured calibration file; `auto` = the one beside the configured reranker, when it exists."""
    setting = cfg.answerability.calibration
    if setting is None or not cfg.rerank.model:
        return None
    if setting == "auto":
        beside = Path(cfg.rerank.model) / CALIBRATION_FILE
        return beside if beside.is_file() else None
    return Path(setting)


def load_answerability(cfg: ServeConfig) -> AnswerabilityModel | None:
    path = calibration_path(cfg)
    return None if path is None else AnswerabilityModel.load(path)


def abstain_below(cfg: ServeConfig, model: AnswerabilityModel) -> float:
    configured = cfg.answerability.min_probability
    return model.operating_point.threshold if configured is None else configured
