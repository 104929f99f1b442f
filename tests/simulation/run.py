"""Running one plan: :func:`simulate` builds a :class:`~tests.simulation.world.World` on a fresh
:class:`~tests.simulation.vloop.VirtualLoop`, runs it to the end, checks the invariants and
returns the :class:`~tests.simulation.world.Result`."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Final

import attrs
from tests.simulation.channel import ChannelWorld
from tests.simulation.invariants import check_end
from tests.simulation.plan import Plan
from tests.simulation.relay import RelayWorld
from tests.simulation.vloop import EPOCH, VirtualLoop
from tests.simulation.webhook import WebhookWorld
from tests.simulation.world import Result, World

from outbox_adapters.lanes import email as email_lane_module
from outbox_core.mail import OutgoingMail, build_message

__all__ = ["simulate"]

_SILENCED: Final = ("outbox_adapters", "asyncio")

_BUILD: Final = "build_message"
_BUILT: dict[tuple[object, ...], OutgoingMail] = {}


def _built_once(**parts: Any) -> OutgoingMail:
    """``build_message``, assembled once per content and given each row's Message-ID.

    Assembling and re-parsing the MIME message is most of a run's cost, and nothing the simulator
    checks depends on its bytes (the mail tests do): the handler's chain around it runs as it is.
    """
    message_id, _date = parts.pop("message_id"), parts.pop("date")
    key = tuple(sorted((name, repr(value)) for name, value in parts.items()))
    mail = _BUILT.get(key)
    if mail is None:
        if len(_BUILT) > 10_000:
            _BUILT.clear()
        mail = _BUILT[key] = build_message(**parts, message_id=message_id, date=EPOCH)
    return attrs.evolve(mail, message_id=message_id)


def simulate(plan: Plan) -> Result:
    """Run ``plan`` to the end and check every invariant; the same plan, the same result."""
    original_build = getattr(email_lane_module, _BUILD)
    setattr(email_lane_module, _BUILD, _built_once)
    loop = VirtualLoop(rng=random.Random(f"reorder-{plan.seed}"))  # noqa: S311 - seeded
    loop.set_exception_handler(lambda _loop, _context: None)
    world = world_for(plan, loop)
    levels = {name: logging.getLogger(name).level for name in _SILENCED}
    for name in _SILENCED:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        loop.run_until_complete(world.main())
        world.result.simulated_seconds = loop.time()
        check_end(world)
        if isinstance(world, ChannelWorld):
            world.check_channel_end()
        if isinstance(world, RelayWorld):
            world.check_relay_end()
        if isinstance(world, WebhookWorld):
            world.check_webhook_end()
    finally:
        _close(loop)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        setattr(email_lane_module, _BUILD, original_build)
    world.result.trace_hash = world._hash.hexdigest()
    return world.result


def world_for(plan: Plan, loop: VirtualLoop) -> World:
    """The world a seed stands for: the webhook deliveries for every fourth seed (``seed % 4 ==
    3``), else the e-mail lane, the e-mail channel or the relay, by ``seed % 3``."""
    if plan.seed % 4 == 3:
        return WebhookWorld(plan, loop)
    worlds: tuple[type[World], ...] = (World, ChannelWorld, RelayWorld)
    return worlds[plan.seed % len(worlds)](plan, loop)


def _close(loop: VirtualLoop) -> None:
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()
