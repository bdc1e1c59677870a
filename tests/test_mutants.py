"""The mutants of ``make mutate`` still apply: each one's original text occurs exactly once in
its module, so a refactoring that moves the code fails here rather than in a long run."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.mutation.__main__ import _skipped
from lab.mutation.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_the_mutant_still_applies(mutant: Mutant) -> None:
    text = (ROOT / mutant.path).read_text(encoding="utf-8")
    assert text.count(mutant.original) == 1, f"{mutant.id}: update lab/mutation/mutants.py"
    assert mutant.replacement != mutant.original


def test_a_mutants_copy_keeps_the_lab_benches_that_tests_import() -> None:
    """Only the benches' results folder at the top is left out; ``lab/bench/`` is code (a
    protocol test imports its app), and leaving it out failed the unmutated baseline."""
    assert _skipped(str(ROOT), ["bench", "lab", ".git", "shared"]) == {"bench", ".git"}
    assert _skipped(str(ROOT / "lab"), ["bench", "sim", "__pycache__"]) == {"__pycache__"}
