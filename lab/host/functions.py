"""The functions a ``function_app.py`` declares, read from its bindings as the host reads them.

The app module is imported once; ``app.get_functions()`` may only be called once per app
(azure-functions 1.26), so the result is kept here. App-setting references written as
``%NAME%`` (queue names, schedules) are resolved from the settings, like the Functions host.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import azure.functions as func

from lab.host.ncrontab import Schedule
from shared.errors import ConfigurationError

UserFunction = Callable[..., Any]
_SETTING_REFERENCE = re.compile(r"%([^%]+)%")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class QueueFunction:
    name: str
    arg_name: str
    queue_name: str
    connection: str
    function: UserFunction


@dataclass(frozen=True)
class TimerFunction:
    name: str
    arg_name: str
    schedule: Schedule
    run_on_startup: bool
    function: UserFunction


@dataclass(frozen=True)
class HttpFunction:
    name: str
    arg_name: str
    route: str
    methods: frozenset[str]
    auth_level: str
    """'anonymous', 'function' or 'admin'."""
    function: UserFunction


@dataclass
class LoadedApp:
    path: Path
    queues: list[QueueFunction] = field(default_factory=list)
    timers: list[TimerFunction] = field(default_factory=list)
    http: list[HttpFunction] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [
            *(f.name for f in self.queues),
            *(f.name for f in self.timers),
            *(f.name for f in self.http),
        ]


def resolve_setting_references(value: str, settings: Mapping[str, str], where: str) -> str:
    """Replace every ``%NAME%`` with the app setting NAME; a missing one is a start-up error."""

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in settings:
            raise ConfigurationError(
                f"{where} refers to app setting %{name}% which is not set "
                "(add it to local.settings.json Values or the environment)"
            )
        return settings[name]

    return _SETTING_REFERENCE.sub(lookup, value)


def import_app(path: Path) -> func.FunctionApp:
    """Import the module at ``path`` (its folder first on sys.path, as the worker does) and
    return its FunctionApp."""
    if not path.is_file():
        raise ConfigurationError(f"function app file {path} does not exist")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    apps = [v for v in vars(module).values() if isinstance(v, func.FunctionApp)]
    if len(apps) != 1:
        raise ConfigurationError(f"{path} must define exactly one FunctionApp, found {len(apps)}")
    return apps[0]


def load_functions(
    path: Path, settings: Mapping[str, str], only: set[str] | None = None
) -> LoadedApp:
    """Read every function's trigger; ``only`` restricts to those names (like
    ``func start --functions``). Bindings the local host cannot honour are refused."""
    app = import_app(path)
    loaded = LoadedApp(path)
    declared = app.get_functions()
    app.functions_bindings = None  # let the app be indexed again (tests, a second host)
    for function in declared:
        name = str(function.get_function_name())
        if only is not None and name not in only:
            continue
        trigger: Any = function.get_trigger()
        kind = trigger.get_binding_name()
        extra = [
            b.get_binding_name()
            for b in function.get_bindings()
            if b is not trigger and not (kind == "httpTrigger" and b.get_binding_name() == "http")
        ]
        if extra:
            raise ConfigurationError(
                f"function {name}: bindings {extra} are not supported by the local host"
            )
        user_function = function.get_user_function()
        where = f"function {name}"
        if kind == "queueTrigger":
            loaded.queues.append(
                QueueFunction(
                    name,
                    trigger.name,
                    resolve_setting_references(trigger.queue_name, settings, where),
                    trigger.connection or "AzureWebJobsStorage",
                    user_function,
                )
            )
        elif kind == "timerTrigger":
            schedule = resolve_setting_references(trigger.schedule, settings, where)
            loaded.timers.append(
                TimerFunction(
                    name,
                    trigger.name,
                    Schedule.parse(schedule),
                    bool(getattr(trigger, "run_on_startup", False)),
                    user_function,
                )
            )
        elif kind == "httpTrigger":
            methods = getattr(trigger, "methods", None)
            level = getattr(trigger, "auth_level", None)
            loaded.http.append(
                HttpFunction(
                    name,
                    trigger.name,
                    (getattr(trigger, "route", None) or name).strip("/"),
                    frozenset(str(_value(m)).upper() for m in methods or HTTP_METHODS),
                    str(_value(level) if level is not None else "function").lower(),
                    user_function,
                )
            )
        else:
            raise ConfigurationError(f"function {name}: trigger {kind} is not supported locally")
    if only is not None and (unknown := only - set(loaded.names)):
        raise ConfigurationError(f"no functions named {sorted(unknown)} in {path}")
    return loaded


def _value(item: object) -> object:
    """Enum members (AuthLevel, HttpMethod) by value; plain strings as they are."""
    return getattr(item, "value", item)


async def invoke(function: UserFunction, arg_name: str, value: object, time_limit: float) -> Any:
    """Call a user function like the Python worker: coroutines on the loop, plain functions
    on a worker thread (a timed-out thread cannot be stopped; it finishes on its own)."""
    async with asyncio.timeout(time_limit):
        if inspect.iscoroutinefunction(function):
            return await function(**{arg_name: value})
        return await asyncio.to_thread(function, **{arg_name: value})
