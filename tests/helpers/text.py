"""Text as a reader of the page sees it."""

from __future__ import annotations

import re
import string
from html import unescape

from qa_system.safe_text import WORD_JOINER


def shown(markdown: str) -> str:
    """What a reader sees of a ``markdown_literal`` string: its escapes and word joiners removed."""
    return unescape(re.sub(rf"\\([{re.escape(string.punctuation)}])", r"\1", markdown)).replace(WORD_JOINER, "")
