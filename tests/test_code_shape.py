"""Code that reads at once: no function longer than ``MAX_FUNCTION_LINES``, and a docstring on every public class and function.

A function's length is the number of lines on which one of its statements starts: its ``def``, its
docstring, every statement of its body and of the functions nested in it (decorators left out). A call the
formatter wraps over several lines is one statement, so how the formatter breaks lines never changes it. Public means a name without a leading underscore, at module
level or as a method (or class) of a public class: nested functions are the enclosing function's
own business and need no docstring.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from helpers.packages import write_package

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "qa_system"
MAX_FUNCTION_LINES = 80

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def modules(root: Path) -> dict[str, ast.Module]:
    """Dotted module name -> parsed source, for every module of the package at ``root``."""
    parsed = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        parsed[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return parsed


def statement_lines(function: ast.AST) -> int:
    """The lines on which a statement of ``function`` starts, its own ``def`` included."""
    return len({node.lineno for node in ast.walk(function) if isinstance(node, ast.stmt)})


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Qualified name -> lines, of every function or method (nested ones too) longer than ``limit`` lines."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}.{child.name}" if isinstance(child, (*FUNCTIONS, ast.ClassDef)) else prefix
            if isinstance(child, FUNCTIONS) and (length := statement_lines(child)) > limit:
                found[name] = length
            visit(child, name)

    for module, tree in modules(root).items():
        visit(tree, module)
    return found


def undocumented(root: Path) -> list[str]:
    """Qualified names of the public classes, functions and methods without a docstring."""
    missing = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (*FUNCTIONS, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    missing.append(f"{prefix}.{node.name}")
                if isinstance(node, ast.ClassDef):  # its methods and classes; a function's inner ones are its own
                    visit(node.body, f"{prefix}.{node.name}")

    for module, tree in modules(root).items():
        visit(tree.body, module)
    return missing


def test_no_function_is_longer_than_80_lines():
    too_long = {name: lines for name, lines in long_functions(PACKAGE_ROOT).items()}
    assert too_long == {}, f"split these into named helpers of at most {MAX_FUNCTION_LINES} lines: {too_long}"


def test_every_public_class_and_function_has_a_docstring():
    assert undocumented(PACKAGE_ROOT) == []


# ----------------------------------------------------------------------------- the checker itself


def test_checker_counts_from_the_def_line_with_the_docstring_and_nested_functions(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(77))
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            # def + docstring + 77 statements + return = 80 lines; the decorator is not counted.
            "pkg/fits.py": f'import functools\n\n@functools.cache\ndef fits():\n    """Doc."""\n{body}\n    return 0\n',
            # 81 lines, inside a method of a class.
            "pkg/sub/long.py": f'class A:\n    """Doc."""\n\n    def long(self):\n        """Doc."""\n{textwrap.indent(body, "    ")}\n        x = 1\n        return x\n',
            # A nested function that is long makes its enclosing one long too: both are named.
            "pkg/nested.py": f'def outer():\n    """Doc."""\n    def inner():\n{textwrap.indent(body, "    ")}\n        x = 1\n        y = 2\n        return x\n    return inner\n',
        },
    )
    assert long_functions(package) == {"pkg.sub.long.A.long": 81, "pkg.nested.outer": 84, "pkg.nested.outer.inner": 81}


def test_a_call_wrapped_over_many_lines_counts_as_one_statement(tmp_path):
    arguments = "\n".join(f"        {i}," for i in range(100))
    package = write_package(
        tmp_path, {"pkg/__init__.py": "", "pkg/wrapped.py": f'def wrapped():\n    """Doc."""\n    return max(\n{arguments}\n    )\n'}
    )
    assert long_functions(package) == {} and long_functions(package, limit=2) == {"pkg.wrapped.wrapped": 3}


def test_checker_finds_public_names_without_a_docstring(tmp_path):
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "def api():\n    pass\n",
            "pkg/mod.py": '''
            from dataclasses import dataclass

            @dataclass
            class Record:
                text: str

                @property
                def size(self):
                    return len(self.text)

                def _private(self):
                    pass

            class Documented:
                """Doc."""

                def method(self):
                    def helper():  # nested: the method's own business
                        pass
                    return helper

                class Inner:
                    pass

            class _Hidden:
                def method(self):
                    pass

            def _helper():
                pass

            async def fetch():
                """Doc."""
        ''',
        },
    )
    assert undocumented(package) == [
        "pkg.api",
        "pkg.mod.Record",
        "pkg.mod.Record.size",
        "pkg.mod.Documented.method",
        "pkg.mod.Documented.Inner",
    ]
