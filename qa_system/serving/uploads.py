"""Files indexed into collections in the background: one upload at a time per collection, which goes on
when its visitor leaves, and the collection's open version closed when it is done."""

from __future__ import annotations

from collections.abc import Callable

from qa_system.config import Settings
from qa_system.ingestion import IngestOptions, IngestProgress, IngestReport, ingest
from qa_system.serving.background import BackgroundTask, Report, TaskRegistry


class Uploads:
    """Uploaded files, each indexed into its collection by ``ingest`` in a background task.

    :param settings: the store written to.
    :param tasks: the service's background tasks (one upload per collection at a time).
    :param changed: called with the collection's name once an upload into it is done.

    Usage::

        uploads = Uploads(settings, TaskRegistry(), service.close)
        task = uploads.start(file, "my-reviews", IngestOptions(text_column="body"), embed=False, on_progress=print)
    """

    def __init__(self, settings: Settings, tasks: TaskRegistry, changed: Callable[[str], None]):
        self.settings, self.tasks, self.changed = settings, tasks, changed

    def start(
        self, source, collection: str, options: IngestOptions, embed: bool, on_progress: Callable[[IngestProgress], None]
    ) -> BackgroundTask[IngestReport] | None:
        """``source`` (an uploaded file) indexed into ``collection`` in the background; None while another upload into
        it runs. The collection is left as it was when it fails (``ingest`` swaps it in at the end); when done, the
        open one is closed, so the next question reads the new version."""

        def work(report: Report) -> IngestReport:
            done = ingest(
                self.settings,
                source,
                collection,
                options,
                name=getattr(source, "name", None),
                embed=embed,
                progress=False,
                on_progress=on_progress,
            )
            self.changed(collection)
            return done

        return self.tasks.start_unless_running(("upload", collection), work, name=f"upload-{collection}")
