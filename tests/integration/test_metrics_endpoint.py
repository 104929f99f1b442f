"""The worker's Prometheus endpoint and JSON logs, in a real ``outbox worker`` process (ADR 0028).

With ``--metrics-port`` the process listens on that port on 127.0.0.1 only, and a scrape over HTTP
shows the sent counter after a real send through SMTP; without it the process listens on nothing.
``--log-format json`` makes every stderr line one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import outbox

from outbox_adapters.demo.sink import SmtpSink

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on over TCP (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((address, int(port, 16)))
    return found


@contextlib.contextmanager
def worker(dsn: str, lane: str, sink: SmtpSink, *flags: str) -> Iterator[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "OUTBOX_DATABASE_URL": dsn,
        "OUTBOX_LANE": lane,
        "OUTBOX_SMTP_URL": f"smtp://{sink.host}:{sink.port}",
        "OUTBOX_SMTP_CA_FILE": str(sink.ca_file),
        "OUTBOX_SENDER": "outbox@example.com",
        "OUTBOX_POLL_INTERVAL": "0.1",
    }
    process = subprocess.Popen(  # noqa: S603 - this interpreter, fixed arguments
        [sys.executable, "-m", "outbox_adapters", *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.communicate(timeout=20)


def send_one(dsn: str, lane: str, sink: SmtpSink) -> None:
    result = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", "ann@example.com",
        "--subject", "Hello", "--text", "Hello there",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 60  # a worker subprocess starting on a busy machine
    while not sink.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.received, "the running worker did not deliver"


def scrape(url: str, pattern: str) -> str:
    """The endpoint's text once ``pattern`` is in it (the mark lands just after the send)."""
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own http URL
            text: str = response.read().decode()
        if re.search(pattern, text, re.MULTILINE) or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def test_the_metrics_endpoint_listens_on_loopback_and_counts_a_real_send(dsn, lane, sink):
    port = free_port()
    flags = ("--log-format", "json", "--log-level", "info", "worker", "--metrics-port", str(port))
    with worker(dsn, lane, sink, *flags) as process:
        send_one(dsn, lane, sink)
        assert listening(process.pid) == {("0100007F", port)}  # 127.0.0.1, and nothing else
        sent = rf'^outbox_sent_total\{{.*outbox_lane="{re.escape(lane)}".*\}} 1\.0$'
        text = scrape(f"http://127.0.0.1:{port}/metrics", sent)
        assert re.search(sent, text, re.MULTILINE), text
        assert re.search(
            rf'^outbox_end_to_end_duration_seconds_count\{{.*"{lane}".*\}} 1\.0$',
            text,
            re.MULTILINE,
        ), text
        assert "outbox_claim_duration_seconds_bucket" in text
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    assert f"metrics: http://127.0.0.1:{port}/metrics" in stdout
    # The log records, one JSON object a line (the command's own notices, such as "SIGTERM:
    # stopping", are plain text on stderr, as without --log-format).
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert lines, stderr
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    rows = [line for line in lines if line.get("lane") == lane and "row" in line]
    assert rows, stderr
    assert rows[0]["level"] == "INFO"


def test_without_a_metrics_port_the_worker_listens_on_nothing(dsn, lane, sink):
    with worker(dsn, lane, sink, "worker") as process:
        send_one(dsn, lane, sink)
        assert listening(process.pid) == set()
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=20)
    assert "metrics:" not in stdout


def test_a_metrics_port_already_taken_is_a_setting_error(dsn, lane, sink):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = outbox("worker", "--database-url", dsn, "--metrics-port", str(port))
    assert result.exit_code == 2
    assert "--metrics-port/--metrics-host" in result.stderr
    assert f"127.0.0.1:{port}" in result.stderr
