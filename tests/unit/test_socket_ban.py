"""The socket ban of tests/unit (tests/unit/conftest.py) holds: no connect, no lookup, no server."""

from __future__ import annotations

import asyncio
import socket
import warnings
from collections.abc import Iterator

import pytest
from pytest_socket import SocketBlockedError


@pytest.fixture
def blocked() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pytest-socket warns, then raises: the raise is checked
        yield


def test_a_unit_test_cannot_connect(blocked: None) -> None:
    with pytest.raises(SocketBlockedError):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    with pytest.raises(SocketBlockedError):
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM)


def test_a_unit_test_cannot_look_up_a_host(blocked: None) -> None:
    with pytest.raises(SocketBlockedError):
        socket.getaddrinfo("example.org", 443)
    with pytest.raises(SocketBlockedError):
        socket.gethostbyname("example.org")


async def test_asyncio_cannot_connect_or_listen_either(blocked: None) -> None:
    with pytest.raises(SocketBlockedError):
        await asyncio.open_connection("127.0.0.1", 9)
    with pytest.raises(SocketBlockedError):
        await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)


def test_unix_socket_pairs_stay_allowed_for_the_event_loop() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
