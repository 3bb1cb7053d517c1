"""Reading: the extractive reader that finds the answer span in retrieved reviews, or "no answer".

``reader.py`` is the Haystack component (ONNX or PyTorch backend), ``windows.py`` cuts a question and
its reviews into the windows it reads, ``model.py`` loads weights and their stored settings, ``onnx.py`` is the int8 ONNX Runtime backend and its export, ``onnx_cache.py``
builds that export into the cache on first use. Reader
training and no-answer threshold tuning (``training/reader.py``) sit above the pipelines and evaluation,
so they are imported from their module, not re-exported here.
"""

from qa_system.reading.model import MODEL_INFO_FILE, load_qa_model, read_model_info
from qa_system.reading.reader import ExtractiveReader, ReaderOutput, SpanCandidate
from qa_system.reading.windows import encode_windows

__all__ = ["MODEL_INFO_FILE", "ExtractiveReader", "ReaderOutput", "SpanCandidate", "encode_windows", "load_qa_model", "read_model_info"]
