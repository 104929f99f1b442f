"""The documentation site stays true to the code: the state diagram is the core's table, the
runbook has an entry for every fault and every error class, and every file a tutorial page
includes is run by a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs.hooks import state_diagram
from docs.hooks.roles import plain_roles
from tests.support.error_classes import HOLE, every_class

from outbox_core.delivery import TRANSITIONS, Event, Status

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


# --- the state diagram ----------------------------------------------------------------------


def test_the_committed_state_diagram_is_the_one_generated_from_the_table() -> None:
    assert state_diagram.committed() == state_diagram.rendered_block(), (
        "docs/architecture.md's state diagram differs from outbox_core.delivery.TRANSITIONS:"
        " run `python -m docs.hooks.state_diagram`"
    )


def test_the_diagram_has_one_arrow_per_entry_of_the_table_and_follows_it() -> None:
    drawn = state_diagram.render(TRANSITIONS)
    for (state, event), after in TRANSITIONS.items():
        assert f"    {state.value} --> {after.value}: {event.value}\n" in drawn
    # A table with one more move draws it; one without a state's exits ends that state.
    more = {**TRANSITIONS, (Status.SKIPPED, Event.REQUEUE): Status.PENDING}
    assert "    skipped --> pending: requeue\n" in state_diagram.render(more)
    assert "    skipped --> [*]\n" not in state_diagram.render(more)
    assert "    skipped --> [*]\n" in drawn


def test_a_stale_page_is_found_and_rewritten(tmp_path: Path) -> None:
    page = tmp_path / "architecture.md"
    stale = state_diagram.rendered_block({(Status.PENDING, Event.CLAIM): Status.PENDING})
    page.write_text(f"# Architecture\n\n{stale}\n\nafter\n", encoding="utf-8")
    assert state_diagram.committed(page) != state_diagram.rendered_block()
    assert state_diagram.write(page)
    assert state_diagram.committed(page) == state_diagram.rendered_block()
    assert page.read_text(encoding="utf-8").endswith("\n\nafter\n")
    assert not state_diagram.write(page)


def test_a_page_without_the_markers_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "architecture.md"
    page.write_text("# Architecture\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no state-diagram block"):
        state_diagram.committed(page)


def test_sphinx_roles_become_code_spans_in_the_api_reference() -> None:
    text = "See :class:`Outcome`, :func:`~outbox_core.decide.decide` and :data:`TRANSITIONS`."
    assert plain_roles(text) == "See `Outcome`, `decide` and `TRANSITIONS`."


# --- the runbook ----------------------------------------------------------------------------

RUNBOOK = DOCS / "operations.md"


def _section(text: str, heading: str) -> str:
    return text.partition(heading)[2].partition("\n## ")[0]


def test_every_fault_of_reliability_md_has_a_runbook_section() -> None:
    faults = re.findall(r"^\| (F\d+) \|", (DOCS / "reliability.md").read_text(), re.MULTILINE)
    assert sorted(faults, key=lambda f: int(f[1:])) == [f"F{n}" for n in range(1, 11)]
    headings = re.findall(r"^### (.+)$", _section(RUNBOOK.read_text(), "## Faults"), re.MULTILINE)
    covered = {f for heading in headings for f in re.findall(r"\bF\d+\b", heading)}
    assert set(faults) <= covered, f"no runbook section for {sorted(set(faults) - covered)}"


def _patterns() -> list[re.Pattern[str]]:
    """The classes the runbook's error-class tables name (first column, in backticks), each as a
    pattern: ``<...>`` / ``<…>`` placeholders stand for any text."""
    tables = _section(RUNBOOK.read_text(), "## Error classes")
    cells = [line.split("|")[1] for line in tables.splitlines() if line.startswith("| `")]
    names = [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]
    return [
        re.compile("".join(".+" if re.fullmatch(r"<[^>]*>", part) else re.escape(part)
                           for part in re.split(r"(<[^>]*>)", name)))
        for name in names
    ]  # fmt: skip


def test_every_error_class_the_code_can_write_has_a_runbook_entry() -> None:
    classes = every_class()
    assert len(classes) > 100  # the classifiers' ranges and the scanned source are in
    assert {"undeliverable", "broker unavailable", "SMTP 550 5.1.1"} <= classes
    assert f"recipient {HOLE} is suppressed" in classes
    patterns = _patterns()
    missing = sorted(c for c in classes if not any(p.fullmatch(c) for p in patterns))
    assert not missing, f"error classes with no entry in docs/operations.md: {missing}"


def test_a_class_without_an_entry_is_found() -> None:
    patterns = _patterns()
    assert not any(p.fullmatch("a brand new failure nobody documented") for p in patterns)


# --- the tutorials --------------------------------------------------------------------------

#: Every file a tutorial page includes, and the test module that runs it (and names it).
TESTED_BY = {
    "docs/tutorials/code/asyncio_email.py": ("tests/integration/test_tutorials.py", "asyncio_email"),
    "docs/tutorials/code/django_shop/settings.py": ("tests/integration/test_tutorials.py", "django_shop.settings"),
    "docs/tutorials/code/django_shop/orders.py": ("tests/integration/test_tutorials.py", "django_shop.orders"),
    "examples/fastapi_app/__init__.py": ("tests/integration/test_fastapi.py", "examples.fastapi_app"),
    "examples/host_app/outbox.py": ("tests/integration/test_host_app.py", "examples.host_app.outbox"),
    "docs/tutorials/code/alembic_migrations/env.py": ("tests/integration/test_alembic.py", '"env.py"'),
    "docs/tutorials/code/alembic_migrations/versions/outbox_triggers.py": (
        "tests/integration/test_alembic.py", '"outbox_triggers.py"',
    ),
}  # fmt: skip


def test_every_file_a_tutorial_includes_is_run_by_a_test() -> None:
    included = {
        name
        for page in (DOCS / "tutorials").glob("*.md")
        for name in re.findall(r'^--8<-- "([^":]+)(?::[\w-]+)?"$', page.read_text(), re.MULTILINE)
    }
    assert "examples/fastapi_app/__init__.py" in included
    untested = included - TESTED_BY.keys()
    assert not untested, f"tutorial code no test runs (add it to TESTED_BY): {sorted(untested)}"
    for name in included:
        module, needle = TESTED_BY[name]
        assert (ROOT / name).is_file(), name
        assert needle in (ROOT / module).read_text(), f"{module} does not run {name}"
