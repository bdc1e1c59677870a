// Entry point: everything the exactly-once bus needs in one resource group.
//
//   identity.bicep     user-assigned managed identity the app runs as
//   monitoring.bicep   Log Analytics workspace + Application Insights (no local auth)
//   storage.bicep      storage account (no shared keys) with every queue, poison
//                      queue, table and container named in resources.json
//   roles.bicep        data-plane RBAC for the identity (and optionally a person)
//   function-app.bicep Flex Consumption plan + Python Function App
//   ingress-auth.bicep optional Microsoft Entra ID authentication in front of
//                      the HTTP routes (entraAuthEnabled)
//   postgres.bicep     optional PostgreSQL Flexible Server, Entra authentication only,
//                      for endpoints with store="postgres" (postgresEnabled); the
//                      app identity is a plain database role, created by a
//                      deployment script (postgres-app-role.sh/.sql)
//   cosmos.bicep       Cosmos DB account (NoSQL, serverless, no keys), its database and
//                      one container per endpoint with store="cosmos"; deployed when
//                      resources.json lists such endpoints (cosmosEndpoints)
//   alerts.bicep       log search alert rules over Application Insights: parked
//                      messages, a message waiting too long, no cleanup pass, ingress
//                      5xx (docs/alerts.md), notifying alertActionGroupId if given
//
// Deploy with:
//   az deployment group create -g <rg> --template-file infra/main.bicep \
//     --parameters infra/main.parameters.json
targetScope = 'resourceGroup'

@description('Required. Short prefix for resource names: 3-11 lowercase letters and digits, starting with a letter (for example eobusdev).')
@minLength(3)
@maxLength(11)
param namePrefix string

@description('Optional. Azure region of every resource; defaults to the resource group region. Must offer the Flex Consumption plan.')
param location string = resourceGroup().location

@description('Optional. Tags applied to every resource.')
param tags object = {
  project: 'exactly-once-bus'
}

@description('Optional. Whether the storage account public endpoint accepts traffic (access still needs an Entra ID token and a data role).')
@allowed([
  'Enabled'
  'Disabled'
])
param storagePublicNetworkAccess string = 'Enabled'

@description('Optional. Replication SKU of the storage account. Standard_ZRS keeps messages in flight through the loss of one zone; Standard_GZRS adds an asynchronous copy in the paired region; Standard_LRS only for regions without availability zones (docs/deploy.md, "Storage redundancy").')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
  'Standard_RAGRS'
  'Standard_RAGZRS'
])
param storageSkuName string = 'Standard_ZRS'

@description('Optional. Create the storage account with hierarchical namespaces (Data Lake Storage Gen2). Off by default; only when on do the app identity and the deployer get Storage Blob Data Owner (POSIX ACLs) instead of Storage Blob Data Contributor.')
param storageHierarchicalNamespace bool = false

@description('Optional. Object id of the person (or pipeline) deploying, granted the same storage data roles as the app so local tools can use Entra ID; leave empty to skip.')
param deployerPrincipalId string = ''

@description('Optional. Principal type of deployerPrincipalId.')
@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
param deployerPrincipalType string = 'User'

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

@description('Optional. Days the Log Analytics workspace keeps data.')
@minValue(30)
@maxValue(730)
param logRetentionInDays int = 30

@description('Optional. NCRONTAB schedule (six fields, seconds first, UTC) of the cleanup timer function.')
param cleanupSchedule string = '0 */5 * * * *'

@description('Optional. The app the Function App runs, as package.module:attribute naming a BusApp in the published project folder (the BUS_APP app setting). The default is the sample app; set your own (docs/deploy.md, "Deploying your own app").')
param appModule string = 'shared.sample.app:app'

@description('Optional. Extra, non-secret app settings for the Function App (name to value).')
param additionalAppSettings object = {}

@description('Optional. Serve the operator console from the Function App at /api/console/ (guarded by its own credential, not a function key: consoleSecret, or with entraAuthEnabled an Entra sign-in, whose name and object id the console records). Off by default (docs/console.md).')
param consoleEnabled bool = false

@description('Optional. The console\'s own secret (BUS_CONSOLE_SECRET): at least 32 random characters, or a Key Vault reference @Microsoft.KeyVault(SecretUri=...). Required with consoleEnabled unless entraAuthEnabled; with both, the console asks for both. Never give it to an ingress client.')
@secure()
param consoleSecret string = ''

@description('Optional. The deployed console shows everything and changes nothing (replays and discards refused). On by default: turn it off to act from the console.')
param consoleReadOnly bool = true

@description('Optional. Require a Microsoft Entra ID access token (App Service authentication) on every HTTP route of the Function App, in addition to the function key. Off by default; for callers that move money (docs/deploy.md, "Microsoft Entra ID for the ingress").')
param entraAuthEnabled bool = false

@description('Optional. Tenant that issues the accepted tokens; defaults to the tenant of the subscription.')
param entraTenantId string = subscription().tenantId

@description('Optional. Application (client) id of the app registration that represents the ingress; required when entraAuthEnabled is true.')
param entraClientId string = ''

@description('Optional. Accepted token audiences (aud claim); empty means the ingress registration itself: api://<entraClientId> and <entraClientId>.')
param entraAllowedAudiences array = []

@description('Optional. Application (client) ids of the callers allowed to send; empty lets any client that obtains a token for the audience call.')
param entraAllowedClientApplications array = []

@description('Optional. Deploy an Azure Database for PostgreSQL Flexible Server (Entra authentication only, the app identity a plain database role created by a deployment script) for endpoints declared with store="postgres", and set BUS_POSTGRES_URL (docs/postgres.md).')
param postgresEnabled bool = false

@description('Optional. Compute SKU of the PostgreSQL server, for example Standard_B1ms or Standard_D2ds_v5.')
param postgresSkuName string = 'Standard_B1ms'

@description('Optional. Compute tier matching postgresSkuName.')
@allowed([
  'Burstable'
  'GeneralPurpose'
  'MemoryOptimized'
])
param postgresSkuTier string = 'Burstable'

@description('Optional. Display name of deployerPrincipalId, registered as a second Entra principal of the PostgreSQL server when both are set (for psql); leave empty to skip.')
param deployerPrincipalName string = ''

@description('Optional. Name of the SQL database of the Cosmos DB account (BUS_COSMOS_DATABASE); the account is deployed only when resources.json lists cosmosEndpoints.')
param cosmosDatabaseName string = 'bus'

@description('Optional. Whether the Cosmos DB account\'s public endpoint accepts traffic (access still needs an Entra ID token and the data role).')
@allowed([
  'Enabled'
  'Disabled'
])
param cosmosPublicNetworkAccess string = 'Enabled'

@description('Optional. Create the Cosmos DB account zone-redundant. Fixed when the account is created; false only where the region has no availability zones.')
param cosmosZoneRedundant bool = true

@description('Optional. Resource id of an existing action group the alert rules notify (docs/alerts.md); empty: the rules are deployed and fire in the portal, notifying nobody.')
param alertActionGroupId string = ''

@description('Optional. Minutes a message may wait (its token in flight, not yet consumed) before the oldest-token alert fires.')
@minValue(1)
param alertOldestTokenMinutes int = 15

@description('Optional. Minutes without a cleanup pass before the cleanup-silence alert fires; at least twice the cleanupSchedule interval plus a few minutes.')
@allowed([
  15
  30
  45
  60
  120
  180
  360
])
param alertCleanupSilenceMinutes int = 30

@description('Optional. Window of the ingress 5xx alert, in minutes.')
@allowed([
  5
  10
  15
  30
  45
  60
])
param alertIngressWindowMinutes int = 15

@description('Optional. Fewest ingress 5xx answers in the window before the ingress 5xx alert may fire.')
@minValue(1)
param alertIngressMinFailed int = 5

@description('Optional. Percentage of ingress requests in the window answered 5xx that fires the ingress 5xx alert.')
@minValue(1)
@maxValue(100)
param alertIngressFailedPercent int = 5

// A deterministic suffix keeps globally unique names stable per resource group.
var prefix = toLower(namePrefix)
var suffix = uniqueString(subscription().id, resourceGroup().id, prefix)
var storageAccountName = take('st${prefix}${suffix}', 24)
var functionAppName = 'func-${prefix}-${suffix}'
var planName = 'plan-${prefix}-${suffix}'
var identityName = 'id-${prefix}-${suffix}'
var appInsightsName = 'appi-${prefix}-${suffix}'
var logAnalyticsName = 'log-${prefix}-${suffix}'
var postgresName = 'psql-${prefix}-${suffix}'
var alertNamePrefix = 'alert-${prefix}-${suffix}'
var cosmosName = 'cosmos-${prefix}-${suffix}'

// The app's endpoints with store="cosmos" (bus resources lists them): the Cosmos DB account
// exists for them, and only when there is one. The file decides, not a parameter, because
// the app cannot start without the account its endpoints declare, and an account no
// endpoint uses would only cost.
// The file lists cosmosEndpoints only for an app that has some: the union gives the property
// a default, so that reading it compiles whatever the file holds.
var resourcesFile = loadJsonContent('resources.json')
var resourceNames = union({ cosmosEndpoints: [] }, resourcesFile)
var cosmosContainerNames = resourceNames.cosmosEndpoints
var cosmosEnabled = !empty(cosmosContainerNames)

module identity 'app/identity.bicep' = {
  name: 'identity'
  params: {
    name: identityName
    location: location
    tags: tags
  }
}

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
    oldestTokenMinutes: alertOldestTokenMinutes
    cleanupSilenceMinutes: alertCleanupSilenceMinutes
    ingressWindowMinutes: alertIngressWindowMinutes
    ingressMinFailed: alertIngressMinFailed
    ingressFailedPercent: alertIngressFailedPercent
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  params: {
    name: storageAccountName
    location: location
    tags: tags
    skuName: storageSkuName
    publicNetworkAccess: storagePublicNetworkAccess
    isHnsEnabled: storageHierarchicalNamespace
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
  }
}

module appRoles 'app/roles.bicep' = {
  name: 'roles-app'
  params: {
    storageAccountName: storage.outputs.name
    principalId: identity.outputs.principalId
    principalType: 'ServicePrincipal'
    appInsightsName: monitoring.outputs.appInsightsName
    assignMonitoringRole: true
    hierarchicalNamespace: storageHierarchicalNamespace
  }
}

module deployerRoles 'app/roles.bicep' = if (!empty(deployerPrincipalId)) {
  name: 'roles-deployer'
  params: {
    storageAccountName: storage.outputs.name
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
    appInsightsName: monitoring.outputs.appInsightsName
    assignMonitoringRole: false
    hierarchicalNamespace: storageHierarchicalNamespace
  }
}

module postgres 'app/postgres.bicep' = if (postgresEnabled) {
  name: 'postgres'
  params: {
    name: postgresName
    location: location
    tags: tags
    appPrincipalId: identity.outputs.principalId
    appPrincipalName: identity.outputs.name
    adminPrincipalId: empty(deployerPrincipalName) ? '' : deployerPrincipalId
    adminPrincipalName: deployerPrincipalName
    adminPrincipalType: deployerPrincipalType
    skuName: postgresSkuName
    skuTier: postgresSkuTier
  }
}

module cosmos 'app/cosmos.bicep' = if (cosmosEnabled) {
  name: 'cosmos'
  params: {
    name: cosmosName
    location: location
    tags: tags
    databaseName: cosmosDatabaseName
    containerNames: cosmosContainerNames
    appPrincipalId: identity.outputs.principalId
    deployerPrincipalId: deployerPrincipalId
    publicNetworkAccess: cosmosPublicNetworkAccess
    zoneRedundant: cosmosZoneRedundant
  }
}

// The app reaches Cosmos DB as its identity: no BUS_COSMOS_KEY, so the library asks for an
// Entra token (for AZURE_CLIENT_ID).
var cosmosAppSettings = cosmosEnabled ? {
  BUS_COSMOS_ENDPOINT: cosmos.outputs.endpoint
  BUS_COSMOS_DATABASE: cosmos.outputs.databaseName
  AZURE_CLIENT_ID: identity.outputs.clientId
} : {}

// The app reaches PostgreSQL as its identity: an Entra token (for AZURE_CLIENT_ID) is the
// password of every new connection.
var postgresAppSettings = postgresEnabled ? {
  BUS_POSTGRES_URL: postgres.outputs.url
  BUS_POSTGRES_ENTRA: 'true'
  AZURE_CLIENT_ID: identity.outputs.clientId
} : {}

// Behind App Service authentication the platform names the caller of every HTTP request
// (X-MS-CLIENT-PRINCIPAL-ID): the ingress then scopes each caller's Idempotency-Keys by it.
var ingressAuthAppSettings = entraAuthEnabled ? {
  BUS_INGRESS_ENTRA_CALLERS: 'true'
} : {}

module functionApp 'app/function-app.bicep' = {
  name: 'function-app'
  params: {
    name: functionAppName
    planName: planName
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: storage.outputs.deploymentContainerName
    appInsightsName: monitoring.outputs.appInsightsName
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    cleanupSchedule: cleanupSchedule
    appModule: appModule
    consoleEnabled: consoleEnabled
    consoleReadOnly: consoleReadOnly
    // Behind App Service authentication the platform names who signed in; only then is the
    // name trusted, and required. Without it the console's own secret is its credential.
    consoleIdentity: entraAuthEnabled ? 'entra' : 'secret'
    consoleSecret: consoleSecret
    additionalAppSettings: union(postgresAppSettings, cosmosAppSettings, ingressAuthAppSettings, additionalAppSettings)
  }
  // The host must be able to read its storage from its first start.
  dependsOn: [
    appRoles
  ]
}

module ingressAuth 'app/ingress-auth.bicep' = if (entraAuthEnabled) {
  name: 'ingress-auth'
  params: {
    functionAppName: functionApp.outputs.name
    tenantId: entraTenantId
    clientId: entraClientId
    allowedAudiences: entraAllowedAudiences
    allowedClientApplications: entraAllowedClientApplications
  }
}

@description('Name of the Function App; pass it to func azure functionapp publish.')
output functionAppName string = functionApp.outputs.name

@description('Default host name of the Function App.')
output functionAppHostName string = functionApp.outputs.defaultHostName

@description('What an HTTP caller must send: functionKey, or entraIdToken+functionKey when entraAuthEnabled is true.')
output httpAuthentication string = entraAuthEnabled ? 'entraIdToken+functionKey' : 'functionKey'

@description('Name of the storage account.')
output storageAccountName string = storage.outputs.name

@description('Blob service endpoint of the storage account.')
output storageBlobEndpoint string = storage.outputs.blobEndpoint

@description('Queue service endpoint of the storage account.')
output storageQueueEndpoint string = storage.outputs.queueEndpoint

@description('Table service endpoint of the storage account.')
output storageTableEndpoint string = storage.outputs.tableEndpoint

@description('Client id of the user-assigned identity the app runs as.')
output identityClientId string = identity.outputs.clientId

@description('Object (principal) id of the user-assigned identity the app runs as.')
output identityPrincipalId string = identity.outputs.principalId

@description('Resource id of the user-assigned identity the app runs as.')
output identityResourceId string = identity.outputs.id

@description('Host name of the PostgreSQL server; empty when postgresEnabled is false.')
output postgresHostName string = postgresEnabled ? postgres.outputs.fqdn : ''

@description('Document endpoint of the Cosmos DB account; empty when resources.json lists no cosmosEndpoints.')
output cosmosEndpoint string = cosmosEnabled ? cosmos.outputs.endpoint : ''

@description('Name of the Application Insights component.')
output appInsightsName string = monitoring.outputs.appInsightsName

@description('Names of the alert rules (docs/alerts.md).')
output alertRuleNames array = alerts.outputs.ruleNames
