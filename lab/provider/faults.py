"""The provider's fault switches: what goes wrong on a call, by count and by seeded rate.

Each switch fires on the next ``count`` calls, then on a share ``rate`` of the calls after
that (drawn from one generator seeded with ``seed``, so a run can be repeated). At most one
fault hits a call, tried in this order: ``unavailable`` answers 503 before anything is
applied; ``drop`` applies the call and closes the connection without answering; ``late``
applies it and holds the answer ``late_seconds`` (past the client's timeout, which then does
not know the outcome)."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Fault = Literal["unavailable", "drop", "late"]
FAULTS: tuple[Fault, ...] = ("unavailable", "drop", "late")


class Switch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate: float = Field(default=0.0, ge=0.0, le=1.0)
    count: int = Field(default=0, ge=0, le=1_000_000)


class FaultSettings(BaseModel):
    """The switches as set at start (``python -m lab.provider``) or by ``POST /control``."""

    model_config = ConfigDict(extra="forbid")
    unavailable: Switch = Switch()
    drop: Switch = Switch()
    late: Switch = Switch()
    late_seconds: float = Field(default=30.0, gt=0.0, le=3600.0)
    seed: int = 0


class Faults:
    """The switches in force and how many times each fired."""

    def __init__(self, settings: FaultSettings | None = None) -> None:
        self.injected: dict[Fault, int] = dict.fromkeys(FAULTS, 0)
        self.set(settings or FaultSettings())

    def set(self, settings: FaultSettings) -> None:
        """Replace the switches (the counts fired so far are kept)."""
        self.settings = settings.model_copy(deep=True)
        self._random = random.Random(settings.seed)

    def draw(self) -> Fault | None:
        """The fault that hits this call, if any (counted as injected)."""
        for fault in FAULTS:
            switch: Switch = getattr(self.settings, fault)
            if switch.count > 0:
                switch.count -= 1
            elif not (switch.rate and self._random.random() < switch.rate):
                continue
            self.injected[fault] += 1
            return fault
        return None
