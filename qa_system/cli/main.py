"""`qa-system` command line: a thin door onto the library.

Every command parses its flags into ``Settings`` and calls one library function; each command
group lives in its own module (``index``, ``ask``, ``evaluate``, ``train``, ``selector``, ``tune``, ``serve``, ``export``, ``bench``).
A ``QAError`` (bad input the user can fix) is printed as one line on stderr with exit code 2,
never a traceback. The library logs through ``logging``; while a command runs, its warnings and
errors are lines on stderr, and the INFO records of ``INFO_LOGGERS`` lines on stdout; `qa-system api` logs as its
server does meanwhile (``serving.api.server.server_logging``: uvicorn's style, on stderr, at ``--log-level``).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from qa_system.cli import ask, bench, evaluate, export, index, selector, serve, train, tune
from qa_system.cli.options import Options, common_options, generator_options
from qa_system.errors import QAError
from qa_system.safe_text import terminal_text
from qa_system.stopping import ask_to_stop

COMMAND_GROUPS = (index, ask, evaluate, train, selector, tune, serve, export, bench)
# Library loggers whose INFO records are part of a command's output, on stdout: the addresses the
# search page and the API serve on. The rest of the library shows its warnings and errors only.
INFO_LOGGERS = ("qa_system.serving.webapp", "qa_system.serving.api.server", "qa_system.serving.model_server")


class ConsoleHandler(logging.Handler):
    """Each record as its message alone, one line: below WARNING on stdout, WARNING and above on stderr.

    The streams are looked up for every record, so output redirected or captured after the handler
    was made still receives it.
    """

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line to stdout or stderr, by its level."""
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own policy: report, never raise
            self.handleError(record)


@contextmanager
def console_logging(info_loggers: Sequence[str] = INFO_LOGGERS) -> Iterator[None]:
    """For the length of a command: the package's log records on the console (``ConsoleHandler``).

    Warnings and errors of every ``qa_system`` logger are shown, INFO records only from
    ``info_loggers`` (and their children). Everything is as it was afterwards.
    """

    def shown(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or any(record.name == name or record.name.startswith(f"{name}.") for name in info_loggers)

    handler = ConsoleHandler()
    handler.addFilter(shown)
    loggers = [logging.getLogger(name) for name in info_loggers]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    package = logging.getLogger("qa_system")
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def build_parser() -> argparse.ArgumentParser:
    """The `qa-system` argument parser, with every command group's commands."""
    parser = argparse.ArgumentParser(prog="qa-system", description="Question answering over product reviews (SubjQA).")
    commands = parser.add_subparsers(dest="command", required=True)
    options = Options(common=common_options(), generation=generator_options())
    for group in COMMAND_GROUPS:
        group.register(commands, options)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `qa-system` command; returns its exit code.

    0 when it succeeded, 2 for a ``QAError`` (printed as one line on stderr), 130 when interrupted (Ctrl+C), 143 when
    told to stop (SIGTERM: a service manager, `kill`), each with a line saying what was saved.
    """
    args = None
    try:
        stop_on_sigterm = _stopping_on_sigterm()
        # Inside the try: count and threshold flags are checked by the library while parsing (QAError).
        args = build_parser().parse_args(argv)
        # --collection, --input and --labels name other data than a SubjQA domain.
        if getattr(args, "domain", None) is None and all(getattr(args, flag, None) is None for flag in ("collection", "input", "labels")):
            # Training learns from every provided domain; everything else works on electronics by default.
            args.domain = (
                ["electronics", "restaurants", "tripadvisor"]
                if args.command in ("train-reader", "train-retriever", "train-selector")
                else ["electronics"]
            )
            args.domain_default = True  # not named: a client of a server asks the server's default collection
        with console_logging(), stop_on_sigterm:
            args.func(args)
            sys.stdout.flush()  # a closed pipe is found here, not at exit
    except QAError as error:
        print(terminal_text(f"error: {error}", newlines=False), file=sys.stderr)  # it may quote a file or a server
        return 2
    except BrokenPipeError:  # whatever read the output stopped (`| head`): quietly, as Unix tools do; the work is done
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush must not fail again
        return 141
    except OSError as error:  # a path that cannot be written or read: a folder, a file, /proc, no permission, a full disk
        print(terminal_text(_os_error_line(error, args), newlines=False), file=sys.stderr)
        return 2
    except KeyboardInterrupt as stopped:
        # It may come after a save: what is saved is whole, not unchanged (a collection swapped in holds every change).
        print(TERMINATED if isinstance(stopped, Terminated) else INTERRUPTED, file=sys.stderr)
        return 143 if isinstance(stopped, Terminated) else 130
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl+C raises KeyboardInterrupt: its work stops the same way."""


# How long a command told to stop may go on when the stop was swallowed (a native library's load catches everything).
STOP_WITHIN_S = 10.0


@contextmanager
def _stopping_on_sigterm() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` while a command runs (the default ends the process without a word), the handler
    before it restored afterwards; a server installs its own meanwhile. Only the main thread may handle signals.

    Code that catches every exception can swallow it (ONNX Runtime loading a model): a command that ends anyway says it
    was stopped, and one still running ``STOP_WITHIN_S`` later ends the process, as the signal's default would."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    asked, left = threading.Event(), threading.Event()

    def deadline() -> None:
        if not left.wait(STOP_WITHIN_S):
            print(TERMINATED, file=sys.stderr, flush=True)
            os._exit(143)

    def terminated(signum, frame):
        if not asked.is_set():
            asked.set()
            ask_to_stop()
            threading.Thread(target=deadline, name="sigterm-deadline", daemon=True).start()
        raise Terminated

    before = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
        if asked.is_set():
            raise Terminated
    except KeyboardInterrupt as stopped:
        if asked.is_set() and not isinstance(stopped, Terminated):  # the stop, passed on by code that caught it
            raise Terminated from stopped
        raise
    finally:
        left.set()
        signal.signal(signal.SIGTERM, before)


WHAT_WAS_SAVED = (
    "What was saved is whole: a collection holds all of this run's changes or none of them "
    "(`qa-system collections` shows when each was last updated)."
)
INTERRUPTED = f"interrupted. {WHAT_WAS_SAVED}"
TERMINATED = f"stopped (SIGTERM). {WHAT_WAS_SAVED}"


def _os_error_line(error: OSError, args: argparse.Namespace | None = None) -> str:
    # A write that finds the disk full names no file: the places the command writes are named instead.
    where = f" {error.filename}" if error.filename not in (None, "") else f" {_written_by(args)}" if args is not None else ""
    if error.errno == errno.ENOSPC:
        fix = "free disk space there, or point QA_HOME (the indexes), --out or --output at another disk."
    else:
        fix = "check that it exists and that you may read and write it, or name another place: QA_HOME for the indexes, --out / --output for reports."
    return f"error: Cannot use{where}: {error.strerror or error}. Fix: {fix}"


def _written_by(args: argparse.Namespace) -> str:
    """Where a command writes: QA_HOME (its indexes, caches and locks) and its --out / --output, when it has one."""
    from qa_system.config import Settings

    try:
        places = [f"QA_HOME ({Settings.from_env(home=getattr(args, 'home', None)).home})"]
    except QAError:
        places = ["QA_HOME"]
    places += [f"--{flag} {value}" for flag in ("out", "output") if (value := getattr(args, flag, None)) is not None]
    return f"{', '.join(places[:-1])} or {places[-1]}" if len(places) > 1 else places[0]


if __name__ == "__main__":
    sys.exit(main())
