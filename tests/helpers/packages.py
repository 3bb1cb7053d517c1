"""A throwaway Python package written to a folder, for checks that read a package's modules."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_package(root: Path, files: dict[str, str]) -> Path:
    """``files`` (relative path -> dedented text) written under ``root``; the package ``root/pkg``."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root / "pkg"
