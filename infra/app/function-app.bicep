// Function App on the Flex Consumption plan (Linux, Python).
//
// The app runs as the user-assigned identity: the host reaches its storage
// account (AzureWebJobsStorage__*), downloads the deployment package and sends
// telemetry with Entra ID tokens for that identity. No account key,
// SAS token or storage connection string is configured anywhere.

@description('Required. Name of the Function App (also the default host name prefix).')
param name string

@description('Required. Name of the Flex Consumption plan.')
param planName string

@description('Optional. Azure region of the plan and the app.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the plan and the app.')
param tags object = {}

@description('Required. Resource id of the user-assigned managed identity the app runs as.')
param identityId string

@description('Required. Client id of the user-assigned managed identity the app runs as.')
param identityClientId string

@description('Required. Name of the storage account used by the host and by the bus.')
param storageAccountName string

@description('Required. Name of the blob container that receives the deployment package.')
param deploymentContainerName string

@description('Required. Name of the Application Insights component that receives telemetry.')
param appInsightsName string

@description('Optional. Python version of the Functions worker.')
@allowed([
  '3.10'
  '3.11'
  '3.12'
])
param pythonVersion string = '3.11'

@description('Optional. Upper bound on the number of instances the plan scales out to.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Optional. Memory size of each instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Optional. NCRONTAB schedule (six fields, seconds first, UTC) of the cleanup timer function; the host does not index the function without it.')
param cleanupSchedule string = '0 */5 * * * *'

@description('Optional. The app to run, package.module:attribute naming a BusApp (the BUS_APP app setting); the default is the sample app.')
param appModule string = 'shared.sample.app:app'

@description('Optional. Serve the operator console as the HTTP function console (/api/console/, guarded by its own credential, not a function key; the BUS_CONSOLE_ENABLED app setting). Off by default.')
param consoleEnabled bool = false

@description('Optional. The console shows everything and changes nothing: replays and discards are refused (the BUS_CONSOLE_READ_ONLY app setting).')
param consoleReadOnly bool = true

@description('Optional. How the console knows its operator (never by a function key, which every host key stands in for): secret (consoleSecret, recorded as "console secret") or entra (the Entra ID sign-in of App Service authentication, recorded by name and object id). The BUS_CONSOLE_IDENTITY app setting.')
@allowed([
  'secret'
  'entra'
])
param consoleIdentity string = 'secret'

@description('Optional. The console\'s own secret (the BUS_CONSOLE_SECRET app setting): at least 32 random characters, or a Key Vault reference @Microsoft.KeyVault(SecretUri=...) resolved as the app\'s identity. Required when consoleEnabled is true and consoleIdentity is secret; never given to an ingress client.')
@secure()
param consoleSecret string = ''

@description('Optional. Extra app settings (name to value), overriding the defaults above. They must not hold secrets; put those in Key Vault and reference them.')
param additionalAppSettings object = {}

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

// Identity-based settings only. The AzureWebJobsStorage__* group is the
// host's storage connection (also used by queue triggers that name no other
// connection); credential + clientId select the user-assigned identity.
var identityAppSettings = [
  {
    name: 'AzureWebJobsStorage__blobServiceUri'
    value: storageAccount.properties.primaryEndpoints.blob
  }
  {
    name: 'AzureWebJobsStorage__queueServiceUri'
    value: storageAccount.properties.primaryEndpoints.queue
  }
  {
    name: 'AzureWebJobsStorage__tableServiceUri'
    value: storageAccount.properties.primaryEndpoints.table
  }
  {
    name: 'AzureWebJobsStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'AzureWebJobsStorage__clientId'
    value: identityClientId
  }
  {
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
    value: appInsights.properties.ConnectionString
  }
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
    value: 'ClientId=${identityClientId};Authorization=AAD'
  }
  {
    // The worker sends the bus's traces and metrics through Azure Monitor's distro; its Python
    // logs already reach Application Insights through the Functions host, so not twice.
    name: 'OTEL_LOGS_EXPORTER'
    value: 'none'
  }
]

// Which BusApp the worker loads: its endpoints are the queue triggers, the queues it expects
// and the topics it subscribes to at start-up. A parameter rather than an additional setting,
// so that a deployment names its app explicitly.
var busAppSettings = [
  {
    name: 'BUS_APP'
    value: appModule
  }
  {
    name: 'BUS_CONSOLE_ENABLED'
    value: consoleEnabled ? 'true' : 'false'
  }
  {
    name: 'BUS_CONSOLE_READ_ONLY'
    value: consoleReadOnly ? 'true' : 'false'
  }
  {
    name: 'BUS_CONSOLE_IDENTITY'
    value: consoleIdentity
  }
  {
    // Blank is unset: with the console enabled and no Entra sign-in, the app then refuses to
    // start rather than serve the console to every host key.
    name: 'BUS_CONSOLE_SECRET'
    value: consoleSecret
  }
]

var extraAppSettings = [for setting in items(union({ CLEANUP_SCHEDULE: cleanupSchedule }, additionalAppSettings)): {
  name: setting.key
  value: setting.value
}]

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225:Zone redundancy for Flex Consumption exists only in regions with availability zones, and this template targets any Flex region; enable it per environment instead of forcing it here.
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222:No VNet or private endpoint exists in this template, so the public HTTPS endpoint is how deployments (func publish, OneDeploy) and any HTTP trigger reach the app; httpsOnly and TLS 1.2 apply.
  // checkov:skip=CKV_AZURE_17:Incoming client certificates authenticate HTTP callers. Here every HTTP route (api/health and the api/messages ingress) needs a function key (the optional console, which a host key must not open, its own secret or an Entra ID sign-in instead), and callers that move money are covered by the entraAuthEnabled option (App Service authentication with Microsoft Entra ID, app/ingress-auth.bicep), which requires an access token from an allowed client on top of the key; the bus work itself is queue-triggered.
  // checkov:skip=CKV_AZURE_212:numberOfWorkers belongs to dedicated App Service plans. On Flex Consumption instance counts come from functionAppConfig.scaleAndConcurrency and the platform replaces failed instances.
  // checkov:skip=CKV_AZURE_213:Health check probes a path anonymously, but every HTTP route (api/health, api/messages) requires a function key (the optional console its own secret or an Entra ID sign-in); the bus work is queue-triggered and Flex Consumption replaces failed instances itself.
  name: name
  location: location
  tags: tags
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    // An app setting may be a Key Vault reference (a service's credential,
    // docs/effects.md): the platform resolves it as this identity, since the app
    // has no system-assigned one. The identity needs "Key Vault Secrets User" on
    // the vault, granted where the vault is managed.
    keyVaultReferenceIdentity: identityId
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      appSettings: concat(identityAppSettings, busAppSettings, extraAppSettings)
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storageAccount.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// Publishing with user/password credentials is switched off; deployments
// authenticate with Entra ID (az / func CLI tokens) instead.
resource ftpCredentials 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmCredentials 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  properties: {
    allow: false
  }
}

@description('Name of the Function App.')
output name string = functionApp.name

@description('Resource id of the Function App.')
output id string = functionApp.id

@description('Default host name of the Function App.')
output defaultHostName string = functionApp.properties.defaultHostName

@description('Resource id of the Flex Consumption plan.')
output planId string = plan.id
