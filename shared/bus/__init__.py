"""The exactly-once bus: declare endpoints and messages, then run them on a storage account."""

from shared.bus.app import BusApp, Endpoint, NoState
from shared.bus.bus import Bus
from shared.bus.config import BusConfig
from shared.bus.context import HandlerContext
from shared.bus.messages import Command, Event, Message
from shared.bus.pipeline import Outcome
from shared.bus.retries import RetryPolicy
from shared.errors import DoNotRetry

__all__ = [
    "Bus",
    "BusApp",
    "BusConfig",
    "Command",
    "DoNotRetry",
    "Endpoint",
    "Event",
    "HandlerContext",
    "Message",
    "NoState",
    "Outcome",
    "RetryPolicy",
]
