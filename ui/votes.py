"""The feedback buttons (Right / Wrong / Right review, wrong answer): a small component that logs
every click in the browser.

A Streamlit button is a trigger, and Streamlit merges the reruns (and their triggers) that arrive
while the page is still running: when a busy server runs slower than a user clicks, two clicks on
one button call its callback once and one judgement is lost. These buttons keep the page's click
log per answer and send all of it as the component's state; a merge keeps the newest log, and the
page records the clicks it has not recorded yet (``qa_system.serving.feedback.unrecorded_clicks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

CSS = """
.qa-votes { display: flex; gap: .5rem; flex-wrap: wrap; }
.qa-votes button {
  display: inline-flex; align-items: center; gap: .5rem; min-height: 2.5rem; padding: .25rem .75rem;
  font: inherit; color: inherit; background: var(--st-background-color, #fff); cursor: pointer;
  border: 1px solid var(--st-border-color, rgba(49, 51, 63, .2)); border-radius: .5rem;
}
.qa-votes button:hover { border-color: var(--st-primary-color, #c2410c); color: var(--st-primary-color, #c2410c); }
.qa-votes button:active { background: var(--st-primary-color, #c2410c); color: #fff; }
.qa-votes .qa-icon { font-family: "Material Symbols Rounded"; font-size: 1.25rem; line-height: 1; }
"""

# The logs live in the module (imported once per page), by answer (data.id, the Streamlit key: the
# component's own key changes when it is mounted again), so that a re-render keeps them; a new page
# starts from what the server recorded.
JS = """
const logs = new Map();
export default function ({ data, parentElement, setStateValue }) {
  if (!logs.has(data.id)) logs.set(data.id, [...data.recorded]);
  const log = logs.get(data.id);
  const bar = parentElement.querySelector(".qa-votes");
  bar.replaceChildren(...data.buttons.map(({ verdict, label, icon }) => {
    const button = document.createElement("button");
    const glyph = Object.assign(document.createElement("span"), { className: "qa-icon", textContent: icon });
    button.type = "button";
    button.dataset.verdict = verdict;
    button.append(glyph, Object.assign(document.createElement("span"), { textContent: label }));
    button.onclick = () => { log.push(verdict); setStateValue("clicks", [...log]); };
    return button;
  }));
}
"""

_VOTES = st.components.v2.component("qa_votes", html='<div class="qa-votes"></div>', css=CSS, js=JS, isolate_styles=False)


def vote_buttons(key: str, buttons: Sequence[tuple[str, str, str]], recorded: Sequence[str]) -> object:
    """Draws (verdict, label, Material icon name) buttons; returns the page's click log (untrusted)."""
    data = {"id": key, "buttons": [{"verdict": v, "label": label, "icon": icon} for v, label, icon in buttons], "recorded": list(recorded)}
    result = _VOTES(key=key, data=data, default={"clicks": []}, on_clicks_change=lambda: None)
    return result.get("clicks")
