"""Two versions of one app, for the fixes the bus suggests when events reach no subscriber:
in ``before`` the front desk publishes ``Rang`` and no endpoint takes it; in ``after`` the
``bell`` endpoint handles it (a handler added, as the hint says)."""

from __future__ import annotations

from shared.bus import BusApp, Command, Event, HandlerContext
from shared.bus.app import Endpoint, NoState


class Ring(Command):
    partition_by = "key"
    key: str


class Rang(Event):
    """Topic ``rang``."""

    partition_by = "key"
    key: str


def _app(with_bell: bool) -> BusApp:
    app = BusApp()
    desk: Endpoint[NoState] = app.endpoint("desk")

    @desk.handles(Ring)
    def ring(ctx: HandlerContext[NoState], cmd: Ring) -> None:
        ctx.publish(Rang(key=cmd.key))

    if with_bell:
        bell: Endpoint[NoState] = app.endpoint("bell")

        @bell.handles(Rang)
        def chime(ctx: HandlerContext[NoState], event: Rang) -> None:
            pass

    return app


before = _app(with_bell=False)
after = _app(with_bell=True)
