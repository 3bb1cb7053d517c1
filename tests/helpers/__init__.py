"""What the test modules share besides fixtures: corpora they write, servers they start, pages they drive.

pytest puts ``tests/`` on ``sys.path`` (rootdir-relative "prepend" import of ``tests/conftest.py``), so a
test imports these as ``from helpers.<module> import ...``, never from another test module. Fixtures live
in ``tests/conftest.py``.
"""
