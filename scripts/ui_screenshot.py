"""Screenshot of the search page answering a question, through headless Chromium (docs/screenshot.png).

    python scripts/ui_screenshot.py --item B0074BW614 --question "Is it good for reading?"

Uses the settings of the environment (QA_*): the default index and the reader in models/.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from qa_system.bench.browser import ask_in_browser, headless_chromium
from qa_system.serving.webapp import serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--item", default="B0074BW614")
    parser.add_argument("--question", default="Is it good for reading?")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshot.png"))
    parser.add_argument("--size", default="1400x1250", help="browser window, WIDTHxHEIGHT")
    args = parser.parse_args()
    width, height = map(int, args.size.split("x"))
    with tempfile.TemporaryDirectory() as scratch, serve(log=Path(scratch) / "streamlit.log", timeout=600) as url:
        driver = headless_chromium(Path(scratch) / "profile", width, height)
        try:
            ask_in_browser(driver, url, args.question, item=args.item, timeout=600)
            time.sleep(1)  # let the cards finish their layout
            args.out.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(args.out))
        finally:
            driver.quit()
    print(f"Saved {args.out}")


if __name__ == "__main__":
    main()
