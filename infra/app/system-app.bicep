// One app of a system of services (../system.bicep): its identity, its own
// storage account, its Function App, its rights, PostgreSQL when its store is
// postgres and a Cosmos DB account when its store is cosmos.
//
// The app's own account is its *state* account (the table of each endpoint:
// state, outbox records, audit rows; the rows containers of its blob endpoints)
// and the Functions host's storage
// (AzureWebJobsStorage: host locks, keys, the deployment package). The app's
// identity gets the data roles of roles.bicep there, on that account only; in
// the shared *messaging* account it gets only what messaging-roles.bicep lists,
// each on one queue, container or table. No other app gets anything on this
// account.
//
// App settings (identity-based connections only, as in main.bicep):
//   BUS_APP                    the app's module:attribute
//   BUS_APP_NAME               the app's name, which scopes its own names
//   BUS_STORAGE_SETTING        BusMessaging: the group of BusMessaging__* settings
//                              locating the messaging account
//   BUS_STATE_STORAGE_SETTING  BusState: the group of BusState__* settings
//                              locating the app's own account

@description('Required. Name of the app (BUS_APP_NAME): 3-20 lowercase letters and digits, starting with a letter, unique in the system.')
@minLength(3)
@maxLength(20)
param appName string

@description('Required. The app to run, as package.module:attribute naming a BusApp (BUS_APP).')
param appModule string

@description('Required. Where the endpoints keep their state: table or blob (tables, or JSON documents in rows containers, of the app\'s own storage account), postgres (a PostgreSQL server of its own) or cosmos (a Cosmos DB account of its own).')
@allowed([
  'table'
  'postgres'
  'cosmos'
  'blob'
])
param store string

@description('Required. The app\'s resource names as `bus resources` prints them: containers (object), tables (object), endpoints (array) and, when it has such endpoints, blobEndpoints and cosmosEndpoints (arrays).')
param resources object

@description('Optional. Endpoints of other apps whose queues the app sends to (its external_endpoint declarations).')
param sendsTo array = []

@description('Optional. Extra, non-secret app settings of this app (name to value), for example BUS_SERVICE_<NAME>_URL.')
param additionalAppSettings object = {}

@description('Required. Short prefix of the system\'s resource names.')
param namePrefix string

@description('Optional. Azure region of the app\'s resources.')
param location string = resourceGroup().location

@description('Optional. Tags applied to every resource.')
param tags object = {}

@description('Required. Name of the messaging storage account the system shares.')
param messagingAccountName string

@description('Required. Name of the Application Insights component of the system.')
param appInsightsName string

@description('Optional. Replication SKU of the app\'s own storage account.')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
  'Standard_RAGRS'
  'Standard_RAGZRS'
])
param storageSkuName string = 'Standard_ZRS'

@description('Optional. Whether the public endpoint of the app\'s own storage account accepts traffic.')
@allowed([
  'Enabled'
  'Disabled'
])
param storagePublicNetworkAccess string = 'Enabled'

@description('Optional. Resource id of the Log Analytics workspace that receives the storage request logs; none when empty.')
param logAnalyticsWorkspaceId string = ''

@description('Optional. Python version of the Functions worker.')
@allowed([
  '3.10'
  '3.11'
  '3.12'
])
param pythonVersion string = '3.11'

@description('Optional. Upper bound on the number of Flex Consumption instances.')
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

@description('Optional. NCRONTAB schedule of the cleanup timer function.')
param cleanupSchedule string = '0 */5 * * * *'

@description('Optional. Compute SKU of the PostgreSQL server of a postgres app.')
param postgresSkuName string = 'Standard_B1ms'

@description('Optional. Compute tier matching postgresSkuName.')
@allowed([
  'Burstable'
  'GeneralPurpose'
  'MemoryOptimized'
])
param postgresSkuTier string = 'Burstable'

@description('Optional. Whether the public endpoint of a cosmos app\'s Cosmos DB account accepts traffic.')
@allowed([
  'Enabled'
  'Disabled'
])
param cosmosPublicNetworkAccess string = 'Enabled'

@description('Optional. Create a cosmos app\'s Cosmos DB account zone-redundant (fixed at creation; false only where the region has no zones).')
param cosmosZoneRedundant bool = true

var prefix = toLower(namePrefix)
var suffix = uniqueString(subscription().id, resourceGroup().id, prefix, appName)
var storageAccountName = take('st${prefix}${suffix}', 24)
var functionAppName = 'func-${prefix}-${appName}-${suffix}'
var planName = 'plan-${prefix}-${appName}-${suffix}'
var identityName = 'id-${prefix}-${appName}-${suffix}'
var postgresName = 'psql-${prefix}-${appName}-${suffix}'
// At most 44 characters: the suffix already hashes the app's name, 10 of its letters are for people.
var cosmosName = 'cosmos-${prefix}-${take(appName, 10)}-${suffix}'
var isPostgres = store == 'postgres'
// shared/system.py refuses an app whose cosmos endpoints and store disagree, so the store
// alone decides here, as it does for PostgreSQL.
var isCosmos = store == 'cosmos'
// `bus resources` lists blobEndpoints and cosmosEndpoints only for an app that has some.
var documentEndpoints = union({
  blobEndpoints: []
  cosmosEndpoints: []
}, resources)
var blobEndpoints = documentEndpoints.blobEndpoints
var cosmosEndpoints = documentEndpoints.cosmosEndpoints

// The names of the connection settings the bus reads (BUS_STORAGE_SETTING and
// BUS_STATE_STORAGE_SETTING name them).
var messagingConnection = 'BusMessaging'
var stateConnection = 'BusState'

resource messagingAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: messagingAccountName
}

module identity 'identity.bicep' = {
  name: '${appName}-identity'
  params: {
    name: identityName
    location: location
    tags: tags
  }
}

module storage 'storage.bicep' = {
  name: '${appName}-storage'
  params: {
    name: storageAccountName
    location: location
    tags: tags
    skuName: storageSkuName
    publicNetworkAccess: storagePublicNetworkAccess
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    resourcesFromFile: false
  }
}

module stateNames 'state-names.bicep' = {
  name: '${appName}-state-names'
  params: {
    storageAccountName: storage.outputs.name
    endpoints: resources.endpoints
    blobEndpoints: blobEndpoints
  }
}

// The app's own account, and only it, at account scope: the host's locks and
// keys (blobs, queues, tables) and the deployment package, and the bus's state
// tables. Monitoring Metrics Publisher on the system's Application Insights.
module ownRoles 'roles.bicep' = {
  name: '${appName}-roles'
  params: {
    storageAccountName: storage.outputs.name
    principalId: identity.outputs.principalId
    principalType: 'ServicePrincipal'
    appInsightsName: appInsightsName
    assignMonitoringRole: true
    hierarchicalNamespace: false
  }
}

// In the shared messaging account: one role per queue, container and table.
module messagingRoles 'messaging-roles.bicep' = {
  name: '${appName}-messaging-roles'
  params: {
    storageAccountName: messagingAccountName
    appName: appName
    principalId: identity.outputs.principalId
    resources: resources
    sendsTo: sendsTo
  }
}

module postgres 'postgres.bicep' = if (isPostgres) {
  name: '${appName}-postgres'
  params: {
    name: postgresName
    location: location
    tags: tags
    appPrincipalId: identity.outputs.principalId
    appPrincipalName: identity.outputs.name
    skuName: postgresSkuName
    skuTier: postgresSkuTier
  }
}

module cosmos 'cosmos.bicep' = if (isCosmos) {
  name: '${appName}-cosmos'
  params: {
    name: cosmosName
    location: location
    tags: tags
    containerNames: cosmosEndpoints
    appPrincipalId: identity.outputs.principalId
    publicNetworkAccess: cosmosPublicNetworkAccess
    zoneRedundant: cosmosZoneRedundant
  }
}

var cosmosAppSettings = isCosmos ? {
  BUS_COSMOS_ENDPOINT: cosmos.outputs.endpoint
  BUS_COSMOS_DATABASE: cosmos.outputs.databaseName
  AZURE_CLIENT_ID: identity.outputs.clientId
} : {}

var postgresAppSettings = isPostgres ? {
  BUS_POSTGRES_URL: postgres.outputs.url
  BUS_POSTGRES_ENTRA: 'true'
  AZURE_CLIENT_ID: identity.outputs.clientId
} : {}

// Identity-based connections to both accounts, as the user-assigned identity.
var busConnectionSettings = {
  BUS_APP_NAME: appName
  BUS_STORAGE_SETTING: messagingConnection
  '${messagingConnection}__blobServiceUri': messagingAccount.properties.primaryEndpoints.blob
  '${messagingConnection}__queueServiceUri': messagingAccount.properties.primaryEndpoints.queue
  '${messagingConnection}__tableServiceUri': messagingAccount.properties.primaryEndpoints.table
  '${messagingConnection}__credential': 'managedidentity'
  '${messagingConnection}__clientId': identity.outputs.clientId
  BUS_STATE_STORAGE_SETTING: stateConnection
  '${stateConnection}__blobServiceUri': storage.outputs.blobEndpoint
  '${stateConnection}__queueServiceUri': storage.outputs.queueEndpoint
  '${stateConnection}__tableServiceUri': storage.outputs.tableEndpoint
  '${stateConnection}__credential': 'managedidentity'
  '${stateConnection}__clientId': identity.outputs.clientId
}

module functionApp 'function-app.bicep' = {
  name: '${appName}-function-app'
  params: {
    name: functionAppName
    planName: planName
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: storage.outputs.deploymentContainerName
    appInsightsName: appInsightsName
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    cleanupSchedule: cleanupSchedule
    appModule: appModule
    additionalAppSettings: union(postgresAppSettings, cosmosAppSettings, additionalAppSettings, busConnectionSettings)
  }
  // The host must be able to read its storage, and the bus the messaging
  // account, from the first start.
  dependsOn: [
    ownRoles
    messagingRoles
    stateNames
  ]
}

@description('Name of the app.')
output appName string = appName

@description('Name of the Function App; pass it to func azure functionapp publish.')
output functionAppName string = functionApp.outputs.name

@description('Default host name of the Function App.')
output functionAppHostName string = functionApp.outputs.defaultHostName

@description('Name of the app\'s own (state and host) storage account.')
output storageAccountName string = storage.outputs.name

@description('Object (principal) id of the app identity.')
output identityPrincipalId string = identity.outputs.principalId

@description('Host name of the app\'s PostgreSQL server; empty unless its store is postgres.')
output postgresHostName string = isPostgres ? postgres.outputs.fqdn : ''

@description('Document endpoint of the app\'s Cosmos DB account; empty unless its store is cosmos.')
output cosmosEndpoint string = isCosmos ? cosmos.outputs.endpoint : ''
