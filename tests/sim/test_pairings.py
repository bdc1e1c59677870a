"""Mixed-mode apps (issue 42): the first endpoint sends in one mode to a receiver in another,
every pairing of two different modes (``pair-<sender>-<receiver>``). A window-mode receiver
deletes its incoming token itself; a token-mode one claims it and leaves it to its cleanup
(R7). Only a pairing has a window-mode sender's token claimed, so only a pairing catches a
cleanup that leaves such a token."""

from __future__ import annotations

import pytest

from lab.sim.__main__ import DEFAULT_PLAN
from lab.sim.explore import CONFIGS, PAIRINGS, exhaustive
from lab.sim.invariants import BOUNDED_RESIDUE
from lab.sim.readings import WINDOW_MODES
from lab.sim.variants import R7_SKIPS_WINDOW_SENDERS

NAMES = [f"pair-{sender}-{receiver}" for sender, receiver in PAIRINGS]


def test_every_sender_mode_is_paired_with_every_other_receiver_mode() -> None:
    modes = {"token", *WINDOW_MODES}

    assert {(s, r) for s, r in PAIRINGS} == {(s, r) for s in modes for r in modes if s != r}
    for name in NAMES:
        config = CONFIGS[name]
        assert name == f"pair-{config.mode}-{config.receivers}"


def test_the_default_simulation_explores_every_pairing() -> None:
    planned = {(name, d, f) for plan in DEFAULT_PLAN for name, d, f in plan}

    assert {(name, 1, 0) for name in NAMES} | {(name, 0, 1) for name in NAMES} <= planned


@pytest.mark.parametrize("name", NAMES)
async def test_every_single_fault_in_a_pairing_loses_repeats_and_leaves_nothing(name: str) -> None:
    summary = await exhaustive(CONFIGS[name], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules >= 60


@pytest.mark.parametrize("sender", WINDOW_MODES)
async def test_a_receivers_r7_that_skips_window_senders_tokens_is_caught(sender: str) -> None:
    summary = await exhaustive(
        CONFIGS[f"pair-{sender}-token"],
        max_deviations=0,
        max_faults=0,
        variant=R7_SKIPS_WINDOW_SENDERS,
        stop_at_first=True,
    )

    assert summary.violations == 1
    [(_, result)] = summary.failures
    assert {v.invariant for v in result.violations} == {BOUNDED_RESIDUE}
    assert "beyond the dedup window" in result.violations[-1].detail


@pytest.mark.parametrize(
    ("name", "faults"),
    [("small", 1), ("pair-token-state_based", 0), *((f"small-{m}", 0) for m in WINDOW_MODES)],
)
async def test_without_a_window_mode_sender_to_a_token_mode_receiver_that_variant_is_unseen(
    name: str, faults: int
) -> None:
    """A token-mode sender's tokens still go by R7; a window-mode receiver has no R7."""
    summary = await exhaustive(
        CONFIGS[name], max_deviations=0, max_faults=faults, variant=R7_SKIPS_WINDOW_SENDERS
    )

    assert summary.violations == 0, summary.failures[:1]
