"""Training: labelled data in -> models this project trains: the extractive reader (``reader.py``, with ``distillation.py``) and the question encoder (``retriever.py``).

Each module is imported by path: they load PyTorch and transformers.
"""
