"""The pinned embedding model and the chunker: recorded with the collection, checked at start-up."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from cluster.config.base import DEFAULT_EMBEDDING_MODEL, Section

TEMPLATE_FIELD = re.compile(r"\{(\w*)\}")
PASSAGE_FIELDS = {"text", "title", "section", "context"}


class EmbeddingConfig(Section):
    model: str = Field(
        default=DEFAULT_EMBEDDING_MODEL,
        description="`packaged:<name>` (weights from a registry package), a local path, or a model id",
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

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_size", 0)
        if size and v >= size:
            raise ValueError(f"chunk_overlap ({v}) must be smaller than chunk_size ({size})")
        return v

    def fingerprint(self) -> str:
        return f"sentence:{self.chunk_size}:{self.chunk_overlap}:md={int(self.markdown_headers)}"
