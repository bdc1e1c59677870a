"""What the Bicep templates under ``infra/`` provision, computed from the templates.

No Bicep compiler is available to the tests, so this module parses the
templates with pycep-parser and evaluates the small subset of Bicep
expressions that resource *names* are built from:

* string literals and ``'${...}'`` interpolation,
* identifiers bound to ``var`` values, ``param`` defaults or loop items,
* ``loadJsonContent('<path>')`` (resolved relative to the file that calls it),
* property access (``names.endpoints``, ``item.value``) and ``items(object)``,
* ``condition ? a : b`` over a bool parameter or variable,
* ``a == b``, ``!x``, ``empty(x)``, ``contains(object, 'key')`` and ``union()`` of
  objects (the optional lists of ``resources.json``: ``blobEndpoints``,
  ``cosmosEndpoints``),
* ``[for x in <array>: {...}]`` resource loops.

Anything else in a name raises :class:`UnsupportedExpression`, so a template
change that this evaluator cannot follow fails loudly instead of silently
provisioning nothing.

Usage from other tests::

    from provisioned import provisioned_resources

    assert ("queue", "orders") in provisioned_resources()

``provisioned_resources()`` starts at ``infra/main.bicep`` and follows its
unconditional local modules, so a module file that main.bicep does not deploy
does not count. ``cosmos_provisioned()`` follows the one conditional module
whose condition the resources file decides: the Cosmos DB account.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA_DIR = REPO_ROOT / "infra"
RESOURCES_JSON = INFRA_DIR / "resources.json"

#: Resource kinds reported by :func:`provisioned_resources`, keyed by ARM type.
KIND_BY_TYPE = {
    "Microsoft.Storage/storageAccounts/queueServices/queues": "queue",
    "Microsoft.Storage/storageAccounts/tableServices/tables": "table",
    "Microsoft.Storage/storageAccounts/blobServices/containers": "container",
}

#: Suffix the Azure Functions host appends to a queue name for its poison queue.
POISON_SUFFIX = "-poison"

#: Container the Flex Consumption deployment package is uploaded to.
DEPLOYMENT_CONTAINER = "deployments"

#: Suffix of the container that holds a ``store="blob"`` endpoint's documents.
ROWS_SUFFIX = "-rows"

#: Resource kinds reported by :func:`cosmos_provisioned`, keyed by ARM type.
COSMOS_KIND_BY_TYPE = {
    "Microsoft.DocumentDB/databaseAccounts": "account",
    "Microsoft.DocumentDB/databaseAccounts/sqlDatabases": "database",
    "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers": "container",
}

Resource = tuple[str, str]

_INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")


class UnsupportedExpression(ValueError):
    """A name expression uses Bicep the evaluator here does not model."""


# --------------------------------------------------------------------------
# parsing


@lru_cache(maxsize=1)
def _parser() -> BicepParser:
    return BicepParser()


@lru_cache(maxsize=64)
def _parse_cached(path: str, text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = dict(_parser().parse(text=text))
    return parsed


def parse_bicep(path: Path) -> dict[str, Any]:
    """Parse one Bicep file into pycep's JSON form (a fresh copy each call)."""
    path = Path(path)
    return copy.deepcopy(_parse_cached(str(path.resolve()), path.read_text(encoding="utf-8")))


def bicep_files(infra_dir: Path = INFRA_DIR) -> list[Path]:
    """Every ``.bicep`` file under ``infra_dir``, sorted."""
    return sorted(Path(infra_dir).rglob("*.bicep"))


# --------------------------------------------------------------------------
# small helpers over pycep's JSON


def unwrap(config: Mapping[str, Any]) -> tuple[dict[str, Any] | None, Any, dict[str, Any]]:
    """Split a resource/module ``config`` into (loop, condition, body).

    pycep nests the body under ``config`` when the declaration is a loop
    (``[for ...]``) or has a condition (``if (...)``); plain declarations keep
    the body at the top level.
    """
    if "loop_type" in config:
        return config["loop_type"], config.get("condition"), config["config"]
    if set(config) >= {"condition", "config"}:
        return None, config["condition"], config["config"]
    return None, None, dict(config)


def dotted(node: Any) -> str | None:
    """``a.b.c`` for a chain of property accessors over plain names, else None."""
    if isinstance(node, str):
        return node
    if isinstance(node, Mapping) and "operator" in node:
        op = node["operator"]
        if op.get("type") == "property_accessor":
            left = dotted(op["operands"]["operand_1"])
            right = dotted(op["operands"]["operand_2"])
            if left is not None and right is not None:
                return f"{left}.{right}"
    return None


def walk(node: Any) -> Iterator[Any]:
    """Every dict, list and scalar inside ``node`` (depth first)."""
    yield node
    if isinstance(node, Mapping):
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


# --------------------------------------------------------------------------
# expression evaluation


def _lookup(path: str, env: Mapping[str, Any]) -> Any:
    head, *rest = path.strip().split(".")
    if head not in env:
        raise UnsupportedExpression(f"unknown identifier {head!r} in {path!r}")
    value = env[head]
    for part in rest:
        if not isinstance(value, Mapping) or part not in value:
            raise UnsupportedExpression(f"cannot resolve {path!r}")
        value = value[part]
    return value


def evaluate(node: Any, env: Mapping[str, Any]) -> Any:
    """Evaluate a pycep expression node for names, with ``env`` as bindings."""
    if isinstance(node, (bool, int)) or node is None:
        return node
    if isinstance(node, str):
        # pycep drops the quotes of string literals, so a bare word is either
        # an identifier in scope or a literal.
        if node in env:
            return env[node]
        if "${" in node:
            return _INTERPOLATION.sub(lambda m: str(_lookup(m.group(1), env)), node)
        return node
    if isinstance(node, list):
        return [evaluate(item, env) for item in node]
    if isinstance(node, Mapping):
        if "operator" in node:
            op = node["operator"]
            if op.get("type") == "property_accessor":
                path = dotted(node)
                if path is None:
                    raise UnsupportedExpression(f"unsupported accessor {node!r}")
                return _lookup(path, env)
            if op.get("type") == "conditional":
                operands = op["operands"]
                condition = evaluate(operands["condition"], env)
                if not isinstance(condition, bool):
                    raise UnsupportedExpression(f"condition {operands['condition']!r} is no bool")
                return evaluate(operands["true_value" if condition else "false_value"], env)
            if op.get("type") == "equals":
                # The templates compare a name in scope with a literal: the left side must
                # resolve, else a typo would compare two words and silently be false.
                operands = op["operands"]
                left = evaluate(_known(operands["operand_1"], env), env)
                return left == evaluate(operands["operand_2"], env)
            if op.get("type") == "not":
                value = evaluate(op["operands"]["bool_value"], env)
                if not isinstance(value, bool):
                    raise UnsupportedExpression(f"! of a non-bool {value!r}")
                return not value
            raise UnsupportedExpression(f"unsupported operator {op.get('type')!r}")
        if "function" in node:
            fn = node["function"]
            params = fn.get("parameters", {})
            if fn["type"] == "items":
                obj = evaluate(params["arg_1"], env)
                if not isinstance(obj, Mapping):
                    raise UnsupportedExpression("items() of a non-object")
                return [{"key": k, "value": v} for k, v in sorted(obj.items())]
            if fn["type"] == "concat":
                out: list[Any] = []
                for key in _ordered(params):
                    out.extend(evaluate(params[key], env))
                return out
            if fn["type"] == "union":
                return _union([evaluate(params[k], env) for k in _ordered(params)])
            if fn["type"] == "empty":
                return _empty(evaluate(_known(params["item_to_test"], env), env))
            if fn["type"] == "contains":
                return _contains(evaluate(params["container"], env), params["item_to_find"])
            raise UnsupportedExpression(f"unsupported function {fn['type']!r}")
        if "loop_type" in node:
            return list(_loop(node["loop_type"], node["config"], env))
        return {key: evaluate(value, env) for key, value in node.items()}
    raise UnsupportedExpression(f"unsupported node {node!r}")


def _known(node: Any, env: Mapping[str, Any]) -> Any:
    """``node``, refused when it is a bare word that names nothing in scope: pycep drops the
    quotes of literals, and where a template means a name (``empty(x)``, ``x == 'y'``) a word
    that names nothing is a name this evaluator could not bind."""
    if isinstance(node, str) and node.isidentifier() and node not in env:
        raise UnsupportedExpression(f"unknown identifier {node!r}")
    return node


def _ordered(params: Mapping[str, Any]) -> list[str]:
    """pycep's ``arg_1``, ``arg_2``... in argument order."""
    return sorted(params, key=lambda k: int(k.split("_")[-1]))


def _union(objects: list[Any]) -> dict[str, Any]:
    """``union()`` of objects: each later object's properties win (the templates merge flat
    objects only)."""
    merged: dict[str, Any] = {}
    for value in objects:
        if not isinstance(value, Mapping):
            raise UnsupportedExpression(f"union() of a non-object {value!r}")
        merged.update(value)
    return merged


def _empty(value: Any) -> bool:
    if not isinstance(value, (str, list, Mapping)):
        raise UnsupportedExpression(f"empty() of {value!r}")
    return not value


def _contains(container: Any, item: Any) -> bool:
    # Only the form the templates use: a literal key of an object (pycep drops the quotes, so
    # the item is taken as written, not looked up).
    if not isinstance(container, Mapping) or not isinstance(item, str):
        raise UnsupportedExpression(f"contains({container!r}, {item!r})")
    return item in container


def _loop(loop: Mapping[str, Any], body: Any, env: Mapping[str, Any]) -> Iterator[Any]:
    if loop.get("type") != "array":
        raise UnsupportedExpression(f"unsupported loop {loop!r}")
    detail = loop["detail"]
    array = evaluate(detail["array_name"], env)
    if not isinstance(array, list):
        raise UnsupportedExpression("loop over a non-array")
    for item in array:
        yield evaluate(body, {**env, detail["item_name"]: item})


def file_environment(
    path: Path, template: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Bindings for one template: parameter values (given or default) and variables.

    Variables that cannot be evaluated (they reference outputs of other
    resources, for example) are left out; referencing one in a name then
    raises :class:`UnsupportedExpression`.
    """
    env: dict[str, Any] = {}
    for name, spec in template.get("parameters", {}).items():
        if params and name in params:
            env[name] = params[name]
        elif spec.get("default") is not None:
            with contextlib.suppress(UnsupportedExpression):
                env[name] = evaluate(spec["default"], env)
    for name, spec in template.get("variables", {}).items():
        value = spec["value"]
        fn = value.get("function") if isinstance(value, Mapping) else None
        if fn and fn.get("type") == "load_json_content":
            json_path = (path.parent / fn["parameters"]["file_path"]).resolve()
            env[name] = json.loads(json_path.read_text(encoding="utf-8"))
            continue
        with contextlib.suppress(UnsupportedExpression):
            env[name] = evaluate(value, env)
    return env


# --------------------------------------------------------------------------
# public API


def resources_in_file(path: Path, params: Mapping[str, Any] | None = None) -> set[Resource]:
    """(kind, name) of every queue, table and container one template declares.

    Conditional declarations (``if (...)``) are not counted: they are not
    guaranteed to exist.
    """
    path = Path(path)
    template = parse_bicep(path)
    env = file_environment(path, template, params)
    found: set[Resource] = set()
    for resource in template.get("resources", {}).values():
        kind = KIND_BY_TYPE.get(resource["type"])
        if kind is None or resource.get("existing"):
            continue
        loop, condition, body = unwrap(resource["config"])
        if condition is not None:
            continue
        if loop is None:
            names: Iterable[Any] = [evaluate(body["name"], env)]
        else:
            names = _loop(loop, body["name"], env)
        for name in names:
            if not isinstance(name, str):
                raise UnsupportedExpression(f"{path}: name evaluated to {name!r}")
            found.add((kind, name))
    return found


def deployed_module_files(entry: Path) -> list[Path]:
    """``entry`` plus every local module it deploys unconditionally, transitively."""
    seen: list[Path] = []
    pending = [Path(entry).resolve()]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.append(current)
        template = parse_bicep(current)
        for module in template.get("modules", {}).values():
            if module.get("type") != "local":
                continue
            loop, condition, _ = unwrap(module["config"])
            if loop is not None or condition is not None:
                continue
            pending.append((current.parent / module["detail"]["path"]).resolve())
    return seen


def provisioned_resources(infra_dir: Path = INFRA_DIR) -> set[Resource]:
    """Set of (kind, name) the templates provision; kind is queue, table or container.

    Starts at ``<infra_dir>/main.bicep`` and follows its unconditional local
    modules. Module parameters are not propagated; resource names must come
    from variables, parameter defaults, loops and ``loadJsonContent``.
    """
    found: set[Resource] = set()
    for path in deployed_module_files(Path(infra_dir) / "main.bicep"):
        found |= resources_in_file(path)
    return found


def expected_resources(resources_json: Path = RESOURCES_JSON) -> set[Resource]:
    """(kind, name) that ``resources.json`` asks for.

    Each endpoint needs a queue, a ``<name>-poison`` queue and a table; each
    entry of ``tables`` a table; each entry of ``containers`` a container.
    """
    names = json.loads(Path(resources_json).read_text(encoding="utf-8"))
    expected: set[Resource] = set()
    for endpoint in names["endpoints"]:
        expected.add(("queue", endpoint))
        expected.add(("queue", endpoint + POISON_SUFFIX))
        expected.add(("table", endpoint))
    for table in names["tables"].values():
        expected.add(("table", table))
    for container in names["containers"].values():
        expected.add(("container", container))
    for endpoint in names.get("blobEndpoints", []):
        expected.add(("container", endpoint + ROWS_SUFFIX))
    return expected


def cosmos_provisioned(infra_dir: Path = INFRA_DIR) -> set[Resource]:
    """(kind, name) of the Cosmos DB resources ``<infra_dir>/main.bicep`` deploys with its
    parameters' defaults: ``("account", <module>)``, ``("database", name)`` and
    ``("container", name)``; empty when the module's condition is false.

    The condition and the module parameters that name things (the database, the
    containers) must evaluate from the resources file and parameter defaults; the others
    (identities, endpoints) are not followed.
    """
    main_path = Path(infra_dir) / "main.bicep"
    main = parse_bicep(main_path)
    env = file_environment(main_path, main)
    found: set[Resource] = set()
    for module_name, module in main.get("modules", {}).items():
        path = (main_path.parent / module["detail"]["path"]).resolve()
        template = parse_bicep(path)
        types = {r["type"] for r in template.get("resources", {}).values()}
        if "Microsoft.DocumentDB/databaseAccounts" not in types:
            continue
        loop, condition, body = unwrap(module["config"])
        if loop is not None:
            raise UnsupportedExpression(f"module {module_name} is a loop")
        deployed = True if condition is None else evaluate(_known(condition, env), env)
        if not isinstance(deployed, bool):
            raise UnsupportedExpression(f"module {module_name}: condition {condition!r}")
        if not deployed:
            continue
        named = {
            key: evaluate(body["params"][key], env)
            for key in ("databaseName", "containerNames")
            if key in body["params"]
        }
        found.add(("account", module_name))
        found |= cosmos_resources_in_file(path, named)
    return found


def cosmos_resources_in_file(path: Path, params: Mapping[str, Any]) -> set[Resource]:
    """(kind, name) of the databases and containers a Cosmos DB template declares with
    these parameters (``account``s are left out: their names hash the deployment)."""
    template = parse_bicep(path)
    env = file_environment(path, template, params)
    found: set[Resource] = set()
    for resource in template.get("resources", {}).values():
        kind = COSMOS_KIND_BY_TYPE.get(resource["type"])
        if kind in (None, "account") or resource.get("existing"):
            continue
        loop, condition, body = unwrap(resource["config"])
        if condition is not None:
            continue
        names = [evaluate(body["name"], env)] if loop is None else _loop(loop, body["name"], env)
        for name in names:
            if not isinstance(name, str):
                raise UnsupportedExpression(f"{path}: name evaluated to {name!r}")
            found.add((str(kind), name))
    return found


__all__ = [
    "COSMOS_KIND_BY_TYPE",
    "DEPLOYMENT_CONTAINER",
    "INFRA_DIR",
    "KIND_BY_TYPE",
    "POISON_SUFFIX",
    "REPO_ROOT",
    "RESOURCES_JSON",
    "ROWS_SUFFIX",
    "UnsupportedExpression",
    "bicep_files",
    "cosmos_provisioned",
    "cosmos_resources_in_file",
    "deployed_module_files",
    "dotted",
    "evaluate",
    "expected_resources",
    "parse_bicep",
    "provisioned_resources",
    "resources_in_file",
    "unwrap",
    "walk",
]
