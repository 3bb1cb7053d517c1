"""README is a short front door, the docs' links resolve, and the layout in docs/architecture.md is what
``scripts/readme_tree.py`` prints from the code, so it cannot drift."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import unquote

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 200
# Markdown links and images: [text](target) and ![alt](target), the target up to a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)


def readme_tree():
    spec = importlib.util.spec_from_file_location("readme_tree", REPO_ROOT / "scripts" / "readme_tree.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relative_links(markdown: str) -> list[str]:
    """The targets of a Markdown text's links that point into the repository (no scheme, no bare anchor), code blocks left out."""
    text = FENCE.sub("", markdown)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I) or target.startswith(("#", "/")):
            continue
        targets.append(unquote(target.split("#", 1)[0]))
    return targets


def test_architecture_layout_is_the_generated_tree():
    tree = readme_tree()
    block = tree.layout_block(tree.LAYOUT_DOC.read_text(encoding="utf-8"))
    assert block is not None, f"{tree.LAYOUT_DOC} has no line {tree.MARKER!r} followed by a ``` block"
    assert block == tree.tree(), "docs/architecture.md's layout differs from the code: run `python scripts/readme_tree.py --write`"


def test_layout_check_fails_when_the_tree_drifts():
    tree = readme_tree()
    text = tree.LAYOUT_DOC.read_text(encoding="utf-8")
    drifted = text.replace("  config.py ", "  settings.py ", 1)
    assert drifted != text, "the layout block lists no qa_system/config.py"
    assert tree.layout_block(drifted) != tree.tree()


def test_every_module_of_the_library_is_in_the_tree():
    tree = readme_tree()
    listed = tree.tree()
    for path in (REPO_ROOT / "qa_system").rglob("*.py"):
        name = path.parent.name + "/" if path.name == "__init__.py" else path.name
        assert f" {name} " in listed or listed.startswith(name), f"{path} is missing from the tree"


def test_readme_is_at_most_200_lines():
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; keep it a front door and move detail into docs/"


def test_relative_links_in_readme_and_docs_point_at_files():
    pages = [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    assert len(pages) > 5, "docs/ holds no Markdown pages"
    broken = []
    for page in pages:
        for target in relative_links(page.read_text(encoding="utf-8")):
            if target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO_ROOT)} -> {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_link_finder_sees_links_and_skips_code():
    text = '[a](docs/x.md) ![b](img.png "t") [c](https://e.org) [d](#here) `[e](no.md)`\n```\n[f](no.md)\n```\n[g](y.md#part)'
    assert relative_links(text) == ["docs/x.md", "img.png", "y.md"]


def test_mkdocs_nav_lists_every_page():
    nav = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w./-]+\.md)\s*$", nav, flags=re.M))
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert pages - listed == set(), f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert listed - pages == set(), f"mkdocs.yml's nav names pages that do not exist: {sorted(listed - pages)}"
