"""The search page's entry point: ``streamlit run ui/app.py`` (or ``qa-system ui``).

Two pages: asking questions about a product (``search.py``) and the evaluation dashboard
(``dashboard.py``). The models and the index are loaded once per server process (``resources.py``).
"""

import os
import sys
from pathlib import Path

# Before any page imports Haystack, which reads it once: no usage telemetry unless the user asks for it.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import streamlit as st  # noqa: E402

# The pages import their helpers (cards, resources) from this folder, whoever starts the app.
UI_DIR = str(Path(__file__).resolve().parent)
if UI_DIR not in sys.path:
    sys.path.insert(0, UI_DIR)

from cards import CSS  # noqa: E402

# An emoji favicon is drawn by the page itself; a ":material/..." one is fetched from fonts.gstatic.com.
# Named for every collection, reviews or documents of one's own: the page's heading says which.
st.set_page_config(page_title="Ask a question", page_icon="🔎", layout="wide")
st.html(CSS)
pages = [
    st.Page("search.py", title="Ask a question", icon=":material/search:", default=True),
    st.Page("dashboard.py", title="Evaluation dashboard", icon=":material/monitoring:", url_path="dashboard"),
]
page = st.navigation(pages)
# Streamlit forgets (or keeps stale) the values of widgets a run does not draw: a page restores its own
# on the way back, and needs to know that it is one.
st.session_state["page_changed"] = st.session_state.get("page_shown", page.title) != page.title
st.session_state["page_shown"] = page.title
page.run()
