"""Where a source lives: a local folder (or file), or an object store URL read through fsspec (`s3://`, and
whatever else fsspec has a filesystem for: `gs://`, `az://`, `memory://`...).

Credentials are never in the config: fsspec's filesystems take them from their standard environment
(`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_ENDPOINT_URL` for S3, the chart's `existingSecret`), in the
driver that lists and in the Ray workers that read bodies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")


def remote_scheme(location: str) -> str | None:
    """The scheme of an object-store URL; None for a local path (a `file://` URL is local too)."""
    match = URL_RE.match(location)
    if match is None or match["scheme"].lower() == "file":
        return None
    return match["scheme"].lower()


def normalized(location: str | Path) -> str:
    """The form a source is recorded under: an absolute local path, or the URL without a trailing slash."""
    text = str(location)
    if remote_scheme(text):
        return text.rstrip("/")
    match = URL_RE.match(text)
    return str(Path(match["rest"] if match else text).resolve())


def base_name(location: str) -> str:
    """The last segment of a path or URL (a bucket's name for `s3://bucket`)."""
    rest = URL_RE.match(location)
    return (rest["rest"] if rest else location).rstrip("/").rsplit("/", 1)[-1]


def filesystem(location: str) -> tuple[Any, str]:
    """An fsspec filesystem and the root path inside it."""
    import fsspec

    return fsspec.core.url_to_fs(location)


def exists(location: str) -> bool:
    if remote_scheme(location):
        fs, root = filesystem(location)
        return bool(fs.exists(root))
    return Path(normalized(location)).exists()


def read_bytes(location: str) -> bytes:
    """A document's body: a local file or one object (one GET)."""
    if remote_scheme(location):
        fs, path = filesystem(location)
        return bytes(fs.cat_file(path))
    return Path(location).read_bytes()
