"""The package's shape: each top-level folder is one layer, there are no import cycles, and lower layers never import higher ones.

Every import counts: module-level and lazy ones inside functions, and the package ``__init__``
files that importing ``a.b.c`` runs (``a.b`` first), since a cycle through an ``__init__`` breaks
at import time just the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.packages import write_package

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "qa_system"

# Each top-level folder of the package is one layer of the data flow, which goes up this table: a
# module may import its own layer and those below it. Files at the package root are the base
# (layer 0); the package's own __init__ (the lazy public API) is the top layer. No file has a layer
# of its own: a module's folder alone says where it stands.
FOLDER_LAYERS = {
    "metrics": 1,  # pure functions (SQuAD EM / F1, ranking, calibration), imported by anyone
    "sources": 2,  # readers of documents and labels
    "stores": 3,  # document stores, saved indexes and their manifests
    "ingestion": 4,  # documents -> passages -> embedded -> a named collection
    "retrieval": 5,
    "reading": 5,
    "generation": 5,  # pipeline components
    "pipelines": 6,  # Haystack pipelines of those components
    "evaluation": 7,
    "training": 7,
    "tuning": 7,  # what runs the pipelines and components over labelled data
    "serving": 8,  # what the doors share: the service, the REST API, the page's server
    "bench": 9,  # every benchmark (the API's and the page's start them)
    "cli": 10,  # the command line
}
ROOT_LAYER = 0  # a file at the package root
TOP_LAYER = max(FOLDER_LAYERS.values()) + 1  # the package's own __init__


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at ``root``."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, implicit_parents: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (lazy imports included).

    ``from pkg import name`` depends on ``pkg.name`` when that is a module, else on ``pkg``.
    With ``implicit_parents``, importing ``a.b.c`` also depends on ``a.b`` and ``a`` (their
    ``__init__`` runs first), except on the importer's own ancestors, already being imported.
    """
    modules = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        edges = set()
        for target in targets:
            while target and target not in modules:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            edges.add(target)
            if implicit_parents:
                edges.update(parent for parent in _ancestors(target) if parent in modules)
        graph[name] = {t for t in edges if t != name and t not in _ancestors(name)}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def layer(module: str, root: Path = PACKAGE_ROOT) -> int:
    """The layer of ``module`` (a dotted name in the package at ``root``), from its top-level folder alone."""
    parts = module.split(".")
    if len(parts) == 1:
        return TOP_LAYER
    if not (root / parts[1]).is_dir():
        return ROOT_LAYER
    if parts[1] not in FOLDER_LAYERS:
        raise LookupError(f"{module} is in the folder {parts[1]}/, which has no layer: add it to FOLDER_LAYERS")
    return FOLDER_LAYERS[parts[1]]


def unplaced_modules(root: Path) -> list[str]:
    """The modules whose folder has no layer."""
    unplaced = []
    for module in sorted(module_files(root)):
        try:
            layer(module, root)
        except LookupError as error:
            unplaced.append(str(error))
    return unplaced


def upward_imports(root: Path) -> list[str]:
    """Every import of a module by one of a lower layer."""
    return sorted(
        f"{module} (layer {layer(module, root)}) imports {target} (layer {layer(target, root)})"
        for module, targets in import_graph(root, implicit_parents=False).items()
        for target in targets
        if layer(target, root) > layer(module, root)
    )


def test_qa_system_has_no_import_cycles():
    assert find_cycles(import_graph(PACKAGE_ROOT)) == []


def test_every_module_is_in_a_layered_folder():
    assert unplaced_modules(PACKAGE_ROOT) == []


def test_every_layered_folder_exists():
    folders = {path.parent.name for path in PACKAGE_ROOT.glob("*/__init__.py")}
    assert sorted(set(FOLDER_LAYERS) - folders) == []


def test_lower_layers_never_import_higher_ones():
    assert upward_imports(PACKAGE_ROOT) == []


def test_package_inits_hold_no_logic():
    """``__init__`` files re-export: docstring, imports, ``__all__`` and the lazy ``__getattr__`` of the public API."""
    for name, path in module_files(PACKAGE_ROOT).items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            allowed = isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)) or (
                isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)
            )
            if name == "qa_system":  # the lazy public API: a name -> module table, __getattr__, __dir__, its typing imports
                allowed = (
                    allowed
                    or isinstance(node, ast.FunctionDef)
                    and node.name in ("__getattr__", "__dir__")
                    or _typing_imports(node) is not None
                )
            assert allowed, f"{path} line {node.lineno}: logic in a package __init__"


def _typing_imports(node: ast.stmt) -> set[tuple[str, str]] | None:
    """(module, name) of each name an ``if TYPE_CHECKING:`` block of imports re-exports; None for any other statement."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" and not node.orelse):
        return None
    if not all(isinstance(statement, ast.ImportFrom) for statement in node.body):
        return None
    return {(statement.module, alias.name) for statement in node.body for alias in statement.names if alias.asname == alias.name}


def test_type_checkers_see_the_whole_public_api():
    """The public API is imported lazily (``_EXPORTS``); type checkers and editors read it from the ``TYPE_CHECKING``
    imports, each re-exported as ``name as name``, which must name the same things from the same modules."""
    import qa_system

    tree = ast.parse((PACKAGE_ROOT / "__init__.py").read_text(encoding="utf-8"))
    [typed] = [found for node in tree.body if (found := _typing_imports(node)) is not None]
    assert typed == {(module, name) for name, module in qa_system._EXPORTS.items()}
    assert set(qa_system.__all__) <= set(dir(qa_system))  # tab completion lists them before their first use
    assert (PACKAGE_ROOT / "py.typed").is_file()


# ----------------------------------------------------------------------------- the checker itself


def test_checker_finds_a_cycle_through_a_lazy_import(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import a  # lazy, still a cycle\n    return a\n",
            "pkg/c.py": "import os\n",
        },
    )
    assert find_cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_checker_finds_a_cycle_through_a_package_init(tmp_path):
    # pkg.x.worker imports pkg.y.metrics, which runs pkg/y/__init__, which imports pkg.y.runner,
    # which imports pkg.x (its __init__ re-exports worker): a cycle no single import line shows.
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/x/__init__.py": "from pkg.x.worker import work\n",
            "pkg/x/worker.py": "from pkg.y.metrics import score\n\ndef work():\n    return score\n",
            "pkg/y/__init__.py": "from pkg.y.runner import run\n",
            "pkg/y/metrics.py": "score = 1\n",
            "pkg/y/runner.py": "from pkg.x import work\nrun = work\n",
        },
    )
    cycles = find_cycles(import_graph(package))
    assert len(cycles) == 1 and {"pkg.x", "pkg.x.worker", "pkg.y", "pkg.y.runner"} <= set(cycles[0])
    assert find_cycles(import_graph(package, implicit_parents=False)) == []


def test_checker_passes_an_acyclic_package(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.top import main\n",
            "pkg/low.py": "VALUE = 1\n",
            "pkg/mid/__init__.py": "from pkg.mid.core import helper\n",
            "pkg/mid/core.py": "from pkg.low import VALUE\n\ndef helper():\n    return VALUE\n",
            "pkg/mid/extra.py": "from . import core\nfrom .core import helper\n",
            "pkg/top.py": "from pkg.mid import helper\n\ndef main():\n    from pkg.mid import extra\n    return helper, extra\n",
        },
    )
    graph = import_graph(package)
    assert find_cycles(graph) == []
    assert graph["pkg.mid.extra"] == {"pkg.mid.core"}  # relative imports resolved; own parent not an edge
    assert graph["pkg.top"] == {"pkg.mid", "pkg.mid.extra"}


def test_checker_finds_upward_imports_and_unplaced_modules(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.cli import main\n",
            "pkg/base.py": "VALUE = 1\n",
            "pkg/metrics/__init__.py": "",
            "pkg/metrics/score.py": "from pkg.base import VALUE\n\ndef score():\n    from pkg.cli import main  # lazy, still upward\n    return VALUE, main\n",
            "pkg/cli/__init__.py": "from pkg.metrics.score import score\n\ndef main():\n    return score\n",
            "pkg/elsewhere/__init__.py": "",
            "pkg/elsewhere/thing.py": "import os\n",
        },
    )
    assert upward_imports(package) == ["pkg.metrics.score (layer 1) imports pkg.cli (layer 10)"]
    assert unplaced_modules(package) == [
        "pkg.elsewhere is in the folder elsewhere/, which has no layer: add it to FOLDER_LAYERS",
        "pkg.elsewhere.thing is in the folder elsewhere/, which has no layer: add it to FOLDER_LAYERS",
    ]


@pytest.mark.parametrize(
    "module, expected",
    [
        ("qa_system.config", ROOT_LAYER),
        ("qa_system.metrics.squad", 1),
        ("qa_system.retrieval.bm25", 5),
        ("qa_system.serving.api.app", 8),  # a sub-package takes its top-level folder's layer
        ("qa_system.cli.main", 10),
        ("qa_system", TOP_LAYER),
    ],
)
def test_layers_come_from_the_top_level_folder(module, expected):
    assert layer(module) == expected
