"""The app the console's browser tests look at: ``bookings`` (token mode) handles Book and
publishes Booked to ``tally`` (processed-messages mode), so the console shows two endpoints
of different modes and a topic's recipient list. Either handler fails on demand, with a
reason that quotes what the sender wrote; a Book that needs a service named in ``OUTAGES``
fails until the test ends the outage (what an operator replays after a fix); a Booked
carries the sender's note as a header; a Book may ask for a Remind to itself later (a
delayed message, due at a known time)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from shared.bus import BusApp, Command, Event, HandlerContext

BOOKINGS = "bookings"
TALLY = "tally"
APP = "tests.console.browser.desk_app:app"
NOTE_HEADER = "x-desk-note"
OUTAGES: set[str] = set()
"""Services that are down, in the process that runs the handlers (the tests')."""


class Book(Command):
    partition_by = "ref"
    ref: str
    note: str = ""
    fail: bool = False
    fail_tally: bool = False
    needs: str | None = None
    remind_after_seconds: int | None = None


class Remind(Command):
    partition_by = "ref"
    ref: str


class Booked(Event):
    partition_by = "ref"
    ref: str
    fail: bool = False


class Desk(BaseModel):
    booked: int = 0


class Tally(BaseModel):
    seen: int = 0


def book(ctx: HandlerContext[Desk], command: Book) -> None:
    if command.fail:
        raise RuntimeError(f"refused {command.ref}: {command.note}")
    if command.needs in OUTAGES:
        raise ConnectionError(f"{command.needs} is down")
    ctx.state.booked += 1
    ctx.publish(
        Booked(ref=command.ref, fail=command.fail_tally), headers={NOTE_HEADER: command.note}
    )
    if command.remind_after_seconds is not None:
        later = timedelta(seconds=command.remind_after_seconds)
        ctx.send(Remind(ref=command.ref), to=BOOKINGS, delay=later)


def remind(ctx: HandlerContext[Desk], command: Remind) -> None:
    """Nothing to do: the reminder is there to be delayed."""


def count(ctx: HandlerContext[Tally], event: Booked) -> None:
    if event.fail:
        raise ValueError(f"cannot count {event.ref}")
    ctx.state.seen += 1


app = BusApp()
bookings = app.endpoint(BOOKINGS, state=Desk)
bookings.handles(Book)(book)
bookings.handles(Remind)(remind)
app.endpoint(TALLY, state=Tally, mode="processed_messages").handles(Booked)(count)
