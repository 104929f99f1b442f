"""The reference application: tenant signup wired to every part of leased-outbox.

``python3 -m nox -s signup`` runs it on embedded defaults (PostgreSQL from ``pgserver``, a
``nats-server`` from the wheel, a local SMTP sink with a web page listing what it received).

- ``POST /v1/signup`` writes the tenant, its admin user and the ``tenant.provisioned`` event in ONE
  transaction (:mod:`.accounts`), after validating the form (:mod:`.forms`) and a per-client rate
  limit that trusts only the right-most ``X-Forwarded-For`` hop (:mod:`.ratelimit`).
- The relay and both consumer channels run beside the web app (:mod:`.workers`): the e-mail channel
  sends the admin a welcome asking to confirm the address (double opt-in: nothing else is mailed to
  it before that) and the platform owner a notice; the in-app channel writes the feed rows.
- The platform and tenant dashboards (:mod:`.pages`) show the feed, with an unread badge that
  updates over SSE and falls back to polling while the stream is down.

A broker or SMTP outage never fails or slows a signup: the signup writes rows, nothing more.
"""
