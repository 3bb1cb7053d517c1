"""The trainers' output: the steps as ``qa_system.progress`` shows them (a bar in a terminal, a log line every few
seconds elsewhere), without the line per logged step that transformers prints."""

from __future__ import annotations

from transformers.trainer_callback import PrinterCallback, ProgressCallback

from qa_system.progress import training_progress


def quiet_progress(trainer, progress: bool, desc: str = "training") -> None:
    """Replace the trainer's printers by one progress display titled ``desc`` (or none when ``progress`` is off)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if progress:
        trainer.add_callback(training_progress(desc))
