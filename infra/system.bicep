// Entry point for a system of services: several bus apps that message each
// other, each deployed as its own Function App with its own identity and its
// own state, all sharing one messaging storage account (docs/deploy.md,
// "Deploying a system of services"; docs/adopting.md).
//
//   monitoring.bicep         one Log Analytics workspace and Application Insights
//                            for the system; alerts.bicep over it
//   storage.bicep            the messaging account (queues and poison queues,
//                            tokens, payloads, topics, parked, the apps' app-wide
//                            tables), without resources.json
//   messaging-names.bicep    each app's queues, containers and tables in it, one
//                            app at a time
//   system-app.bicep         per app: identity, own storage account (state and
//                            host), Function App, PostgreSQL for a postgres app,
//                            a Cosmos DB account for a cosmos app,
//                            and its roles: roles.bicep on its own account only,
//                            messaging-roles.bicep (queue, container and table
//                            scopes) in the messaging account
//
// Each entry of apps gives name, busApp (package.module:attribute), store (table,
// blob, postgres or cosmos), resources (what `bus resources` prints for that app, without
// its $comment), sendsTo (the other apps' endpoints it sends to or that
// subscribe to its events: its external_endpoint declarations) and optionally
// appSettings (extra, non-secret settings).
//
// Deploy with:
//   az deployment group create -g <rg> --template-file infra/system.bicep \
//     --parameters infra/system.parameters.json
targetScope = 'resourceGroup'

@description('Required. Short prefix for resource names: 3-11 lowercase letters and digits, starting with a letter.')
@minLength(3)
@maxLength(11)
param namePrefix string

@description('Required. The apps of the system: each an object with name, busApp, store (table, blob, postgres or cosmos), resources (as `bus resources` prints them), sendsTo (array) and optionally appSettings (object).')
@minLength(1)
param apps array

@description('Optional. Azure region of every resource; defaults to the resource group region. Must offer the Flex Consumption plan.')
param location string = resourceGroup().location

@description('Optional. Tags applied to every resource.')
param tags object = {
  project: 'exactly-once-bus'
}

@description('Optional. Whether the public endpoints of the storage accounts accept traffic (access still needs an Entra ID token and a data role).')
@allowed([
  'Enabled'
  'Disabled'
])
param storagePublicNetworkAccess string = 'Enabled'

@description('Optional. Replication SKU of every storage account (docs/deploy.md, "Storage redundancy").')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
  'Standard_RAGRS'
  'Standard_RAGZRS'
])
param storageSkuName string = 'Standard_ZRS'

@description('Optional. Python version of the Functions workers.')
@allowed([
  '3.10'
  '3.11'
  '3.12'
])
param pythonVersion string = '3.11'

@description('Optional. Upper bound on the number of Flex Consumption instances of each app.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Optional. Memory size of each Flex Consumption instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Optional. Days the Log Analytics workspace keeps data.')
@minValue(30)
@maxValue(730)
param logRetentionInDays int = 30

@description('Optional. NCRONTAB schedule (six fields, seconds first, UTC) of every app\'s cleanup timer function.')
param cleanupSchedule string = '0 */5 * * * *'

@description('Optional. Compute SKU of the PostgreSQL server of each postgres app.')
param postgresSkuName string = 'Standard_B1ms'

@description('Optional. Compute tier matching postgresSkuName.')
@allowed([
  'Burstable'
  'GeneralPurpose'
  'MemoryOptimized'
])
param postgresSkuTier string = 'Burstable'

@description('Optional. Whether the public endpoint of each cosmos app\'s Cosmos DB account accepts traffic (access still needs an Entra ID token and the data role).')
@allowed([
  'Enabled'
  'Disabled'
])
param cosmosPublicNetworkAccess string = 'Enabled'

@description('Optional. Create each cosmos app\'s Cosmos DB account zone-redundant (fixed at creation; false only where the region has no zones).')
param cosmosZoneRedundant bool = true

@description('Optional. Resource id of an existing action group the alert rules notify; empty: the rules fire in the portal only.')
param alertActionGroupId string = ''

var prefix = toLower(namePrefix)
var suffix = uniqueString(subscription().id, resourceGroup().id, prefix)
var messagingAccountName = take('st${prefix}msg${suffix}', 24)
var appInsightsName = 'appi-${prefix}-${suffix}'
var logAnalyticsName = 'log-${prefix}-${suffix}'
var alertNamePrefix = 'alert-${prefix}-${suffix}'

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    logAnalyticsName: logAnalyticsName
    appInsightsName: appInsightsName
    location: location
    tags: tags
    retentionInDays: logRetentionInDays
  }
}

module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  params: {
    namePrefix: alertNamePrefix
    location: location
    tags: tags
    appInsightsName: monitoring.outputs.appInsightsName
    actionGroupId: alertActionGroupId
  }
}

// The messaging account: no names from resources.json; each app's come next.
module messaging 'app/storage.bicep' = {
  name: 'messaging-storage'
  params: {
    name: messagingAccountName
    location: location
    tags: tags
    skuName: storageSkuName
    publicNetworkAccess: storagePublicNetworkAccess
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
    resourcesFromFile: false
  }
}

// One app at a time: the containers every app lists (tokens, payloads, topics,
// parked) are declared by each, and two must not create one at once.
@batchSize(1)
module messagingNames 'app/messaging-names.bicep' = [for app in apps: {
  name: '${app.name}-messaging-names'
  params: {
    storageAccountName: messaging.outputs.name
    resources: app.resources
  }
}]

module systemApps 'app/system-app.bicep' = [for app in apps: {
  name: '${app.name}-app'
  params: {
    appName: app.name
    appModule: app.busApp
    store: app.store
    resources: app.resources
    sendsTo: app.sendsTo
    additionalAppSettings: contains(app, 'appSettings') ? app.appSettings : {}
    namePrefix: prefix
    location: location
    tags: tags
    messagingAccountName: messaging.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
    storageSkuName: storageSkuName
    storagePublicNetworkAccess: storagePublicNetworkAccess
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    cleanupSchedule: cleanupSchedule
    postgresSkuName: postgresSkuName
    postgresSkuTier: postgresSkuTier
    cosmosPublicNetworkAccess: cosmosPublicNetworkAccess
    cosmosZoneRedundant: cosmosZoneRedundant
  }
  // Role assignments name the queues, containers and tables they cover.
  dependsOn: [
    messagingNames
  ]
}]

@description('Name of the messaging storage account the apps share.')
output messagingAccountName string = messaging.outputs.name

@description('Per app, in the order of apps: name, Function App, its host name, its own storage account, PostgreSQL host (empty unless a postgres app) and Cosmos DB endpoint (empty unless a cosmos app).')
output apps array = [for (app, i) in apps: {
  name: systemApps[i].outputs.appName
  functionAppName: systemApps[i].outputs.functionAppName
  functionAppHostName: systemApps[i].outputs.functionAppHostName
  storageAccountName: systemApps[i].outputs.storageAccountName
  postgresHostName: systemApps[i].outputs.postgresHostName
  cosmosEndpoint: systemApps[i].outputs.cosmosEndpoint
}]

@description('Name of the Application Insights component of the system.')
output appInsightsName string = monitoring.outputs.appInsightsName
