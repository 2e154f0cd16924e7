"""`ragc train-reranker`: the recipe the job trains our cross-encoder with."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cluster.config.base import Section


class RerankTrainingConfig(Section):
    """`ragc train-reranker`: fine-tune a cross-encoder on a labelled split, hard negatives from our retriever."""

    base_model: str = Field(default="packaged:all-minilm-l6-v2", description="weights the cross-encoder starts from")
    loss: Literal["listwise", "bce"] = Field(
        default="listwise",
        description="listwise: softmax cross-entropy over one positive and its negatives; bce: pointwise",
    )
    negatives: int = Field(default=7, ge=1, description="hard negatives per positive")
    negative_pool: int = Field(default=30, gt=0, description="hybrid candidates the negatives are drawn from")
    epochs: int = Field(
        default=2,
        ge=1,
        description="passes over the groups (the measured recipes: ARCHITECTURE.md, Rerank)",
    )
    groups_per_step: int = Field(default=4, gt=0, description="positives (each with its negatives) per step")
    learning_rate: float = Field(default=1e-4, gt=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    max_length: int = Field(default=128, gt=0, description="tokens of query + passage; saved with the model")
    frozen_layers: int = Field(
        default=-1,
        ge=-1,
        description="keep the pretrained weights of the token embeddings and of this many lowest transformer "
        "layers (0 = the embeddings alone, -1 = train everything): a step then skips their gradients and updates",
    )
    dropout: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="probability of every dropout layer while training; null = the base model's own (0.1 in "
        "MiniLM). 0 draws no masks and lets attention take its fused kernel: 1.4x the pairs/s alone on 2 CPU "
        "cores and a larger lift, but 3 of its 4 gate runs failed the answerability clause (README, Retrieval "
        "quality)",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="bfloat16 = bf16 autocast over fp32 master weights; auto = bfloat16 where native (CUDA, "
        "AMX/AVX512-BF16 CPUs), else float32 (emulated bf16 autocast is an order of magnitude slower)",
    )
    average_tail: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="share of the last steps whose weights are averaged into the saved model (0 = the last step's)",
    )
    calibration_share: float = Field(
        default=0.2,
        ge=0,
        lt=1,
        description="share of the split's questions kept out of training (a fixed hash of their ids), so that "
        "`ragc calibrate-abstention` fits the answerability model on questions the reranker never saw",
    )
    domain_neighbours: int = Field(
        default=5,
        gt=0,
        description="a question's closeness to the reranker's domain: its mean cosine to this many "
        "nearest training questions",
    )
    domain_coverage: float = Field(
        default=0.98,
        gt=0,
        le=1,
        description="share of the held-out questions (calibration_share) whose closeness the domain's threshold "
        "admits: the in-domain questions reranked",
    )
    seed: int = 13
    gpus: float = Field(default=1.0, ge=0, description="GPUs of the Ray task when the cluster has any")
