"""`qa-system bench api`: a bounded load test of the REST API on loopback.

``clients`` threads (in processes of their own, 8 to a process), each with its own keep-alive HTTP
connection, ask ``POST /query`` back to back for ``seconds`` (the labelled questions of a SubjQA
split, each about its own product, in a seeded order), while a probe asks ``GET /health`` twice a
second: throughput, client-side latency percentiles, errors by kind, how long the health check took
while the server was busy (it must not queue behind the questions), the pipeline's own times
(retrieval, answering), the waits for a worker thread and for the reader's inference lane, the
server's memory (RSS, from /health) over the run and the clients' own CPU: each as a table, and over
time as a table and a plot (a soak test is a long ``--seconds``). For each reader backend asked for,
a server is started for the run (``serve_api``, rate limit off) and stopped after it; ``url``
measures a running server instead.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

from qa_system.bench.measure import machine
from qa_system.config import Settings
from qa_system.errors import QAError, check_count
from qa_system.evaluation.report import write_report
from qa_system.serving.api import serve_api
from qa_system.serving.model_server import PROGRAM
from qa_system.serving.webapp import settings_environment
from qa_system.sources import load_subjqa

HEALTH_EVERY_S = 0.5
MODEL_SERVER_ROLE = "model server"
SERVER_ROLES = ("api", MODEL_SERVER_ROLE)
MODEL_SERVER_PROGRAM = PROGRAM[-1]  # what the model server's command line runs
CLIENTS_PER_PROCESS = 8  # httpx takes about 2 ms of a core per answer: 8 clients at 50 answers/s each is a fifth of a core


@dataclass
class LoadResult:
    """What one load test of the API measured: answered requests' latencies, errors by kind, health-check latencies and the machine's load."""

    label: str
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)  # of the answered (200) requests
    errors: dict[str, int] = field(default_factory=dict)  # "HTTP 503", "ReadTimeout", ... -> count
    health: list[float] = field(default_factory=list)
    server_total_s: list[float] = field(default_factory=list)  # the pipeline's own total_s
    load_average: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end (a shared machine)
    records: list[dict[str, float]] = field(
        default_factory=list
    )  # per answered request: when (s into the run), latency and the server's timings
    memory: list[tuple[float, float]] = field(default_factory=list)  # (s into the run, server RSS in MB), from /health
    client_cpu: float = 0.0  # the busiest client process's CPU seconds per second of the run: near 1, it measured itself
    pipelines: set[str] = field(default_factory=set)  # which pipelines answered, as the answers name them (device included)
    server_cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of the server's processes during the run, by role

    def over_time(self, bin_s: float = 10.0) -> pd.DataFrame:
        """Per ``bin_s`` seconds of the run: answers, throughput, latency p50 / p95, the waits, and the server's largest RSS."""
        requests = pd.DataFrame(self.records or [{"t": 0.0, "latency_s": np.nan, "queue_s": np.nan, "reader_queue_s": np.nan}])
        memory = pd.DataFrame(self.memory or [(0.0, np.nan)], columns=["t", "memory_mb"])
        rows = []
        for start in np.arange(0.0, max(self.seconds, bin_s), bin_s):
            got = requests[(requests.t >= start) & (requests.t < start + bin_s)]
            rss = memory[(memory.t >= start) & (memory.t < start + bin_s)].memory_mb
            rows.append(
                {
                    "server": self.label,
                    "from_s": round(float(start)),
                    "answered": int(got.latency_s.notna().sum()),
                    "throughput_qps": round(got.latency_s.notna().sum() / bin_s, 2),
                    "p50_ms": _ms(got.latency_s, 50),
                    "p95_ms": _ms(got.latency_s, 95),
                    "queue_p50_ms": _ms(got.queue_s, 50),
                    "reader_queue_p50_ms": _ms(got.reader_queue_s, 50),
                    "memory_mb": round(float(rss.max()), 1) if rss.notna().any() else float("nan"),
                }
            )
        return pd.DataFrame(rows)

    def row(self) -> dict[str, Any]:
        """The result as one row of the report's table: throughput, latency percentiles in ms, the pipeline's own
        times, the waits, errors, the server's memory and load averages."""
        timing = pd.DataFrame(self.records or [{}], columns=["retrieval_s", "answer_s", "queue_s", "reader_queue_s"])
        memory = [mb for _, mb in self.memory]
        return {
            "server": self.label,
            "clients": self.clients,
            "seconds": round(self.seconds, 3),
            "answered": len(self.latencies),
            "errors": sum(self.errors.values()),
            "throughput_qps": round(len(self.latencies) / self.seconds, 2),
            "p50_ms": _ms(self.latencies, 50),
            "p95_ms": _ms(self.latencies, 95),
            "p99_ms": _ms(self.latencies, 99),
            "pipeline_p50_ms": _ms(self.server_total_s, 50),
            "pipeline_p95_ms": _ms(self.server_total_s, 95),
            "retrieval_p50_ms": _ms(timing.retrieval_s, 50),
            "answer_p50_ms": _ms(timing.answer_s, 50),
            "queue_p50_ms": _ms(timing.queue_s, 50),
            "queue_p95_ms": _ms(timing.queue_s, 95),
            "reader_queue_p50_ms": _ms(timing.reader_queue_s, 50),
            "reader_queue_p95_ms": _ms(timing.reader_queue_s, 95),
            "health_p50_ms": _ms(self.health, 50),
            "health_max_ms": _ms(self.health, 100),
            "memory_start_mb": memory[0] if memory else float("nan"),
            "memory_max_mb": max(memory, default=float("nan")),
            "memory_end_mb": memory[-1] if memory else float("nan"),
            "client_cpu_pct": round(100 * self.client_cpu, 1),
            "server_cpu_ms_per_answer": self._cpu_ms_per_answer(*SERVER_ROLES),
            "model_server_cpu_ms_per_answer": self._cpu_ms_per_answer(MODEL_SERVER_ROLE),
            "server_cores_busy": round(sum(self.server_cpu.values()) / self.seconds, 2) if self.server_cpu else float("nan"),
            "load_average_start": round(self.load_average[0], 1),
            "load_average_end": round(self.load_average[1], 1),
            "answered_by": "; ".join(sorted(self.pipelines)),
        }

    def _cpu_ms_per_answer(self, *roles: str) -> float:
        """The server's CPU ms per answered question in ``roles``' processes: NaN when none ran (or none was measured)."""
        if not self.latencies or not any(role in self.server_cpu for role in roles):
            return float("nan")
        return round(1000 * sum(self.server_cpu.get(role, 0.0) for role in roles) / len(self.latencies), 1)


def server_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far (user and system) of the server process ``pid`` and its descendants, by role: the model
    server's (``MODEL_SERVER_ROLE``, when it runs one), the others' ("api": the server processes, their supervisor)."""
    import psutil

    seconds: dict[str, float] = {}
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:  # it ended
        return seconds
    for process in processes:
        try:
            times, command = process.cpu_times(), " ".join(process.cmdline())
        except psutil.Error:  # one that ended meanwhile
            continue
        role = MODEL_SERVER_ROLE if MODEL_SERVER_PROGRAM in command else "api"
        seconds[role] = seconds.get(role, 0.0) + times.user + times.system
    return seconds


def _ms(values, q: float) -> float:
    """The ``q``-th percentile of ``values`` (seconds; NaN ignored) in ms, NaN when there are none."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return round(1000 * float(np.percentile(values, q)), 1) if len(values) else float("nan")


def load_test(
    url: str,
    questions: Sequence[dict],
    clients: int,
    seconds: float,
    label: str,
    token: str | None = None,
    warmup: int = 1,
    client_processes: int | None = None,
    server_pid: int | None = None,
) -> LoadResult:
    """``clients`` clients asking ``questions`` (request bodies; client k asks k, k + clients, ...) for ``seconds``; each
    first asks ``warmup`` uncounted. They are threads spread over ``client_processes`` processes (default: one per
    ``CLIENTS_PER_PROCESS``), none of them this one: Python runs one thread at a time per process, and 64 clients in one
    would measure the client as much as the server. The busiest client process's share of a core is reported
    (``client_cpu_pct``); with ``server_pid`` (a server started for the run), the CPU its processes spent meanwhile."""
    processes = client_processes or -(-clients // CLIENTS_PER_PROCESS)
    spawn = multiprocessing.get_context("spawn")
    started, stop, results = spawn.Barrier(clients + 1, timeout=600), spawn.Event(), spawn.Queue()
    asking = (url, questions, clients, token, warmup, started, stop)
    children = [
        spawn.Process(target=_ask_in_process, args=(results, range(first, clients, processes), *asking), daemon=True)
        for first in range(processes)
    ]
    for child in children:
        child.start()
    passed = threading.Event()
    threading.Thread(target=_abort_if_one_ends, args=(children, started, passed), daemon=True).start()
    try:
        started.wait()
    except threading.BrokenBarrierError:
        ended = [child.exitcode for child in children if child.exitcode is not None]
        why = f"a client process ended (exit code {ended[0]}) before the load began" if ended else "they did not start"
        raise QAError(f"The load test's clients did not start: {why}.", "see the error above; check that the server answers.") from None
    finally:
        passed.set()
    result = LoadResult(label, clients, seconds)
    run_began, load_before = time.time(), os.getloadavg()[0]
    cpu_before = server_cpu_seconds(server_pid) if server_pid else {}
    prober = threading.Thread(target=_probe, args=(url, result, run_began, stop), daemon=True)
    prober.start()
    time.sleep(seconds)
    stop.set()
    ended, result.load_average = time.time(), (load_before, os.getloadavg()[0])
    if server_pid:
        cpu_now = server_cpu_seconds(server_pid)
        result.server_cpu = {role: cpu_now[role] - cpu_before.get(role, 0.0) for role in cpu_now}
    try:
        outcomes = [results.get(timeout=120) for _ in children]
    except queue.Empty:
        raise QAError("A client process of the load test ended without its results.", "see the error above.") from None
    for child in children:
        child.join(timeout=30)
    prober.join(timeout=90)
    run_began = min(run_began, *(outcome["began"] for outcome in outcomes))  # the first client to pass the barrier
    result.seconds = ended - run_began
    for outcome in outcomes:
        result.pipelines.update(outcome["pipelines"])
        for error, count in outcome["errors"].items():
            result.errors[error] = result.errors.get(error, 0) + count
        for record in outcome["records"]:
            result.latencies.append(record["latency_s"])
            result.server_total_s.append(record["total_s"])
            result.records.append({**record, "t": record["t"] - run_began})
    result.records.sort(key=lambda record: record["t"])
    result.client_cpu = max(outcome["cpu_s"] for outcome in outcomes) / result.seconds
    return result


def _abort_if_one_ends(children: Sequence, started, passed: threading.Event) -> None:
    """Break the start barrier when a client process ends before passing it: the others would wait for it until the
    barrier's timeout (10 minutes)."""
    while not passed.wait(0.5):
        if any(child.exitcode is not None for child in children):
            started.abort()
            return


def _ask_in_turn(
    client_ids: Sequence[int], url: str, questions: Sequence[dict], clients: int, token: str | None, warmup: int, started, stop
) -> dict[str, Any]:
    """``client_ids``' clients, a thread each with its own keep-alive connection, asking back to back from ``started``
    (a barrier the caller passes too) until ``stop``: their answered requests (``t`` the time one began, in epoch
    seconds; ``client`` who asked), the pipelines that answered, errors by kind and the process's CPU seconds meanwhile."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    lock = threading.Lock()
    records: list[dict[str, float]] = []
    errors: dict[str, int] = {}
    pipelines: set[str] = set()
    passed: list[tuple[float, float]] = []  # (time, process CPU) as each client passed the barrier

    def client(k: int) -> None:
        turns = (questions[(k + i * clients) % len(questions)] for i in itertools.count())
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for _ in range(warmup):  # the first requests build per-connection state; an error here shows in the run
                try:
                    http.post("/query", json=next(turns))
                except httpx.HTTPError:
                    pass
            started.wait()
            passed.append((time.time(), time.process_time()))
            while not stop.is_set():
                began, began_at = time.perf_counter(), time.time()
                try:
                    response = http.post("/query", json=next(turns))
                    error = None if response.status_code == 200 else f"HTTP {response.status_code}"
                except httpx.HTTPError as failure:
                    response, error = None, type(failure).__name__
                elapsed = time.perf_counter() - began
                if error:
                    with lock:
                        errors[error] = errors.get(error, 0) + 1
                elif not stop.is_set():  # a request that ends after the deadline is not counted
                    answer = response.json()
                    timings = answer["timings"]
                    record = {"t": began_at, "client": k, "latency_s": elapsed}
                    record.update(
                        {name: timings.get(name, np.nan) for name in ("total_s", "retrieval_s", "answer_s", "queue_s", "reader_queue_s")}
                    )
                    with lock:
                        records.append(record)
                        pipelines.add(answer["pipeline"])

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in client_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    began_at, cpu_began = min(passed)
    return {
        "records": records,
        "pipelines": sorted(pipelines),
        "errors": errors,
        "began": began_at,
        "cpu_s": time.process_time() - cpu_began,
    }


def _ask_in_process(
    results, client_ids: Sequence[int], url: str, questions: Sequence[dict], clients: int, token: str | None, warmup: int, started, stop
) -> None:
    """``_ask_in_turn`` in a client process; its outcome goes back through ``results``. A client process that fails
    breaks the barrier, so that the load test stops rather than waits."""
    try:
        results.put(_ask_in_turn(client_ids, url, questions, clients, token, warmup, started, stop))
    except BaseException:
        started.abort()
        raise


def _probe(url: str, result: LoadResult, run_began: float, stop) -> None:
    """``GET /health`` every ``HEALTH_EVERY_S`` until ``stop``: its latency and the server's memory."""
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.wait(HEALTH_EVERY_S):
            began = time.perf_counter()
            try:
                response = http.get("/health")
            except httpx.HTTPError:
                continue
            result.health.append(time.perf_counter() - began)
            if (memory_mb := response.json().get("memory_mb")) is not None:
                result.memory.append((time.time() - run_began, memory_mb))


def wait_all_ready(url: str, processes: int, timeout: float = 600) -> None:
    """Until ``/health`` answers ready on ``4 x processes`` new connections in a row: each process loads on its own,
    and a new connection may reach any of them."""
    deadline, ready = time.monotonic() + timeout, 0
    while ready < 4 * processes:
        if time.monotonic() > deadline:
            raise QAError(f"The server's {processes} processes were not all ready after {timeout:.0f} s.", "see its log (server-*.log).")
        health = httpx.get(f"{url}/health", timeout=30)
        if health.status_code != 200 and health.json().get("status") == "failed":
            raise QAError(f"A server process failed to load: {health.json().get('error')}", "see the server's log (server-*.log).")
        ready = ready + 1 if health.status_code == 200 else 0
        if not ready:
            time.sleep(0.5)


def load_questions(settings: Settings, domain: str, split: str, limit: int, seed: int, retriever: str | None, top_k: int) -> list[dict]:
    """Up to ``limit`` distinct /query bodies (question and product) of a labelled split, shuffled with ``seed``."""
    questions = load_subjqa(domain, [split], settings.data_dir).questions
    if not questions:
        raise QAError(f"No labelled questions in {domain}/{split}.", "pick another --split.")
    bodies = list({(q.question, q.item_id): None for q in questions})
    random.Random(seed).shuffle(bodies)
    extra = {"retriever": retriever} if retriever else {}
    return [{"query": q, "item_id": item, "collection": domain, "top_k": top_k, **extra} for q, item in bodies[:limit]]


def run_api_bench(
    settings: Settings,
    out_dir: str | Path = "reports/bench-api",
    backends: Sequence[str] | None = None,
    clients: int | Sequence[int] = 8,
    seconds: float = 60.0,
    url: str | None = None,
    domain: str = "electronics",
    split: str = "test",
    questions: int = 200,
    retriever: str | None = None,
    top_k: int = 3,
    seed: int = 0,
    progress: Callable[[str], None] = print,
    processes: int = 1,
) -> pd.DataFrame:
    """The load test against ``url``, or against a server started for each of ``backends`` (None: the configured
    reader backend, as `qa-system api` serves it) with ``processes`` processes, at each number of ``clients`` in
    turn; writes a report to ``out_dir``."""
    counts = [check_count(n, "clients", 1, 256) for n in ([clients] if isinstance(clients, int) else clients)]
    processes = check_count(processes, "processes")
    backends = backends or (settings.reader_backend,)
    bodies = load_questions(settings, domain, split, check_count(questions, "questions"), seed, retriever, check_count(top_k, "top_k"))
    results = []
    named = (lambda label, n: f"{label}, {n} clients") if len(counts) > 1 else (lambda label, n: label)
    for n in counts if url else []:
        progress(f"{n} clients for {seconds:.0f} s against {url}")
        results.append(load_test(url, bodies, n, seconds, named(url, n), settings.api_token))
    for backend in [] if url else backends:
        env = settings_environment({**settings.model_dump(), "reader_backend": backend, "api_rate_limit": 0, "api_processes": processes})
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        # Named by the setting, not by what reads: on a GPU without ONNX Runtime's CUDA provider, PyTorch reads for
        # "onnx" (each row's answered_by says which).
        asked = f"QA_READER_BACKEND={backend}"
        progress(f"starting qa-system api with {asked}, {processes} process(es) (log: {out / f'server-{backend}.log'})")
        with serve_api(env, args=["--domain", domain], log=out / f"server-{backend}.log", timeout=1800) as server:
            if processes > 1:
                wait_all_ready(server.url, processes)
            for n in counts:
                progress(f"{n} clients for {seconds:.0f} s against the server with {asked}")
                label = named(asked, n)
                results.append(load_test(server.url, bodies, n, seconds, label, settings.api_token, server_pid=server.pid))
    table = pd.DataFrame([r.row() for r in results])
    over_time = pd.concat([r.over_time() for r in results], ignore_index=True)
    summary: dict[str, Any] = {
        "machine": machine(settings.device),
        "questions": len(bodies),
        "domain": domain,
        "split": split,
        "top_k": top_k,
        "retriever": retriever or settings.retriever,
        "server_processes": None if url else processes,
        "workers_per_process": None if url else settings.api_workers,
    }
    if len(results) == 2:
        first, second = table.iloc[0], table.iloc[1]
        summary["ratios"] = {
            f"throughput {second['server']} / {first['server']}": round(second["throughput_qps"] / first["throughput_qps"], 2),
            f"p50 {second['server']} / {first['server']}": round(second["p50_ms"] / first["p50_ms"], 2),
            f"p95 {second['server']} / {first['server']}": round(second["p95_ms"] / first["p95_ms"], 2),
        }
    summary["errors"] = {r.label: r.errors for r in results}
    notes = [
        f"{' then '.join(map(str, counts))} concurrent clients, each asking POST /query back to back for {seconds:.0f} s ({len(bodies)} labelled {domain}/{split} questions, "
        f"each about its own product, top_k {top_k}); latency measured by the client; a GET /health probe every {HEALTH_EVERY_S} s meanwhile.",
        f"{summary['machine']['logical_cpus']} CPUs, shared with other jobs: the load average at each run's start and end is in the table; compare ratios under similar load.",
    ]
    notes.append(
        "queue: waiting for an API worker thread; reader_queue: waiting for the reader's inference lane (other questions' windows); "
        "pipeline: the server's own time for a question (retrieval + answer); answered_by: the pipelines that answered, as "
        "their answers name them (the reader's backend and the device included); memory: the server's RSS, from GET /health"
        + (" (of the one process that answered each probe)." if processes > 1 else ".")
    )
    notes.append(
        f"The clients run {CLIENTS_PER_PROCESS} to a process; client_cpu_pct: the busiest client process's share of one core "
        "(near 100, the load test rather than the server set the pace)."
    )
    notes.append(
        "server_cpu_ms_per_answer: the CPU (user and system, all threads) of the server's processes during the run per "
        "answered question, the model server's included; model_server_cpu_ms_per_answer: the model server's part (a "
        "server of several processes on a GPU); server_cores_busy: their CPU seconds per second, to compare with the "
        "machine's cores. Not measured (NaN) against --url."
    )
    write_report(
        out_dir, "API load test", table, summary, {"over_time.png": over_time_plot(over_time)}, {"Over time": over_time}, notes=notes
    )
    return table


def over_time_plot(over_time: pd.DataFrame):
    """Latency p50 / p95 and the server's memory (RSS) over each run, one line per server."""
    import matplotlib.pyplot as plt

    figure, (latency, memory) = plt.subplots(1, 2, figsize=(13, 4.5))
    for server, rows in over_time.groupby("server", sort=False):
        line = latency.plot(rows.from_s, rows.p50_ms, marker="o", label=f"{server} p50")[0]
        latency.plot(rows.from_s, rows.p95_ms, linestyle="--", color=line.get_color(), label=f"{server} p95")
        memory.plot(rows.from_s, rows.memory_mb, marker="o", color=line.get_color(), label=server)
    latency.set(title="Latency over the run (client side)", xlabel="seconds into the run", ylabel="ms")
    memory.set(title="Server memory (RSS) over the run", xlabel="seconds into the run", ylabel="MB")
    for axes in (latency, memory):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    return figure
