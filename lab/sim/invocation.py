"""What one simulated invocation did, for the invariants that judge an invocation whole.

The world sets a fresh ``Invocation`` as ``current`` when it starts an invocation; the
account below the bus records the shared payloads it reads (``lab.sim.payloads``), the
simulated app's handlers say that they ran (``handler_ran``), and the world notes the
outcome the pipeline returned. Nothing here imports the rest of the simulator, so that the
model's handlers can use it.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from shared.bus.pipeline import Outcome


@dataclass
class Invocation:
    payload_reads: list[str] = field(default_factory=list)
    """The shared payloads this invocation read (their names, once per read)."""
    handled: bool = False
    """A handler of the simulated app ran in this invocation."""
    ran: list[str] = field(default_factory=list)
    """Ids of the messages whose handlers of the cancel phase ran (``lab.sim.cancels``)."""
    outcome: Outcome | None = None
    """What the pipeline returned; None if it raised or has not returned yet."""

    @property
    def copy_read_payload(self) -> bool:
        """It read a shared payload, ran no handler and ended as a copy of a message already
        processed: the read served nothing (NoPayloadReadByCopies)."""
        return (
            bool(self.payload_reads)
            and not self.handled
            and self.outcome in (Outcome.RESUMED, Outcome.DUPLICATE)
        )


current: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "invocation", default=None
)


def handler_ran() -> None:
    """Called by the simulated app's handlers of shared bodies."""
    record = current.get()
    if record is not None:
        record.handled = True


def payload_read(name: str) -> None:
    record = current.get()
    if record is not None:
        record.payload_reads.append(name)
