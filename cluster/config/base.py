"""The shared pieces of the config tree: strict sections, secret references, the defaults named once."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "RAGC_"


ENV_NESTING = "__"


DEFAULT_STATE_DIR = ".ragc"


DEFAULT_COLLECTION_ALIAS = "ragc_chunks"


PACKAGED_PREFIX = "packaged:"


DEFAULT_EMBEDDING_MODEL = "packaged:all-MiniLM-L6-v2"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SecretRef(Section):
    """A credential named by where it lives, never by its value."""

    env_var: str | None = Field(default=None, description="environment variable holding the secret")
    file: Path | None = Field(default=None, description="file holding the secret (e.g. a mounted k8s Secret)")

    def resolve(self) -> str | None:
        if self.env_var and os.environ.get(self.env_var):
            return os.environ[self.env_var]
        if self.file and self.file.exists():
            return self.file.read_text(encoding="utf-8").strip()
        return None
