"""The cleanup's task list: each task pages through one kind of record and removes what is
evicted, in a module of its own over ``shared.cleanup.base``.

Every decision here is safe on its own, whatever else runs concurrently (receivers, other
cleanup instances): deletions are ETag-guarded or idempotent, and nothing that was or will be
signalled is deleted (design notes section 3):
- a token is deleted only when it is older than the grace period, unclaimed, and its origin
  row does not list it as committed (``shared.cleanup.origins``);
- a committed O(m) is retired once every token it committed is gone or claimed (consumed
  or received, so signalled) and no abandoned one is left under its prefix; its incoming
  token is deleted first (R7, which the receiver leaves to the cleanup:
  ``shared.bus.receiver``). One that committed no output and records no abandoned token
  goes without looking under its prefix: nothing of it can be in flight, and its absence
  then proves a token left there uncommitted. An uncommitted O(m) is retired only once its
  incoming token is gone;
- an ingress record is removed only after its window, and only once its tokens are gone;
  so is a transactional session's record O(s), once the cleanup has signalled what its
  request left unsignalled; an open one is removed after the grace period
  (``shared.cleanup.sessions``);
- audit rows are removed after their retention period;
- a shared payload is removed once no token can still need it (``shared.cleanup.payloads``);
- a discarded message's archive entry is removed once its retention has passed
  (``shared.cleanup.discarded``).

Every task reaches an endpoint's rows one way, ``CleanupContext.rows`` (an ``EndpointRows``,
``shared.bus.state.rows``), whichever store keeps them. The cleanup does not choose the store:
whoever composes it hands it every endpoint's rows, already chosen from the endpoint's
declaration (its table, or PostgreSQL for ``store="postgres"``: ``Worker.endpoint_rows``,
``shared.bus.state.stores.endpoints_rows``). So each judgement, and what is done with a row
that cannot be read (``shared.bus.state.damaged``), is written once for every store. The
ingress records are no endpoint's rows: they are always in the ingress table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from shared.bus.effects import PERFORMER_ENDPOINT
from shared.cleanup.abandoned_tokens import AbandonedTokens
from shared.cleanup.audit_rows import AuditRows
from shared.cleanup.base import CleanupTask
from shared.cleanup.discarded import ExpiredDiscards
from shared.cleanup.ingress_records import IngressRecords
from shared.cleanup.markers import RetiredMarkers
from shared.cleanup.outbox_records import OutboxRecords
from shared.cleanup.parked import poison_tasks
from shared.cleanup.payloads import SharedPayloads
from shared.cleanup.retention import MODE_EXPIRY, ModeRetention
from shared.cleanup.saga_markers import SagaMarkers
from shared.cleanup.sessions import SessionRecords


def standard_tasks(
    endpoints: Mapping[str, str] | Collection[str],
    performer: str = PERFORMER_ENDPOINT,
    sessions: Collection[str] = (),
    sagas: Collection[str] = (),
) -> list[CleanupTask]:
    """Every task for these endpoints (a name-to-mode mapping; bare names are token mode),
    the markers' when ``performer`` (the app's performer endpoint, ``BusConfig``) is one, and
    the sessions' of the endpoints in ``sessions`` (declared ``sessions=True``), and the
    completed instances' of the sagas in ``sagas``.

    The job runs them side by side; none waits on another, since the outbox and ingress
    tasks delete the abandoned tokens under their own records' prefixes themselves (but for
    an O(m) that committed no output and knows of none abandoned, whose strays the tokens
    task deletes, in the same pass or the next). A sweep (``lab.cleanup.sweep``)
    runs them in this order."""
    modes = dict(endpoints) if isinstance(endpoints, Mapping) else dict.fromkeys(endpoints, "token")
    names = sorted(modes)
    tasks: list[CleanupTask] = [AbandonedTokens()]
    tasks += [OutboxRecords(e) for e in names]
    tasks += [SessionRecords(e) for e in names if e in sessions]
    tasks += [SagaMarkers(e) for e in names if e in sagas]
    tasks.append(IngressRecords())
    tasks += [AuditRows(e) for e in names]
    tasks += [ModeRetention(e, modes[e]) for e in names if modes[e] in MODE_EXPIRY]
    tasks.append(SharedPayloads())
    tasks += poison_tasks(names)
    tasks.append(ExpiredDiscards())
    if performer in modes:
        tasks.append(RetiredMarkers())
    return tasks
