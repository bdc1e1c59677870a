"""Format 2 of every record ``wire_v1.py`` and ``stored_v1.py`` hold (the first format plus
its version: ``shared.bus.formats``), as this version writes them, for
``fixtures/wire_v2.json``.

Same rules as ``wire_v1.py``: written once by the version that introduced format 2, checked
in, never rewritten; later versions must still read it. ``python -m tests.formats.wire_v2``
writes the file only if it is absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.formats import stored_v1, wire_v1
from tests.formats.written_once import write_once

FIXTURE = Path(__file__).parent / "fixtures" / "wire_v2.json"
VERSION = 2


def examples() -> dict[str, Any]:
    """Every example in format 2, as text or entity exactly as it is stored or sent."""
    return {**wire_v1.examples(VERSION), **stored_v1.examples(VERSION)}


def main(argv: list[str] | None = None) -> int:
    return write_once("tests.formats.wire_v2", __doc__, FIXTURE, examples, argv)


if __name__ == "__main__":
    raise SystemExit(main())
