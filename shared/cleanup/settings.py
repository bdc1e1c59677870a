"""What the cleanup removes, and when: grace, retention, paging and the per-run budget.

The app reads them from the ``CLEANUP_*`` app settings (``shared.app_settings``) into
``AppConfig.cleanup`` (``shared.config``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from shared.errors import ConfigurationError

DAY = 24 * 3600.0


@dataclass(frozen=True)
class CleanupSettings:
    grace_seconds: float = 600.0
    """How old an unsignalled token must be before it counts as abandoned. It must exceed the
    function timeout (a losing copy may create tokens until its invocation ends) plus the
    network's maximum segment lifetime (a create with an unknown outcome may land that late).
    host.json's functionTimeout is 5 minutes; 10 minutes leaves room for both."""
    budget_seconds: float = 240.0
    """Stop starting new pages after this long, so a timer invocation ends well inside the
    function timeout; the next run resumes from the saved continuation."""
    page_size: int = 200
    concurrency: int = 32
    """How many records a pass judges at once, across all its tasks (1-64): each record's
    decision is independent and ETag-guarded, so they need not wait for one another."""
    lease_seconds: float = 30.0
    """How long a task's lease lasts without renewal. A heartbeat renews every held lease a
    few times per lease period, and every page saves a checkpoint, so an instance that died
    is replaced after at most this long, however long its pages take."""
    audit_retention_seconds: float = 30 * DAY
    """Audit rows older than this are removed (export them first to keep them longer)."""
    poison_expiry_margin_seconds: float = 6 * DAY
    """A poison message with less than this left before it expires is re-parked with no
    expiry (``shared.cleanup.parked``). The Functions host moves messages with the queue's
    default of seven days: six days re-parks them in their first day, and leaves six for a
    stopped cleanup to be noticed and restarted."""
    backlog_max_tokens: int = 20000
    """Tokens in flight a pass counts at its end (``shared.cleanup.backlog``), for the
    alerts: four listing requests at most; 0 counts none."""
    checkpoint_table: str = "cleanup"

    def __post_init__(self) -> None:
        for name in (
            "grace_seconds",
            "budget_seconds",
            "lease_seconds",
            "audit_retention_seconds",
            "poison_expiry_margin_seconds",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"cleanup {name} must be a non-negative number: {value}")
        if self.page_size < 1 or self.page_size > 1000:
            raise ConfigurationError(f"cleanup page_size must be 1-1000: {self.page_size}")
        if self.concurrency < 1 or self.concurrency > 64:
            raise ConfigurationError(f"cleanup concurrency must be 1-64: {self.concurrency}")
        if self.backlog_max_tokens < 0:
            raise ConfigurationError(
                f"cleanup backlog_max_tokens must not be negative: {self.backlog_max_tokens}"
            )
        if self.lease_seconds < 1:
            raise ConfigurationError(
                f"cleanup lease_seconds must be at least 1: {self.lease_seconds}"
            )
