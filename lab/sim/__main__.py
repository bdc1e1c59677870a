"""``python -m lab.sim``: the default exploration, or one replayed seed.

The default exploration (``make simulate``) runs, for token mode:
1. ``small`` exhaustively: every schedule with at most one deviation from the default order,
   each with no fault and with every single fault at every operation;
2. ``small`` exhaustively with up to two deviations and no fault;
3. ``small-sweep`` exhaustively: a cleanup pass and time passing may come at any point,
   with up to one deviation and one fault;
4. ``small-postgres`` and ``small-sweep-postgres``: the same with the endpoints' rows in
   PostgreSQL (its in-memory model), up to one deviation and one fault;
for each window mode (``processed_messages``, ``state_based``, ``entity_outbox``):
5. ``small-<mode>`` and ``small-sweep-<mode>`` exhaustively with up to one deviation and one
   fault (bounded timing: every run stays inside the mode's dedup window), and
   ``small-postgres-<mode>`` and ``small-partition-postgres-<mode>`` the same with the
   endpoints' rows in PostgreSQL (its in-memory model);
and, in token mode, with up to one deviation and one fault:
6. ``small-ingress``: two scheduled client sends of one idempotency key racing, faults at
   their creates, record and signals included;
7. ``small-partition``: three messages on one partition (concurrent state updates);
8. ``small-redelivery``: a redelivery may come after the grace period, a cleanup pass first;
9. ``small-unbounded-sweep``: outside the timing assumptions, a round may be slower than the
   grace period while cleanup passes run (also with two deviations and no fault);
10. ``small-delay``: a delayed message, its copies and crashes around its send (NoEarlyDelivery);
11. ``small-retry``: a handler failing twice under a retry policy (immediate, then delayed);
12. ``small-oversized``: a handler whose state outgrows a table entity (parked at once,
    replayed by the operator once quiet);
13. ``small-shared``: an event whose body its two subscribers' tokens share as one payload
    (NoMissingPayload, BoundedResidue over the payloads), with up to one deviation and no
    fault, then no deviation and one fault; ``small-shared-processed_messages`` the same in
    a window mode, whose origin rows have no fence, with up to one deviation;
14. ``small-rolling``: a rolling deploy, the second endpoint served by the new version and
    by an old one that does not know Step and gives it back (NoMisreadMessages; nothing
    parked, lost or processed twice), with up to one deviation and one fault, then two
    deviations and no fault;
15. ``small-effect``: a handler requests a charge, the bus's performer calls the provider
    after the commit (a scheduled, faulted operation; a call under the key of one still held
    is answered 409, in progress, and retried) and the answer comes back to the handler
    (EffectsAppliedOnce), with up to one deviation and one fault;
16. ``small-effect-amo``: the same with a service that honours no key, declared at-most-once
    (EffectsAppliedAtMostOnce), with up to one deviation and no fault, then no deviation and
    one fault;
17. ``pair-<sender>-<receiver>``: a mixed-mode app, its first endpoint in one mode sending to
    a receiver in another, for every pairing of two different modes (a mode paired with
    itself is 1-5), two copies and a cleanup pass at any point, with up to one deviation
    and no fault, then no deviation and one fault;
18. ``small-budget``: the shared event with a body budget that holds one payload: the
    subscriber that finds no room postpones its message (sends it again, hidden), with up
    to one deviation and no fault, then no deviation and one fault;
19. ``small-two-apps``: a system of two apps over one messaging store, each with its rows in
    its own store and its own cleanup (which may run at once, and each lists the other's
    tokens in the shared container), one sending a command and publishing an event to the
    other's endpoints, with up to one deviation and no fault, then no deviation and one
    fault;
20. ``small-state-outage``: the app's state store silent for its first three requests,
    more deliveries than the host's tries: each message waits for it without spending a
    try, with up to one deviation and no fault, then no deviation and one fault;
21. ``small-session`` and ``small-session-postgres``: web requests in transactional sessions
    (``lab.sim.sessions``), one racing its retry under its key, one its client gives up on
    (the cleanup's resend finishes it), one rolling back, beside a cleanup pass with the
    sessions task, on Table Storage and PostgreSQL, with up to one deviation and no fault,
    then no deviation and one fault;
22. ``small-saga`` and ``small-saga-postgres``: a saga (``lab.sim.sagas``) whose instance
    starts, takes a reply, completes and then meets a second starting message (a new id,
    the same correlation), beside a message for an instance nobody starts, with copies, a
    network duplicate, a late redelivery and a cleanup pass, on Table Storage and
    PostgreSQL (NoResurrectedInstance, NoUnstartedInstance, NoProcessingAfterCompletion,
    SagaNotFoundOnce), with up to one deviation and no fault, then no deviation and one
    fault;
23. ``small-cancel`` and ``small-cancel-postgres``: cancellable scheduled messages
    (``lab.sim.cancels``) racing their delivery as time makes them due: a saga's timeout
    cancelled by its completion, a delayed message cancelled by ``ctx.cancel`` (both through
    ``bus.CancelScheduled``) and a client's delayed message cancelled by its key
    (``cancel_by_key``), with copies, a network duplicate, a late redelivery, a cleanup pass
    and faults at every storage operation the cancels make, on Table Storage and PostgreSQL
    (CancelOrProcessedOnce), with up to one deviation and no fault, then no deviation and
    one fault;
24. ``small-cosmos``, ``small-sweep-cosmos``, ``small-partition-cosmos``,
    ``small-cosmos-entity_outbox``, ``small-blob`` and ``small-sweep-blob``: the endpoints'
    rows in a document store (issue 47), one JSON document per partition under its ETag, in
    the Cosmos DB model (``lab.sim.documents``: every document request scheduled and faulted,
    a lost write answered as its client's resend sees it) or as blobs of the account, with up
    to one deviation and one fault (``small-partition-blob``, the other window modes'
    ``small-<store>-<mode>``, ``small-sweep-<store>-<mode>`` and
    ``small-partition-<store>-<mode>`` and the session, saga and cancel phases'
    ``small-<phase>-<store>`` are configurations outside the plan);
and then seeded random search over larger configurations in every mode for the rest of the
time budget. With two cores the phases are dealt to two processes (``DEFAULT_PLAN``), each
then searching its own random seeds. ``--mode`` keeps the phases and random runs of one mode.
With ``--reduce`` the exhaustive phases skip schedules equivalent to one already explored
(``Reduction``). It prints progress, every violation with its seed and
schedule, the speed (schedules and distinct schedules per second of CPU, schedules per second
of wall-clock time) and ends with
``simulation: schedules=<N> faults=<F> violations=<V>``; the exit status is 1 on violations.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from lab.sim.explore import (
    CONFIGS,
    PAIRINGS,
    Summary,
    config_named,
    exhaustive,
    random_search,
    replay,
    report,
)
from lab.sim.variants import VARIANTS, Variant
from shared.bus.app import MODES, Mode
from shared.errors import ConfigurationError

Phase = tuple[str, int, int]
"""(configuration, deviations, faults) explored exhaustively."""
Plan = tuple[Phase, ...]


def _pairing_phases(pairings: tuple[tuple[Mode, Mode], ...]) -> Plan:
    """Each pairing with up to one deviation and no fault, then no deviation and one fault
    (one deviation and one fault together is minutes per pairing: random search goes there)."""
    return tuple(
        (f"pair-{sender}-{receiver}", deviations, faults)
        for sender, receiver in pairings
        for deviations, faults in ((1, 0), (0, 1))
    )


_HALF = len(PAIRINGS) // 2

DEFAULT_PLAN: tuple[Plan, Plan] = (
    (
        ("small", 1, 1),
        ("small", 2, 0),
        ("small-processed_messages", 1, 1),
        ("small-partition", 1, 1),
        ("small-postgres", 1, 1),
        ("small-sweep-postgres", 1, 1),
        ("small-postgres-processed_messages", 1, 1),
        ("small-postgres-entity_outbox", 1, 1),
        ("small-partition-postgres-state_based", 1, 1),
        ("small-delay", 1, 1),
        ("small-retry", 1, 1),
        ("small-oversized", 1, 1),
        ("small-parked", 1, 0),
        ("small-parked", 0, 1),
        ("small-shared", 1, 0),
        ("small-shared", 0, 1),
        ("small-rolling", 1, 1),
        ("small-rolling", 2, 0),
        *_pairing_phases(PAIRINGS[:_HALF]),
        ("small-two-apps", 1, 0),
        ("small-state-outage", 1, 0),
        ("small-session", 1, 0),
        ("small-session-postgres", 0, 1),
        ("small-saga", 1, 0),
        ("small-saga-postgres", 0, 1),
        ("small-cancel", 1, 0),
        ("small-cancel-postgres", 0, 1),
        ("small-cosmos", 1, 1),
        ("small-partition-cosmos", 1, 1),
    ),
    (
        ("small-sweep", 1, 1),
        ("small-sweep-processed_messages", 1, 1),
        ("small-sweep-entity_outbox", 1, 1),
        ("small-redelivery", 1, 1),
        ("small-unbounded-sweep", 1, 1),
        ("small-unbounded-sweep", 2, 0),
        ("small-state_based", 1, 1),
        ("small-entity_outbox", 1, 1),
        ("small-sweep-state_based", 1, 1),
        ("small-ingress", 1, 1),
        ("small-postgres-state_based", 1, 1),
        ("small-partition-postgres-processed_messages", 1, 1),
        ("small-partition-postgres-entity_outbox", 1, 1),
        ("small-shared-processed_messages", 1, 0),
        ("small-effect", 1, 1),
        ("small-effect-amo", 1, 0),
        ("small-effect-amo", 0, 1),
        *_pairing_phases(PAIRINGS[_HALF:]),
        ("small-budget", 1, 0),
        ("small-budget", 0, 1),
        ("small-two-apps", 0, 1),
        ("small-state-outage", 0, 1),
        ("small-session", 0, 1),
        ("small-session-postgres", 1, 0),
        ("small-saga", 0, 1),
        ("small-saga-postgres", 1, 0),
        ("small-cancel", 0, 1),
        ("small-cancel-postgres", 1, 0),
        ("small-blob", 1, 1),
        ("small-sweep-cosmos", 1, 1),
        ("small-sweep-blob", 1, 1),
        ("small-cosmos-entity_outbox", 1, 1),
    ),
)
"""The phases explored exhaustively before the random search, dealt to two processes so
that both take about as long (measured); with one process they run one after the other."""


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lab.sim",
        description="Explore interleavings and faults of the real pipeline; check invariants.",
    )
    parser.add_argument("--seed", help="replay one run: an integer, <config>@<n> or <config>:<d.d>")
    parser.add_argument(
        "--variant", choices=sorted(VARIANTS), help="explore a known-bad pipeline variant"
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), help="explore one configuration")
    parser.add_argument(
        "--mode", choices=MODES, help="the default exploration restricted to one endpoint mode"
    )
    parser.add_argument("--deviations", type=int, default=1, help="with --config (default 1)")
    parser.add_argument("--faults", type=int, default=1, help="with --config (default 1)")
    parser.add_argument(
        "--budget",
        type=float,
        default=240.0,
        help="seconds for the whole exploration: the random search fills what the exhaustive "
        "phases leave (default 240; the exhaustive phases always finish)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="processes; with 2 or more, a second process runs random search from the start",
    )
    parser.add_argument("--first-seed", type=int, default=0, help="first random seed (default 0)")
    parser.add_argument(
        "--random",
        action="store_true",
        help="random search only, for the whole budget (no exhaustive phases)",
    )
    parser.add_argument("--verbose", action="store_true", help="print the schedule of a replay")
    parser.add_argument(
        "--reduce",
        action="store_true",
        help="skip schedules of the exhaustive phases equivalent to one already explored",
    )
    return parser.parse_args(argv)


def _progress(label: str, started: float) -> Callable[[Summary], None]:
    def show(summary: Summary) -> None:
        print(
            f"  {label}: {summary.schedules} schedules, {summary.violations} violations "
            f"({time.monotonic() - started:.0f}s)",
            flush=True,
        )

    return show


async def _work(
    plan: Plan,
    first_seed: int,
    step: int,
    deadline: float | None,
    variant: Variant | None,
    modes: tuple[Mode, ...],
    who: str,
    reduce: bool = False,
) -> Summary:
    """Explore ``plan`` exhaustively, then search at random (seeds first_seed, first_seed +
    step, ...) until ``deadline`` (at least a few seconds, however long the plan took)."""
    total = Summary()
    started = time.monotonic()
    for name, deviations, faults in plan:
        label = f"{who}exhaustive {name} (deviations<={deviations}, faults<={faults})"
        print(label, flush=True)
        summary = await exhaustive(
            config_named(name),
            max_deviations=deviations,
            max_faults=faults,
            variant=variant,
            progress=_progress(label, started),
            reduce=reduce,
        )
        print(f"  {label}: {summary.line.removeprefix('simulation: ')}; {summary.rate}", flush=True)
        total.merge(summary)
    if deadline is not None:
        label = f"{who}random search"
        print(f"{label} from seed {first_seed}", flush=True)
        summary = await random_search(
            itertools.count(first_seed, step),
            modes=modes,
            variant=variant,
            deadline=max(deadline, time.monotonic() + 5),
            progress=_progress(label, started),
        )
        print(f"  {label}: {summary.line.removeprefix('simulation: ')}; {summary.rate}", flush=True)
        total.merge(summary)
    return total


def _second_process(
    plan: Plan,
    first_seed: int,
    deadline_in: float | None,
    variant: str | None,
    modes: tuple[Mode, ...],
    reduce: bool,
) -> Summary:
    deadline = None if deadline_in is None else time.monotonic() + deadline_in
    chosen = VARIANTS[variant] if variant else None
    return asyncio.run(_work(plan, first_seed, 2, deadline, chosen, modes, "[2] ", reduce))


def _modes(args: argparse.Namespace, variant: Variant | None) -> tuple[Mode, ...]:
    """The modes explored: all, or the one asked for, and only those a variant changes."""
    chosen = [m for m in MODES if args.mode is None or m == args.mode]
    if variant is not None:
        chosen = [m for m in chosen if m in variant.modes]
    if not chosen:
        raise ConfigurationError(
            f"variant {args.variant} changes modes {list(variant.modes if variant else ())}, "
            f"not {args.mode}"
        )
    return tuple(chosen)


def _keep(plan: Plan, modes: tuple[Mode, ...]) -> Plan:
    """The phases with an endpoint in one of ``modes`` (a pairing's sender or receivers)."""

    def kept(name: str) -> bool:
        config = config_named(name)
        return config.mode in modes or config.receivers in modes

    return tuple(phase for phase in plan if kept(phase[0]))


async def _explore(args: argparse.Namespace, variant: Variant | None) -> Summary:
    modes = _modes(args, variant)
    first, second = (_keep(plan, modes) for plan in DEFAULT_PLAN)
    if args.random:
        first, second = (), ()
    if args.config is not None:
        first, second = ((args.config, args.deviations, args.faults),), ()
    searching = args.config is None and args.budget > 0
    deadline = time.monotonic() + args.budget if searching else None
    if args.jobs < 2 or not searching:
        return await _work(
            first + second, args.first_seed, 1, deadline, variant, modes, "", args.reduce
        )
    with ProcessPoolExecutor(max_workers=1) as pool:
        helper = pool.submit(
            _second_process,
            second,
            args.first_seed + 1,
            args.budget,
            args.variant,
            modes,
            args.reduce,
        )
        total = await _work(first, args.first_seed, 2, deadline, variant, modes, "", args.reduce)
        total.merge(helper.result())
    return total


async def _main(args: argparse.Namespace) -> int:
    variant = VARIANTS[args.variant] if args.variant else None
    if args.seed:
        result = await replay(args.seed, variant)
        summary = Summary()
        summary.add(args.seed, result)
        if result.ok:
            print("\n".join(result.trace) if args.verbose else f"seed {args.seed}: no violation")
    else:
        started = time.monotonic()
        summary = await _explore(args, variant)
        elapsed = time.monotonic() - started
        processes = 2 if args.jobs >= 2 and args.config is None and args.budget > 0 else 1
        print(
            f"speed: {summary.rate}; {summary.schedules / elapsed:.0f} schedules per second "
            f"of wall-clock time ({elapsed:.0f} s, {processes} process(es))"
        )
    for seed, failed in summary.failures:
        print(report(seed, failed))
    print(summary.line)
    return 1 if summary.violations else 0


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        return asyncio.run(_main(args))
    except ConfigurationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
