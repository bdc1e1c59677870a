"""Endpoint modes other than token mode (design notes section 5; ``docs/modes.md``).

Every mode shares the transport and the outgoing side with token mode: output tokens are
created with fresh at-most-once attempt ids before the commit, the committed signals are
stored atomically with the mode's state change, tokens of rounds that did not commit are
discarded, and duplicates only re-send committed signals (never new tokens). What differs is
how a copy of an incoming message is recognised.
"""
