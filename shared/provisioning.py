"""Create the app's queues, containers and tables where Bicep does not run (Azurite, tests).

Idempotent: re-running creates only what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.resources import Resources
from shared.stores.account import StorageAccount


@dataclass(frozen=True)
class ProvisionReport:
    queues: list[str]
    containers: list[str]
    tables: list[str]

    def summary(self) -> str:
        return (
            f"provisioned {len(self.queues)} queues, {len(self.containers)} containers, "
            f"{len(self.tables)} tables"
        )


async def provision(account: StorageAccount, resources: Resources) -> ProvisionReport:
    for queue in resources.queue_names:
        await account.queue(queue).create_if_missing()
    for container in resources.container_names:
        await account.blob_container(container).create_if_missing()
    for table in resources.table_names:
        await account.table(table).create_if_missing()
    return ProvisionReport(resources.queue_names, resources.container_names, resources.table_names)
