"""The embedded demo (`outbox demo`) and its local SMTP sink: everything started in-process."""
