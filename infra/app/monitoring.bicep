// Log Analytics workspace plus a workspace-based Application Insights
// component. Local (instrumentation-key) authentication is switched off, so
// telemetry is accepted only from callers holding an Entra ID token with the
// Monitoring Metrics Publisher role (granted in roles.bicep).

@description('Required. Name of the Log Analytics workspace.')
param logAnalyticsName string

@description('Required. Name of the Application Insights component.')
param appInsightsName string

@description('Optional. Azure region of the monitoring resources.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the monitoring resources.')
param tags object = {}

@description('Optional. Days the workspace keeps log data.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    IngestionMode: 'LogAnalytics'
    DisableLocalAuth: true
    publicNetworkAccessForIngestion: 'Enabled'
    publicNetworkAccessForQuery: 'Enabled'
  }
}

@description('Resource id of the Log Analytics workspace.')
output logAnalyticsWorkspaceId string = workspace.id

@description('Name of the Log Analytics workspace.')
output logAnalyticsWorkspaceName string = workspace.name

@description('Resource id of the Application Insights component.')
output appInsightsId string = appInsights.id

@description('Name of the Application Insights component.')
output appInsightsName string = appInsights.name
