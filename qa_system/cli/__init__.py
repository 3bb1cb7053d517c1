"""The `qa-system` command line (entry point ``qa_system.cli:main``)."""

from qa_system.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
