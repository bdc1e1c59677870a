"""The alert rules of infra/app/alerts.bicep (docs/alerts.md): each is a log search alert
over Application Insights that notifies the action group given at deployment, its query
names the metric or table it watches as the app writes them (the instruments of
``shared.bus.telemetry``, the ingress function of ``shared.bindings``), and its threshold
and window are the template's parameters, wired from main.bicep.

The queries are KQL files the template loads (``loadTextContent``); no Kusto engine runs
here, so what is checked is the text the template sends, evaluated from the parsed Bicep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provisioned import INFRA_DIR, dotted, parse_bicep, unwrap

from shared.bindings import FIXED_FUNCTIONS
from shared.bus.telemetry import DESTINATION, SENDER
from tests.cleanup.test_backlog import OLDEST, PARKED, PASSES

ALERTS = INFRA_DIR / "app" / "alerts.bicep"
RULE_TYPE = "Microsoft.Insights/scheduledQueryRules"
ALERTS_MD = INFRA_DIR.parent / "docs" / "alerts.md"

# Each rule of the template, and the main.bicep parameter each of its parameters comes from.
RULES = ("parkedMessages", "oldestToken", "cleanupSilence", "ingressFailures")
WIRED = {
    "actionGroupId": "alertActionGroupId",
    "oldestTokenMinutes": "alertOldestTokenMinutes",
    "cleanupSilenceMinutes": "alertCleanupSilenceMinutes",
    "ingressWindowMinutes": "alertIngressWindowMinutes",
    "ingressMinFailed": "alertIngressMinFailed",
    "ingressFailedPercent": "alertIngressFailedPercent",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    parsed: dict[str, Any] = parse_bicep(ALERTS)
    return parsed


def rule(template: dict[str, Any], name: str) -> dict[str, Any]:
    resource = template["resources"][name]
    assert resource["type"] == RULE_TYPE, name
    loop, condition, body = unwrap(resource["config"])
    found: dict[str, Any] = body
    assert loop is None, f"{name} must be one rule"
    assert condition is None, f"{name} must be unconditional"
    return found


def criterion(template: dict[str, Any], name: str) -> dict[str, Any]:
    [only] = rule(template, name)["properties"]["criteria"]["allOf"]
    found: dict[str, Any] = only
    return found


def text_of(template: dict[str, Any], node: Any) -> str:
    """The text an expression of the template evaluates to: loadTextContent (relative to the
    template), concat, replace, variables; ``string(p)`` of a parameter is ``<p>``."""
    if isinstance(node, str):
        variables = template.get("variables", {})
        if node in variables:
            return text_of(template, variables[node]["value"])
        if node in template.get("parameters", {}):
            return f"<{node}>"
        return node
    function = node["function"]
    kind, args = function["type"], function["parameters"]
    if kind == "load_text_content":
        loaded: str = (ALERTS.parent / str(args["file_path"])).read_text(encoding="utf-8")
        return loaded
    if kind == "concat":
        return "".join(text_of(template, a) for a in args.values() if a is not None)
    if kind == "replace":
        original, old, new = (
            text_of(template, args[k]) for k in ("original_string", "old_string", "new_string")
        )
        assert old in original, f"replace() finds no {old!r}"
        return original.replace(old, new)
    if kind == "string":
        return text_of(template, args["value_to_convert"])
    raise AssertionError(f"cannot evaluate {kind}() in a query")


def query(template: dict[str, Any], name: str) -> str:
    return text_of(template, criterion(template, name)["query"])


def limits(parameter: dict[str, Any]) -> list[Any]:
    """A parameter's decorators but its description: what values it accepts."""
    return [d for d in parameter.get("decorators", []) if d.get("type") != "description"]


def code_lines(kql: str) -> list[str]:
    """The query's lines without its comments."""
    return [line.strip() for line in kql.splitlines() if line.strip() and "//" not in line]


# --------------------------------------------------------------------------
# wiring


def test_main_deploys_the_rules_over_its_application_insights_with_its_parameters() -> None:
    main = parse_bicep(INFRA_DIR / "main.bicep")
    [module] = [
        m
        for m in main["modules"].values()
        if m["type"] == "local" and m["detail"]["path"] == "app/alerts.bicep"
    ]
    loop, condition, body = unwrap(module["config"])
    assert loop is None
    assert condition is None, "the rules are deployed with every deployment"
    given = body["params"]
    assert dotted(given["appInsightsName"]) == "monitoring.outputs.appInsightsName"
    for inner, outer in WIRED.items():
        assert given[inner] == outer, inner
    alerts = parse_bicep(ALERTS)["parameters"]
    for inner, outer in WIRED.items():
        assert main["parameters"][outer]["default"] == alerts[inner]["default"], outer
        assert limits(main["parameters"][outer]) == limits(alerts[inner]), (
            f"{outer} and {inner} accept different values"
        )
    assert main["parameters"]["alertActionGroupId"]["default"] == ""
    document = json.loads((INFRA_DIR / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["alertActionGroupId"] == {"value": ""}


def test_the_thresholds_have_sensible_defaults(template: dict[str, Any]) -> None:
    defaults = {name: spec.get("default") for name, spec in template["parameters"].items()}
    assert defaults["oldestTokenMinutes"] == 15
    # The cleanup runs every 5 minutes (cleanupSchedule): twice that, and room for the
    # exporter's minute and the ingestion's delay.
    assert defaults["cleanupSilenceMinutes"] >= 2 * 5 + 10
    assert (defaults["ingressWindowMinutes"], defaults["ingressMinFailed"]) == (15, 5)
    assert defaults["ingressFailedPercent"] == 5
    assert defaults["actionGroupId"] == ""


# --------------------------------------------------------------------------
# every rule


@pytest.mark.parametrize("name", RULES)
def test_each_rule_is_a_log_alert_on_application_insights_notifying_the_action_group(
    template: dict[str, Any], name: str
) -> None:
    body = rule(template, name)
    assert template["resources"][name]["api_version"] == "2023-12-01"
    assert body["kind"] == "LogAlert"
    assert "identity" not in body, "no identity, so no role to grant (docs/alerts.md)"
    props = body["properties"]
    [scope] = props["scopes"]
    assert dotted(scope) == "appInsights.id"
    insights = template["resources"]["appInsights"]
    assert insights["existing"] is True
    assert insights["config"]["name"] == "appInsightsName"
    assert props["enabled"] is True
    assert props["autoMitigate"] is True, "an alert resolves itself once the cause is gone"
    assert props["severity"] in (1, 2)
    assert props["evaluationFrequency"] == "PT5M"
    assert props["actions"] == "actions"
    # empty(actionGroupId) ? [] : [actionGroupId]
    choice = template["variables"]["actions"]["value"]["actionGroups"]["operator"]
    assert choice["type"] == "conditional"
    assert choice["operands"] == {
        "condition": {
            "function": {"type": "empty", "parameters": {"item_to_test": "actionGroupId"}}
        },
        "true_value": [],
        "false_value": ["actionGroupId"],
    }
    assert criterion(template, name)["failingPeriods"] == "everyPeriod"
    assert "docs/alerts.md" in props["description"]


@pytest.mark.parametrize("name", RULES)
def test_each_rule_measures_a_column_its_query_computes(
    template: dict[str, Any], name: str
) -> None:
    """A measure or dimension the query does not produce makes the rule fail at deployment
    or, worse, evaluate nothing."""
    found = criterion(template, name)
    kql = query(template, name)
    assert f"{found['metricMeasureColumn']} = " in kql
    for dimension in found.get("dimensions", []):
        assert f"extend {dimension['name']} = " in kql
        assert f"by {dimension['name']}" in kql
        assert dimension == {"name": dimension["name"], "operator": "Include", "values": ["*"]}


# --------------------------------------------------------------------------
# what each rule watches


def test_the_backlog_rules_read_the_last_pass_figures_by_endpoint_and_sender(
    template: dict[str, Any],
) -> None:
    last_pass = text_of(template, "lastPass")
    assert f'where name == "{PASSES}"' in last_pass
    assert "arg_max(timestamp, cloud_RoleInstance)" in last_pass
    watched = {"parkedMessages": (PARKED, DESTINATION), "oldestToken": (OLDEST.name, SENDER)}
    for name, (metric, attribute) in watched.items():
        kql = query(template, name)
        assert kql.startswith(last_pass), f"{name} reads the figures of the last pass only"
        assert f'where name == "{metric}"' in kql
        assert "join kind=inner lastPass on timestamp, cloud_RoleInstance" in kql
        assert f'tostring(customDimensions["{attribute}"])' in kql
        assert rule(template, name)["properties"]["windowSize"] == "PT${cleanupSilenceMinutes}M"


def test_the_parked_rule_fires_on_any_parked_message(template: dict[str, Any]) -> None:
    found = criterion(template, "parkedMessages")
    assert (found["operator"], found["threshold"]) == ("GreaterThan", 0)
    assert rule(template, "parkedMessages")["properties"]["severity"] == 2


def test_the_oldest_token_rule_compares_seconds_with_the_minutes_parameter(
    template: dict[str, Any],
) -> None:
    assert OLDEST.unit == "s"
    found = criterion(template, "oldestToken")
    assert found["operator"] == "GreaterThan"
    assert found["threshold"] == {
        "operator": {
            "type": "multiply",
            "operands": {"operand_1": "oldestTokenMinutes", "operand_2": 60},
        }
    }


def test_the_silence_rule_fires_when_no_pass_was_recorded_at_all(
    template: dict[str, Any],
) -> None:
    """An empty answer is never compared with a threshold: the query must answer one row
    with 0 when no pass was recorded, which ``summarize`` without ``by`` does."""
    kql = code_lines(query(template, "cleanupSilence"))
    assert kql[0] == "customMetrics"
    assert f'| where name == "{PASSES}"' in kql
    assert kql[-1] == "| summarize passes = count()"
    found = criterion(template, "cleanupSilence")
    assert (found["operator"], found["threshold"]) == ("LessThan", 1)
    assert "dimensions" not in found
    props = rule(template, "cleanupSilence")["properties"]
    assert props["windowSize"] == "PT${cleanupSilenceMinutes}M"
    assert props["severity"] == 1


def test_the_ingress_rule_counts_5xx_answers_of_the_ingress_function(
    template: dict[str, Any],
) -> None:
    assert "ingress" in FIXED_FUNCTIONS  # the function name the host records requests under
    kql = code_lines(query(template, "ingressFailures"))
    assert kql[0] == "requests"
    assert '| where name == "ingress" or operation_Name == "ingress"' in kql
    assert "countif(toint(resultCode) >= 500)" in kql[2]
    assert "| where failed >= <ingressMinFailed>" in kql
    assert "| extend failedPercent = 100.0 * failed / total" in kql
    found = criterion(template, "ingressFailures")
    assert (found["operator"], found["threshold"]) == (
        "GreaterThanOrEqual",
        "ingressFailedPercent",
    )
    props = rule(template, "ingressFailures")["properties"]
    assert props["windowSize"] == "PT${ingressWindowMinutes}M"
    assert props["severity"] == 1


# --------------------------------------------------------------------------
# docs


def test_docs_alerts_md_says_what_each_rule_means_and_how_to_tune_it(
    template: dict[str, Any],
) -> None:
    text = ALERTS_MD.read_text(encoding="utf-8")
    for name in RULES:
        title = rule(template, name)["properties"]["displayName"]
        assert f"## {title}" in text, f"docs/alerts.md has no section for {title!r}"
    for parameter in WIRED.values():
        assert f"`{parameter}`" in text, parameter
    for command in ("bus poison list --group", "bus replay", "bus status", "bus console"):
        assert command in text, command
    assert "az deployment group create" in text


def test_the_queries_docs_alerts_md_shows_are_the_rules_own(template: dict[str, Any]) -> None:
    """What the page shows of a query is in that query (with the defaults put in)."""
    sent = {
        line
        for name in RULES
        for line in code_lines(query(template, name).replace("<ingressMinFailed>", "5"))
    }
    shown = ALERTS_MD.read_text(encoding="utf-8").split("```kusto")[1:]
    assert len(shown) >= 3
    for block in shown:
        lines = code_lines(block.split("```", 1)[0])
        assert lines
        assert set(lines) <= sent, set(lines) - sent


def test_the_deploy_guide_and_the_readme_link_to_the_alerts() -> None:
    for doc in (INFRA_DIR.parent / "docs" / "deploy.md", INFRA_DIR.parent / "README.md"):
        assert "alerts.md" in Path(doc).read_text(encoding="utf-8"), doc
