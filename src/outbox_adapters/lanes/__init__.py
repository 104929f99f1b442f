"""The lanes: what each kind of row does when the runtime hands it over, and the consumer channels.

A lane is the one runtime (:mod:`outbox_adapters.runtime`) driving one store with a handler and
a timing of its own; nothing here claims, loops or marks.

========================  ======================================================================
module                    holds
========================  ======================================================================
:mod:`.email`             the e-mail lane's row handler (render, re-validate, send)
:mod:`.hooks`             the e-mail handler's host hooks, each under its step budget
:mod:`.webhooks`          the webhook lanes: the drainer's fan-out and the deliveries' attempts
:mod:`.webhook_workers`   one process's webhook workers (drainer, first attempts, retries, health)
:mod:`.relay`             the event relay: the event outbox published to a broker
:mod:`.consumer`          what every consumer channel shares (deadline, parking, acks)
:mod:`.row_channel`       a channel whose recipients are rows of a lane
:mod:`.email_channel`     the e-mail channel: events become e-mail rows on a lane of their own
:mod:`.inapp`             the in-app channel: events become rows of the notification feed
:mod:`.channel_workers`   one process's consumer channels (``outbox consume``)
========================  ======================================================================
"""
