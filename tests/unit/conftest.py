"""The unit tests' rule: no network (docs/testing.md, "The socket ban").

Every test in ``tests/unit`` runs with network sockets and name lookups blocked by pytest-socket:
``socket.socket`` for any family but AF_UNIX, ``socket.getaddrinfo`` and ``socket.gethostbyname``
raise ``SocketBlockedError``, so ``connect``, ``create_connection`` and asyncio's
``open_connection`` fail before a byte leaves. AF_UNIX stays allowed: an asyncio event loop wakes
itself through a ``socketpair``. A test that needs a server belongs in ``tests/integration``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest
import pytest_socket

BANNED = (
    "tests/unit may not use the network (tests/unit/conftest.py, pytest-socket): this test opened"
    " a socket or looked up a host name. Use the in-memory fakes, or move the test to"
    " tests/integration."
)


@pytest.fixture(autouse=True)
def _no_network() -> Iterator[None]:
    pytest_socket.disable_socket(allow_unix_socket=True)
    yield
    pytest_socket.enable_socket()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Name the rule next to the failure when the socket guard is what failed the test."""
    report = yield
    text = str(call.excinfo.value) if call.excinfo else ""
    if report.failed and "A test tried to use socket" in text + report.longreprtext:
        report.sections.append(("socket ban", BANNED))
    return report
