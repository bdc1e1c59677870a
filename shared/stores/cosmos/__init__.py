"""Cosmos DB (NoSQL API) as a document store for endpoint rows (``store="cosmos"``)."""

from shared.stores.cosmos.database import (
    MAX_DOCUMENT_BYTES,
    PARTITION_KEY_PATH,
    CosmosDatabase,
    CosmosSettings,
    cosmos_client,
)
from shared.stores.cosmos.documents import COSMOS_KIND, CosmosDocuments

__all__ = [
    "COSMOS_KIND",
    "MAX_DOCUMENT_BYTES",
    "PARTITION_KEY_PATH",
    "CosmosDatabase",
    "CosmosDocuments",
    "CosmosSettings",
    "cosmos_client",
]
