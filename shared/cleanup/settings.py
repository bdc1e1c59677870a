"""What the cleanup removes, and when: grace, retention, paging and the per-run budget."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

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
    lease_seconds: float = 120.0
    """How long a task's lease lasts without a checkpoint. Renewed after every page, so it only
    needs to cover one page; an instance that died is replaced after at most this long."""
    audit_retention_seconds: float = 30 * DAY
    """Audit rows older than this are removed (export them first to keep them longer)."""
    checkpoint_table: str = "cleanup"

    def __post_init__(self) -> None:
        for name in ("grace_seconds", "budget_seconds", "lease_seconds", "audit_retention_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"cleanup {name} must be a non-negative number: {value}")
        if self.page_size < 1 or self.page_size > 1000:
            raise ConfigurationError(f"cleanup page_size must be 1-1000: {self.page_size}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CleanupSettings:
        """Read ``CLEANUP_<FIELD>`` app settings (e.g. ``CLEANUP_GRACE_SECONDS``); unset ones
        keep their defaults."""
        values: dict[str, float | int] = {}
        for f in fields(cls):
            if f.name == "checkpoint_table":
                continue
            raw = env.get(f"CLEANUP_{f.name.upper()}")
            if raw is None or raw.strip() == "":
                continue
            try:
                values[f.name] = int(raw) if f.name == "page_size" else float(raw)
            except ValueError:
                raise ConfigurationError(
                    f"app setting CLEANUP_{f.name.upper()}={raw!r} is not a number"
                ) from None
        return cls(**values)  # type: ignore[arg-type]
