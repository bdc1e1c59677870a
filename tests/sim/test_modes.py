"""The window modes (processed_messages, state_based, entity_outbox) under the simulator:
every small interleaving and single fault keeps every invariant inside the dedup window, each
mode-specific reading of the invariants catches a pipeline that breaks what it checks, and
past the window the late duplicate the modes document does happen."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest

from lab.sim.__main__ import main
from lab.sim.explore import CONFIGS, exhaustive, random_search, reference_for
from lab.sim.readings import WINDOW_MODES
from lab.sim.variants import (
    NO_INDEX_ROW,
    NO_OUTBOX_ENTRY,
    NO_PROCESSED_OR_AUDIT_ROW,
    NO_PROCESSED_ROW,
    NO_RETENTION,
    NO_STATE_WITH_RECORD,
    NO_VERSION_ROW,
    SIGNALS_UNRECORDED,
    Variant,
)
from lab.sim.world import RunResult, SimConfig
from shared.errors import ConfigurationError

JOURNAL_DUPLICATE = re.compile(r"applied message \S+ (\d+) times")


def applied_twice(result: RunResult) -> bool:
    """A handler really applied one message twice (not merely a missing dedup record)."""
    return any(JOURNAL_DUPLICATE.search(v.detail) for v in result.violations)


def recording(found: list[RunResult], accept: Callable[[RunResult], bool]) -> Callable[..., bool]:
    def stop(result: RunResult) -> bool:
        if accept(result):
            found.append(result)
            return True
        return False

    return stop


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_every_interleaving_with_two_deviations_keeps_every_invariant(mode: str) -> None:
    summary = await exhaustive(CONFIGS[f"small-{mode}"], max_deviations=2, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 500


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_every_single_fault_at_every_operation_keeps_every_invariant(mode: str) -> None:
    summary = await exhaustive(CONFIGS[f"small-{mode}"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 60
    assert summary.faults == summary.schedules - 1


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_the_checks_read_each_modes_own_records_and_the_pass_beyond_the_window(
    mode: str,
) -> None:
    """Three messages, two on one partition: inside the window every applied message has
    its record; after the pass beyond the window only what the mode must keep is left."""
    seen = await reference_for(replace(CONFIGS[f"small-{mode}"], messages=3))

    for endpoint, entries in seen.applied.items():
        rows = seen.rows[endpoint]
        assert sorted(r.message_id for r in rows.records) == sorted(a.id for a in entries)
    assert seen.beyond is not None
    later = seen.beyond.rows["first"]
    assert later.beyond_window() == []
    if mode == "state_based":
        # Partition k0 got two messages: its first version went, the head stays.
        assert [v.number for v in later.versions["k0"]] == [2]
        assert len(later.records) == 2
    else:
        assert later.records == []


async def _caught(variant: Variant, config: SimConfig, faults: int) -> set[str]:
    summary = await exhaustive(
        config, max_deviations=0, max_faults=faults, variant=variant, stop_at_first=True
    )
    assert summary.violations == 1, f"{variant.name} was not caught"
    [(_, result)] = summary.failures
    return {v.invariant for v in result.violations}


@pytest.mark.parametrize(
    ("variant", "mode", "invariant"),
    [
        (NO_PROCESSED_ROW, "processed_messages", "NoDuplicatedProcessing"),
        (NO_INDEX_ROW, "state_based", "NoDuplicatedProcessing"),
        (NO_OUTBOX_ENTRY, "entity_outbox", "NoDuplicatedProcessing"),
        (NO_STATE_WITH_RECORD, "processed_messages", "NoLostMessages"),
        (SIGNALS_UNRECORDED, "processed_messages", "ConsistentOutput"),
        (NO_VERSION_ROW, "state_based", "ConsistentOutput"),
        (NO_RETENTION, "processed_messages", "BoundedResidue"),
        (NO_RETENTION, "entity_outbox", "BoundedResidue"),
    ],
    ids=lambda value: value.name if isinstance(value, Variant) else str(value),
)
async def test_a_commit_or_cleanup_that_breaks_a_mode_reading_is_caught(
    variant: Variant, mode: str, invariant: str
) -> None:
    assert invariant in await _caught(variant, CONFIGS[f"small-{mode}"], faults=0)


async def test_a_state_stream_that_is_never_truncated_is_caught() -> None:
    """One version per partition is all truncation may keep, so two messages on a partition
    are needed to see a truncation that keeps everything."""
    config = replace(CONFIGS["small-state_based"], messages=3)

    assert "BoundedResidue" in await _caught(NO_RETENTION, config, faults=0)


async def test_without_its_processed_and_audit_rows_a_redelivered_message_is_applied_twice() -> (
    None
):
    """Under redelivery (a crash after the commit, before the incoming token is deleted) the
    next copy finds no processed row and, with no audit row to fail its insert, commits the
    message again."""
    found: list[RunResult] = []
    await exhaustive(
        CONFIGS["small-processed_messages"],
        max_deviations=0,
        max_faults=1,
        variant=NO_PROCESSED_OR_AUDIT_ROW,
        stop_when=recording(found, applied_twice),
    )

    [result] = found
    trace = result.trace
    crash = next(i for i, step in enumerate(trace) if "[crash-" in step)
    assert any("table.transact" in step for step in trace[:crash])
    assert any("table.transact" in step for step in trace[crash + 1 :])


@pytest.mark.parametrize("mode", ["processed_messages", "entity_outbox"])
async def test_past_its_dedup_window_a_mode_applies_a_message_again(mode: str) -> None:
    """The documented limit, proven: a copy that read the incoming token stalls (under
    unbounded timing) until the message was processed, its dedup record expired and its
    audit row was removed; it then commits the message a second time. Token mode, in the
    same exploration, never does (``test_variants``)."""
    found: list[RunResult] = []
    await exhaustive(
        CONFIGS[f"small-unbounded-{mode}"],
        max_deviations=0,
        max_faults=1,
        stop_when=recording(found, applied_twice),
    )

    [result] = found
    assert any("stalls before" in step for step in result.trace)
    assert any("the dedup window and the audit retention" in step for step in result.trace)


@pytest.mark.slow
async def test_past_its_window_a_truncated_state_stream_applies_a_message_again() -> None:
    """Truncation keeps the latest version and its index row, so in state-based mode the
    stalled copy's message must be followed by another on its partition: three messages,
    and one deviation to start that other message's processing during the stall."""
    found: list[RunResult] = []
    await exhaustive(
        replace(CONFIGS["small-unbounded-state_based"], messages=3),
        max_deviations=1,
        max_faults=1,
        stop_when=recording(found, applied_twice),
    )

    [result] = found
    assert any("stalls before table.transact" in step for step in result.trace)


@pytest.mark.parametrize("mode", WINDOW_MODES)
async def test_while_the_audit_row_is_kept_a_stall_past_the_window_applies_nothing_twice(
    mode: str,
) -> None:
    """Every mode inserts audit|{m} in its commit: until the audit retention removes it, a
    second commit of m fails even once the dedup record has expired."""
    config = replace(CONFIGS[f"small-unbounded-{mode}"], stall_outlasts_audit=False)
    summary = await exhaustive(config, max_deviations=0, max_faults=1)

    assert summary.schedules > 60
    assert not any(applied_twice(result) for _, result in summary.failures)
    assert summary.violations == 0, summary.failures[:1]


def test_a_window_shorter_than_a_bounded_run_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must outlast the longest bounded run"):
        SimConfig(mode="processed_messages", window=600.0)
    # Token mode has no window; unbounded timing goes past it on purpose.
    SimConfig(mode="token", window=600.0)
    SimConfig(mode="state_based", window=600.0, timing="unbounded")


def test_the_command_line_explores_one_mode_and_refuses_a_variant_of_another(
    capsys: pytest.CaptureFixture[str],
) -> None:
    once = ["--deviations", "0", "--faults", "0"]
    assert main(["--mode", "entity_outbox", "--config", "small-entity_outbox", *once]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "simulation: schedules=1 faults=0 violations=0"
    )
    assert main(["--variant", "no-index-row", "--mode", "token"]) == 2
    assert main(["--variant", "no-retention", "--config", "small-processed_messages", *once]) == 1


async def test_random_search_in_the_window_modes_keeps_every_invariant() -> None:
    summary = await random_search(range(60), modes=WINDOW_MODES)

    assert summary.schedules > 30
    assert summary.violations == 0, summary.failures[:1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", WINDOW_MODES)
@pytest.mark.parametrize("base", ["small", "small-sweep"])
async def test_every_interleaving_with_one_deviation_times_every_single_fault(
    mode: str, base: str
) -> None:
    summary = await exhaustive(CONFIGS[f"{base}-{mode}"], max_deviations=1, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 2000


@pytest.mark.slow
async def test_random_search_over_larger_configurations_in_the_window_modes() -> None:
    summary = await random_search(range(2000), modes=WINDOW_MODES)

    assert summary.schedules > 1000
    assert summary.violations == 0, summary.failures[:1]
