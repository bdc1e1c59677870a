"""host.json's queue settings (``extensions.queues``), with the Functions queue trigger's
defaults: what the app reads of host.json (``maxDequeueCount``, in ``shared.runtime``) and the
local host's queue polling (``shared.queue_trigger``) runs by."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from shared.bus.poison import DEFAULT_PARKED_CONTAINER
from shared.errors import ConfigurationError
from shared.stores.queue import MAX_RECEIVE_BATCH

DEFAULT_FUNCTION_TIMEOUT = 300.0
"""host.json's ``functionTimeout`` when it sets none: the Consumption plan's 5 minutes."""


@dataclass(frozen=True)
class QueueSettings:
    batch_size: int = 16
    new_batch_threshold: int = 8
    max_dequeue_count: int = 5
    visibility_timeout: float = 0.0
    """Delay before a failed message is retried."""
    max_polling_interval: float = 60.0
    lease_seconds: float = 60.0
    """How long a received message stays hidden while its function runs."""
    renew_lease: bool = False
    """Extend the lease every ``lease_seconds / 2`` while the function runs, as the Functions
    host does, so a short lease (quick recovery after a crash) is safe for slow functions."""
    parked_container: str = DEFAULT_PARKED_CONTAINER
    """Where a message too large to move to the poison queue beside its error is kept (only a
    signal whose token exists in ``tokens_container``: ``shared.bus.poison.park``)."""
    tokens_container: str = "tokens"

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_RECEIVE_BATCH:
            raise ConfigurationError(f"batchSize must be 1-{MAX_RECEIVE_BATCH}")
        if self.new_batch_threshold < 0 or self.max_dequeue_count < 1:
            raise ConfigurationError("newBatchThreshold must be >= 0, maxDequeueCount >= 1")
        if self.lease_seconds <= 0 or self.visibility_timeout < 0:
            raise ConfigurationError("lease and visibilityTimeout must be positive")

    @classmethod
    def from_host_json(cls, path: Path) -> QueueSettings:
        try:
            host = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigurationError(f"cannot read {path}: {e}") from e
        queues = host.get("extensions", {}).get("queues", {})
        encoding = str(queues.get("messageEncoding", "base64")).lower()
        if encoding != "base64":
            # The queue adapters always write base64 (the Functions default); reading plain
            # text here would hand functions garbage.
            raise ConfigurationError(
                f"{path}: messageEncoding {encoding!r} is not supported; use 'base64'"
            )
        batch_size = int(queues.get("batchSize", 16))
        try:
            return cls(
                batch_size=batch_size,
                new_batch_threshold=int(queues.get("newBatchThreshold", batch_size // 2)),
                max_dequeue_count=int(queues.get("maxDequeueCount", 5)),
                visibility_timeout=timespan(queues.get("visibilityTimeout", "00:00:00")),
                max_polling_interval=timespan(queues.get("maxPollingInterval", "00:01:00")),
            )
        except ValueError as e:
            raise ConfigurationError(f"{path}: invalid queues setting: {e}") from e


def timespan(value: str) -> float:
    """host.json time spans are 'hh:mm:ss' (optionally with fractional seconds)."""
    try:
        hours, minutes, seconds = str(value).split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        raise ConfigurationError(f"invalid time span {value!r}: expected 'hh:mm:ss'") from None


def function_timeout(path: Path | None) -> float:
    """host.json's ``functionTimeout`` in seconds: how long the host lets one invocation run
    before it ends it (and so how long it keeps renewing a queue message's lease for it);
    ``math.inf`` for ``-1``, unbounded on the plans that allow it; the default without a
    host.json or the field."""
    if path is None:
        return DEFAULT_FUNCTION_TIMEOUT
    try:
        value = json.loads(path.read_text()).get("functionTimeout")
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigurationError(f"cannot read {path}: {e}") from e
    if value is None:
        return DEFAULT_FUNCTION_TIMEOUT
    if str(value).strip() == "-1":
        return math.inf
    seconds = timespan(value)
    if seconds <= 0:
        raise ConfigurationError(f"{path}: functionTimeout must be positive or -1")
    return seconds
