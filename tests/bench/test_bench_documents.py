"""The bench's token mode over the document stores: each partition's rows in one JSON blob
(``token_blob``) or one Cosmos DB item (``token_cosmos``), in memory with in-process hosts and
on Azurite in a host process, with every document request counted and priced."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from lab.bench.modes import (
    AT_LEAST_ONCE,
    TOKEN,
    TOKEN_BLOB,
    TOKEN_COSMOS,
    BenchMode,
    store_modes,
)
from lab.bench.prices import billing_class
from lab.bench.report import merged_results, results_document
from lab.bench.runner import Measurement, Plan, measure
from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from shared.stores.cosmos.settings import CosmosSettings
from shared.stores.memory import MemoryStorageAccount
from shared.stores.memory.documents import MemoryDocumentDatabase

ROOTS = 5


def mode(label: str) -> BenchMode:
    return next(m for m in store_modes() if m.label == label)


def assert_exactly_once_and_cleaned(result: Measurement, messages: int) -> None:
    """Every message processed once; before the cleanup each partition holds its state, one
    O(m) and one audit row per message (in its document); after it, only the state."""
    assert result.ok, result.error
    assert result.handled == messages
    assert result.outcomes == {"processed": messages}
    assert result.residue_kinds["state"] == messages  # one partition per root and endpoint
    assert result.residue_kinds["outbox"] == result.residue_kinds["audit"] == messages
    assert result.residue_after_cleanup == {"state": messages}
    assert result.cleanup_ops_per_message > 0


async def test_token_blob_keeps_every_row_in_blob_documents_and_counts_their_requests() -> None:
    """Given token mode with its rows as blob documents, when the workload drains in memory,
    then no endpoint row is in a table: each message reads its partition's document and
    writes it back under its ETag (R2's O(m), R5's commit), all counted as blob requests."""
    result = await measure(
        MemoryStorageAccount(),
        mode(TOKEN_BLOB),
        Plan(ROOTS, concurrency=4, processes=2),
        separate_processes=False,
    )

    messages = 2 * ROOTS
    assert_exactly_once_and_cleaned(result, messages)
    ops = result.operations
    assert not [kind for kind in ops if kind.startswith(("table.", "sql.", "cosmos."))]
    # Per message (its partition's first): R2 reads the document, finds none, and the O(m)
    # creates it; the commit replaces it from the copy the create left (no read); the claim
    # and the acknowledgement as in every token mode. Each root's sender creates one token.
    assert ops["blob.read"] == ops["blob.upload"] == messages
    assert ops["blob.create"] == messages + ROOTS
    assert ops["blob.set_metadata"] == ops["queue.delete"] == messages
    assert result.usd_per_million_messages["whole"] > 0


async def test_token_cosmos_counts_each_document_request_as_a_cosmos_request() -> None:
    """Given token mode with its rows in (the in-memory model of) Cosmos DB, when the
    workload drains, then every document read, write and page is a ``cosmos.*`` request,
    priced in the Cosmos DB class at nothing per request (it bills request units)."""
    result = await measure(
        MemoryStorageAccount(),
        mode(TOKEN_COSMOS),
        Plan(ROOTS, concurrency=4),
        separate_processes=False,
        cosmos=MemoryDocumentDatabase(),
    )

    messages = 2 * ROOTS
    assert_exactly_once_and_cleaned(result, messages)
    ops = result.operations
    assert not [kind for kind in ops if kind.startswith(("table.", "sql."))]
    # One read and two writes per message, as for blob documents (above).
    assert ops["cosmos.read"] == ops["cosmos.create"] == ops["cosmos.replace"] == messages
    assert "cosmos.page" in result.cleanup_operations  # the cleanup pages the documents
    assert {billing_class(k).key for k in ops if k.startswith("cosmos.")} == {"cosmos.request"}


def test_the_document_modes_are_refused_where_the_bus_has_no_token_mode() -> None:
    modes = store_modes(offered=("processed_messages",))
    assert {m.label for m in modes} >= {TOKEN_BLOB, TOKEN_COSMOS}
    assert not any(m.available for m in modes)


@pytest.mark.azurite
async def test_token_blob_drains_in_a_host_process_on_azurite(azurite: AzuriteEndpoints) -> None:
    """Given Azurite, when token_blob runs in a host process, then it drains exactly once with
    its documents in each endpoint's rows container, and the cleanup leaves only the state."""
    connection = azurite.connection_string
    async with AzureStorageAccount(StorageSettings(connection)) as raw:
        result = await measure(
            raw,
            mode(TOKEN_BLOB),
            Plan(4, concurrency=4),
            separate_processes=True,
            connection_string=connection,
        )

    assert_exactly_once_and_cleaned(result, 8)
    assert "table.transact" not in result.operations
    assert result.operation_ms["blob.upload"] > 0


async def test_a_run_of_some_modes_merges_into_the_results_of_a_full_run() -> None:
    """Given the results of a run of the floor and token mode, when a later run of token mode
    and token_blob is merged into them, then the floor is kept and named with its run, token
    mode and token_blob are the later run's, and the ratio is recomputed over what is held."""

    def measured(label: str, throughput: float) -> Measurement:
        m = Measurement(label, True, 16, 1, ROOTS, handled=2 * ROOTS)
        m.throughput_msgs_per_s = throughput
        return m

    first = {"generated_at": "first", "machine": {"cpu_count": 2}, "settings": {"roots": 500}}
    earlier = results_document([measured(AT_LEAST_ONCE, 100.0), measured(TOKEN, 50.0)], [], first)
    later = {"generated_at": "later", "machine": {}, "settings": {"roots": 100}}

    merged = merged_results(earlier, [measured(TOKEN_BLOB, 40.0), measured(TOKEN, 80.0)], [], later)

    # In the earlier run's order, the new mode after them.
    assert [m["mode"] for m in merged["modes"]] == [AT_LEAST_ONCE, TOKEN, TOKEN_BLOB]
    assert merged["generated_at"] == "later"
    assert merged["earlier_runs"] == [{**first, "modes": [AT_LEAST_ONCE]}]
    assert merged["ratio_token_vs_at_least_once"] == pytest.approx(0.8)
    # Merged once more, the floor keeps naming its own run, not the one in between.
    again = merged_results(merged, [measured(TOKEN_COSMOS, 30.0)], [], {"generated_at": "3"})
    assert again["earlier_runs"] == [
        {**first, "modes": [AT_LEAST_ONCE]},
        {**later, "modes": [TOKEN, TOKEN_BLOB]},
    ]


@pytest.mark.azurite
@pytest.mark.cosmos
async def test_token_cosmos_drains_in_a_host_process_on_the_local_server(
    azurite: AzuriteEndpoints, cosmos: CosmosSettings
) -> None:
    """Given Azurite and the local Cosmos DB server, when token_cosmos runs in a host process,
    then it drains exactly once with each partition's rows in an item of the endpoint's
    container (created by the round), its document requests counted, and the request units
    the server charged are reported: the hosts' and the cleanup's, one per response here."""
    connection = azurite.connection_string
    settings = replace(cosmos, database=f"bench{uuid.uuid4().hex[:8]}")
    async with AzureStorageAccount(StorageSettings(connection)) as raw:
        result = await measure(
            raw,
            mode(TOKEN_COSMOS),
            Plan(4, concurrency=4),
            separate_processes=True,
            connection_string=connection,
            cosmos_settings=settings,
        )

    assert_exactly_once_and_cleaned(result, 8)
    ops = result.operations
    assert ops["cosmos.read"] == ops["cosmos.create"] == ops["cosmos.replace"] == 8
    documents = sum(n for kind, n in ops.items() if kind.startswith("cosmos."))
    # The local server charges 1 per response: at least one per document request, plus the
    # SDK's own reads of the account and the containers.
    assert result.request_units_per_message is not None
    assert result.request_units_per_message * result.handled >= documents
    assert result.cleanup_request_units_per_message is not None
    assert result.cleanup_request_units_per_message > 0


def test_a_charge_is_read_from_each_response_and_none_is_made_up() -> None:
    """The request units hook adds each response's x-ms-request-charge, and counts apart a
    response that has none or an unreadable one."""
    from lab.bench.request_units import RequestCharges

    class Response:
        def __init__(self, headers: dict[str, str]) -> None:
            self.http_response = self
            self.headers = headers

    charges = RequestCharges()
    for headers in (
        {"x-ms-request-charge": "5.71"},
        {"x-ms-request-charge": "1"},
        {},
        {"x-ms-request-charge": "lots"},
    ):
        charges(Response(headers))

    assert charges.units == pytest.approx(6.71)
    assert (charges.responses, charges.uncharged) == (4, 2)
