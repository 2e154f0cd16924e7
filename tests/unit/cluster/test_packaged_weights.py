from __future__ import annotations

import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cluster.packaged_weights import SplitArchive, SplitArchiveError, assemble, assembled_model_dir


def split_zip(tmp_path: Path, files: dict[str, bytes], parts: int) -> list[Path]:
    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w") as bundle:
        for name, data in files.items():
            bundle.writestr(name, data)
    data = whole.read_bytes()
    size = -(-len(data) // parts)
    out = []
    for i in range(parts):
        part = tmp_path / f"model.zip.{i + 1:03d}"
        part.write_bytes(data[i * size : (i + 1) * size])
        out.append(part)
    return out


FILES = {"model/config.json": b'{"d": 768}', "model/weights.bin": bytes(range(256)) * 400}


def test_the_parts_are_joined_and_unpacked_once(tmp_path: Path) -> None:
    parts = split_zip(tmp_path, FILES, 3)
    model = assemble(parts, "model", tmp_path / "cache" / "model-1")
    assert model == tmp_path / "cache" / "model-1" / "model"
    assert (model / "weights.bin").read_bytes() == FILES["model/weights.bin"]
    for part in parts:
        part.unlink()  # a second call reads nothing
    assert assemble(parts, "model", tmp_path / "cache" / "model-1") == model
    left = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert left == [".model-1.lock", "model-1"], "no work folder left behind"


def test_a_damaged_part_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    parts = split_zip(tmp_path, FILES, 3)
    damaged = bytearray(parts[1].read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    parts[1].write_bytes(bytes(damaged))
    with pytest.raises(SplitArchiveError, match="valid zip"):
        assemble(parts, "model", tmp_path / "cache" / "model-1")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".model-1.lock"]


def test_a_missing_part_is_refused(tmp_path: Path) -> None:
    parts = split_zip(tmp_path, FILES, 3)
    with pytest.raises(SplitArchiveError, match="valid zip"):
        assemble(parts[:2], "model", tmp_path / "cache" / "model-1")


def test_an_archive_without_the_folder_is_refused(tmp_path: Path) -> None:
    parts = split_zip(tmp_path, {"other/config.json": b"{}"}, 2)
    with pytest.raises(SplitArchiveError, match="no model/ folder"):
        assemble(parts, "model", tmp_path / "cache" / "model-1")


def test_an_uninstalled_package_is_named(tmp_path: Path) -> None:
    archive = SplitArchive("ragc-no-such-weights-part-", 2, "model")
    with pytest.raises(SplitArchiveError, match="needs the ragc-no-such-weights-part-001 package"):
        assembled_model_dir(archive, tmp_path)


def test_concurrent_callers_unpack_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = split_zip(tmp_path, FILES, 3)
    unpacked = []
    extract = zipfile.ZipFile.extractall

    def counted(self: zipfile.ZipFile, path: Path) -> None:
        unpacked.append(path)
        time.sleep(0.2)  # long enough that every caller arrives while the first is unpacking
        extract(self, path)

    monkeypatch.setattr(zipfile.ZipFile, "extractall", counted)
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: assemble(parts, "model", tmp_path / "cache" / "model-1"), range(4)))
    assert len(unpacked) == 1 and set(models) == {tmp_path / "cache" / "model-1" / "model"}
