"""README's "Layout" block is what ``scripts/readme_tree.py`` prints from the code, so it cannot drift."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def readme_tree():
    spec = importlib.util.spec_from_file_location("readme_tree", REPO_ROOT / "scripts" / "readme_tree.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_layout_is_the_generated_tree():
    tree = readme_tree()
    block = tree.readme_block((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert block is not None, f"README.md has no line {tree.MARKER!r} followed by a ``` block"
    assert block == tree.tree(), "README's layout differs from the code: run `python scripts/readme_tree.py --write`"


def test_every_module_of_the_library_is_in_the_tree():
    tree = readme_tree()
    listed = tree.tree()
    for path in (REPO_ROOT / "qa_system").rglob("*.py"):
        name = path.parent.name + "/" if path.name == "__init__.py" else path.name
        assert f" {name} " in listed or listed.startswith(name), f"{path} is missing from the tree"
