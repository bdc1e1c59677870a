"""Removing state the protocol no longer needs, so that residue stays bounded."""
