"""What the operator does next after an audit: one sentence per finding, most urgent first.
The console, the report and ``summary.json`` all show these. No pyspark here."""

from __future__ import annotations

from shared.audit.summary import AuditSummary, DroppedEvents
from shared.bus.unsubscribed import PREFIX, subscribe_hint
from shared.resources import POISON_SUFFIX

NOTHING_TO_DO = "Nothing to do: every delivery sent was processed exactly once."


def _endpoints_of(queues: dict[str, int]) -> str:
    return " ".join(q.removesuffix(POISON_SUFFIX) for q in sorted(queues))


def _fix_of_dropped(drops: DroppedEvents) -> str:
    if drops.takers is not None:
        return subscribe_hint(drops.topic, drops.takers)
    return (
        "run the audit with --app naming the app to learn which of its endpoints take them; "
        f"an endpoint that takes them is subscribed with `bus subscribe {drops.topic} "
        "ENDPOINT`, else add a handler for them to an endpoint, deploy the app (`bus "
        "provision` creates a new endpoint's queues and table), then run `bus subscribe --all`"
    )


def _dropped_step(drops: DroppedEvents) -> str:
    return (
        f"{drops.dropped:,} events of topic {drops.topic} were dropped for want of a "
        f"subscriber (first {drops.first_dropped_at or 'unknown'}, last "
        f"{drops.last_dropped_at or 'unknown'}); they reached no endpoint and no replay "
        f"brings them back; {_fix_of_dropped(drops)}. "
        f"Audits warn until the record (blob {PREFIX}{drops.topic} in the topics container) "
        "is deleted."
    )


def next_steps(summary: AuditSummary) -> list[str]:
    inv = summary.invariants
    steps: list[str] = []
    if inv.duplicates:
        steps.append(
            f"{inv.duplicates:,} deliveries were processed more than once "
            "(NoDuplicatedProcessing): the samples list their tables, partitions and modes; "
            "keep summary.json and report it as a bug of the bus."
        )
    if inv.lost:
        steps.append(
            f"{inv.lost:,} deliveries were sent more than {summary.lost_after_seconds:g} s "
            "ago, never processed and are in no poison queue: check that every endpoint's "
            "function runs and its queue drains (`bus status`), then audit again; if they "
            "remain, keep summary.json and report it as a bug of the bus."
        )
    if inv.ghosts:
        steps.append(
            f"{inv.ghosts:,} deliveries were processed with no record of their send: an "
            "ingress record deleted or overwritten by a reused idempotency key, or an audit "
            "of part of the tables (--endpoints); see the samples."
        )
    if inv.invalid_rows:
        steps.append(
            f"{inv.invalid_rows:,} rows cannot be read, so the audit cannot vouch for them: "
            "see the samples of invalid_rows for their tables and partitions."
        )
    steps.extend(_dropped_step(drops) for drops in summary.dropped)
    if summary.poisoned or summary.poison_messages:
        queues = summary.poison_messages
        waiting = ", ".join(f"{q}: {n:,}" for q, n in sorted(queues.items()))
        endpoints = _endpoints_of(queues)
        steps.append(
            f"{summary.poisoned:,} deliveries wait in poison queues ({waiting} messages): "
            f"read why with `bus poison list {endpoints}`, fix the cause, then "
            f"`bus replay {endpoints}`; each is then processed exactly once. Messages there "
            "that name a delivery processed since, or none, are replayed harmlessly or cleared."
        )
    if summary.unverifiable_poison:
        queues = summary.poison_unverifiable
        where = ", ".join(f"{q}: {n:,}" for q, n in sorted(queues.items()))
        steps.append(
            f"{summary.unverifiable_poison:,} poison messages cover no delivery ({where}): no "
            "parseable signal, a wrapper that disagrees with its signal, or a token naming no "
            "delivery sent to that endpoint; they were not counted as poisoned. See the "
            f"samples of unverifiable_poison and `bus poison list {_endpoints_of(queues)}`; "
            "a forged or damaged message there is removed by hand."
        )
    if summary.poison_cut:
        cut = ", ".join(f"{q}: about {n:,}" for q, n in sorted(summary.poison_cut.items()))
        steps.append(
            f"Poison queues were not read to their end ({cut} messages not read: the "
            "cap, or another reader holding them): a delivery parked among those counts as "
            "lost here. Raise --poison-cap, or replay or clear those queues, then audit again."
        )
    if summary.in_flight:
        steps.append(
            f"{summary.in_flight:,} deliveries were sent less than "
            f"{summary.lost_after_seconds:g} s ago and are not processed yet: audit again later."
        )
    return steps or [NOTHING_TO_DO]
