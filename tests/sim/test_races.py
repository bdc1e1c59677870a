"""Races the small configurations reach in `make test`: a client's retry racing its original
send, concurrent updates of one partition's state, a redelivery after the grace period, and a
cleanup pass beside a round slower than the grace period. Each comes with the known-bad
variant it must catch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lab.sim.explore import CONFIGS, Summary, exhaustive
from lab.sim.variants import (
    INGRESS_DOUBLE_SEND,
    INGRESS_LEGACY_IGNORED,
    INGRESS_ONE_NAMESPACE,
    LOST_UPDATE,
    NO_CLEANUP_FENCE,
    OUTPUTS_UNLISTED,
    R7_BEFORE_OUTPUTS,
    RETIRED_BEFORE_R7,
    RETIRED_WITHOUT_R7,
    Variant,
)
from lab.sim.world import RunResult
from shared.bus.app import MODES

Accept = Callable[[RunResult], bool]


def config(base: str, mode: str) -> str:
    return base if mode == "token" else f"{base}-{mode}"


async def first_violation(name: str, variant: Variant, deviations: int, faults: int) -> RunResult:
    summary = await exhaustive(
        CONFIGS[name],
        max_deviations=deviations,
        max_faults=faults,
        variant=variant,
        stop_at_first=True,
    )
    assert summary.violations == 1, f"{variant.name} was not caught in {name}"
    [(_, result)] = summary.failures
    return result


def process_of(step: str) -> str:
    """The process a trace line's operation belongs to ('  12 inv3@first: table.get ...')."""
    return step.split(":")[0].split()[-1]


def invariants(result: RunResult) -> set[str]:
    return {v.invariant for v in result.violations}


def collecting(found: list[RunResult], accept: Accept) -> Accept:
    """A ``stop_when`` that never stops: it keeps the runs ``accept`` picks."""

    def keep(result: RunResult) -> bool:
        if accept(result):
            found.append(result)
        return False

    return keep


def clean(summary: Summary, at_least: int) -> None:
    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= at_least


# -- client sends ---------------------------------------------------------------------------


async def test_a_retry_racing_its_original_send_delivers_the_key_once() -> None:
    """Two sends of one idempotency key, interleaved at every operation (two deviations)."""
    summary = await exhaustive(CONFIGS["small-ingress"], max_deviations=2, max_faults=0)

    clean(summary, 900)


@pytest.mark.parametrize("mode", MODES)
async def test_every_fault_in_racing_client_sends_loses_and_repeats_nothing(mode: str) -> None:
    """A crash, error or late request at any operation of either send (its token creates, its
    record insert, its signal) or of the processing after it; a client whose sends all
    ended without a receipt sends again."""
    summary = await exhaustive(
        CONFIGS[config("small-ingress", mode)], max_deviations=0, max_faults=1
    )

    clean(summary, 80)
    assert summary.faults == summary.schedules - 1


async def test_a_client_retry_after_a_crash_resends_the_committed_signal() -> None:
    """A send that crashed after its record committed leaves a token nobody signalled: the
    retry finds the record and signals it, so the message is processed once and no token is
    left behind."""
    found: list[RunResult] = []
    summary = await exhaustive(
        CONFIGS["small-ingress"],
        max_deviations=0,
        max_faults=1,
        stop_when=collecting(
            found,
            lambda r: any("table.insert ingress" in s and "[crash-after]" in s for s in r.trace),
        ),
    )

    clean(summary, 80)
    [result] = found
    crash = next(i for i, s in enumerate(result.trace) if "[crash-after]" in s)
    crashed = process_of(result.trace[crash])
    resent = [s for s in result.trace[crash:] if "queue.send first" in s]
    assert resent
    assert all(process_of(s) != crashed for s in resent)


async def test_two_racing_sends_that_both_send_are_caught() -> None:
    """Both sends see no record; the one whose insert loses the race sends anyway."""
    result = await first_violation("small-ingress", INGRESS_DOUBLE_SEND, deviations=1, faults=0)

    assert "NoDuplicatedProcessing" in invariants(result)
    assert any("first applied message m0 2 times" in str(v) for v in result.violations)
    inserts = [step for step in result.trace if "table.insert ingress" in step]
    assert len({process_of(step) for step in inserts}) == 2


async def test_two_senders_choosing_one_key_each_get_their_message_sent_once() -> None:
    """Issue 34: two senders (scopes) send different messages under one idempotency key,
    interleaved at every operation, or with a crash, error or late request at any operation,
    the reads of the sender's record and of the previous version's unscoped one included."""
    at_unscoped_read: list[RunResult] = []
    faulted = await exhaustive(
        CONFIGS["small-ingress-scopes"],
        max_deviations=0,
        max_faults=1,
        stop_when=collecting(
            at_unscoped_read,
            lambda r: any("table.get ingress/m/ingress  [" in s for s in r.trace),
        ),
    )
    interleaved = await exhaustive(CONFIGS["small-ingress-scopes"], max_deviations=1, max_faults=0)

    clean(faulted, 150)
    clean(interleaved, 50)
    assert faulted.faults == faulted.schedules - 1
    assert at_unscoped_read
    assert all(
        "table.get ingress/client-" in r.trace[r.trace.index(s) - 1]
        for r in at_unscoped_read
        for s in r.trace
        if "table.get ingress/m/ingress  [" in s
    )


async def test_one_key_namespace_for_every_sender_is_caught() -> None:
    """The previous version's records (raw key, no scope, no fingerprint): the second
    sender is answered with the first one's receipt and its message is never sent."""
    result = await first_violation(
        "small-ingress-scopes", INGRESS_ONE_NAMESPACE, deviations=0, faults=0
    )

    assert "NoLostMessages" in invariants(result)
    assert any("never applied m1" in str(v) for v in result.violations)
    assert sum("table.insert ingress" in step for step in result.trace) == 1


async def test_retries_after_the_upgrade_find_the_previous_versions_record() -> None:
    """The previous version committed the record under the raw key and stopped before its
    signal; two racing retries, interleaved or with a fault at any operation (the read of
    the unscoped record included), send its signal and nothing new."""
    faulted = await exhaustive(CONFIGS["small-ingress-legacy"], max_deviations=0, max_faults=1)
    interleaved = await exhaustive(CONFIGS["small-ingress-legacy"], max_deviations=1, max_faults=0)

    clean(faulted, 100)
    clean(interleaved, 40)


async def test_an_upgrade_that_forgets_the_previous_versions_records_is_caught() -> None:
    """The retry sends the message anew: the committed token of the first send is left
    for good (and, had its signal gone out, the message would be processed twice)."""
    result = await first_violation(
        "small-ingress-legacy", INGRESS_LEGACY_IGNORED, deviations=0, faults=0
    )

    assert "BoundedResidue" in invariants(result)
    assert any("table.insert ingress/client|m0" in step for step in result.trace)


# -- one partition, concurrent state updates --------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_concurrent_updates_of_one_partition_lose_nothing(mode: str) -> None:
    name = config("small-partition", mode)
    interleaved = await exhaustive(CONFIGS[name], max_deviations=1, max_faults=0)
    faulted = await exhaustive(CONFIGS[name], max_deviations=0, max_faults=1)

    clean(interleaved, 50)
    clean(faulted, 150)


async def test_a_state_written_without_its_etag_loses_an_update() -> None:
    result = await first_violation("small-partition", LOST_UPDATE, deviations=1, faults=0)

    assert "NoLostMessages" in invariants(result)


# -- redelivery after the grace period --------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_redelivery_after_the_grace_period_keeps_every_invariant(mode: str) -> None:
    name = config("small-redelivery", mode)
    late: list[RunResult] = []
    faulted = await exhaustive(
        CONFIGS[name],
        max_deviations=0,
        max_faults=1,
        stop_when=collecting(late, lambda r: any("beyond the grace period" in s for s in r.trace)),
    )
    interleaved = await exhaustive(CONFIGS[name], max_deviations=1, max_faults=0)

    clean(faulted, 80)
    clean(interleaved, 30)
    assert len(late) > 10  # after each crash that leaves the message hidden


async def test_retiring_an_uncommitted_outbox_record_while_its_token_exists_is_caught() -> None:
    """A crash after the claim and before the commit leaves the token claimed by O(m); its
    redelivery comes after the grace period, and a cleanup pass that retires O(m) although
    the token still exists lets the redelivery insert a new O(m) whose claim the token does
    not carry."""
    result = await first_violation("small-redelivery", RETIRED_BEFORE_R7, deviations=0, faults=1)

    trace = result.trace
    crash = next(i for i, step in enumerate(trace) if "[crash-" in step)
    waited = next(i for i, s in enumerate(trace) if "beyond the grace period" in s)
    assert crash < waited
    assert "a cleanup pass runs" in trace[waited]
    assert any("table.insert" in s for s in trace[waited:])
    assert invariants(result) & {"BoundedResidue", "NoLostMessages", "NoDuplicatedProcessing"}


async def test_r7_by_the_cleanup_before_the_outputs_are_received_is_caught() -> None:
    """R7 is the cleanup's, and it waits for O(m)'s outputs to be claimed or gone: a round
    that committed and crashed before its signals would otherwise have its token deleted and
    O(m) retired, and the redelivery acknowledge a message whose outputs nobody signals."""
    result = await first_violation("small-redelivery", R7_BEFORE_OUTPUTS, deviations=0, faults=1)

    assert "NoLostMessages" in invariants(result)


async def test_an_outbox_record_retired_unlisted_although_it_has_outputs_is_caught() -> None:
    """The cleanup retires an O(m) without listing its prefix only when it committed no
    output: one that has outputs and goes unlisted loses the output of a round that committed
    and crashed before its signal (the redelivery after the pass is a duplicate)."""
    result = await first_violation("small-redelivery", OUTPUTS_UNLISTED, deviations=0, faults=1)

    assert "NoLostMessages" in invariants(result)


async def test_retiring_a_committed_outbox_record_without_r7_is_caught() -> None:
    """A committed O(m) retired while token(a) stays leaves a claimed token no cleanup will
    ever delete (and a late copy an O(m) of its own that the token's claim contradicts)."""
    result = await first_violation("small-sweep", RETIRED_WITHOUT_R7, deviations=0, faults=0)

    assert "BoundedResidue" in invariants(result)


# -- a round slower than the grace period (unbounded timing) ----------------------------------


async def test_a_cleanup_beside_a_slow_round_keeps_every_invariant() -> None:
    """Two deviations: time passes while a round is between its token creates and its
    commit, and a cleanup pass runs there (what the fence is for)."""
    summary = await exhaustive(CONFIGS["small-unbounded-sweep"], max_deviations=2, max_faults=0)
    faulted = await exhaustive(CONFIGS["small-unbounded-sweep"], max_deviations=0, max_faults=1)

    clean(summary, 2500)
    clean(faulted, 90)


async def test_a_cleanup_without_its_fence_is_caught() -> None:
    """Time passes while a round has created its tokens but not committed; a cleanup pass
    deletes them as abandoned without fencing O(m); the round then commits and signals a
    deleted token."""
    result = await first_violation(
        "small-unbounded-sweep", NO_CLEANUP_FENCE, deviations=2, faults=0
    )

    assert "NoLostMessages" in invariants(result)
    trace = result.trace
    deleted = next(
        i for i, s in enumerate(trace) if process_of(s).startswith("sweep") and "blob.delete" in s
    )
    assert any("table.transact" in s for s in trace[deleted:])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["small-ingress", "small-partition", "small-redelivery", "small-unbounded-sweep"],
)
async def test_every_interleaving_with_one_deviation_times_every_single_fault(name: str) -> None:
    summary = await exhaustive(CONFIGS[name], max_deviations=1, max_faults=1)

    clean(summary, 2000)
