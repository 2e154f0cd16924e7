"""Cross-encoder fine-tuning loop: plain torch over sentence-transformers' `CrossEncoder`, no Ray, no
Milvus, so the same code runs in a Ray GPU task, in-process on CPU, or on a bare GPU box.

Each training group is one (query, positive) with its hard negatives. `listwise` is a softmax
cross-entropy over the group (the positive must outrank its own negatives); `bce` scores pairs alone."""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loop itself needs only torch and sentence-transformers (it also runs on a bare GPU box)
    from cluster.config import RerankTrainingConfig

# how the progress line that starts the training begins: the corpus is embedded and mined by then, and what
# follows needs only the CPU (the quality gate starts its answer run on it: tests/eval/test_quality_gate.py)
TRAINING_STARTS = "training on "


@dataclass(frozen=True)
class TrainingGroup:
    query: str
    positive: str
    negatives: tuple[str, ...]


def query_groups(
    query: str,
    candidates: list[tuple[str, str]],
    relevant: set[str],
    negatives: int,
    rng: random.Random,
    missing_positives: Callable[[list[str]], dict[str, str]] | None = None,
) -> list[TrainingGroup]:
    """One group per relevant document: its best-ranked candidate text (else the text `missing_positives`
    gives for it), with `negatives` sampled from the candidates that are not relevant.

    `candidates`: (doc_id, text) in retrieval order. A query with too few negatives gives no group."""
    best: dict[str, str] = {}
    pool: list[str] = []
    for doc_id, text in candidates:
        if doc_id in relevant:
            best.setdefault(doc_id, text)
        else:
            pool.append(text)
    if len(pool) < negatives:
        return []
    if missing_positives is not None:
        best |= {d: t for d, t in missing_positives(sorted(relevant - set(best))).items() if d not in best}
    return [TrainingGroup(query, text, tuple(rng.sample(pool, negatives))) for text in best.values()]


@dataclass
class TrainingOutcome:
    steps: int = 0
    pairs: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)  # mean loss per tenth of training
    precision: str = "float32"
    threads: int = 1
    wait_policy: str = "default"  # OMP_WAIT_POLICY: how the threads wait for each other

    @property
    def pairs_per_s(self) -> float:
        return self.pairs / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "pairs": self.pairs,
            "seconds": round(self.seconds, 1),
            "pairs_per_s": round(self.pairs_per_s, 2),
            "precision": self.precision,
            "threads": self.threads,
            "wait_policy": self.wait_policy,
            "loss_by_tenth": [round(x, 4) for x in self.losses],
        }


def train_cross_encoder(
    model_path: str,
    groups: list[TrainingGroup],
    recipe: RerankTrainingConfig,
    device: str,
    progress: Callable[[str], None] | None = None,
    autocast_bf16: bool = False,
) -> tuple[Any, TrainingOutcome]:
    """Returns the trained `CrossEncoder` and what the run did; `progress` hears each tenth's loss.

    `autocast_bf16`: forward passes under bf16 autocast (fp32 master weights); only where bf16 is native."""
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    encoder = CrossEncoder(  # fp32 master weights whatever the checkpoint holds; bf16 only under autocast
        model_path, num_labels=1, max_length=recipe.max_length, device=device, model_kwargs={"dtype": torch.float32}
    )
    model, tokenizer = encoder.model, encoder.tokenizer
    freeze_lower(model, recipe.frozen_layers)
    set_dropout(model, recipe.dropout)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    steps_per_epoch = math.ceil(len(groups) / recipe.groups_per_step)
    total = steps_per_epoch * recipe.epochs
    # fused: one kernel updates every parameter (3-5% more pairs/s than the per-tensor default on 2 CPU cores)
    optimizer = torch.optim.AdamW(trainable, lr=recipe.learning_rate, weight_decay=0.01, fused=True)
    warmup = max(1, int(total * recipe.warmup_ratio))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
    )
    outcome = TrainingOutcome(
        precision="bfloat16" if autocast_bf16 else "float32",
        threads=torch.get_num_threads(),
        wait_policy=os.environ.get("OMP_WAIT_POLICY", "default"),
    )
    if progress is not None:
        progress(
            f"{TRAINING_STARTS}{device}, {outcome.precision}, {outcome.threads} torch threads waiting "
            f"{outcome.wait_policy}, {total} steps"
        )
    averaged = TailAverage(first_step=total - int(total * recipe.average_tail) + 1)  # tail 0: never copies
    window: list[float] = []
    started = time.perf_counter()
    for _ in range(recipe.epochs):
        order = groups[:]
        rng.shuffle(order)
        for start in range(0, len(order), recipe.groups_per_step):
            batch = order[start : start + recipe.groups_per_step]
            loss = _group_loss(model, tokenizer, batch, recipe, device, autocast_bf16)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            outcome.steps += 1
            averaged.add(model, outcome.steps)
            outcome.pairs += sum(1 + len(g.negatives) for g in batch)
            window.append(float(loss.detach()))
            if len(window) >= max(1, total // 10):
                outcome.losses.append(sum(window) / len(window))
                window = []
                if progress is not None:
                    rate = outcome.pairs / (time.perf_counter() - started)
                    progress(f"step {outcome.steps}/{total} loss {outcome.losses[-1]:.4f} ({rate:.1f} pairs/s)")
    if window:
        outcome.losses.append(sum(window) / len(window))
    averaged.load_into(model)
    outcome.seconds = time.perf_counter() - started
    model.eval()
    return encoder, outcome


def freeze_lower(model: Any, frozen_layers: int) -> None:
    """Keep the token embeddings and the `frozen_layers` lowest transformer layers as pretrained (-1: none).

    Autograd then stops below the lowest trainable layer, and AdamW skips the embedding matrix, which holds
    about half of MiniLM-L6's weights."""
    if frozen_layers < 0:
        return
    encoder = model.base_model
    layers = encoder.encoder.layer
    if frozen_layers > len(layers):
        raise ValueError(f"frozen_layers {frozen_layers}: the model has {len(layers)} transformer layers")
    for module in (encoder.embeddings, *layers[:frozen_layers]):
        for parameter in module.parameters():
            parameter.requires_grad_(False)


def set_dropout(model: Any, probability: float | None) -> None:
    """Every dropout layer at `probability` while training (None: as the checkpoint has them). Attention reads
    its layer's probability when it runs, so 0 there also lets it take the fused kernel."""
    import torch

    if probability is None:
        return
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = probability


class TailAverage:
    """Uniform average of the weights over the steps from `first_step` on: a small-batch, high-learning-rate
    run ends wherever its last few batches pushed it; the average of its tail is steadier."""

    def __init__(self, first_step: int) -> None:
        self.first_step = first_step
        self.count = 0
        self.sums: dict[str, Any] = {}

    def add(self, model: Any, step: int) -> None:
        if step < self.first_step:
            return
        for name, value in model.state_dict().items():
            if value.is_floating_point():
                if name in self.sums:
                    self.sums[name] += value.detach()
                else:
                    self.sums[name] = value.detach().clone()
        self.count += 1

    def load_into(self, model: Any) -> None:
        if self.count > 1:
            state = model.state_dict()
            model.load_state_dict(state | {n: s / self.count for n, s in self.sums.items()})


def _group_loss(
    model: Any, tokenizer: Any, batch: list[TrainingGroup], recipe: RerankTrainingConfig, device: str, bf16: bool
) -> Any:
    import torch
    import torch.nn.functional as F

    width = min(len(g.negatives) for g in batch) + 1  # groups of one width per step (negatives are trimmed)
    queries = [g.query for g in batch for _ in range(width)]
    texts = [t for g in batch for t in (g.positive, *g.negatives[: width - 1])]
    features = tokenizer(
        queries, texts, padding=True, truncation="longest_first", max_length=recipe.max_length, return_tensors="pt"
    ).to(device)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(**features).logits.view(len(batch), width).float()
    if recipe.loss == "listwise":
        return F.cross_entropy(logits, torch.zeros(len(batch), dtype=torch.long, device=logits.device))
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    pos_weight = torch.tensor(float(width - 1), device=logits.device)  # one positive per group
    return F.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight)
