"""Serving: what the doors onto the library share (the page's answer cards, answer feedback, starting the page).

``answer_views`` turns answers into what a front end shows, ``feedback`` stores users' verdicts
and exports them as training data, ``webapp`` starts the Streamlit page (``ui/``) and drives it in
a headless browser. Each module is imported by path: they pull in different optional dependencies.
"""
