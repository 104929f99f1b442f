"""The fault tests of RELIABILITY.md (F1-F10): short by default, long under OUTBOX_CHAOS=full."""
