"""What a message costs, whole: the bench's cleanup pass after each round, the hot path and
the cleanup added per mode, and every request priced in the class Azure bills it in."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

from lab.bench.cleanup_pass import CleanupIncomplete, clean_round
from lab.bench.host import HostSpec
from lab.bench.modes import AT_LEAST_ONCE, TOKEN, bench_modes, select
from lab.bench.prices import BILLING, PRICES, billing_class, usd_per_million
from lab.bench.report import token_whole_verdict, whole_cost_table
from lab.bench.runner import Measurement, Plan, measure_side_by_side
from lab.bench.seed import provision_run
from lab.bench.workload import Names
from shared.errors import InvalidValue
from shared.stores.instrumented import Fault, Instrumentation, InstrumentedAccount
from shared.stores.memory import MemoryStorageAccount

REPO = Path(__file__).resolve().parents[2]
KIND = re.compile(r"(blob|table|queue|sql|cosmos)\.[a-z_]+")
ROOTS = 6


def kinds_the_stores_count() -> set[str]:
    """Every operation kind named where a request is counted: the kind argument of a
    ``_call(kind, ...)`` or ``run(kind, ...)`` method call, or of a module's
    ``_run(instrumentation, kind, ...)``, anywhere in the library."""
    kinds: set[str] = set()
    for path in (REPO / "shared").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                kinds.update(_kind_of(node))
    return kinds


def _kind_of(call: ast.Call) -> list[str]:
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("_call", "run"):
        named = call.args[:1]
    elif isinstance(call.func, ast.Name) and call.func.id == "_run":
        named = call.args[1:2]
    else:
        return []
    return [
        str(a.value) for a in named if isinstance(a, ast.Constant) and KIND.fullmatch(str(a.value))
    ]


def test_every_kind_the_instrumented_stores_count_has_a_billing_class() -> None:
    """Given every operation kind the counting wrappers name, then each maps to a priced
    class, and the price table names no kind the stores do not make."""
    kinds = kinds_the_stores_count()

    # The scan finds the blob, table, queue, SQL and Cosmos DB kinds, so it cannot pass by
    # finding none.
    assert {"blob.delete_batch", "table.transact", "queue.receive", "sql.transact"} <= kinds
    assert {"cosmos.read", "cosmos.replace", "cosmos.page"} <= kinds
    assert sorted(kinds - BILLING.keys()) == []
    assert sorted(BILLING.keys() - kinds) == []
    assert all(billing_class(kind).key in PRICES for kind in kinds)


def test_a_kind_without_a_class_is_refused_not_priced_at_nothing() -> None:
    with pytest.raises(InvalidValue, match=r"blob\.copy"):
        usd_per_million({"blob.create": 3, "blob.copy": 1}, 4)


def test_prices_follow_the_billing_classes() -> None:
    """A million messages making one blob write, one free delete and one table transaction
    each cost a million of each at the class's price per 10,000."""
    cost = usd_per_million({"blob.create": 10, "blob.delete": 10, "table.get": 10}, 10)

    write = PRICES["blob.write"].usd_per_10k
    table = PRICES["table.transaction"].usd_per_10k
    assert cost == pytest.approx(100 * (write + table))


@pytest.fixture(scope="module")
def measured() -> dict[str, Measurement]:
    """One side-by-side run, in-process on the in-memory stores, shared by the tests below."""
    modes = select(bench_modes(), [AT_LEAST_ONCE, TOKEN, "processed_messages", "entity_outbox"])
    found = asyncio.run(
        measure_side_by_side(
            MemoryStorageAccount(),
            modes,
            Plan(ROOTS, concurrency=4),
            rounds=2,
            separate_processes=False,
        )
    )
    return {m.mode: m for m in found}


def test_each_mode_s_whole_cost_adds_its_cleanup_to_its_hot_path(
    measured: dict[str, Measurement],
) -> None:
    """Given the workload drained in each mode, when the cleanup pass has run after each
    round, then per handled message the whole is the hot path plus the cleanup, in requests
    and in dollars, and the cleanup's count is the pass's requests over the messages."""
    for m in measured.values():
        assert m.ok, m.error
        assert m.handled == 2 * ROOTS
        cleanup = sum(m.cleanup_operations.values()) / m.handled
        assert m.cleanup_ops_per_message == pytest.approx(cleanup)
        assert m.whole_ops_per_message == pytest.approx(m.ops_per_message + cleanup)
        usd = m.usd_per_million_messages
        assert usd["whole"] == pytest.approx(usd["hot_path"] + usd["cleanup"], abs=1e-3)
        assert usd["hot_path"] == pytest.approx(usd_per_million(m.operations, m.handled), abs=1e-3)


def test_the_floor_has_no_cleanup(measured: dict[str, Measurement]) -> None:
    floor = measured[AT_LEAST_ONCE]

    assert floor.cleanup_operations == {}
    assert floor.whole_ops_per_message == floor.ops_per_message


def test_each_bus_mode_s_cleanup_does_its_own_retention_work(
    measured: dict[str, Measurement],
) -> None:
    """Given the pass runs past every retention window, then it removes what each mode kept
    per message (token mode's tokens and outbox records, the processed rows, the entity
    outbox entries) and every audit row, and leaves only the business state rows."""
    handled = 2 * ROOTS
    assert measured[TOKEN].cleanup_removed["incoming_tokens"] == handled
    assert measured[TOKEN].cleanup_removed["outbox_records"] == handled
    assert measured["processed_messages"].cleanup_removed["processed_rows"] == handled
    assert measured["entity_outbox"].cleanup_removed["entity_outbox_entries"] == handled
    for mode in (TOKEN, "processed_messages", "entity_outbox"):
        m = measured[mode]
        assert m.cleanup_removed["audit_rows"] == handled
        assert m.residue_after_cleanup == {"state": handled}, mode
        assert m.cleanup_ops_per_message > 0


def test_the_report_prints_and_judges_the_whole_cost(measured: dict[str, Measurement]) -> None:
    found = list(measured.values())
    lines = whole_cost_table(found)
    verdict = token_whole_verdict(found)

    assert [line.split()[0] for line in lines[2:]] == list(measured)
    assert verdict is not None
    assert verdict["lowest_other_mode"] in ("processed_messages", "entity_outbox")
    lowest = min(measured[m].whole_ops_per_message for m in ("processed_messages", "entity_outbox"))
    assert verdict["token_lowest"] == (measured[TOKEN].whole_ops_per_message <= lowest)


async def test_a_cleanup_pass_that_does_not_finish_fails_the_round() -> None:
    """Given a store whose every blob listing times out, when the bench's cleanup pass runs,
    then it fails saying which tasks did not finish, rather than counting half a pass."""
    memory = MemoryStorageAccount()
    names = Names("unfinished")
    await provision_run(memory, names)
    listings_fail = Instrumentation(
        plan=lambda op: Fault.ERROR_BEFORE if op.kind == "blob.list" else None
    )

    with pytest.raises(CleanupIncomplete, match="tokens"):
        await clean_round(
            InstrumentedAccount(memory, listings_fail),
            names,
            TOKEN,
            HostSpec(TOKEN, TOKEN, names.tag, 4).bus_config(),
        )
