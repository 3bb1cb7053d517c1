"""No usage telemetry from Haystack unless the user asks for it (``HAYSTACK_TELEMETRY_ENABLED=True``).

Reviews are private data and these machines are often offline. Haystack reads the variable once, when it
is imported: a program that imported it before qa_system (Hayhooks loading an exported pipeline, a
notebook) has its telemetry on already, so it is switched off there too.
"""

import os
import sys

ENV = "HAYSTACK_TELEMETRY_ENABLED"


def haystack_telemetry_off() -> None:
    """Default ``HAYSTACK_TELEMETRY_ENABLED`` to False, and switch off the telemetry of a Haystack imported already, unless the user asked for it."""
    os.environ.setdefault(ENV, "False")
    loaded = sys.modules.get("haystack.telemetry._telemetry")
    if loaded is not None and os.environ[ENV].strip().lower() not in ("true", "1"):
        loaded.telemetry = None  # what Haystack sets when the variable says no
