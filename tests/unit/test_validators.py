"""The setting checks written once (outbox_core._validators): one error type, the setting named."""

from __future__ import annotations

import math
from datetime import timedelta

import attrs
import pytest

from outbox_core._validators import duration, seconds, whole_number
from outbox_core.errors import ConfigurationError


@attrs.frozen
class Settings:
    wait: timedelta = attrs.field(default=timedelta(seconds=1), validator=duration("Thing."))
    grace: timedelta = attrs.field(default=timedelta(0), validator=duration("Thing.", zero_ok=True))
    sessions: int = attrs.field(default=1, validator=whole_number("SMTP", 1, 64))
    retries: int = attrs.field(default=1, validator=whole_number("SMTP", 1))
    poll: float = attrs.field(default=1.0, validator=seconds("Thing."))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"wait": timedelta(0)}, r"^Thing.wait must be a duration above 0s, got "),
        ({"wait": 5}, r"^Thing.wait must be a duration above 0s, got 5$"),
        ({"grace": -timedelta(seconds=1)}, r"^Thing.grace must be a duration 0s or more"),
        ({"sessions": 0}, r"^SMTP sessions must be a whole number from 1 to 64, got 0$"),
        ({"sessions": 65}, r"^SMTP sessions must be a whole number from 1 to 64, got 65$"),
        ({"sessions": True}, r"^SMTP sessions must be a whole number from 1 to 64, got True$"),
        ({"sessions": 2.0}, r"^SMTP sessions must be a whole number"),
        ({"retries": 0}, r"^SMTP retries must be a whole number of at least 1, got 0$"),
        ({"poll": 0}, r"^Thing.poll must be a finite number of seconds above 0, got 0$"),
        ({"poll": math.inf}, r"^Thing.poll must be a finite number of seconds above 0"),
        ({"poll": False}, r"^Thing.poll must be a finite number of seconds above 0"),
        ({"poll": "1"}, r"^Thing.poll must be a finite number of seconds above 0"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_by_name(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        Settings(**settings)


def test_settings_inside_their_bounds_are_kept():
    kept = Settings(timedelta(seconds=2), timedelta(0), 64, 10**6, 0.001)
    assert (kept.sessions, kept.retries, kept.poll) == (64, 10**6, 0.001)
