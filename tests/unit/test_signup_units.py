"""The reference app's pure parts: the signup form, the client a request counts as, the in-process
limiter's windows, the confirmation links."""

from __future__ import annotations

import pytest

from examples.signup_service.forms import FormError, SignupForm, slug_of
from examples.signup_service.ratelimit import InProcessLimiter, client_of
from examples.signup_service.recipes import ConfirmLinks


def test_a_good_form_is_normalised() -> None:
    form = SignupForm.parse(
        {"company": "  Café Über ", "admin_name": "Ann", "admin_email": "Ann@Bücher.example"}
    )
    assert form.company == "Café Über"
    assert form.slug == "cafe-uber"
    assert form.admin_email == "Ann@xn--bcher-kva.example"


@pytest.mark.parametrize(
    "hostile",
    ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\x85b", "a\u2028b", "a\u202eb", "a\u2066b", "a\x7fb"],
)
def test_control_characters_are_refused_in_free_text(hostile: str) -> None:
    for field in ("company", "admin_name"):
        raw = {"company": "Acme", "admin_name": "Ann", "admin_email": "a@b.example", field: hostile}
        with pytest.raises(FormError) as refused:
            SignupForm.parse(raw)
        assert refused.value.field == field
        assert "control characters" in refused.value.reason


def test_refusals_name_the_field() -> None:
    cases: dict[str, dict[str, object]] = {
        "company": {"company": "!!!", "admin_name": "A", "admin_email": "a@b.example"},
        "admin_name": {"company": "Acme", "admin_name": 7, "admin_email": "a@b.example"},
        "admin_email": {"company": "Acme", "admin_name": "A", "admin_email": "Ann <a@b.example>"},
    }
    for field, raw in cases.items():
        with pytest.raises(FormError) as refused:
            SignupForm.parse(raw)
        assert refused.value.field == field


def test_slugs() -> None:
    assert slug_of("Acme -- Rockets & Co.") == "acme-rockets-co"
    assert slug_of("東京") == ""
    assert len(slug_of("x" * 100)) == 40


def test_the_client_is_the_right_most_forwarded_hop_else_the_peer() -> None:
    assert client_of({"x-forwarded-for": "6.6.6.6, 10.0.0.1, 203.0.113.9"}, "10.0.0.2") == (
        "203.0.113.9"
    )
    assert client_of({"x-forwarded-for": " 203.0.113.9 ,"}, "10.0.0.2") == "203.0.113.9"
    assert client_of({"x-forwarded-for": " , "}, "10.0.0.2") == "10.0.0.2"
    assert client_of({}, "10.0.0.2") == "10.0.0.2"
    assert client_of({}, None) == "unknown"
    assert len(client_of({"x-forwarded-for": "a" * 500}, None)) == 64


async def test_the_in_process_limiter_counts_per_client_and_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("examples.signup_service.ratelimit.time.time", lambda: now[0])
    limiter = InProcessLimiter(2, 60.0)
    verdicts = [await limiter.hit("a") for _ in range(3)]
    assert [v.allowed for v in verdicts] == [True, True, False]
    assert verdicts[2].retry_after == 20  # the window of 960-1020 ends in 20 s
    assert (await limiter.hit("b")).allowed
    now[0] = 1020.0  # the next window
    assert (await limiter.hit("a")).allowed
    assert len(limiter._counts) == 1  # past windows forgotten


def test_confirmation_links_are_signed_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    links = ConfirmLinks("k" * 32, "https://app.example/", max_age=60)
    link = links.link("user-1")
    assert link.startswith("https://app.example/confirm?token=")
    token = link.split("token=")[1]
    assert links.user_of(token) == "user-1"
    # Altered payload, altered signature: each refused. (Not the signature's last character: its
    # low bits are base64 padding, so some replacements decode to the same bytes.)
    payload, _, rest = token.partition(".")
    altered = ("A" if payload[0] != "A" else "B") + payload[1:]
    assert links.user_of(f"{altered}.{rest}") is None
    signature = token.rsplit(".", 1)[1]
    forged = token[: -len(signature)] + ("A" if signature[0] != "A" else "B") + signature[1:]
    assert links.user_of(forged) is None
    assert ConfirmLinks("j" * 32, "https://app.example", max_age=60).user_of(token) is None
    later = ConfirmLinks("k" * 32, "https://app.example", max_age=60)
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: 10**10)
    assert later.user_of(token) is None
