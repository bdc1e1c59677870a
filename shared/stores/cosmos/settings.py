"""Where the app's Cosmos DB account is and how to sign in to it: read by ``shared.config``
without importing the SDK."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CosmosSettings:
    """``BUS_COSMOS_ENDPOINT`` (None: the app has no Cosmos DB account), ``BUS_COSMOS_KEY``
    (None: sign in with the app's identity; never shown) and ``BUS_COSMOS_DATABASE``."""

    endpoint: str | None = None
    key: str | None = field(default=None, repr=False)
    database: str = "bus"
