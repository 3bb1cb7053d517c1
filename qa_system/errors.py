"""One error type for everything a user can get wrong.

Each error names the problem and the fix in one line, so that the CLI and the UI can show it
as-is instead of a traceback.
"""


class QAError(Exception):
    """A problem the user can fix; ``str(error)`` is a one-line message naming the fix."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} Fix: {fix}" if fix else problem)
