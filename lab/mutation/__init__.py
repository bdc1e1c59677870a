"""Mutation testing of the protocol modules: ``make mutate`` (``python -m lab.mutation``).

Each mutant in ``lab.mutation.mutants`` is one plausible bug written into a copy of the
repository; the protocol tests and a bounded simulator run must fail on it (the mutant is
killed). A mutant that survives is either equivalent (the docs say why) or a gap in the
evidence. Results and their triage: ``docs/mutation.md``.
"""
