"""Tutorial: a Django project that sends its order confirmations through the outbox
(docs/tutorials/django.md). tests/integration/test_tutorials.py runs it with ``manage.py`` against a
real PostgreSQL and SMTP server."""
