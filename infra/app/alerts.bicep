// Log search alert rules over Application Insights (docs/alerts.md says what
// each means and what to do):
//
//   parked messages     an endpoint's poison queue holds messages
//   oldest token        a message has waited longer than a threshold
//   cleanup silence     no cleanup pass measured the backlog for a while
//   ingress 5xx         the HTTP ingress answers 5xx to a share of its requests
//
// The first three read the figures the cleanup timer records at the end of each
// pass (shared/cleanup/backlog.py): OpenTelemetry metrics that Azure Monitor's
// distro writes to the customMetrics table, the attributes in customDimensions.
// The fourth reads the requests table the Functions host writes.
//
// The rules have no identity of their own: such a rule queries with the rights
// of whoever last deployed it, who needs read access to Application Insights
// for the deployment anyway, so no role is granted here. With no action group
// given they still fire and show in the portal's Alerts page, and notify nobody.

@description('Required. Prefix of the rule names, for example alert-eobusdev-abc123.')
param namePrefix string

@description('Optional. Azure region of the rules.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the rules.')
param tags object = {}

@description('Required. Name of the Application Insights component the rules query.')
param appInsightsName string

@description('Optional. Resource id of an existing action group that every rule notifies; empty: the rules fire without notifying anyone.')
param actionGroupId string = ''

@description('Optional. A sender\'s oldest token in flight older than this many minutes raises the oldest-token alert.')
@minValue(1)
param oldestTokenMinutes int = 15

@description('Optional. Minutes without a cleanup pass that measured the backlog before the silence alert fires; also how far back the parked-message and oldest-token rules look for the last pass. At least twice the cleanup schedule plus a few minutes for the export and ingestion.')
@allowed([
  15
  30
  45
  60
  120
  180
  360
])
param cleanupSilenceMinutes int = 30

@description('Optional. Window of the ingress 5xx rule, in minutes.')
@allowed([
  5
  10
  15
  30
  45
  60
])
param ingressWindowMinutes int = 15

@description('Optional. Fewest 5xx answers of the ingress in the window before its rule may fire, so that one failure among few requests does not.')
@minValue(1)
param ingressMinFailed int = 5

@description('Optional. Share of the ingress requests in the window, in percent, answered 5xx that raises the ingress 5xx alert.')
@minValue(1)
@maxValue(100)
param ingressFailedPercent int = 5

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

var actions = {
  actionGroups: empty(actionGroupId) ? [] : [
    actionGroupId
  ]
}
var lastPass = loadTextContent('alerts/last-pass.kql')
var everyPeriod = {
  numberOfEvaluationPeriods: 1
  minFailingPeriodsToAlert: 1
}

resource parkedMessages 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-parked-messages'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Messages parked'
    description: 'An endpoint\'s poison queue holds messages, as the last cleanup pass counted them (bus.parked.messages). See docs/alerts.md.'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT${cleanupSilenceMinutes}M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: concat(lastPass, loadTextContent('alerts/parked-messages.kql'))
          metricMeasureColumn: 'parked'
          timeAggregation: 'Maximum'
          operator: 'GreaterThan'
          threshold: 0
          dimensions: [
            {
              name: 'endpoint'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          failingPeriods: everyPeriod
        }
      ]
    }
    actions: actions
  }
}

resource oldestToken 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-oldest-token'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Message waiting too long'
    description: 'A sender\'s oldest token in flight (a message not yet processed) is older than ${oldestTokenMinutes} minutes, as the last cleanup pass saw it (bus.tokens.oldest_age). See docs/alerts.md.'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT${cleanupSilenceMinutes}M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: concat(lastPass, loadTextContent('alerts/oldest-token.kql'))
          metricMeasureColumn: 'oldestAgeSeconds'
          timeAggregation: 'Maximum'
          operator: 'GreaterThan'
          threshold: oldestTokenMinutes * 60
          dimensions: [
            {
              name: 'sender'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          failingPeriods: everyPeriod
        }
      ]
    }
    actions: actions
  }
}

resource cleanupSilence 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-cleanup-silence'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'No cleanup pass'
    description: 'No cleanup pass measured the backlog in the last ${cleanupSilenceMinutes} minutes (bus.cleanup.passes): residue is not removed and the other figures are stale. See docs/alerts.md.'
    severity: 1
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT${cleanupSilenceMinutes}M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: loadTextContent('alerts/cleanup-silence.kql')
          metricMeasureColumn: 'passes'
          timeAggregation: 'Maximum'
          operator: 'LessThan'
          threshold: 1
          failingPeriods: everyPeriod
        }
      ]
    }
    actions: actions
  }
}

resource ingressFailures 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-ingress-5xx'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Ingress answering 5xx'
    description: 'At least ${ingressMinFailed} requests to the ingress (POST /api/messages) in ${ingressWindowMinutes} minutes were answered 5xx, ${ingressFailedPercent} percent or more of them. See docs/alerts.md.'
    severity: 1
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT${ingressWindowMinutes}M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: replace(loadTextContent('alerts/ingress-5xx.kql'), '{minFailed}', string(ingressMinFailed))
          metricMeasureColumn: 'failedPercent'
          timeAggregation: 'Maximum'
          operator: 'GreaterThanOrEqual'
          threshold: ingressFailedPercent
          failingPeriods: everyPeriod
        }
      ]
    }
    actions: actions
  }
}

@description('Names of the alert rules: parked messages, oldest token, cleanup silence, ingress 5xx.')
output ruleNames array = [
  parkedMessages.name
  oldestToken.name
  cleanupSilence.name
  ingressFailures.name
]
