"""Where a storage connection comes from, and the configurations that leave it ambiguous.

A connection setting ``N`` is one value (a connection string, ``UseDevelopmentStorage=true``)
or a group of ``N__*`` parts (service URIs or an account name, a credential, a client id).
The resolver (``shared.settings``) takes each name from the first source that sets it, which
is right for one value but can assemble a connection nobody wrote: a copied
``local.settings.json`` holding ``N=UseDevelopmentStorage=true`` beside Azure service URIs
exported in the shell gives a connection string, and so the emulator, where the shell said
Azure. So the connection is taken whole from one source, or refused, saying which part is
where. A connection given on the command line is explicit and overrides the rest.

The precedence of the sources is documented in docs/settings.md, "Where settings come from".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.errors import ConfigurationError
from shared.logsafe import shown

COMMAND_LINE = "command line"
ENVIRONMENT = "environment"
DEFAULTS = "defaults"

LOCATION_PARTS = ("blobServiceUri", "queueServiceUri", "tableServiceUri", "accountName")
"""The ``N__*`` parts that say where the account is: with a connection string they would
name a second account."""

Layer = tuple[str, Mapping[str, str]]
"""One source of settings: its origin (``COMMAND_LINE``, ``ENVIRONMENT``, a settings file's
path, ``DEFAULTS``) and its values."""


@dataclass(frozen=True)
class ConnectionSource:
    """The setting a storage connection was read from, and the source that set it."""

    setting: str
    """The connection setting's name, the ``N__*`` parts used, or the command-line option."""
    origin: str
    """``COMMAND_LINE``, ``ENVIRONMENT`` or the settings file's path."""

    def where(self) -> str:
        """The origin as a phrase: 'on the command line', 'in the environment', 'in PATH'."""
        return _where(self.origin)


def connection_parts(values: Mapping[str, str], name: str) -> dict[str, str]:
    """The settings of connection ``name`` that ``values`` sets (empty values are unset)."""
    prefix = f"{name}__"
    return {
        key: value
        for key, value in values.items()
        if (key == name or key.startswith(prefix)) and value.strip()
    }


def connection_source(layers: Sequence[Layer], name: str) -> ConnectionSource:
    """The one source of connection ``name``'s settings, ``layers`` highest precedence first.
    Raises ConfigurationError, naming which setting is where, when the connection is set both
    as a connection string and by location, or its settings come from two sources that do not
    agree; the command line, when it sets the connection, overrides the rest."""
    found = [
        (origin, parts)
        for origin, values in layers
        if origin != DEFAULTS and (parts := connection_parts(values, name))
    ]
    if found and found[0][0] == COMMAND_LINE:
        return ConnectionSource(_setting_names(found[0][1], name), COMMAND_LINE)
    _refuse_two_forms(found, name)
    _refuse_two_sources(found, name)
    origin, parts = found[0]
    return ConnectionSource(_setting_names(parts, name), origin)


def _setting_names(parts: Mapping[str, str], name: str) -> str:
    """The setting, or the parts that say where the account is, that the connection is read
    from."""
    if name in parts:
        return name
    located = [f"{name}__{part}" for part in LOCATION_PARTS if f"{name}__{part}" in parts]
    return ", ".join(located) or name


def _refuse_two_forms(found: Sequence[tuple[str, Mapping[str, str]]], name: str) -> None:
    strings = [origin for origin, parts in found if name in parts]
    located = [
        (origin, [key for key in parts if key.removeprefix(f"{name}__") in LOCATION_PARTS])
        for origin, parts in found
    ]
    by_location = "; ".join(
        f"{', '.join(shown(key) for key in keys)} {_where(origin)}"
        for origin, keys in located
        if keys
    )
    if not (strings and by_location):
        return
    as_string = " and ".join(_where(origin) for origin in strings)
    raise ConfigurationError(
        f"ambiguous storage connection: {shown(name)} is set as a connection string "
        f"{as_string}, and its account is also set by location ({by_location}); the two may "
        "name different accounts: keep one of them (a copied local.settings.json brings "
        f"{shown(name)}=UseDevelopmentStorage=true), or give the connection on the command line"
    )


def _refuse_two_sources(found: Sequence[tuple[str, Mapping[str, str]]], name: str) -> None:
    if len(found) < 2 or all(parts == found[0][1] for _, parts in found[1:]):
        return  # one source, or a settings file repeating the environment word for word
    first_origin, first = found[0]
    listed = [f"{_where(first_origin)}: {', '.join(shown(key) for key in first)}"]
    for origin, parts in found[1:]:
        keys = [_compared(key, value, first) for key, value in parts.items()]
        listed.append(f"{_where(origin)}: {', '.join(keys)}")
    lower = " or ".join(_where(origin).removeprefix("in ") for origin, _ in found[1:])
    raise ConfigurationError(
        f"ambiguous storage connection: {shown(name)} is set in more than one source "
        f"({'; '.join(listed)}), so which account is meant cannot be told: set the connection "
        f"in one source only (remove it from {lower}, or unset it {_where(first_origin)})"
    )


def _compared(key: str, value: str, first: Mapping[str, str]) -> str:
    """``key``, saying how it compares with the higher source's (values are never shown: they
    may hold a key)."""
    if key not in first:
        return shown(key)
    same = first[key].strip() == value.strip()
    return f"{shown(key)} ({'the same' if same else 'a different'} value)"


def _where(origin: str) -> str:
    if origin == COMMAND_LINE:
        return "on the command line"
    return f"in the {ENVIRONMENT}" if origin == ENVIRONMENT else f"in {shown(origin)}"
