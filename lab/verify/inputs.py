"""The messages ``bus verify`` sends to a user's app: the examples it declares, or, when it
declares none, messages generated from its message models.

A declaration is a list (or a function of no arguments returning one) whose items are a
``Command`` (sent to the one endpoint that handles it), a ``(Command, "endpoint")`` pair, or
an ``Event`` (published to its subscribers). It is found as ``--examples module:attribute``,
else as the attribute ``examples`` of the module that defines the app.

Without a declaration, one command of each type an endpoint handles is generated from its
pydantic model with Hypothesis (``st.builds`` of the model, keeping only what the model
validates), derandomized so that the same app always gets the same messages and a seed
replays. Events, effect answers and models Hypothesis cannot build need examples: the error
says which model and what to declare.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from shared.app_loader import load_attribute
from shared.bus import BusApp, Command, Event, Message
from shared.bus.effects import EffectAnswered
from shared.errors import ConfigurationError
from shared.logsafe import shown

EXAMPLES_ATTRIBUTE = "examples"
M = TypeVar("M", bound=BaseModel)
DECLARE = (
    f"declare examples: a module-level list `{EXAMPLES_ATTRIBUTE}` beside the app (commands, "
    "(command, endpoint) pairs or events), or --examples module:attribute"
)


@dataclass(frozen=True)
class Input:
    """One message the client sends at the start of every run, and where to."""

    message: Message
    to: str | None
    """The endpoint of a command; None for an event (published)."""

    def describe(self) -> str:
        where = f"to {self.to}" if self.to is not None else "published"
        return f"{self.message.type_name()} {where}: {shown(self.message.model_dump_json())}"


def declared_inputs(app: BusApp, declared: object, where: str = "examples") -> list[Input]:
    """The inputs a declaration gives (a list, or a function of no arguments returning one)."""
    value = _called(declared, where) if callable(declared) else declared
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigurationError(f"{where}: expected a non-empty list of messages; {DECLARE}")
    return [_input(app, item, f"{where}[{n}]") for n, item in enumerate(value)]


def _called(function: Callable[[], object], where: str) -> object:
    try:
        return function()
    except Exception as e:  # the user's function ran and raised: say so, with its type
        raise ConfigurationError(f"{where}: calling it raised {type(e).__name__}: {e}") from e


def found_inputs(app: BusApp, module: ModuleType | None, reference: str | None) -> list[Input]:
    """The examples named by ``reference`` (``module:attribute``), else those beside the app
    in ``module``; an empty list when there are none."""
    if reference is not None:
        where = f"--examples {reference}"
        declared = load_attribute(reference, where, example="--examples myapp.app:examples")
        return declared_inputs(app, declared, where)
    if module is not None and hasattr(module, EXAMPLES_ATTRIBUTE):
        where = f"{module.__name__}.{EXAMPLES_ATTRIBUTE}"
        return declared_inputs(app, getattr(module, EXAMPLES_ATTRIBUTE), where)
    return []


def app_module(reference: str) -> ModuleType | None:
    """The module an app reference (``module:attribute``) names, once the app is loaded."""
    return sys.modules.get(reference.partition(":")[0].strip())


def _input(app: BusApp, item: object, where: str) -> Input:
    to: object = None
    if isinstance(item, tuple) and len(item) == 2:
        item, to = item
    if isinstance(item, Event) and to is None:
        return Input(item, None)
    if isinstance(item, Command):
        if to is None:
            to = handler_of(app, type(item), where)
        if not isinstance(to, str) or to not in app.endpoints:
            raise ConfigurationError(
                f"{where}: {shown(to)} is not an endpoint of the app ({sorted(app.endpoints)})"
            )
        return Input(item, to)
    raise ConfigurationError(
        f"{where}: {shown(type(item).__name__)} is not a Command, (Command, endpoint) or Event"
    )


def handler_of(app: BusApp, model: type[Message], where: str) -> str:
    """The one endpoint that handles commands of ``model``."""
    handling = [
        name for name, endpoint in app.endpoints.items() if model.type_name() in endpoint.accepted
    ]
    if len(handling) != 1:
        raise ConfigurationError(
            f"{where}: {len(handling)} endpoints handle {model.type_name()} "
            f"({handling}); give it as (command, endpoint)"
        )
    return handling[0]


def generated_inputs(app: BusApp) -> list[Input]:
    """One command of each type the app's endpoints handle, built from its model."""
    inputs: list[Input] = []
    for name, endpoint in app.endpoints.items():
        for model, _ in endpoint.handlers.values():
            if issubclass(model, EffectAnswered) or not issubclass(model, Command):
                continue  # answers come from the performer; events need a declared example
            inputs.append(Input(generate(model), name))
    if not inputs:
        raise ConfigurationError(f"the app's endpoints handle no command to generate; {DECLARE}")
    return inputs


def generate(model: type[M]) -> M:
    """One valid instance of ``model``, the same on every call (derandomized Hypothesis)."""
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
        from hypothesis.errors import HypothesisException
    except ImportError:
        raise ConfigurationError(
            f"generating {model.__name__} needs Hypothesis (pip install hypothesis); {DECLARE}"
        ) from None
    found: list[M] = []
    fields = {
        name: st.from_type(cast(type[Any], info.annotation))
        if info.is_required()
        else st.just(info.get_default(call_default_factory=True))
        for name, info in model.model_fields.items()
        if info.annotation is not None
    }
    strategy = st.fixed_dictionaries(fields).map(_validated(model)).filter(_valid)

    @settings(
        derandomize=True,
        database=None,
        max_examples=1,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(strategy)
    def draw(value: M) -> None:
        found.append(value)

    try:
        draw()
    except (HypothesisException, TypeError, ValueError) as e:
        raise ConfigurationError(
            f"cannot generate {model.__name__} from its model ({type(e).__name__}: "
            f"{shown(e, 200)}); {DECLARE}"
        ) from None
    if not found:
        raise ConfigurationError(f"cannot generate a valid {model.__name__}; {DECLARE}")
    return found[0]


_INVALID = object()
"""What a drawn set of fields becomes when the model refuses it (filtered out)."""


def _validated(model: type[BaseModel]) -> Callable[[dict[str, Any]], object]:
    def validate(fields: dict[str, Any]) -> object:
        try:
            return model.model_validate(fields)
        except (ValidationError, ValueError, TypeError):
            return _INVALID

    return validate


def _valid(value: object) -> bool:
    return value is not _INVALID


def describe_inputs(inputs: Sequence[Input]) -> list[str]:
    return [f"m{n}: {i.describe()}" for n, i in enumerate(inputs)]
