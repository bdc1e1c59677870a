"""Reading a received body as its message type, however old the sender.

Every body that reaches a model from outside goes through ``read_body``: a token's envelope
on receive (every mode, a replay too), an HTTP ingress request, ``bus send``/``publish`` and
a bulk job's row. During a rolling deploy the sender may run a newer or older version of
the app than the reader, so:

- a top-level field the model does not know is dropped (a newer sender added it), counted
  (``bus.messages.fields_ignored``) and named in a debug line, unless the type reads
  strictly (``Message.strict_reading``): then it fails the schema as any bad body does;
- a body of an older type version is read with that version's model (``previous``) and
  upcast one version at a time (``upcast``) to the model's own;
- a body of a newer type version is not read at all: NewerTypeVersion (a NewerVersion), so
  that it waits for an upgraded instance instead of being misread.

A body that still does not validate is a MessageSchemaError, as before.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import AliasChoices, AliasPath, BaseModel, ValidationError

from shared.bus.messages import Message
from shared.bus.telemetry import BusTelemetry
from shared.errors import ConfigurationError, MessageSchemaError, NewerTypeVersion
from shared.logsafe import problems, shown

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

MAX_NAMED_FIELDS = 10
"""Ignored field names a debug line names; the rest are counted. A hostile body may have
thousands of them, so the line stays short."""
FIELD_NAME_CHARS = 60
"""Characters of one ignored field name a debug line keeps."""


def read_body(
    model: type[M],
    body: Mapping[str, Any],
    *,
    type_version: int | None = None,
    reader: str,
    telemetry: BusTelemetry,
) -> M:
    """``body``, written as version ``type_version`` of ``model``'s type (None: ``model``'s
    own, as a client's request is), read as ``model``. ``reader`` names who reads it (the
    endpoint, or ``ingress`` for a client's request) in the telemetry and the log. Raises
    NewerTypeVersion for a version newer than ``model``'s and MessageSchemaError for a body
    that does not validate (the text says why, escaped)."""
    if type_version is None:
        type_version = model.version
    check_readable(model, type_version)
    chain = _chain_down_to(model, type_version)
    oldest = chain[-1]
    known = _known_fields(oldest)
    unknown = [name for name in body if name not in known]
    if unknown and not getattr(oldest, "strict_reading", False):
        body = {name: value for name, value in body.items() if name in known}
        _count_ignored(telemetry, reader, model.type_name(), unknown)
    try:
        value: Any = oldest.model_validate(body)
        for newer in reversed(chain[:-1]):
            value = newer.upcast(value)  # type: ignore[attr-defined]  # checked by check_versions
    except ValidationError as e:
        older = "" if oldest is model else f" (read as {oldest.__name__}, version {type_version})"
        raise MessageSchemaError(f"{problems(e, 'body')}{older}") from None
    if not isinstance(value, model):
        raise MessageSchemaError(
            f"{model.type_name()}'s upcast from version {type_version} returned "
            f"{type(value).__name__}, not {model.type_name()}"
        )
    return value


def check_readable(model: type[Message], type_version: int | None) -> None:
    """Whether a body of ``type_version`` (None: ``model``'s own) can be read as ``model``,
    decided before the body itself is read: NewerTypeVersion for a newer version,
    MessageSchemaError for one older than ``model`` still reads."""
    if type_version is None:
        return
    if type_version > model.version:
        raise NewerTypeVersion(
            f"{model.type_name()} version {type_version} is newer than the version this "
            f"instance reads ({model.version})"
        )
    if type_version < model.oldest_version:
        raise MessageSchemaError(
            f"{model.type_name()} version {type_version} is older than the oldest version this "
            f"instance reads ({model.oldest_version}): its upcaster was retired"
        )


def _chain_down_to(model: type[Message], version: int) -> list[type[BaseModel]]:
    """``model``, its ``previous``, that one's ``previous``... down to the model of
    ``version`` (checked complete at start-up by ``check_versions``)."""
    chain: list[type[BaseModel]] = [model]
    while version_of(chain[-1]) > version:
        chain.append(_previous(chain[-1]))
    return chain


def version_of(model: type[BaseModel]) -> int:
    """A model's type version: its ``version``, 1 for a plain model without one."""
    version = getattr(model, "version", 1)
    return version if isinstance(version, int) else 0


def _previous(model: type[BaseModel]) -> type[BaseModel]:
    previous = getattr(model, "previous", None)
    if not (isinstance(previous, type) and issubclass(previous, BaseModel)):
        raise ConfigurationError(f"{model.__name__} has no previous version's model")
    return previous


@functools.cache  # once per model class, not per message
def _known_fields(model: type[BaseModel]) -> frozenset[str]:
    """The top-level keys ``model`` reads: its fields' names and their aliases."""
    known = set(model.model_fields)
    for info in model.model_fields.values():
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                known.add(alias)
            elif isinstance(alias, AliasPath) and isinstance(alias.path[0], str):
                known.add(alias.path[0])
            elif isinstance(alias, AliasChoices):
                for choice in alias.choices:
                    if isinstance(choice, str):
                        known.add(choice)
                    elif isinstance(choice.path[0], str):
                        known.add(choice.path[0])
    return frozenset(known)


def _count_ignored(
    telemetry: BusTelemetry, reader: str, type_name: str, unknown: list[str]
) -> None:
    telemetry.fields_ignored.add(
        len(unknown), {"bus.reader": reader, "bus.message.type": type_name}
    )
    if log.isEnabledFor(logging.DEBUG):
        named = ", ".join(shown(name, FIELD_NAME_CHARS) for name in unknown[:MAX_NAMED_FIELDS])
        more = len(unknown) - MAX_NAMED_FIELDS
        log.debug(
            "%s read %s without %d field(s) it does not know: %s%s",
            shown(reader, 100),
            type_name,
            len(unknown),
            named,
            f" and {more} more" if more > 0 else "",
        )


def check_versions(model: type[Message]) -> None:
    """Refuse, at start-up, a type whose versions cannot all be read: every version above
    the oldest still read (``oldest_version``, 1 unless retired) needs a ``previous`` model of
    the version before and its own ``upcast``, down to that one."""
    oldest = model.oldest_version
    if version_of(model) >= 1 and not (
        isinstance(oldest, int) and 1 <= oldest <= version_of(model)
    ):
        raise ConfigurationError(
            f"{model.type_name()}: oldest_version must be a whole number from 1 to its version "
            f"({version_of(model)}), got {oldest!r}"
        )
    current: type[BaseModel] = model
    while True:
        version = version_of(current)
        if version < 1:
            raise ConfigurationError(
                f"{_named(model, current)}: version must be a whole number from 1, got "
                f"{getattr(current, 'version', None)!r}"
            )
        if version <= oldest:
            return
        _check_step(model, current, version)
        current = _previous(current)


def _check_step(model: type[Message], current: type[BaseModel], version: int) -> None:
    where = _named(model, current)
    previous = getattr(current, "previous", None)
    if not (isinstance(previous, type) and issubclass(previous, BaseModel)):
        raise ConfigurationError(
            f"{where} is version {version} but names no previous model (the model of "
            f"version {version - 1}, set as `previous`)"
        )
    if version_of(previous) != version - 1:
        raise ConfigurationError(
            f"{where} is version {version}, but its previous model {previous.__name__} is "
            f"version {version_of(previous)}, not {version - 1}"
        )
    if "upcast" not in vars(current) or not inspect.ismethod(getattr(current, "upcast", None)):
        raise ConfigurationError(
            f"{where} is version {version} but defines no classmethod upcast(cls, old) reading "
            f"a {previous.__name__} as a {current.__name__}"
        )


def _named(model: type[Message], current: type[BaseModel]) -> str:
    if current is model:
        return model.type_name()
    return f"{model.type_name()} (its older model {current.__name__})"
