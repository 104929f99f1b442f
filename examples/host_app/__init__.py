"""A host application's outbox, described once: its own lane and suppression hook, run by the
host's own process (``async with outbox.running(...)``) and by ``outbox --app``
(docs/tutorials/application.md)."""
