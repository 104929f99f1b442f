"""Every error class ``outbox failed`` can show, enumerated from the code (tests/unit/test_docs.py
checks each has an entry in the runbook, docs/operations.md).

A row's error is its outcome's reason, and its class is :func:`outbox_core.top.error_class` of it
(the text up to the first colon followed by a space, addresses masked). Two sources:

- the core's classifiers, run over their whole input: every SMTP reply code and stage, every
  HTTP status and transport failure;
- every other reason the code writes, read from the source: the first argument of each
  ``Outcome.transient/permanent/skipped(...)`` and ``StepFailed(...)`` call in ``src/`` that is a
  string or f-string (a conditional inside an f-string gives one class per branch). A formatted
  value becomes ``<...>``: the runbook writes it as a ``<placeholder>``.

A call whose reason is not written out there (``str(exc)``, a variable) must be in
:data:`PASSED_THROUGH`, which says where its classes come from; a new one fails the test until it
is explained there.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

from outbox_core import (
    HttpAttempt,
    HttpFailure,
    SmtpStage,
    classify_http,
    classify_smtp_failure,
    classify_smtp_reply,
)
from outbox_core.top import error_class

SRC = Path(__file__).resolve().parents[2] / "src"
# The in-memory fakes and the demo write no reasons of their own to a real database.
SKIPPED_DIRS = ("outbox_adapters/memory/", "outbox_adapters/demo/")
REASON_CALLS = {"transient", "permanent", "skipped", "StepFailed"}
#: brokers.errors.operation(what): a BrokerUnavailable "<what> failed: <cause>".
OPERATION_CALLS = {"operation"}
HOLE = "<...>"

#: Calls whose reason is not written out at the call: (file, the argument's source) -> the classes
#: it can give (those of the classifiers, run by :func:`classified`, are not repeated).
PASSED_THROUGH: dict[tuple[str, str], tuple[str, ...]] = {
    (
        "outbox_core/classify.py",
        "_reason(f'SMTP unexpected reply {_code_text(code)}', _plain(message))",
    ): (),
    (
        "outbox_core/classify.py",
        "_reason('SMTP no reply after the message was sent (may be delivered)', detail)",
    ): (),
    ("outbox_core/classify.py", "_reason(f'SMTP failure at {stage.value}', detail)"): (),
    ("outbox_core/classify.py", "reason"): (),
    ("outbox_core/recipients.py", "_capped(f\"recipients {', '.join(named)} are suppressed\")"): (
        f"recipients {HOLE} are suppressed",
    ),
    # settle(): one refusal names its recipient, several are counted.
    ("outbox_core/recipients.py", "reason"): (
        "recipient <address> refused",
        f"{HOLE} recipients refused",
    ),
    # EmailHandler: a hook's StepFailed (its calls are scanned) as it is.
    ("outbox_adapters/lanes/email.py", "str(exc)"): (),
    # The relay's wait for an earlier event of the same key.
    ("outbox_adapters/lanes/relay.py", "EARLIER_UNPUBLISHED"): (
        "an earlier event of this key is unpublished",
    ),
    # A BrokerUnavailable raised by brokers.errors.operation(): its calls are scanned.
    ("outbox_adapters/brokers/nats/broker.py", "str(exc)"): (),
    ("outbox_adapters/brokers/kafka/broker.py", "str(exc)"): (),
    ("outbox_adapters/http/errors.py", "_reason(detail)"): ("destination address not allowed",),
    ("outbox_adapters/http/errors.py", "_reason(f'destination address not allowed: {detail}')"): (
        "destination address not allowed",
    ),
    (
        "outbox_adapters/http/errors.py",
        "_reason(f'the webhook request cannot be sent as built: {type(exc).__name__}: {exc}')",
    ): ("the webhook request cannot be sent as built",),
}


def _texts(node: ast.expr) -> list[str]:
    """The texts an argument can be, formatted values as HOLE; [] when it is not written out."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if not isinstance(node, ast.JoinedStr):
        return []
    texts = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            texts = [t + str(part.value) for t in texts]
            continue
        assert isinstance(part, ast.FormattedValue)
        value = part.value
        if isinstance(value, ast.IfExp) and (_texts(value.body) and _texts(value.orelse)):
            options = _texts(value.body) + _texts(value.orelse)
        else:
            options = [HOLE]
        texts = [t + option for t in texts for option in options]
    return texts


def _name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "Outcome" else None
    return func.id if isinstance(func, ast.Name) else None


def scanned() -> tuple[set[str], set[tuple[str, str]]]:
    """The classes written out in ``src/``, and the calls whose reason is not."""
    classes: set[str] = set()
    unwritten: set[tuple[str, str]] = set()
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where.startswith(SKIPPED_DIRS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _name(node) in OPERATION_CALLS and node.args:
                classes.update(error_class(f"{text} failed") or "" for text in _texts(node.args[0]))
            if isinstance(node, ast.Call) and _name(node) in REASON_CALLS and node.args:
                texts = _texts(node.args[0])
                if not texts:
                    unwritten.add((where, ast.unparse(node.args[0])))
                classes.update(c for c in map(error_class, texts) if c)
    return classes, unwritten


def classified() -> set[str]:
    """The classes of everything the core's SMTP and HTTP classifiers can say."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    outcomes = [
        classify_smtp_reply(code, message)
        for code in range(700)
        for message in ("", "no such user", "5.1.1 no such user", "4.2.2 mailbox full")
    ]
    outcomes += [classify_smtp_failure(stage, "detail") for stage in SmtpStage]
    outcomes += [
        classify_http(HttpAttempt.failed(failure, request_sent=False), now=now)
        for failure in HttpFailure
    ]
    outcomes += [classify_http(HttpAttempt.response(status), now=now) for status in range(100, 700)]
    return {c for c in (error_class(o.reason) for o in outcomes) if c}


def every_class() -> set[str]:
    """Every class ``outbox failed`` can show; raises if a call's reason is unaccounted for."""
    classes, unwritten = scanned()
    unknown = unwritten - PASSED_THROUGH.keys()
    if unknown:
        raise AssertionError(
            f"reasons not written out and not in PASSED_THROUGH: {sorted(unknown)}"
        )
    classes.discard("")
    for passed in PASSED_THROUGH.values():
        classes.update(passed)
    return classes | classified()
