"""The browser the suite's Playwright tests drive: Debian's chromium (browser downloads are
blocked). Missing, it fails the test under ``CI=true`` (``.ci/run`` installs the package) and skips
it elsewhere."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ["assert_unframeable", "chromium"]


def chromium() -> str:
    """The chromium executable's path."""
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("no chromium: .ci/run installs Debian's package when it is missing")
        pytest.skip("no chromium (apt-get install -y chromium)")
    return found


def assert_unframeable(answer: object) -> None:
    """A browser-facing app's answer forbids framing and sniffing (``BrowserGuard``)."""
    headers = answer.headers  # type: ignore[attr-defined]
    assert "frame-ancestors 'none'" in headers["content-security-policy"], answer
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
