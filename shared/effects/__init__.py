"""Performing the effects handlers request (``docs/effects.md``): the provider interface, the
performer endpoint, and an in-memory provider with idempotency keys."""
