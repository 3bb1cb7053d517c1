"""The trainers' terminal output: a progress bar, without the line per logged step that transformers prints."""

from __future__ import annotations

from transformers.trainer_callback import PrinterCallback, ProgressCallback


class StepProgress(ProgressCallback):
    """The trainer's progress bar, without a printed line per logged step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Logs go to the run's own epoch record, not to the terminal."""


def quiet_progress(trainer, progress: bool) -> None:
    """Replace the trainer's printers by one progress bar (or none when ``progress`` is off)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if progress:
        trainer.add_callback(StepProgress())
