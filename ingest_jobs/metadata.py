"""Document metadata from where authors put it: Markdown front matter, HTML `<meta>`, PDF document info, and
an optional sidecar `<file>.meta.json` (which wins). Declared fields are type-checked; a document whose
metadata has the wrong type fails with the reason, and nothing else is lost."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from cluster.labels import check_labels

SIDECAR_SUFFIX = ".meta.json"
YEAR_MAX = 9999
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
# <meta name=...> spellings of the same field (Dublin Core, Highwire/Google Scholar, Open Graph)
HTML_NAMES = {
    "author": "author",
    "dc.creator": "author",
    "citation_author": "author",
    "keywords": "tags",
    "year": "year",
    "date": "date",
    "dc.date": "date",
    "dcterms.date": "date",
    "citation_publication_date": "date",
    "article:published_time": "date",
}


class MetadataError(ValueError):
    """Metadata a document declares with the wrong type; the message names the field."""


class DocumentMetadata(BaseModel):
    """The fields a document may declare. Unknown keys are ignored. `year` is what the `year` filter reads:
    declared, or the year of `date`."""

    model_config = ConfigDict(extra="ignore", strict=False)

    title: str | None = Field(default=None, min_length=1)
    author: str | None = None
    year: int | None = Field(default=None, ge=0, le=YEAR_MAX)
    date: dt.date | None = None
    tags: list[str] = Field(default_factory=list)
    access: list[str] = Field(
        default_factory=list, description="the groups whose keys may read it (none: every key of its tenant)"
    )

    @field_validator("year", mode="before")
    @classmethod
    def _whole_year(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be a whole year")
        return value

    @field_validator("date", mode="before")
    @classmethod
    def _date_or_timestamp(cls, value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.date()
        if isinstance(value, str) and "T" in value:  # an ISO timestamp (Open Graph): its date
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).date()
        return value

    @field_validator("tags", "access", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("tags", "access")
    @classmethod
    def _labels(cls, labels: list[str], info: ValidationInfo) -> list[str]:
        """What the `tags` filter and the access check match exactly (cluster/labels.py)."""
        return check_labels(labels, str(info.field_name))

    @field_validator("author")
    @classmethod
    def _stripped_author(cls, author: str | None) -> str | None:
        return author.strip() or None if author is not None else None

    @property
    def effective_year(self) -> int | None:
        if self.year is not None:
            return self.year
        return self.date.year if self.date else None


def validate(raw: dict[str, Any], where: str) -> DocumentMetadata:
    try:
        return DocumentMetadata.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])} {e['msg'].lower()} (got {e['input']!r})" for e in exc.errors()
        )
        raise MetadataError(f"metadata in {where}: {problems}") from exc


def merged(*layers: DocumentMetadata) -> DocumentMetadata:
    """Later layers win, field by field, where they declare a value."""
    values: dict[str, Any] = {}
    for layer in layers:
        values |= layer.model_dump(exclude_unset=True, exclude_defaults=True)
    return DocumentMetadata.model_validate(values)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(front matter, body) of a Markdown text; a front matter that is not a YAML mapping is an error."""
    match = FRONT_MATTER.match(text)
    if not match:
        return {}, text
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise MetadataError(f"front matter is not valid YAML: {exc}") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise MetadataError("front matter must be a mapping of fields")
    return loaded, text[match.end() :]


def html_meta(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """`(name or property, content)` of a page's `<meta>` tags, mapped to our fields (first one wins)."""
    found: dict[str, Any] = {}
    for name, content in pairs:
        field = HTML_NAMES.get(name.strip().lower())
        if field and content.strip() and field not in found:
            found[field] = content.strip()
    return found


def pdf_meta(info: Any) -> dict[str, Any]:
    """A pypdf `DocumentInformation`: title, author, creation date (or its raw `D:YYYY...` string), keywords."""
    if info is None:
        return {}
    found: dict[str, Any] = {}
    if info.title:
        found["title"] = str(info.title)
    if info.author:
        found["author"] = str(info.author)
    try:
        created = info.creation_date
    except ValueError:  # a malformed date string in the file: its year digits, when they are there
        created = None
        raw = str(info.get("/CreationDate", ""))
        if re.match(r"D:\d{4}", raw):
            found["year"] = int(raw[2:6])
    if created:
        found["date"] = created.date()
    keywords = info.get("/Keywords")
    if keywords:
        found["tags"] = str(keywords)
    return found


def read_sidecar(data: bytes, where: str) -> DocumentMetadata:
    try:
        loaded = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise MetadataError(f"{where} must be a JSON object of fields")
    return validate(loaded, where)
