"""The body budget in the simulator (``small-budget``): the shared event's two subscribers
overlap with room for one payload, and the one that finds no room postpones its message
(its signal sent again, hidden, its copy acknowledged). Every invariant holds, and the
known-bad variant that acknowledges a postponed copy without sending it again loses it."""

from __future__ import annotations

from lab.sim.explore import CONFIGS, exhaustive, replay
from lab.sim.invariants import NO_LOST_MESSAGES
from lab.sim.variants import POSTPONED_UNSENT


async def test_postponing_for_want_of_budget_keeps_every_invariant() -> None:
    config = CONFIGS["small-budget"]

    interleaved = await exhaustive(config, max_deviations=1, max_faults=0)
    faulted = await exhaustive(config, max_deviations=0, max_faults=1)

    assert (interleaved.violations, faulted.violations) == (0, 0), [
        str(v) for _, r in interleaved.failures + faulted.failures for v in r.violations
    ]


async def test_a_subscriber_without_room_postpones_after_its_claim_and_resumes_later() -> None:
    """third claims its token while second holds the budget for the payload: it sends its
    signal again and acknowledges; the postponed copy finds its token claimed by its O(m),
    reads it, and processes the message once."""
    result = await replay(f"small-budget:{'0.' * 34}1")

    assert result.ok, result.violations
    steps = [step.split(": ", 1)[-1] for step in result.trace if "@third" in step]
    sent_again = steps.index("queue.send third")
    assert steps[sent_again - 1].startswith("blob.set_metadata tokens/")  # after its claim
    assert steps[sent_again + 1] == "queue.delete third"
    assert sum(step.startswith("blob.read payloads/") for step in steps) == 1


async def test_a_postponed_copy_acknowledged_unsent_is_lost() -> None:
    summary = await exhaustive(
        CONFIGS["small-budget"],
        max_deviations=1,
        max_faults=0,
        variant=POSTPONED_UNSENT,
        stop_at_first=True,
    )

    assert summary.violations == 1
    assert NO_LOST_MESSAGES in {v.invariant for _, r in summary.failures for v in r.violations}
