"""The demo's verdict from the payment provider's ledger: what the provider applied is the
evidence a charge happened, whatever the bus's own rows say.

Every order placed is charged exactly once, for its amount, under a key found once in the
ledger; nothing is charged for an order that was not placed; every late payment is refunded
exactly once, and no other order is refunded."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from lab.provider.book import Entry, Ledger
from shared.logsafe import shown


@dataclass
class LedgerCheck:
    charges: int
    refunds: int
    faults: int
    """Faults the provider injected (late answers, 503s, dropped connections)."""
    errors: list[str] = field(default_factory=list)


def check_ledger(
    ledger: Ledger, charged: Mapping[str, int], refunded: Mapping[str, int]
) -> LedgerCheck:
    """``charged``: every order placed and its amount (each must be charged once);
    ``refunded``: the orders whose late payment must be given back, and the amount."""
    by_kind: dict[str, dict[str, list[Entry]]] = {"charge": defaultdict(list), "refund": {}}
    by_kind["refund"] = defaultdict(list)
    keys: dict[str, int] = defaultdict(int)
    for entry in ledger.entries:
        by_kind[entry.kind][entry.order].append(entry)
        keys[entry.key] += 1
    errors = [f"key {shown(k)} applied {n} times" for k, n in keys.items() if n > 1]
    errors += _exactly_once("charge", by_kind["charge"], charged, "was not placed")
    errors += _exactly_once("refund", by_kind["refund"], refunded, "has no late payment")
    return LedgerCheck(
        charges=sum(len(e) for e in by_kind["charge"].values()),
        refunds=sum(len(e) for e in by_kind["refund"].values()),
        faults=sum(ledger.faults.values()),
        errors=errors,
    )


def _exactly_once(
    kind: str, applied: Mapping[str, list[Entry]], expected: Mapping[str, int], unexpected: str
) -> list[str]:
    errors = []
    for order, amount in expected.items():
        entries = applied.get(order, [])
        if len(entries) != 1:
            keys = ", ".join(shown(e.key) for e in entries) or "none"
            errors.append(f"order {shown(order)}: {len(entries)} {kind}s in the ledger ({keys})")
        elif entries[0].amount != amount:
            errors.append(f"order {shown(order)}: {kind} of {entries[0].amount}, not {amount}")
    errors += [
        f"{kind} for order {shown(order)}, which {unexpected}"
        for order in applied
        if order not in expected
    ]
    return errors
