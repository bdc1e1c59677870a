"""The benchmark workload: one message type that updates state and sends one message on, and
one that updates state and sends none.

Every root message goes to the *sender* endpoint, whose handler adds the amount to its
partition's state and forwards one message to the *sink* endpoint, whose handler does the same
update and sends nothing. Both variants carry the same padding, so the payload a mode moves is
the same whatever wraps it (a bus envelope in a token, or a plain queue body).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.app import Mode, Store
from shared.errors import InvalidValue
from shared.resources import check_endpoint_name

_TAG = re.compile(r"[a-z0-9]{1,20}")
PAYLOAD_BYTES = 256
"""Padding carried by every message; big enough to look like a business payload, small
enough that the floor's plain queue body stays far below the 64 KiB queue limit."""


class Work(Command):
    """What the sender endpoint receives (the root messages)."""

    partition_by = "key"
    key: str
    amount: int
    payload: str


class Done(Command):
    """What the sender forwards to the sink endpoint."""

    partition_by = "key"
    key: str
    amount: int
    payload: str


class Tally(BaseModel):
    """The state both endpoints keep per partition."""

    count: int = 0
    total: int = 0


@dataclass(frozen=True)
class Names:
    """Resource names of one measurement; fresh for every run so runs never share data."""

    tag: str

    def __post_init__(self) -> None:
        if not _TAG.fullmatch(self.tag):
            raise InvalidValue(f"run tag {self.tag!r} must be lowercase letters and digits")
        check_endpoint_name(self.sender)

    @property
    def sender(self) -> str:
        return f"bsend{self.tag}"

    @property
    def sink(self) -> str:
        return f"bsink{self.tag}"

    @property
    def tokens(self) -> str:
        return f"btok{self.tag}"

    @property
    def topics(self) -> str:
        return f"btop{self.tag}"

    @property
    def ingress(self) -> str:
        return f"bing{self.tag}"

    @property
    def endpoints(self) -> tuple[str, str]:
        return (self.sender, self.sink)


def padding(index: int, size: int = PAYLOAD_BYTES) -> str:
    """Deterministic filler of exactly ``size`` ASCII characters."""
    seed = f"{index:08d}"
    return (seed * (size // len(seed) + 1))[:size]


def partition_of(index: int, partitions: int) -> str:
    return f"p{index % partitions}"


def root(index: int, partitions: int) -> Work:
    return Work(key=partition_of(index, partitions), amount=index % 97 + 1, payload=padding(index))


def build_app(names: Names, mode: Mode, store: Store = "table") -> BusApp:
    """The bus app for one measurement: the same two handlers in the given endpoint mode,
    with their rows in the given store."""
    app = BusApp()
    sender = app.endpoint(names.sender, state=Tally, mode=mode, store=store)
    sink = app.endpoint(names.sink, state=Tally, mode=mode, store=store)

    @sender.handles(Work)
    def forward(ctx: HandlerContext[Tally], message: Work) -> None:
        ctx.state.count += 1
        ctx.state.total += message.amount
        ctx.send(
            Done(key=message.key, amount=message.amount, payload=message.payload), to=sink.name
        )

    @sink.handles(Done)
    def absorb(ctx: HandlerContext[Tally], message: Done) -> None:
        ctx.state.count += 1
        ctx.state.total += message.amount

    return app


def plain_body(message: Work | Done) -> str:
    """The floor's queue message: the message body itself, with no envelope or token."""
    return json.dumps({"type": type(message).__name__, **message.model_dump()})
