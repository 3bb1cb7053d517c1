"""Widget values that survive a visit to the other page.

Streamlit forgets a widget's value when a run does not draw it (a visit to the other page), and may
keep a stale one: each page keeps a copy of its widgets' values after drawing them and puts it back
before drawing them again. Defaults live here, not in the widget calls, since a widget given both a
default and a Session State value warns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import streamlit as st


def restore_widgets(page: str, defaults: Mapping[str, Any]) -> None:
    """Before any widget is drawn: the defaults of the widgets not set yet and, on the way back from
    the other page (``app.py`` sets ``page_changed``), the values they last had on this one."""
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    back = st.session_state.get("page_changed", False)
    for key, value in st.session_state.get(f"kept_widgets:{page}", {}).items():
        if back or key not in st.session_state:
            st.session_state[key] = value


def keep_widgets(page: str, keys: Iterable[str]) -> None:
    st.session_state[f"kept_widgets:{page}"] = {key: st.session_state[key] for key in keys if key in st.session_state}
