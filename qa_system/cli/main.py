"""`qa-system` command line: a thin door onto the library.

Every command parses its flags into ``Settings`` and calls one library function; each command
group lives in its own module (``index``, ``ask``, ``evaluate``, ``train``, ``tune``, ``serve``, ``bench``).
A ``QAError`` (bad input the user can fix) is printed as one line on stderr with exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from qa_system.cli import ask, bench, evaluate, index, serve, train, tune
from qa_system.cli.options import Options, common_options, generator_options
from qa_system.errors import QAError

COMMAND_GROUPS = (index, ask, evaluate, train, tune, serve, bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qa-system", description="Question answering over product reviews (SubjQA).")
    commands = parser.add_subparsers(dest="command", required=True)
    options = Options(common=common_options(), generation=generator_options())
    for group in COMMAND_GROUPS:
        group.register(commands, options)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        # Inside the try: count and threshold flags are checked by the library while parsing (QAError).
        args = build_parser().parse_args(argv)
        # --collection, --input and --labels name other data than a SubjQA domain.
        if getattr(args, "domain", None) is None and all(getattr(args, flag, None) is None for flag in ("collection", "input", "labels")):
            # Training learns from every provided domain; everything else works on electronics by default.
            args.domain = ["electronics", "restaurants", "tripadvisor"] if args.command in ("train-reader", "train-retriever") else ["electronics"]
        args.func(args)
    except QAError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing saved was changed.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
