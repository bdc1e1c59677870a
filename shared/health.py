"""Is every resource the app needs reachable? Used by the health endpoint and the demo."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field

from shared.errors import BusError, NotFound
from shared.resources import Resources
from shared.stores.account import StorageAccount


@dataclass
class HealthReport:
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.missing and not self.errors

    def as_dict(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "checked": self.checked,
            "missing": self.missing,
            "errors": self.errors,
        }


async def check_storage(account: StorageAccount, resources: Resources) -> HealthReport:
    """Touch every queue, container and table with one cheap read each."""
    report = HealthReport()

    async def probe(kind: str, name: str, read: Awaitable[object]) -> None:
        report.checked += 1
        try:
            await read
        except NotFound:
            report.missing.append(f"{kind} {name}")
        except BusError as e:
            report.errors.append(f"{kind} {name}: {e}")

    for queue in resources.queue_names:
        await probe("queue", queue, account.queue(queue).approximate_count())
    for container in resources.container_names:
        await probe("container", container, _first_blob(account, container))
    for table in resources.table_names:
        await probe("table", table, account.table(table).query(page_size=1))
    return report


async def _first_blob(account: StorageAccount, container: str) -> None:
    async for _ in account.blob_container(container).list():
        break
