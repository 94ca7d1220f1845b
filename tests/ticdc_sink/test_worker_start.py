"""A worker whose Kafka goes away between its own wait for Kafka and Faust's first connection
starts again in place (same pid), saying so in one line, and goes on once Kafka is back."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.settings import Settings
from core.redis_client import redis_client
from core.staging import Staging
from tests.ticdc_sink.pipelines import pipeline_env, spawn, stop, wait_for
from ticdc_sink.produce import run_produce

pytestmark = pytest.mark.integration

KAFKA = ("127.0.0.1", 9092)
# The start of the client id of the worker's Faust app (streams/worker/app.py).
FAUST_CLIENT = b"ticdc-sink-worker-"


class DoorToKafka:
    """A TCP port in front of Kafka that, while shut, closes each connection of Faust's clients
    (known by the client id the worker gives them) after their first request, and forwards every
    other; once opened, it forwards all (Kafka's metadata then sends clients to its own port).
    So the worker's own checks and waits find Kafka, and Faust's start-up does not."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.open = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(client,), daemon=True).start()

    def _connection(self, client: socket.socket) -> None:
        # A request: size (4), api key (2), api version (2), correlation id (4), client id.
        head = _read(client, 14)
        name = _read(client, struct.unpack(">h", head[12:14])[0]) if len(head) == 14 else b""
        if not head or (not self.open and name.startswith(FAUST_CLIENT)):
            client.close()
            return
        upstream = socket.create_connection(KAFKA)
        upstream.sendall(head + name)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._server.close()


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        try:
            more = connection.recv(size - len(data))
        except OSError:
            return data
        if not more:
            return data
        data += more
    return data


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def door() -> Iterator[DoorToKafka]:
    opened = DoorToKafka()
    yield opened
    opened.close()


def test_kafka_gone_as_faust_starts_starts_the_worker_again_in_place(
    pipeline: Settings, door: DoorToKafka, tmp_path: Path
) -> None:
    run_produce(
        pipeline, pipeline.group, "open", 2, 20, seed=1, expected=tmp_path / "x.json",
        schema=pipeline.group,
    )  # fmt: skip
    log = tmp_path / "worker.log"
    env = pipeline_env(pipeline, "open", TICDC_SINK_KAFKA=f"127.0.0.1:{door.port}")
    worker = spawn("worker", env, log)
    try:
        wait_for(lambda: "starting again" in log.read_text(), "a start again", 120)
        assert worker.poll() is None
        door.open = True
        staging = Staging(redis_client(pipeline), pipeline.group)
        deadline = time.monotonic() + 120
        while staging.staged_totals()[0] == 0:
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.25)
    finally:
        stop(worker)
    text = log.read_text()
    assert "Traceback" not in text, text
    again = [line for line in text.splitlines() if "starting again" in line]
    assert again and "Kafka went away while the worker started (KafkaConnectionError" in again[0]
    # One process all along: the start again replaced its program, not the process.
    starts = [line for line in text.splitlines() if "starting on" in line]
    assert len(starts) == len(again) + 1
    assert all(line.endswith(f"(pid {worker.pid})") for line in starts)
