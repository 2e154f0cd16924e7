"""The pinned embedding model and the chunker: recorded with the collection, checked at start-up."""

from __future__ import annotations

import re
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from cluster.config.base import DEFAULT_EMBEDDING_MODEL, PACKAGED_PREFIX, Section

TEMPLATE_FIELD = re.compile(r"\{(\w*)\}")
PASSAGE_FIELDS = {"text", "title", "section", "context"}
# what a packaged embedding model is: the identity its collections record and its vectors' dimension
PACKAGED_EMBEDDERS = {
    "all-minilm-l6-v2": ("sentence-transformers/all-MiniLM-L6-v2", 384),
    "all-mpnet-base-v2": ("sentence-transformers/all-mpnet-base-v2", 768),
}


class EmbeddingConfig(Section):
    model: str = Field(
        default=DEFAULT_EMBEDDING_MODEL,
        description="`packaged:all-MiniLM-L6-v2` or `packaged:all-mpnet-base-v2` (the `mpnet` extra): weights from "
        "registry packages, which bring their own model_id and dim; or a local path, or a model id",
    )
    model_id: str = Field(
        default="sentence-transformers/all-MiniLM-L6-v2",
        description="identity recorded with the collection; serving refuses a collection with another one",
    )
    dim: int = Field(default=384, gt=0)
    batch_size: int = Field(default=32, gt=0, le=4096)
    max_seq_length: int = Field(default=256, gt=0)
    normalize: bool = True
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "int8"] = Field(
        default="auto",
        description="precision; auto = on a CPU bfloat16 where native (AMX/AVX512-BF16), else int8 (dynamic "
        "quantization), each one text per pass so that a vector never depends on its batchmates; on a GPU "
        "float32 (ARCHITECTURE.md, Precision)",
    )
    num_threads: int = Field(default=0, ge=0, description="torch threads per embedding actor; 0 = all CPUs")
    passage_template: str = Field(
        default="{text}",
        description="what the dense arm embeds for a chunk: {text}, {title}, {section}, and {context} (title > "
        "section, the parts present; a template whose context is empty embeds {text} alone). Recorded on the "
        "collection: a change is a `ragc reindex`",
    )

    @model_validator(mode="after")
    def _packaged_identity(self) -> Self:
        """A packaged model brings its own id and dimension: naming it is enough, and naming it with another
        id or dimension is refused rather than recorded on a collection."""
        if not self.model.startswith(PACKAGED_PREFIX):
            return self
        known = PACKAGED_EMBEDDERS.get(self.model[len(PACKAGED_PREFIX) :].lower())
        if known is None:
            return self  # the model registry names the packaged models it knows when it loads one
        model_id, dim = known
        for field, value in (("model_id", model_id), ("dim", dim)):
            if field not in self.model_fields_set:
                object.__setattr__(self, field, value)  # validate_assignment would re-enter this validator
            elif getattr(self, field) != value:
                raise ValueError(f"{self.model} has {field} {value!r}, not {getattr(self, field)!r}")
        return self

    @field_validator("passage_template")
    @classmethod
    def _known_fields(cls, template: str) -> str:
        fields = set(TEMPLATE_FIELD.findall(template))
        if "text" not in fields or not fields <= PASSAGE_FIELDS:
            raise ValueError(f"passage_template must use {{text}} and only {sorted(PASSAGE_FIELDS)}: {template!r}")
        return template

    def passage_text(self, title: str, section: str, text: str) -> str:
        """The text the dense arm embeds for a chunk."""
        context = " > ".join(part for part in (title, section) if part)
        if self.passage_template == "{text}" or ("{context}" in self.passage_template and not context):
            return text
        return self.passage_template.format(title=title, section=section, context=context, text=text)


class ChunkingConfig(Section):
    chunk_size: int = Field(default=256, ge=32, le=8192, description="tokens per chunk")
    chunk_overlap: int = Field(default=32, ge=0, description="tokens shared by neighbouring chunks")
    markdown_headers: bool = Field(default=True, description="split markdown on headers first")
    sentence_window: int = Field(
        default=0,
        ge=0,
        le=8,
        description="0: chunks of chunk_size tokens. N > 0: sentence-window retrieval, one vector per sentence "
        "(the dense arm embeds the sentence), returning the sentence with N sentences each side as the passage "
        "(what BM25 indexes and the answer reads); chunk_size and chunk_overlap are then unused",
    )

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_size", 0)
        if size and v >= size:
            raise ValueError(f"chunk_overlap ({v}) must be smaller than chunk_size ({size})")
        return v

    def fingerprint(self) -> str:
        if self.sentence_window:
            return f"window:{self.sentence_window}:md={int(self.markdown_headers)}"
        return f"sentence:{self.chunk_size}:{self.chunk_overlap}:md={int(self.markdown_headers)}"
