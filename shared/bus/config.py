"""Tunable settings of a bus runtime, with the defaults users get.

The names of the containers and tables are an unnamed app's; ``shared.config.build_config``
sets the names of the app's own ones from its name (``shared.resources``).

A deployed app sets the ingress window, the retention windows, the payload and output limits
and the conflict rounds through app settings (``BUS_INGRESS_WINDOW_SECONDS``... declared in
``shared.app_settings``, read once by ``shared.config.build_config``), host.json sets
``max_dequeue_count``; the rest (clock, sleep, ids, jitter, telemetry providers) is given by
code."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from shared.app_settings import (
    BODY_BUDGET,
    BODY_BUDGET_WAIT,
    GIVE_BACK,
    HTTP_CONCURRENCY,
    MAX_PAYLOAD,
    STATE_WAIT,
    WIRE_FORMAT,
)
from shared.bus.ids import fresh_id
from shared.bus.telemetry import BusTelemetry
from shared.clock import Clock, system_clock

BODY_BUDGETS = 4
"""Bodies of the largest size the default body budget holds: a few large messages run at
once, each with its few copies in memory, well inside a worker's 1.5-2 GB."""


@dataclass(frozen=True)
class BusConfig:
    tokens_container: str = "tokens"
    topics_container: str = "topics"
    ingress_table: str = "ingress"
    payloads_container: str = "payloads"
    """Where the bodies shared by several deliveries of a message are (``shared.bus.payloads``)."""
    discarded_container: str = "discarded"
    """Where ``bus poison discard`` archives a poison message before deleting it."""
    discard_retention_seconds: float = 90 * 24 * 3600.0
    """BUS_DISCARD_RETENTION_SECONDS: how long a discarded message's archive entry is kept."""
    actions_table: str = "operatoractions"
    """The journal of operators' replays and discards (``shared.bus.journal``)."""
    audits_container: str = "audits"
    """Where the audit publishes the app's last verdict and report (``shared.audit.published``)."""
    performer_endpoint: str = "effects"
    """The endpoint of the app's effects performer (``shared.effects``), named after the app
    (``shared.resources.performer_endpoint``)."""
    shared_payload_min_chars: int = 8192
    """BUS_SHARED_PAYLOAD_MIN_CHARS: a message for two or more destinations whose inline
    envelope is longer than this stores its body once, shared by its tokens. The default is
    ``MAX_INLINE_ENVELOPE_CHARS``: shorter envelopes ride in their signals (no read at all)."""
    parked_container: str = "parked"
    """Where a message too large to park beside its reason is kept (``shared.bus.poison``)."""
    max_dequeue_count: int | None = None
    """host.json's maxDequeueCount: on that delivery a failing message is parked with its last
    error instead of raising, so the reason travels with it (the Functions host would move the
    bare signal). None leaves the move to the host."""
    max_conflict_rounds: int = 12
    """Optimistic-concurrency retries inside one invocation before giving the message back."""
    give_back_seconds: float = GIVE_BACK.default
    """BUS_GIVE_BACK_SECONDS: how long a message written by a newer version is given back for
    an upgraded instance before it is parked (``shared.bus.giveback``); 0 parks it at once."""
    backoff_base: float = 0.005
    backoff_cap: float = 0.5
    max_create_attempts: int = 3
    """Fresh attempt ids tried per outgoing token when a create's outcome is unknown."""
    max_payload_bytes: int = MAX_PAYLOAD.default
    """Largest serialised body sent (BUS_MAX_PAYLOAD_BYTES); the setting's default, so code
    that builds a config gets what a deployed app gets."""
    body_budget_bytes: int = BODY_BUDGET.default
    """BUS_BODY_BUDGET_BYTES: bytes of bodies one worker holds at once (``shared.bus.budget``);
    0 means ``BODY_BUDGETS`` bodies of ``max_payload_bytes`` (``body_budget``)."""
    body_budget_wait_seconds: float = BODY_BUDGET_WAIT.default
    """BUS_BODY_BUDGET_WAIT_SECONDS: how long a receiver waits for room before giving its
    message back, hidden for as long."""
    state_wait_max_seconds: float = STATE_WAIT.default
    """BUS_STATE_WAIT_MAX_SECONDS: the longest a message is hidden while the state store does
    not answer (``shared.bus.failures``, ``Action.WAIT``)."""
    http_concurrency: int = HTTP_CONCURRENCY.default
    """BUS_HTTP_CONCURRENCY: ingress requests one instance works on at once."""
    max_outputs: int = 100
    """Messages one handler run (or one client send) may send or publish, as sent."""
    max_deliveries: int = 3000
    """Deliveries those may expand to (an event once per subscriber); BUS_MAX_DELIVERIES."""
    send_concurrency: int = 16
    """Token creations, then signal sends, in flight at once for one round's deliveries
    (BUS_SEND_CONCURRENCY). The simulator runs with 1: its scheduler lets a process perform
    one storage operation at a time."""
    topic_cache_seconds: float = 5.0
    ingress_window_seconds: float = 7 * 24 * 3600.0
    """The only time window in the system: client retries with one idempotency key are
    deduplicated for this long."""
    session_resend_seconds: float = 60.0
    """BUS_SESSION_RESEND_SECONDS: how long after its commit a transactional session left
    unsignalled (its request stopped) waits before the cleanup signals its messages."""
    saga_retention_seconds: float = 7 * 24 * 3600.0
    """BUS_SAGA_RETENTION_SECONDS: how long a completed saga instance's marker stays, during
    which a message for it (a starting one too) is ``saga_not_found``."""
    ingress_key_scopes: bool = False
    """BUS_INGRESS_KEY_SCOPES: idempotency keys scoped by sender (records at ``scope|key``).
    Off: records at the raw key, where the previous version reads them, with a fingerprint
    (``shared.bus.ingress``); switched on once every instance runs this version."""
    wire_format: int = WIRE_FORMAT.default
    """BUS_WIRE_FORMAT: the format version written on every record that outlives the code
    that wrote it (``shared.bus.formats``); 1 writes what a release before format versions
    reads."""
    ingress_entra_callers: bool = False
    """The HTTP ingress is behind Entra ID authentication (BUS_INGRESS_ENTRA_CALLERS): its
    keys are scoped by the caller the platform names (``shared.http_ingress.http_scope``)."""
    processed_retention_seconds: float = 7 * 24 * 3600.0
    """processed_messages mode: how long a processed-message row deduplicates copies of its
    message (its dedup window); ``expire_processed`` removes older rows."""
    state_stream_retention_seconds: float = 7 * 24 * 3600.0
    """state_based mode: how long a duplicate can still be replayed against the version before
    it; ``truncate_state_streams`` removes older versions (never the latest)."""
    entity_outbox_retention_seconds: float = 7 * 24 * 3600.0
    """entity_outbox mode: how long a dispatched entry stays in the entity's outbox map to
    deduplicate copies; older entries are dropped at the next commit of that entity or by
    ``expire_entity_outboxes``."""
    entity_max_bytes: int = 960 * 1024
    """entity_outbox mode: the state entity (business state plus outbox map) is refused with
    ``EntityOutboxFull`` above this size, kept under Table Storage's 1 MiB entity limit with a
    margin for the service's own accounting."""
    clock: Clock = system_clock
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    new_id: Callable[[], str] = fresh_id
    """Source of claim and attempt ids (random; injectable so simulations replay exactly)."""
    jitter: random.Random = field(default_factory=random.Random)
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    """Where the bus's spans and metrics go (``shared.bus.telemetry``); None: the global
    providers, which the app's edge configures (``shared.observability``) or leaves no-op."""

    @property
    def body_budget(self) -> int:
        """The worker's body budget in bytes: ``body_budget_bytes``, or by default
        ``BODY_BUDGETS`` bodies of the largest size."""
        return self.body_budget_bytes or BODY_BUDGETS * self.max_payload_bytes

    @cached_property
    def telemetry(self) -> BusTelemetry:
        return BusTelemetry(self.tracer_provider, self.meter_provider)

    def backoff(self, round_number: int) -> float:
        """Full-jitter exponential backoff: spreads out copies that collide on one partition."""
        ceiling = min(self.backoff_cap, self.backoff_base * (2**round_number))
        return self.jitter.uniform(0, ceiling)
