"""`make setup` installs with uv, which reads no pip configuration: scripts/uv_pip_args.py carries it over."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "uv_pip_args.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("uv_pip_args", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pip_settings_become_uv_flags_with_the_environment_over_the_files() -> None:
    script = load()
    listed = [
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/opt/wheels'",
        "install.find-links='/srv/wheels'",
        ":env:.find-links='/env/wheels'",
        ":env:.default-timeout='180'",
        "freeze.index-url='https://elsewhere.example/simple'",
    ]
    args = script.uv_args(script.parse(listed))
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(zip(args[2::2], args[3::2], strict=True))
    assert sorted(pairs) == [
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"),
        ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--find-links", "/env/wheels"),
    ]


def test_an_unconfigured_pip_gives_only_pips_index_strategy() -> None:
    script = load()
    assert script.uv_args(script.parse([])) == ["--index-strategy", "unsafe-best-match"]


def test_the_script_prints_what_this_machines_pip_would_use() -> None:
    printed = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True).stdout
    args = shlex.split(printed)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"] and len(args) % 2 == 0
