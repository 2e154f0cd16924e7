"""A Python environment for a client whose pins conflict with the service's: a venv holding only the
client's wheels (installed without dependencies), with the service's site-packages after them on the path
for everything else. Built once per pin set under `.ragc/clients/`."""

from __future__ import annotations

import hashlib
import site
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def client_python(requirements: Path) -> Path:
    """The interpreter of the environment for `requirements` (pinned, one per line)."""
    pins = requirements.read_text(encoding="utf-8")
    home = ROOT / ".ragc" / "clients" / f"{requirements.stem}-{hashlib.sha256(pins.encode()).hexdigest()[:12]}"
    python = home / "bin" / "python"
    if (home / ".installed").exists():
        return python
    venv.EnvBuilder(clear=True, with_pip=True).create(home)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(requirements)], check=True, timeout=600
    )
    (own,) = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    # a .pth line is appended to sys.path, after the venv's own site-packages: the client's pins win
    (Path(own) / "service_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    (home / ".installed").write_text(sys.version, encoding="utf-8")
    return python
