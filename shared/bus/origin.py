"""Where a token's fate is decided: the table row whose commit lists it.

Every token is created by a round of some sender (an endpoint processing an incoming message,
or an ingress client) and is signalled only if that round commits it into one row: O(m) in the
endpoint's table, or the ingress record. The token's metadata names that row, so the cleanup
can decide from the token alone whether it was abandoned — even after a late-landing create,
and for senders whose partition it could not otherwise know.

Metadata values must be ASCII, and partition keys need not be, so each part is
percent-encoded and the parts are joined with ``|`` (which encoding always escapes).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from shared.errors import InvalidValue


@dataclass(frozen=True)
class Origin:
    table: str
    partition_key: str
    row_key: str

    def encode(self) -> str:
        return "|".join(
            quote(part, safe="") for part in (self.table, self.partition_key, self.row_key)
        )

    @classmethod
    def decode(cls, value: str) -> Origin:
        parts = value.split("|")
        if len(parts) != 3 or not all(parts):
            raise InvalidValue(f"token origin {value!r} is not table|partition|row")
        table, partition_key, row_key = (unquote(part) for part in parts)
        return cls(table, partition_key, row_key)
