"""The lanes: what each kind of row does when the runtime hands it over (e-mail today).

A lane is the one runtime (:mod:`outbox_adapters.runtime`) driving one store with a handler and
a timing of its own; nothing here claims, loops or marks.
"""
