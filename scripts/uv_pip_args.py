"""Print the `uv pip install` arguments that carry this machine's pip settings over.

uv reads no pip.conf and no PIP_* variable, so on a machine whose pip is configured (a wheel folder, a local
index mirror, a constraints file) `make setup` would resolve against another set of packages than pip does.
This reads what pip itself would use (`pip config list`: its files and its environment) and prints the same
settings as uv's flags, shell-quoted, on one line. Standard library only: it runs before the venv exists."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterable

# pip's option -> uv's flag; every one of them takes a whitespace-separated list in pip's configuration
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
# sections whose settings `pip install` applies (the environment's show as ":env:")
SECTIONS = (":env:", "global", "install")


def parse(lines: Iterable[str]) -> dict[str, list[str]]:
    """`pip config list` lines (`section.option='value'`) -> option -> values, later sections overriding
    earlier ones as pip does (the environment over the files, `install` over `global`)."""
    by_section: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        name, sep, quoted = line.strip().partition("=")
        section, dot, option = name.rpartition(".")
        if not (sep and dot) or section not in SECTIONS or option not in FLAGS:
            continue
        value = shlex.split(quoted)
        by_section[(section, option)] = " ".join(value).split()
    settings: dict[str, list[str]] = {}
    for section in ("global", "install", ":env:"):
        for (found, option), values in by_section.items():
            if found == section:
                settings[option] = values
    return settings


def uv_args(settings: dict[str, list[str]]) -> list[str]:
    # pip takes each package's best version across every index; uv's default stops at the first index that
    # has the package at all
    args = ["--index-strategy", "unsafe-best-match"]
    for option, values in settings.items():
        for value in values:
            args += [FLAGS[option], value]
    return args


def main() -> int:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    print(shlex.join(uv_args(parse(listed.splitlines()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
