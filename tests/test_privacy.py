"""Nothing leaves the machine unless the user asks: Haystack's usage telemetry is off however qa_system is imported,
and the search page's favicon is drawn locally (the API's /docs: test_api.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import os, haystack\n"
    "from haystack.telemetry import _telemetry\n"
    "before = _telemetry.telemetry is not None\n"
    "import qa_system\n"
    "print(before, _telemetry.telemetry is not None, os.environ['HAYSTACK_TELEMETRY_ENABLED'])\n"
)


def telemetry_after_import(tmp_path: Path, **env: str) -> str:
    """``before on_after env`` of a Python that imports Haystack, then qa_system (a notebook, Hayhooks loading a pipeline)."""
    clean = {k: v for k, v in os.environ.items() if k != "HAYSTACK_TELEMETRY_ENABLED"}
    # HOME: Haystack writes its telemetry id under ~/.haystack when telemetry starts.
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip()


def test_haystack_telemetry_is_off_even_when_haystack_was_imported_first(tmp_path):
    """Haystack reads HAYSTACK_TELEMETRY_ENABLED once, at its import: imported first, its telemetry stayed on."""
    assert telemetry_after_import(tmp_path) == "True False False"


def test_telemetry_the_user_asks_for_stays_on(tmp_path):
    assert telemetry_after_import(tmp_path, HAYSTACK_TELEMETRY_ENABLED="True") == "True True True"


def test_the_pages_favicon_is_drawn_locally():
    """A ':material/...' favicon is fetched from fonts.gstatic.com by the browser; an emoji is drawn as an inline SVG."""
    from streamlit.commands.page_config import _get_favicon_string

    calls = [
        node
        for node in ast.walk(ast.parse((REPO_ROOT / "ui" / "app.py").read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "set_page_config"
    ]
    assert len(calls) == 1
    icon = ast.literal_eval(next(k.value for k in calls[0].keywords if k.arg == "page_icon"))
    assert _get_favicon_string(icon).startswith("emoji:")
