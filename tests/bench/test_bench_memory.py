"""The bench machinery end to end at a tiny size on the in-memory stores (hosts in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.bench.modes import (
    AT_LEAST_ONCE,
    TOKEN,
    BenchMode,
    bench_modes,
    select,
)
from lab.bench.report import mode_table, results_document, scaling_table, write_results
from lab.bench.runner import Measurement, Plan, measure, measure_side_by_side, split
from lab.bench.workload import Names
from shared.errors import InvalidValue
from shared.stores.memory import MemoryStorageAccount

ROOTS = 5


async def run(mode: BenchMode, processes: int = 1, concurrency: int = 4) -> Measurement:
    return await measure(
        MemoryStorageAccount(),
        mode,
        Plan(ROOTS, concurrency=concurrency, processes=processes),
        separate_processes=False,
    )


async def test_floor_costs_exactly_its_plain_operations() -> None:
    """Given the at-least-once floor, when 5 roots are drained, then each of the 10 messages
    cost one state read, one upsert and one acknowledgement, and each root one send."""
    result = await run(bench_modes()[0])

    assert result.ok, result.error
    assert result.handled == 2 * ROOTS
    ops = result.operations
    assert ops["table.get"] == ops["table.upsert"] == ops["queue.delete"] == 2 * ROOTS
    assert ops["queue.send"] == ROOTS
    assert result.residue == 0
    assert result.residue_kinds == {"state": 2 * ROOTS}
    assert result.ingress_ops_per_root == 1.0
    assert result.latency_samples == ROOTS  # every forwarded message, in one host
    assert 0 < result.p50_ms <= result.p99_ms
    assert result.peak_rss_mb is None  # in-process: no per-mode memory figure


@pytest.mark.parametrize("mode", [m for m in bench_modes() if m.bus_mode], ids=lambda m: m.label)
async def test_every_bus_mode_drains_the_workload_exactly_once(mode: BenchMode) -> None:
    """Given a bus mode, when the workload runs through two in-process hosts, then every
    message is handled once (nothing poisoned, nothing left) and the mode leaves dedup data."""
    if not mode.available:
        pytest.skip(f"{mode.label} is not in this version of the bus")
    result = await run(mode, processes=2)

    assert result.ok, result.error
    assert result.handled == 2 * ROOTS
    assert result.outcomes == {"processed": 2 * ROOTS}
    assert result.residue_kinds.get("state") == 2 * ROOTS
    assert result.residue > 0
    assert result.ops_per_message > 3  # more than the floor's plain read, write and ack


async def test_token_mode_leaves_each_incoming_token_to_the_cleanup() -> None:
    """Given token mode, when it drains the workload, then it handles every message once
    without a single blob delete (R7 is the cleanup's, issue 33), and each handled message's
    token is left, claimed, for the cleanup's next pass."""
    result = await run(select(bench_modes(), [TOKEN])[0])

    assert result.ok, result.error
    assert result.outcomes == {"processed": 2 * ROOTS}
    assert "blob.delete" not in result.operations
    assert result.operations["blob.set_metadata"] == 2 * ROOTS  # one claim per message
    assert result.residue_kinds.get("token blobs") == 2 * ROOTS


async def test_results_document_has_one_entry_per_mode_and_the_token_ratio(
    tmp_path: Path,
) -> None:
    modes = select(bench_modes(), [AT_LEAST_ONCE, TOKEN])
    measured = [await run(m) for m in modes]
    missing = await run(BenchMode("state_based", None, available=False))
    path = tmp_path / "results.json"

    write_results(path, results_document([*measured, missing], measured, {"machine": {}}))

    document = json.loads(path.read_text())
    entries = {e["mode"]: e for e in document["modes"]}
    assert set(entries) == {AT_LEAST_ONCE, TOKEN, "state_based"}
    for entry in entries.values():
        for key in ("throughput_msgs_per_s", "ops_per_message", "p50_ms", "p99_ms", "residue"):
            assert key in entry
    assert entries["state_based"]["available"] is False
    expected = measured[1].throughput_msgs_per_s / measured[0].throughput_msgs_per_s
    assert document["ratio_token_vs_at_least_once"] == pytest.approx(expected)
    assert document["scaling_ratio_token_vs_at_least_once"]["4x1"] == pytest.approx(expected)
    table = "\n".join(mode_table([*measured, missing]))
    assert any(
        line.startswith("state_based") and "not available" in line for line in table.splitlines()
    )
    assert len(scaling_table(measured)) == 4


def test_modes_missing_from_the_bus_are_listed_as_unavailable() -> None:
    modes = bench_modes(offered=("token", "entity_outbox"))

    assert [(m.label, m.available) for m in modes] == [
        (AT_LEAST_ONCE, True),
        ("processed_table", False),
        (TOKEN, True),
        ("state_based", False),
        ("entity_outbox", True),
    ]
    with pytest.raises(InvalidValue, match="unknown bench mode"):
        select(modes, ["tokens"])


def test_a_plan_refuses_sizes_that_cannot_run() -> None:
    with pytest.raises(InvalidValue):
        Plan(0)
    with pytest.raises(InvalidValue):
        Plan(10, processes=0)


def test_run_names_accept_any_lowercase_hex_tag_and_refuse_others() -> None:
    assert Names("8220042177").sender == "bsend8220042177"  # all digits: still a valid name
    with pytest.raises(InvalidValue):
        Names("Bad-Tag")


def test_an_offered_mode_is_reported_under_the_bus_name() -> None:
    labels = [m.label for m in bench_modes(offered=("token", "processed_messages"))]

    assert labels == [AT_LEAST_ONCE, "processed_messages", TOKEN, "state_based"]


async def test_interleaved_rounds_add_up_and_a_broken_mode_does_not_stop_the_others() -> None:
    """Given the floor, token mode and a mode the bus refuses, when 7 roots run in two
    interleaved rounds, then each working mode handled all 14 messages over both rounds and
    the broken one is reported with its error."""
    floor, token = select(bench_modes(), [AT_LEAST_ONCE, TOKEN])
    broken = BenchMode("bogus", "bogus")
    seen: list[tuple[str, int | None]] = []

    measured = await measure_side_by_side(
        MemoryStorageAccount(),
        [floor, token, broken],
        Plan(7, concurrency=2),
        rounds=2,
        separate_processes=False,
        progress=lambda mode, result, error: seen.append(
            (mode.label, result.roots if result else None)
        ),
    )

    assert seen == [
        (AT_LEAST_ONCE, 4),
        (TOKEN, 4),
        ("bogus", None),
        (TOKEN, 3),
        (AT_LEAST_ONCE, 3),
    ]
    by_mode = {m.mode: m for m in measured}
    for label in (AT_LEAST_ONCE, TOKEN):
        assert by_mode[label].ok, by_mode[label].error
        assert by_mode[label].handled == 14
        assert by_mode[label].residue_kinds["state"] == 14
    assert by_mode["bogus"].error is not None
    assert "no endpoint mode 'bogus'" in by_mode["bogus"].error
    assert split(7, 2) == [4, 3]
    with pytest.raises(InvalidValue):
        split(2, 3)
