"""``bus verify``: the simulator's exploration over a user's own endpoints (docs/verify.md)."""
