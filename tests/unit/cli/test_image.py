"""The container image holds the folders the Dockerfile copies; every `ragc` command must import from them alone."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROJECT_PACKAGES = {"cluster", "serve", "ingest_jobs", "evals", "training", "local", "bench", "cli", "loadtests"}

# Run in a fresh interpreter that sees only the copied folders: the editable install's finder (which maps every
# project package to this checkout) and the checkout itself are taken off the import path first.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
editable = lambda obj: "__editable__" in (getattr(obj, "__module__", None) or "")
sys.meta_path = [f for f in sys.meta_path if not editable(f)]
sys.path_hooks = [h for h in sys.path_hooks if not editable(h)]
sys.path_importer_cache.clear()
sys.path = [p for p in sys.path if p not in ("", {root!r}) and "__editable__" not in p]
sys.path.insert(0, {image!r})
failed = {{}}
for package in {packages!r}:
    root = importlib.import_module(package)
    assert root.__file__.startswith({image!r}), root.__file__
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed[info.name] = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps(failed))
"""


def copied_packages() -> list[str]:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    return [m for m in re.findall(r"^COPY (\w+) \./\1$", text, flags=re.MULTILINE) if m in PROJECT_PACKAGES]


def project_imports(folder: Path) -> dict[str, set[str]]:
    """Every project package a module imports, lazily imported ones (inside functions) included."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] in PROJECT_PACKAGES:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(folder.parent)))
    return found


def test_the_image_copies_every_package_the_cli_reaches() -> None:
    copied = set(copied_packages())
    assert "cli" in copied
    reached: dict[str, set[str]] = {}
    for package in copied:
        for name, users in project_imports(ROOT / package).items():
            reached.setdefault(name, set()).update(users)
    missing = {name: sorted(users) for name, users in reached.items() if name not in copied}
    assert not missing, f"imported but not copied into the image: {missing}"


def test_every_module_imports_from_the_image_folders_alone(tmp_path: Path) -> None:
    packages = copied_packages()
    for package in packages:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    code = IMPORT_ALL.format(root=str(ROOT), image=str(tmp_path), packages=packages)
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failed, failed
