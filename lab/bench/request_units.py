"""The request units a Cosmos DB account charged the bench: every response of the account
carries the charge of its request in ``x-ms-request-charge``, and the bench's clients add
them up (``RequestCharges``, a response hook of the client, so every request counts: the
documents' and the SDK's own account and container reads).

The local server (npm ``@vercel/cosmosdb-server``) answers every request with a charge of 1,
whatever it did: its figure counts requests, not the work the service would bill.
docs/benchmarks.md says what the service's documented charges would make of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from azure.cosmos.aio import CosmosClient

from shared.errors import ConfigurationError
from shared.settings import StorageTimeouts
from shared.stores.cosmos.database import CosmosDatabase, is_loopback
from shared.stores.cosmos.settings import CosmosSettings

CHARGE_HEADER = "x-ms-request-charge"


@dataclass
class RequestCharges:
    """The charges of the responses one client received."""

    units: float = 0.0
    responses: int = 0
    uncharged: int = 0
    """Responses without a readable charge (none is made up for them)."""

    def __call__(self, response: Any) -> None:
        """The client's ``raw_response_hook``: one response of the pipeline."""
        charge = response.http_response.headers.get(CHARGE_HEADER)
        self.responses += 1
        try:
            self.units += float(charge)
        except (TypeError, ValueError):
            self.uncharged += 1


def charged_database(settings: CosmosSettings, charges: RequestCharges) -> CosmosDatabase:
    """The settings' database with every response's charge added to ``charges``; signed in
    with the account key (the bench runs on a local server)."""
    if settings.endpoint is None or settings.key is None:
        raise ConfigurationError("the bench's Cosmos DB account needs an endpoint and a key")
    timeouts = StorageTimeouts()
    client = CosmosClient(
        settings.endpoint,
        credential=settings.key,
        connection_verify=not is_loopback(settings.endpoint),
        connection_timeout=timeouts.connect,
        read_timeout=timeouts.read,
        raw_response_hook=charges,
    )
    return CosmosDatabase(client, settings.database, timeouts)
