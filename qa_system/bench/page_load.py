"""Many users on one search page at once (``qa-system bench page``): answer times, and no lost click.

``sessions`` real browsers (headless Chromium, ``browser.headless_chromium``) open one page served on
a free loopback port (``serving.webapp.serve``), each on its own product, and for ``seconds`` all of them at
once ask that product's labelled questions one after another and click feedback on each answer.
Measured per question: what the user waits (Ask pressed until the first answer card is on screen,
timed inside the browser) beside what the pipeline took (the page's own "Answered in"). Checked: every
click the page acknowledges ("Saved N clicks") is a row in the feedback database, which the served
page writes to a file of its own (``QA_FEEDBACK_DB``), never the user's.

The server's first answer loads the models: it is asked once before the clock starts and reported
apart, so the percentiles are those of a warm server.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from qa_system.bench.browser import chromium_paths, headless_chromium, require_selenium
from qa_system.config import Settings
from qa_system.errors import QAError, check_count, check_number
from qa_system.serving.feedback import MAX_NEW_CLICKS, FeedbackStore
from qa_system.serving.webapp import free_port, serve_process, settings_environment, streamlit_command
from qa_system.sources import load_subjqa

DOMAIN = "electronics"  # the page's domain (ui/resources.py)
MAX_SESSIONS = 16  # a bound: each session is a Chromium of its own
CLICK_GAP_S = 0.3  # between two clicks of one user: quick, so that a click lands while the page still reruns for the last

# Watches, inside the browser, for the first answer card of a run newer than the one shown (the
# feedback buttons' keys carry the page's run number: st-key-feedback-<run>-<rank>), timed from the
# click on Ask. Installed before the click, which the driver makes as a user does (a real click also
# commits the typed question, which a click from script does not); WAIT_JS then returns
# [milliseconds, key], or null after the timeout.
WATCH_JS = """
const before = arguments[0];
const watch = window.qaWatch = { start: null, shown: null, done: null };
if (!window.qaListening) {
  window.qaListening = true;
  document.addEventListener("click", (event) => {
    const current = window.qaWatch;
    if (current.start === null && event.target.closest(".st-key-FormSubmitter-ask-Ask")) current.start = performance.now();
  }, { capture: true });
}
const newer = () => {
  for (const element of document.querySelectorAll("[class*='st-key-feedback-']")) {
    const match = element.className.match(/st-key-(feedback-(\\d+)-\\d+)/);
    if (match && Number(match[2]) > before) return match[1];
  }
  return null;
};
watch.observer = new MutationObserver(() => {
  const key = watch.start === null ? null : newer();
  if (!key) return;
  watch.observer.disconnect();
  watch.shown = [performance.now() - watch.start, key];
  if (watch.done) watch.done(watch.shown);
});
watch.observer.observe(document.body, { childList: true, subtree: true, attributes: true, attributeFilter: ["class"] });
"""
WAIT_JS = """
const [timeoutMs, done] = arguments;
const watch = window.qaWatch;
if (watch.shown) { done(watch.shown); return; }
watch.done = done;
setTimeout(() => { watch.observer.disconnect(); done(null); }, timeoutMs);
"""
# The newest run whose answers are on screen (0: none yet).
LAST_RUN_JS = """
let last = 0;
for (const element of document.querySelectorAll("[class*='st-key-feedback-']")) {
  const match = element.className.match(/st-key-feedback-(\\d+)-\\d+/);
  if (match) last = Math.max(last, Number(match[1]));
}
return last;
"""
# What the page says under one answer's buttons ("Saved: right answer.", "Saved 3 clicks, the last: ...").
# Not a stale caption: until a run ends, Streamlit leaves the previous run's elements on screen (marked
# data-stale), so a new answer's buttons first sit beside the caption of the answer before.
ACK_JS = """
const element = document.querySelector(`.st-key-${arguments[0]}`);
if (!element) return "";
const caption = element.parentElement.querySelector("[data-testid='stCaptionContainer']");
return caption && caption.closest("[data-stale]")?.dataset.stale !== "true" ? caption.textContent : "";
"""
ANSWERED_IN = re.compile(r"Answered in ([\d.]+) ms")


@dataclass(frozen=True)
class Round:
    """One question asked by one session, and the clicks on its first answer."""

    session: int
    item_id: str
    question: str
    answer_s: float | None  # Ask pressed -> first answer card shown; None: none within the timeout
    pipeline_s: float | None  # the page's "Answered in"
    clicks: int  # feedback clicks made on the answer
    acknowledged: int  # clicks the page said it saved
    error: str = ""
    asked_at: float | None = None  # time.monotonic() when Ask was pressed


@dataclass(frozen=True)
class PageLoadResult:
    """What a page load run measured: every round of every session, the feedback rows stored, and the times."""

    rounds: list[Round]
    stored: dict[str, int]  # feedback rows per product
    sessions: int
    elapsed_s: float  # from the start until every session's last question and clicks were done
    cold_answer_s: float  # the server's first answer (models loading), not in the percentiles
    memory: list[tuple[float, float]] = field(default_factory=list)  # (s into the run, the page server's RSS in MB)
    started: float = 0.0  # time.monotonic() at the run's start

    def over_time(self, bin_s: float = 10.0) -> pd.DataFrame:
        """Per ``bin_s`` seconds of the run: questions answered, answer time p50 / p95 (ms) and the server's largest RSS (MB)."""
        rows = []
        for begin in np.arange(0.0, max(self.elapsed_s, bin_s), bin_s):
            times = [r.answer_s for r in self.answered if r.asked_at is not None and begin <= r.asked_at - self.started < begin + bin_s]
            rss = [mb for t, mb in self.memory if begin <= t < begin + bin_s]
            rows.append(
                {
                    "from_s": round(float(begin)),
                    "answered": len(times),
                    "answer_p50_ms": round(1000 * float(np.percentile(times, 50))) if times else None,
                    "answer_p95_ms": round(1000 * float(np.percentile(times, 95))) if times else None,
                    "memory_mb": max(rss) if rss else None,
                }
            )
        return pd.DataFrame(rows)

    def total(self, field: str) -> int:
        """The sum of one counter (``clicks``, ``acknowledged``) over every round."""
        return sum(getattr(r, field) for r in self.rounds)

    @property
    def answered(self) -> list[Round]:
        """The rounds whose question got an answer in time."""
        return [r for r in self.rounds if r.answer_s is not None]

    @property
    def lost(self) -> int:
        """Acknowledged clicks that are not rows (per product: each session asks about its own)."""
        acknowledged = Counter()
        for r in self.rounds:
            acknowledged[r.item_id] += r.acknowledged
        return sum(max(0, n - self.stored.get(item, 0)) for item, n in acknowledged.items())

    def percentile_ms(self, field: str, q: float) -> int | str:
        """Whole milliseconds ("n/a" with nothing measured)."""
        values = [getattr(r, field) for r in self.rounds if getattr(r, field) is not None]
        return round(1000 * float(np.percentile(values, q))) if values else "n/a"

    def table(self) -> pd.DataFrame:
        """The run as the report's table: one measurement a row, with its value and a note."""
        stored = sum(self.stored.values())
        rows = [
            ("sessions (browsers asking and clicking at once)", self.sessions, ""),
            ("questions answered", len(self.answered), f"{len(self.rounds) - len(self.answered)} got no answer in time"),
            ("questions answered per minute", round(60 * len(self.answered) / self.elapsed_s, 1), "all sessions together"),
            (
                "answer time p50 (ms)",
                self.percentile_ms("answer_s", 50),
                "Ask pressed -> first answer card on screen, timed in the browser",
            ),
            ("answer time p95 (ms)", self.percentile_ms("answer_s", 95), ""),
            ("answer time max (ms)", self.percentile_ms("answer_s", 100), ""),
            ("pipeline time p50 (ms)", self.percentile_ms("pipeline_s", 50), "the page's 'Answered in': retrieval + reader"),
            ("pipeline time p95 (ms)", self.percentile_ms("pipeline_s", 95), ""),
            ("first answer of the server (ms)", round(1000 * self.cold_answer_s), "loads the models; asked before the clock started"),
            ("feedback clicks made", self.total("clicks"), ""),
            ("clicks the page acknowledged", self.total("acknowledged"), "'Saved N clicks' under each answer"),
            ("feedback rows stored", stored, "rows in the page's feedback database"),
            ("acknowledged clicks not stored", self.lost, "must be 0"),
            ("page server memory at start (MB)", self.memory[0][1] if self.memory else "n/a", "RSS of Streamlit and its children"),
            ("page server memory max (MB)", max((mb for _, mb in self.memory), default="n/a"), ""),
            ("page server memory at end (MB)", self.memory[-1][1] if self.memory else "n/a", ""),
        ]
        return pd.DataFrame(rows, columns=["measurement", "value", "note"], dtype=object)


def pick_questions(settings: Settings, split: str, sessions: int) -> list[tuple[str, list[str]]]:
    """(product, its labelled questions) per session: the products with the most distinct questions,
    each session its own while there are enough."""
    questions: dict[str, list[str]] = {}
    for question in load_subjqa(DOMAIN, [split], settings.data_dir).questions:
        asked = questions.setdefault(question.item_id, [])
        if question.question not in asked:
            asked.append(question.question)
    if not questions:
        raise QAError(f"SubjQA {DOMAIN} {split} has no questions.", "pick another --split.")
    products = sorted(questions, key=lambda item: (-len(questions[item]), item))
    return [(products[i % len(products)], questions[products[i % len(products)]]) for i in range(sessions)]


def acknowledged_clicks(caption: str) -> int:
    """How many clicks the page's caption says it saved ("Saved: ..." is one, "Saved N clicks" is N, anything else none)."""
    if caption.startswith("Saved:"):
        return 1
    match = re.match(r"Saved (\d+) clicks", caption)
    return int(match.group(1)) if match else 0


# The browsers stand in for users' own machines, yet here share the page server's cores (on 2 cores
# eight headless Chromiums took about three quarters of the CPU): they run below it, so that the
# server gets the share of the CPU it would have in production. `--browser-nice 0` puts them level.
BROWSER_NICE = 10


class BrowserPriority:
    """While the ``with`` block runs, every second: each process under the browser drivers ``pids`` at niceness
    ``nice`` at least. Again and again, because Chromium starts renderers as pages need them and sets its
    own processes' priorities (0, or -8 for some, as root), whatever its driver's niceness."""

    def __init__(self, pids: Sequence[int], nice: int, every_s: float = 1.0):
        self.pids, self.nice, self.every_s = list(pids), nice, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._lower, name="browser-priority", daemon=True)

    def lower_once(self) -> None:
        """One round: every process under the drivers now, at ``nice`` at least."""
        import psutil

        for pid in self.pids:
            try:
                driver = psutil.Process(pid)
                processes = [driver, *driver.children(recursive=True)]
            except psutil.Error:  # the driver ended
                continue
            for process in processes:
                try:
                    if process.nice() < self.nice:
                        process.nice(self.nice)
                except psutil.Error:  # a process that ended, or one we may not renice: the others still are
                    continue

    def _lower(self) -> None:
        while True:
            self.lower_once()
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> BrowserPriority:
        if self.nice:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


class Session:
    """One user: a browser on the page, opened on one product."""

    def __init__(self, number: int, url: str, item_id: str, questions: Sequence[str], profile: Path, timeout_s: float):
        self.number, self.item_id, self.questions, self.timeout_s = number, item_id, list(questions), timeout_s
        self.driver = headless_chromium(profile, 1280, 1000)
        self.driver.set_script_timeout(timeout_s + 10)
        self.asked = 0
        self.driver.get(f"{url}/?{urllib.parse.urlencode({'item': item_id})}")

    def wait_ready(self, timeout_s: float) -> None:
        """Until the question box is there (the first visitor waits for the server to open the index)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as conditions
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, timeout_s).until(conditions.element_to_be_clickable((By.CSS_SELECTOR, "input[aria-label='Question']")))

    def ask(self) -> tuple[float | None, str | None, float | None]:
        """Asks the next question: (seconds until its first answer card, that card's key, the page's pipeline seconds)."""
        from selenium.webdriver.common.keys import Keys

        question = self.questions[self.asked % len(self.questions)]
        self.asked += 1
        box = self.driver.find_element("css selector", "input[aria-label='Question']")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(question)
        self.driver.execute_script(WATCH_JS, self.driver.execute_script(LAST_RUN_JS))
        self.driver.find_element("xpath", "//button[.//p[normalize-space()='Ask']]").click()
        shown = self.driver.execute_async_script(WAIT_JS, 1000 * self.timeout_s)
        if shown is None:
            return None, None, None
        asked = urllib.parse.parse_qs(urllib.parse.urlparse(self.driver.current_url).query).get("q", [""])[0]
        if asked != question.strip():  # the page's link names the question it answered
            raise QAError(f"The page answered {asked!r} instead of {question!r}.", "the question box did not take the typed question.")
        timings = self.driver.find_elements("css selector", ".qa-timings")
        match = ANSWERED_IN.search(timings[0].text) if timings else None
        return round(shown[0] / 1000, 4), shown[1], float(match.group(1)) / 1000 if match else None

    def click_feedback(self, key: str, clicks: int, rng: random.Random) -> tuple[int, int]:
        """``clicks`` quick clicks on one answer's buttons; (clicks made, clicks the page acknowledged)."""
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        buttons = f".st-key-{key} button"
        WebDriverWait(self.driver, self.timeout_s, poll_frequency=0.1).until(lambda d: d.find_elements("css selector", buttons))
        made = 0
        for _ in range(clicks):
            for _attempt in range(3):  # a rerun may redraw the buttons between finding one and clicking it
                try:
                    rng.choice(self.driver.find_elements("css selector", buttons)).click()
                    made += 1
                    break
                except (StaleElementReferenceException, NoSuchElementException, IndexError):
                    time.sleep(0.1)
            time.sleep(CLICK_GAP_S)
        deadline = time.monotonic() + self.timeout_s
        while (acknowledged := acknowledged_clicks(self.driver.execute_script(ACK_JS, key))) < made and time.monotonic() < deadline:
            time.sleep(0.25)
        return made, acknowledged

    def run(self, deadline: float, clicks: int, rng: random.Random, rounds: list[Round]) -> None:
        """Ask questions and click their answers' buttons until ``deadline``, appending one ``Round`` per question to ``rounds``."""
        while time.monotonic() < deadline:
            question = self.questions[self.asked % len(self.questions)]
            asked_at = time.monotonic()
            try:
                answer_s, key, pipeline_s = self.ask()
                made, acknowledged = self.click_feedback(key, clicks, rng) if key else (0, 0)
                error = "" if key else f"no answer within {self.timeout_s:.0f} s"
            except Exception as error:  # a browser failure ends this session, recorded, not the run
                rounds.append(Round(self.number, self.item_id, question, None, None, 0, 0, f"{type(error).__name__}: {error}"[:300]))
                return
            rounds.append(Round(self.number, self.item_id, question, answer_s, pipeline_s, made, acknowledged, error, asked_at))

    def close(self) -> None:
        """Quit the session's browser."""
        self.driver.quit()


def run_page_load(
    settings: Settings,
    sessions: int = 8,
    seconds: float = 60.0,
    clicks: int = 3,
    split: str = "test",
    out_dir: str | Path = "reports/page-load",
    timeout_s: float = 120.0,
    seed: int = 0,
    progress: Callable[[str], None] = lambda message: None,
    browser_nice: int | None = None,
) -> PageLoadResult:
    """Runs the load test (module doc) and writes its report to ``out_dir``; the browsers run ``browser_nice``
    (None: ``BROWSER_NICE``) below the page server."""
    from qa_system.bench.measure import MemorySampler, machine
    from qa_system.ingestion.indexing import open_or_build_index

    check_count(sessions, "sessions", 1, MAX_SESSIONS)
    check_number(seconds, "seconds", 0, above=True)
    check_count(clicks, "clicks", 1, MAX_NEW_CLICKS)
    check_number(timeout_s, "timeout", 0, above=True)
    browser_nice = BROWSER_NICE if browser_nice is None else check_count(browser_nice, "browser_nice", 0, 19)
    require_selenium()
    if chromium_paths() is None:
        raise QAError("The page load test drives Chromium, which is not installed.", "apt-get install chromium chromium-driver.")
    plan = pick_questions(settings, split, sessions)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    feedback_db = out / "feedback.sqlite"
    feedback_db.unlink(missing_ok=True)  # this run's clicks only
    progress(f"opening the {DOMAIN} index the page serves (built on first use)")
    open_or_build_index(settings, DOMAIN, embeddings=True)  # as the page opens it, so that it only loads
    env = {**settings_environment(settings.model_dump()), "QA_FEEDBACK_DB": str(feedback_db)}
    rounds: list[Round] = []
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        tempfile.TemporaryDirectory(prefix="qa-page-load-") as profiles,
        serve_process(streamlit_command(port, "127.0.0.1"), f"{url}/_stcore/health", "Streamlit", env, out / "streamlit.log") as server,
    ):
        progress(f"page served on {url}; starting {sessions} Chromium sessions")
        opened: list[Session] = []
        try:
            for number, (item_id, questions) in enumerate(plan):
                opened.append(Session(number, url, item_id, questions, Path(profiles) / f"chromium-{number}", timeout_s))
            for session in opened:
                session.wait_ready(max(timeout_s, 600))
            cold_s, key, _ = opened[0].ask()
            if key is None:
                raise QAError(
                    f"The page gave no answer within {timeout_s:.0f} s.",
                    f"see {out / 'streamlit.log'}, or raise --timeout on a slow machine.",
                )
            progress(f"first answer (models loaded) in {cold_s:.1f} s; {sessions} sessions ask and click for {seconds:.0f} s")
            load_at_start = [round(x, 2) for x in os.getloadavg()]  # the machine may be shared: the figures depend on it
            drivers = [session.driver.service.process.pid for session in opened]
            with MemorySampler(server.pid) as memory, BrowserPriority(drivers, browser_nice):
                start = memory.began
                threads = [
                    threading.Thread(
                        target=s.run, args=(start + seconds, clicks, random.Random(seed + s.number), rounds), name=f"page-load-{s.number}"
                    )
                    for s in opened
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed_s = time.monotonic() - start
        finally:
            for session in opened:
                session.close()
    stored = Counter(f.item_id for f in FeedbackStore(feedback_db).all()) if feedback_db.exists() else Counter()
    result = PageLoadResult(sorted(rounds, key=lambda r: r.session), dict(stored), sessions, elapsed_s, cold_s, memory.samples, start)
    summary = {
        "settings": {
            "sessions": sessions,
            "seconds": seconds,
            "clicks_per_answer": clicks,
            "split": split,
            "store": settings.store,
            "reader": settings.reader_model,
            "reader_backend": settings.reader_backend,
        },
        "load_average_at_start": load_at_start,
        "machine": machine(settings.device),
    }
    _write(out, result, summary, seconds, clicks, split, browser_nice)
    return result


def _write(out: Path, result: PageLoadResult, summary: dict, seconds: float, clicks: int, split: str, browser_nice: int) -> None:
    """The run's report: the table, per session, over time (a table and a plot), and every round."""
    from qa_system.evaluation.report import write_report

    notes = [
        f"{result.sessions} headless Chromium sessions on one page (127.0.0.1), each on its own {DOMAIN} product, asking its {split} questions "
        f"one after another for {seconds:.0f} s and clicking feedback {clicks} times ({CLICK_GAP_S} s apart) on each first answer.",
        "Answer time: Ask pressed until the first answer card is on screen, measured in the browser; "
        "pipeline time: the page's 'Answered in' (retrieval and reader only).",
        "Each click the page acknowledges ('Saved N clicks') must be a row of the feedback database (feedback.sqlite here).",
        "Memory: the RSS of the page's server process (Streamlit and its children), sampled every second.",
        f"The browsers ran at nice {browser_nice}, the page server at 0: they share its machine here, where users' browsers would not."
        if browser_nice
        else "The browsers ran at the page server's priority, on its machine.",
    ]
    records = pd.DataFrame([asdict(r) for r in result.rounds], columns=[f.name for f in fields(Round)])
    per_session = records.groupby(["session", "item_id"], as_index=False).agg(
        questions=("question", "size"), clicks=("clicks", "sum"), acknowledged=("acknowledged", "sum")
    )
    per_session["stored (product)"] = per_session["item_id"].map(lambda item: result.stored.get(item, 0))
    over_time = result.over_time()
    write_report(
        out,
        "Page load: concurrent browser sessions asking and clicking feedback",
        result.table(),
        summary,
        {"over_time.png": over_time_plot(over_time)},
        sections={"sessions": per_session, "over time": over_time},
        records=records,
        notes=notes,
    )


def over_time_plot(over_time: pd.DataFrame):
    """Answer time p50 / p95 and the page server's memory (RSS) over the run."""
    import matplotlib.pyplot as plt

    figure, (latency, memory) = plt.subplots(1, 2, figsize=(13, 4.5))
    latency.plot(over_time.from_s, over_time.answer_p50_ms.astype(float), marker="o", label="p50")
    latency.plot(over_time.from_s, over_time.answer_p95_ms.astype(float), linestyle="--", label="p95")
    memory.plot(over_time.from_s, over_time.memory_mb.astype(float), marker="o")
    latency.set(title="Answer time over the run (browser)", xlabel="seconds into the run", ylabel="ms")
    memory.set(title="Page server memory (RSS) over the run", xlabel="seconds into the run", ylabel="MB")
    latency.legend(fontsize=8)
    for axes in (latency, memory):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure
