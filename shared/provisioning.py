"""Create the app's queues, containers and tables where Bicep does not run (Azurite, tests).

Each in the account of its role (``shared.resources``): the queues, containers and app-wide
tables in the messaging account, each endpoint's table in the state account. Idempotent:
re-running creates only what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.resources import MESSAGING, STATE, Resources
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


async def provision(
    account: StorageAccount, resources: Resources, *, state: StorageAccount | None = None
) -> ProvisionReport:
    """``account``: the messaging account; ``state``: the state account (None: the same)."""
    roles = resources.by_role()
    accounts = {MESSAGING: account, STATE: account if state is None else state}
    for role, held in roles.items():
        for queue in held.queues:
            await accounts[role].queue(queue).create_if_missing()
        for container in held.containers:
            await accounts[role].blob_container(container).create_if_missing()
        for table in held.tables:
            await accounts[role].table(table).create_if_missing()
    return ProvisionReport(
        resources.queue_names,
        [*resources.container_names, *resources.rows_containers],
        resources.table_names,
    )
