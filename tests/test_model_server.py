"""The model server of a several-process API on a GPU, run here on the CPU: its reader and encoder answer as the
process's own would, concurrent callers share its calls, and its failures reach the caller as one line."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client
from pathlib import Path

import numpy as np
import psutil
import pytest
from haystack import Document

from helpers.models import tiny_model_dir
from qa_system.bench.api import MODEL_SERVER_ROLE, server_cpu_seconds
from qa_system.config import Settings, default_embedding_model
from qa_system.errors import QAError, Unavailable
from qa_system.ingestion.embedding import TorchSentenceEncoder, load_encoder
from qa_system.model_client import ADDRESS_VARIABLE, KEY_VARIABLE, RemoteEncoder, model_server
from qa_system.reading.model import load_qa_model
from qa_system.reading.reader import ExtractiveReader
from qa_system.serving.api.server import uses_model_server
from qa_system.serving.model_server import ModelServer, load_lines

REVIEWS = [
    Document(content="The screen is sharp and great for reading at night. The battery lasts two days."),
    Document(content="Too heavy to hold in one hand for long, but the case is sturdy."),
]
QUESTIONS = ["Is it good for reading?", "How long does the battery last?", "Is it heavy?", "Is the case sturdy?", "Is the screen sharp?"]


@pytest.fixture(scope="module")
def tiny_reader(tmp_path_factory):
    """A tiny random reader that reads windows of up to 512 tokens, as the lane's start-up check does."""
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-reader-512"), max_positions=512)


@pytest.fixture(scope="module")
def server():
    with ModelServer("cpu") as running:
        yield running


def _answers(reader, question):
    return [(a.data, round(a.score, 5)) for a in reader.run(question, REVIEWS)["answers"]]


def test_the_model_servers_address_is_in_the_environment_for_the_block_only(server):
    assert os.environ[ADDRESS_VARIABLE].endswith("socket") and len(bytes.fromhex(os.environ[KEY_VARIABLE])) == 32
    assert model_server() is not None


def test_a_reader_on_the_model_server_answers_as_its_own_model_would(server, tiny_reader):
    own = ExtractiveReader(model=tiny_reader, backend="torch", device="cpu")
    served = ExtractiveReader(model=tiny_reader, backend="torch", device="cpu")
    own.warm_up()
    served.warm_up()
    assert served._model is None and served.active_backend == "torch" and served.runs_on == "cpu"
    tokenizer, no_model = load_qa_model(tiny_reader, weights=False)  # what the served reader loads: its tokenizer alone
    assert tokenizer.is_fast and no_model is None
    expected = {question: _answers(own, question) for question in QUESTIONS}
    assert {question: _answers(served, question) for question in QUESTIONS} == expected
    # Questions asked at once, their windows read together in the model server's lane, get the same answers.
    got = {}
    threads = [threading.Thread(target=lambda q=q: got.__setitem__(q, _answers(served, q))) for q in QUESTIONS * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == expected
    served, calls, busy_s = model_server().request("load")[f"reader {tiny_reader}"]
    assert served >= 3 * len(QUESTIONS) and 0 < calls and busy_s > 0  # every question's windows, read in the lane
    # `bench api` tells the model server's CPU from its API's, as here this process's from its child's.
    cpu = server_cpu_seconds(os.getpid())
    assert cpu[MODEL_SERVER_ROLE] > 0 and cpu["api"] > 0


def test_an_encoder_on_the_model_server_gives_the_processs_own_vectors_and_shares_its_calls(server):
    model = default_embedding_model()
    served = load_encoder(model, "torch", "cpu")
    assert isinstance(served, RemoteEncoder) and served.precision == "float32"
    texts = [[f"question {i}", "battery life", "a longer phrase about the screen and the case"] for i in range(8)]
    own = TorchSentenceEncoder(model, "cpu")
    assert np.abs(served.encode(texts[0]) - own.encode(texts[0])).max() <= 1e-6
    assert served.encode([]).shape == (0, 384)
    before = model_server().request("load")
    got = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, served.encode(texts[i]))) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(8):
        assert np.abs(got[i] - own.encode(texts[i])).max() <= 1e-6
    # Callers waiting together share a call; the model server's log says so every 30 s.
    (line,) = [line for line in load_lines(before, model_server().request("load"), 30.0) if line.startswith(f"encoder {model}:")]
    requests, calls, busy = re.fullmatch(r".*: (\d+) requests in (\d+) calls in the last 30 s, busy (\d+)% of it\.", line).groups()
    assert int(requests) == 8 and int(calls) < 8 and 0 <= int(busy) <= 100


def test_the_model_servers_errors_reach_the_caller_as_one_line(server, tmp_path):
    with pytest.raises(QAError, match=r"The reader model directory .* has no config.json\..* Fix: "):
        model_server().reader(str(tmp_path), 0.003, 64)
    with pytest.raises(QAError, match="Could not load the embedding model 'no such encoder'"):
        model_server().request("encode", "no such encoder", ["text"])
    # Its own failures are the API's 503, and it goes on serving.
    with pytest.raises(Unavailable, match="The model server's logits request failed: ValueError"):
        model_server().request("logits", "not a reader's key")
    pid = server._process.pid
    with pytest.raises(Exception, match="digest"):  # a caller without the key is refused...
        Client(os.environ[ADDRESS_VARIABLE], family="AF_UNIX", authkey=b"not the key")
    with pytest.raises(subprocess.TimeoutExpired):  # ...the server does not end (its own end takes under a second)...
        server._process.wait(timeout=3)
    assert server._process.pid == pid and model_server().request("load") is not None  # ...and goes on serving


def test_a_stopped_model_server_is_one_line_and_settings_choose_it_on_a_gpu_alone(tiny_reader):
    with ModelServer("cpu"):
        client = model_server()
        client.request("load")
    assert ADDRESS_VARIABLE not in os.environ and model_server() is None
    with pytest.raises(Unavailable, match=r"The model server of this API does not answer \(it stopped, .*\)\. Fix: ask again shortly"):
        client.request("load")
    settings = Settings.from_env(device="cpu", api_processes=4)
    assert not uses_model_server(settings)  # a CPU's processes read their own ONNX models


def test_a_model_server_that_ends_is_started_again_and_loads_its_models_anew(tiny_reader, caplog):
    # A GPU's fatal error ends the process that met it: the API's questions fail (503) until the model server runs
    # again, then the reader answers as before, its model loaded anew for the first question.
    with caplog.at_level("INFO", logger="qa_system.serving.model_server"), ModelServer("cpu", retry_s=1) as running:
        served = ExtractiveReader(model=tiny_reader, backend="torch", device="cpu")
        served.warm_up()
        expected = _answers(served, QUESTIONS[0])
        first = running._process.pid
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while True:
            try:
                got = _answers(served, QUESTIONS[0])
                break
            except Unavailable as error:
                assert "does not answer" in str(error) and time.monotonic() < deadline
                time.sleep(0.2)
        assert got == expected and running._process.pid != first
    assert f"The model server (process {first}) ended with exit code -9; starting it again." in caplog.text
    assert "The model server runs again" in caplog.text


def test_a_model_server_whose_api_is_killed_ends_and_removes_its_socket():
    # Killed, the API cannot stop its model server: the server sees its parent go, and ends rather than hold a GPU.
    api = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from qa_system.serving.model_server import ModelServer\n"
            "with ModelServer('cpu') as running:\n    print(running._process.pid, running._address, flush=True)\n    time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid, address = api.stdout.readline().split()
    os.kill(api.pid, signal.SIGKILL)
    api.wait()
    deadline = time.monotonic() + 30
    while Path(address).parent.exists() or _alive(int(pid)):
        assert time.monotonic() < deadline, "the model server outlived its API"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
