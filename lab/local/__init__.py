"""Local development support: the storage emulator launcher (and later the local host)."""
