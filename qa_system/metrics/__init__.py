"""Metrics: pure functions that anyone may import: SQuAD EM / F1 (``squad``), ranking (``ranking``), calibration (``calibration``).

Each module is imported by path: ``squad`` needs only the standard library, the others pandas.
"""
