"""What the bench's storage requests come to in money: each operation kind the instrumented
stores count, mapped to the class Azure bills it in, at one region's list prices.

One table, ``PRICES``, for one account kind and region. Azure bills requests per 10,000 of a
class: blob storage by write, read, list-and-create-container and other operations (deletes
free), queue storage by class 1 and class 2 operations, table storage by transactions. SQL
statements (token mode's rows in PostgreSQL) are billed by the server's hour, not per
statement, and Cosmos DB requests by the request units they consume, so each has a class of
its own at no price per request.

    .venv/bin/python -m lab.bench.prices   # the price table as docs/benchmarks.md shows it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.errors import InvalidValue

ACCOUNT = "General Purpose v2, Standard, Hot access tier, LRS, East US, pay as you go, USD"
READ_ON = "2026-12-02"

_BLOB_LIST = (
    "a third party's summary, not Azure's own page: github.com/api-evangelist/microsoft-azure-"
    "blob-storage, plans/microsoft-azure-blob-storage-plans-pricing.yml (Hot, LRS East US list "
    "prices, machine-generated 2026-05-05, citing azure.microsoft.com/pricing/details/storage/"
    "blobs)"
)
_NOT_FOUND = (
    "no published figure found from here: as remembered from azure.microsoft.com/pricing/"
    "details/storage/{page}, unverified"
)
_FREE = (
    "Delete Blob is free on Standard general purpose v2: learn.microsoft.com/azure/storage/"
    "blobs/map-rest-apis-transaction-categories (MicrosoftDocs/azure-docs, 2025-05-14)"
)


@dataclass(frozen=True)
class BillingClass:
    key: str
    service: str
    name: str
    usd_per_10k: float
    source: str


PRICES: dict[str, BillingClass] = {
    c.key: c
    for c in (
        BillingClass("blob.write", "blob", "write operations", 0.055, _BLOB_LIST),
        BillingClass("blob.read", "blob", "read operations", 0.0044, _BLOB_LIST),
        BillingClass(
            "blob.list",
            "blob",
            "list and create container operations",
            0.055,
            _NOT_FOUND.format(page="blobs"),
        ),
        BillingClass(
            "blob.other", "blob", "all other operations", 0.0044, _NOT_FOUND.format(page="blobs")
        ),
        BillingClass("blob.free", "blob", "delete operations (free)", 0.0, _FREE),
        BillingClass(
            "queue.class1", "queue", "class 1 operations", 0.004, _NOT_FOUND.format(page="queues")
        ),
        BillingClass(
            "queue.class2", "queue", "class 2 operations", 0.004, _NOT_FOUND.format(page="queues")
        ),
        BillingClass(
            "table.transaction",
            "table",
            "storage transactions",
            0.00036,
            _NOT_FOUND.format(page="tables"),
        ),
        BillingClass(
            "cosmos.request",
            "Cosmos DB",
            "requests (billed by the request units they consume, not per request)",
            0.0,
            "Azure Cosmos DB bills request units (serverless: per million consumed), not "
            "requests: learn.microsoft.com/azure/cosmos-db/request-units; the bench reports "
            "the request units apart",
        ),
        BillingClass(
            "sql.statement",
            "PostgreSQL",
            "statements (billed by the server's hour, not per request)",
            0.0,
            "Azure Database for PostgreSQL bills compute by the hour",
        ),
    )
}

# Each operation kind the instrumented stores count (shared/stores/delegating.py,
# shared/bus/state/instrumented.py) and the class of the REST call it makes; for blobs, the
# column "Standard general purpose v2" of Microsoft's "Map each REST operation to a price"
# (learn.microsoft.com/azure/storage/blobs/map-rest-apis-transaction-categories, 2025-05-14).
BILLING: dict[str, str] = {
    "blob.create": "blob.write",  # Put Blob
    "blob.upload": "blob.write",  # Put Blob
    "blob.set_metadata": "blob.other",  # Set Blob Metadata: "Other" on GPv2 (Write on v1)
    "blob.read": "blob.read",  # Get Blob (whole or a range)
    "blob.get_properties": "blob.other",  # Get Blob Properties
    "blob.list": "blob.list",  # List Blobs, one page
    "blob.delete": "blob.free",  # Delete Blob
    # The Blob Batch request itself, taken as "Other" as the page has a batch of Set Blob Tier;
    # its Delete Blob sub-requests are free.
    "blob.delete_batch": "blob.other",
    "queue.send": "queue.class1",  # Put Message
    "queue.update": "queue.class1",  # Update Message
    "queue.delete": "queue.class1",  # Delete Message
    "queue.receive": "queue.class2",  # Get Messages
    "queue.peek": "queue.class2",  # Peek Messages
    "queue.count": "queue.class2",  # Get Queue Metadata
    "table.get": "table.transaction",
    "table.query": "table.transaction",
    "table.insert": "table.transaction",
    "table.update": "table.transaction",
    "table.upsert": "table.transaction",
    "table.delete": "table.transaction",
    # An entity group transaction is one request, counted here as one transaction.
    "table.transact": "table.transaction",
    # Cosmos DB endpoints' documents (shared/stores/instrumented_documents.py): point read,
    # create, replace, delete, and a page (a query).
    "cosmos.read": "cosmos.request",
    "cosmos.create": "cosmos.request",
    "cosmos.replace": "cosmos.request",
    "cosmos.delete": "cosmos.request",
    "cosmos.page": "cosmos.request",
    "sql.get": "sql.statement",
    "sql.query": "sql.statement",
    "sql.insert": "sql.statement",
    "sql.update": "sql.statement",
    "sql.delete": "sql.statement",
    "sql.transact": "sql.statement",
}


def billing_class(kind: str) -> BillingClass:
    """The class Azure bills an operation of ``kind`` in; an unknown kind is refused, so a
    request the stores learn to make cannot be priced at nothing unnoticed."""
    try:
        return PRICES[BILLING[kind]]
    except KeyError:
        raise InvalidValue(
            f"operation kind {kind!r} has no billing class in lab/bench/prices.py"
        ) from None


def by_class(operations: Mapping[str, int]) -> dict[str, int]:
    """Operation counts by kind, summed per billing class."""
    classes: dict[str, int] = {}
    for kind, count in operations.items():
        key = billing_class(kind).key
        classes[key] = classes.get(key, 0) + count
    return dict(sorted(classes.items()))


def usd_per_million(operations: Mapping[str, int], handled: int) -> float:
    """What ``operations``, made for ``handled`` messages, cost per million messages."""
    if handled < 1:
        raise InvalidValue("a cost per message needs at least one handled message")
    dollars = sum(n * billing_class(kind).usd_per_10k / 10_000 for kind, n in operations.items())
    return dollars * 1_000_000 / handled


def price_table() -> str:
    """The price table, in markdown, as docs/benchmarks.md shows it."""
    lines = [
        f"Prices per 10,000 requests: {ACCOUNT}, read on {READ_ON}.",
        "",
        "| class | USD per 10,000 | operation kinds | source |",
        "|---|---|---|---|",
    ]
    for c in PRICES.values():
        kinds = ", ".join(f"`{k}`" for k, v in BILLING.items() if v == c.key)
        lines.append(f"| {c.service}: {c.name} | {c.usd_per_10k:g} | {kinds} | {c.source} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(price_table())
