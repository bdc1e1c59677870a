"""A deterministic simulator that runs the real pipeline (in every endpoint mode) under every
interleaving and fault it is asked to explore, and checks the invariants of design notes
section 6.

``python -m lab.sim`` (``make simulate``) runs the default exploration; see
``lab.sim.explore`` for seeds and replay, ``lab.sim.world`` for what one run does.
"""
