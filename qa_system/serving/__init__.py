"""Serving: what the doors onto the library share (answer cards, answer feedback, the API, starting the page).

``answer_views`` turns answers into what a front end shows, ``feedback`` stores users' verdicts
and exports them as training data, ``service`` holds what a long-running door serves (collections,
pipelines built once, feedback), ``api`` is the REST API over it, ``webapp`` starts the Streamlit
page (``ui/``); driving it in a headless browser is ``bench/browser.py``. Each module is imported by path: they pull in different optional dependencies.
"""
