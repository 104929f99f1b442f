"""Helpers several test directories share (imported as ``tests.support.<module>``).

Fixtures live in the conftest nearest to every test that uses them (``tests/conftest.py``,
``tests/integration/conftest.py``, ...); the plain functions those fixtures and the tests call live
here, one module per thing they touch: ``postgres`` (rows written and read around the store) and
``smtp`` (a client for the test SMTP server).
"""
