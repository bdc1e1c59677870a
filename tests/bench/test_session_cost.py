"""The session bench's counts: what one web request costs in requests, each way, on both
stores (a count, not a clock: the latencies are printed, never asserted)."""

from __future__ import annotations

from collections import Counter

import pytest

from lab.bench.session_cost import bench, show
from lab.local.azurite import AzuriteEndpoints

pytestmark = [pytest.mark.azurite, pytest.mark.postgres]

REQUESTS = 3
SESSION_TABLE = {
    "table.query": 1,  # S1: O(s), with the key's first request's record if any
    "table.insert": 1,  # S1: O(s) inserted open
    "blob.create": 1,  # S3: the message's token
    "table.transact": 1,  # S4: the user's row, O(s) committed, the audit row
    "queue.send": 1,  # S5
    "table.update": 1,  # S6: O(s) marked signalled
}


def per_request(kinds: Counter[str]) -> dict[str, float]:
    return {kind: count / REQUESTS for kind, count in kinds.items()}


async def test_each_way_costs_what_its_steps_make(azurite: AzuriteEndpoints, postgres: str) -> None:
    runs = await bench(azurite.connection_string, postgres, REQUESTS, warmup=1)
    by_way = {(run.name, run.store): per_request(run.kinds) for run in runs}
    assert by_way["session", "table"] == SESSION_TABLE
    sql_session = {k.replace("table.", "sql."): v for k, v in SESSION_TABLE.items()}
    assert by_way["session", "postgres"] == {**sql_session, "sql.user statement": 3}
    assert by_way["write + raw send", "table"] == {"table.insert": 1, "queue.send": 1}
    assert by_way["write + raw send", "postgres"] == {"sql.user statement": 1, "queue.send": 1}
    assert sum(by_way["write + ingress", "table"].values()) == 6
    assert all(len(run.millis) == REQUESTS for run in runs)
    assert "session" in show(runs, REQUESTS)
