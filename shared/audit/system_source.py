"""Reads a system of services for the audit: every app's rows where that app keeps them.

Each app's endpoints keep their audit rows in the app's own state store (its state account's
tables, or for endpoints of another store PostgreSQL, Cosmos DB or blob documents in its
state account: ``shared.audit.store_rows``), its ingress records are in its own
ingress table in the messaging account, and its poison queues are in the messaging account.
The union of every app's rows goes through the one-app audit's checks, so that a send
recorded in one app's state store is matched with its processing in another's.

Rows off tables are not in any table Spark tasks could read with the storage SDK: they are
read by the driver, page by page, as the export reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial, reduce

from pyspark.sql import DataFrame, SparkSession

from shared.audit.rows import Row, audit_row
from shared.audit.schema import AUDIT_SCHEMA
from shared.audit.store_rows import described, endpoint_states, off_tables
from shared.audit.table_source import read_poisoned, read_tables
from shared.bus import BusApp
from shared.bus.app import Store
from shared.config import AppConfig
from shared.settings import StorageSettings
from shared.system import LoadedApp


@dataclass(frozen=True)
class AppSource:
    """Where one app of the system keeps what the audit reads."""

    name: str
    messaging: StorageSettings
    state: StorageSettings
    state_tables: list[str]
    """Endpoints whose audit rows are in the state account's tables."""
    elsewhere: dict[str, Store]
    """Endpoints whose audit rows are off tables, and their store (read by the driver)."""
    app: BusApp
    config: AppConfig
    """The app and its configuration, which open the stores of ``elsewhere``."""
    ingress_tables: list[str]
    """In the messaging account."""

    @property
    def endpoints(self) -> list[str]:
        return [*self.state_tables, *self.elsewhere]

    def describe(self) -> str:
        """What is read where, for the progress lines (no secret: ``describe`` names the
        account, never its key)."""
        parts = [
            f"app {self.name}: audit rows of {', '.join(self.state_tables) or 'no endpoint'} "
            f"from {self.state.describe()}"
        ]
        if self.elsewhere:
            parts.append(f"of {described(self.elsewhere)}")
        parts.append(
            f"ingress records ({', '.join(self.ingress_tables)}) and poison queues from "
            f"{self.messaging.describe()}"
        )
        return "; ".join(parts)


def app_source(loaded: LoadedApp) -> AppSource:
    """The audit's view of one loaded app of a system file."""
    settings, app = loaded.entry.settings, loaded.app
    endpoints = app.running_endpoints(loaded.config.app_name)
    elsewhere = off_tables(app, endpoints)
    return AppSource(
        name=loaded.name,
        messaging=settings.storage(),
        state=settings.state_storage(),
        state_tables=[e for e in endpoints if e not in elsewhere],
        elsewhere=elsewhere,
        app=app,
        config=loaded.config,
        ingress_tables=[loaded.config.bus.ingress_table],
    )


@dataclass
class SystemFrames:
    audit: DataFrame
    ingress: DataFrame
    poisoned: DataFrame


def read_system(
    spark: SparkSession,
    apps: Sequence[AppSource],
    *,
    splits: int,
    boundaries: Sequence[str] | None,
    small_table_rows: int,
    poison_cap: int,
    tokens_container: str,
) -> SystemFrames:
    """The union of every app's audit rows, ingress records and poison messages (up to
    ``poison_cap`` per app)."""
    audits: list[DataFrame] = []
    ingresses: list[DataFrame] = []
    poisons: list[DataFrame] = []
    for app in apps:
        read = partial(
            read_tables,
            spark,
            splits=splits,
            boundaries=boundaries,
            small_table_rows=small_table_rows,
        )
        audit, _ = read(app.state, endpoint_tables=app.state_tables, ingress_tables=[])
        _, ingress = read(app.messaging, endpoint_tables=[], ingress_tables=app.ingress_tables)
        audits.append(audit)
        if app.elsewhere:
            rows = asyncio.run(store_rows(app))
            audits.append(spark.createDataFrame(rows, AUDIT_SCHEMA))
        ingresses.append(ingress)
        poisons.append(
            asyncio.run(
                read_poisoned(spark, app.messaging, app.endpoints, poison_cap, tokens_container)
            )
        )
    return SystemFrames(_union(audits), _union(ingresses), _union(poisons))


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), frames)


async def store_rows(app: AppSource) -> list[Row]:
    """Every audit row of the app's endpoints that keep them off tables, where it keeps
    them."""
    rows: list[Row] = []
    async with endpoint_states(app.app, app.config, app.elsewhere) as states:
        for name, state in states.items():
            async for entity in state.audit_entities():
                rows.append(audit_row(name, entity.partition_key, entity.properties))
    return rows
