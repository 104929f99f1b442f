"""``python -m outbox_adapters``: the ``outbox`` command, for when the script is not on PATH."""

from __future__ import annotations

from outbox_adapters.cli import main

if __name__ == "__main__":
    main(prog_name="outbox")
