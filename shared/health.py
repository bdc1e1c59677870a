"""Is every resource the app needs reachable, is every trigger worker still running, and is
every endpoint subscribed to the topics it handles? Used by the health endpoint and the demo.

Workers: the local host (``lab.host``) runs the queue and timer triggers in the app's own
process and records here any of them that ends while the host is not stopping, with why.
On Azure the Functions host owns the triggers, outside the app's reach: nothing is recorded,
and health covers storage only.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field

from shared.bus.app import BusApp
from shared.bus.subscriptions import MissingSubscription, missing_subscriptions
from shared.bus.topics import RecipientLists
from shared.errors import BusError, NotFound
from shared.resources import MESSAGING, STATE, Resources, RoleResources
from shared.stores.account import StorageAccount


@dataclass
class HealthReport:
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    """Trigger workers of this process that are no longer running: ``"<worker>: <why>"``."""
    unsubscribed: list[MissingSubscription] = field(default_factory=list)
    """Handling endpoints missing from their topic's recipient list: events they handle are
    dropped, so the app is not healthy."""
    startup_subscription: str | None = None
    """The state of this process's start-up subscription (``shared.startup_subscription``)."""

    @property
    def healthy(self) -> bool:
        return not (self.missing or self.errors or self.stopped or self.unsubscribed)

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "checked": self.checked,
            "missing": self.missing,
            "errors": self.errors,
            "stopped": self.stopped,
            "unsubscribed": [gap.as_dict() for gap in self.unsubscribed],
            "startup_subscription": self.startup_subscription,
        }


# Process-wide because the host and the app share nothing else: the host writes, the app's
# health function reads. Keyed by worker name ('queue orders'), so a restart of one worker
# under the same name would replace its entry.
_stopped_workers: dict[str, str] = {}


def worker_stopped(worker: str, reason: str) -> None:
    """Record that ``worker`` (e.g. 'queue orders') ended while it should be running."""
    _stopped_workers[worker] = reason


def forget_workers() -> None:
    """A host starting or ending its run: nothing recorded before still applies."""
    _stopped_workers.clear()


def stopped_workers() -> list[str]:
    return [f"{worker}: {reason}" for worker, reason in sorted(_stopped_workers.items())]


async def check(
    account: StorageAccount, resources: Resources, *, state: StorageAccount | None = None
) -> HealthReport:
    """Storage (``check_storage``) plus the trigger workers of this process."""
    report = await check_storage(account, resources, state=state)
    report.stopped = stopped_workers()
    return report


async def check_subscriptions(report: HealthReport, app: BusApp, topics: RecipientLists) -> None:
    """Add to ``report`` every handling endpoint of ``app`` that ``topics`` does not list."""
    try:
        report.unsubscribed = await missing_subscriptions(app, topics)
    except BusError as e:
        report.errors.append(f"topic recipient lists: {e}")


async def check_storage(
    account: StorageAccount, resources: Resources, *, state: StorageAccount | None = None
) -> HealthReport:
    """Touch every queue, container and table with one cheap read each, each in the account
    of its role (``Resources.by_role``): ``account`` the messaging one, ``state`` the app's
    own (None: the messaging account holds both, and the report reads as it always has; given,
    every line names the account it is about)."""
    report = HealthReport()
    accounts = {MESSAGING: account, STATE: account if state is None else state}
    for role, held in resources.by_role().items():
        where = "" if state is None else f" in the {role} account"
        await _probe_role(report, accounts[role], held, where)
    return report


async def _probe_role(
    report: HealthReport, account: StorageAccount, held: RoleResources, where: str
) -> None:
    async def probe(kind: str, name: str, read: Awaitable[object]) -> None:
        report.checked += 1
        try:
            await read
        except NotFound:
            report.missing.append(f"{kind} {name}{where}")
        except BusError as e:
            report.errors.append(f"{kind} {name}{where}: {e}")

    for queue in held.queues:
        await probe("queue", queue, account.queue(queue).approximate_count())
    for container in held.containers:
        await probe("container", container, _first_blob(account, container))
    for table in held.tables:
        await probe("table", table, account.table(table).query(page_size=1))


async def _first_blob(account: StorageAccount, container: str) -> None:
    async for _ in account.blob_container(container).list():
        break
