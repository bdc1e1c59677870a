// Storage account for the exactly-once bus and for the Functions host itself.
//
// Security model: no shared keys, no SAS, no anonymous blob access; every
// caller authenticates with Entra ID and is authorised by data-plane RBAC
// (roles.bicep). Queue, table and container names are not written here: they
// come from ../resources.json, the same file the Python provisioner reads, so
// adding an endpoint to that file provisions its queue, poison queue and table.
// A system of services (../system.bicep) creates its accounts here without that
// file (resourcesFromFile false) and each app's names per storage role with
// messaging-names.bicep and state-names.bicep.

@description('Required. Globally unique storage account name (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Optional. Azure region of the storage account.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the storage account.')
param tags object = {}

@description('Optional. Replication SKU of the storage account. Zone-redundant by default: the tokens, outbox records and queues of messages in flight survive the loss of one datacentre (docs/deploy.md, "Storage redundancy").')
@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_GZRS'
  'Standard_RAGRS'
  'Standard_RAGZRS'
])
param skuName string = 'Standard_ZRS'

@description('Optional. Whether the public endpoint accepts traffic. Flex Consumption apps without virtual network integration need Enabled.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Resource id of a Log Analytics workspace that receives blob, queue and table request logs; no diagnostic settings are created when empty.')
param logAnalyticsWorkspaceId string = ''

@description('Optional. Enable hierarchical namespaces (Data Lake Storage Gen2). Off by default: the bus needs flat blob containers only, and with it off the app identity gets Storage Blob Data Contributor rather than Owner.')
param isHnsEnabled bool = false

@description('Optional. Days that deleted blobs and containers stay recoverable.')
@minValue(1)
@maxValue(365)
param softDeleteRetentionDays int = 7

@description('Optional. Create the queues, poison queues, tables and containers that ../resources.json lists (one app on one account, main.bicep). False: only the account, its services and the deployments container; the system template creates the names of each app itself.')
param resourcesFromFile bool = true

// Single source of truth for names (see infra/resources.json).
var fileNames = loadJsonContent('../resources.json')
var noNames = {
  containers: {}
  tables: {}
  endpoints: []
  blobEndpoints: []
}
// The file lists blobEndpoints only for an app that has some: the union gives the property a
// default, so that reading it compiles whatever the file holds.
var names = resourcesFromFile ? union(noNames, fileNames) : noNames
// The endpoints with store="blob" keep their rows as JSON documents in a container of their
// own, <endpoint>-rows, in the account that holds the endpoint tables (this one for a single
// app; a system's state-names.bicep creates them in each app's own account).
var rowsEndpoints = names.blobEndpoints

// Blob container that holds the Flex Consumption deployment package.
var deploymentContainerName = 'deployments'

var networkDefaultAction = publicNetworkAccess == 'Enabled' ? 'Allow' : 'Deny'

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35:Default action follows the publicNetworkAccess parameter. A Flex Consumption app without VNet integration reaches storage over the public endpoint (the AzureServices bypass does not cover it), and every request still needs an Entra ID token plus a data role because shared keys are off.
  // checkov:skip=CKV_AZURE_59:Same reason as CKV_AZURE_35. Public network access is the publicNetworkAccess parameter, Enabled by default only because the app has no private endpoint or VNet in this template.
  // checkov:skip=CKV_AZURE_206:This check accepts geo-replication only. Replication is the skuName parameter, Standard_ZRS by default: synchronous copies in three zones keep every token, outbox record and queued signal through the loss of one datacentre. Standard_GZRS (allowed) adds an asynchronous copy in the paired region, which after a regional failover may miss the last writes of each service differently, so it protects against losing a region but not the exactly-once bookkeeping of the messages in flight at that moment (docs/deploy.md).
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    isHnsEnabled: isHnsEnabled
    allowSharedKeyAccess: false
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: networkDefaultAction
    }
    encryption: {
      keySource: 'Microsoft.Storage'
      requireInfrastructureEncryption: true
      services: {
        blob: {
          enabled: true
          keyType: 'Account'
        }
        file: {
          enabled: true
          keyType: 'Account'
        }
        queue: {
          enabled: true
          keyType: 'Account'
        }
        table: {
          enabled: true
          keyType: 'Account'
        }
      }
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storageAccount
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: softDeleteRetentionDays
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: softDeleteRetentionDays
    }
  }
}

// One container per entry of resources.json "containers" (tokens, topics, ...).
resource dataContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [for container in items(names.containers): {
  parent: blobService
  name: container.value
  properties: {
    publicAccess: 'None'
  }
}]

resource rowsContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [for endpoint in rowsEndpoints: {
  parent: blobService
  name: '${endpoint}-rows'
  properties: {
    publicAccess: 'None'
  }
}]

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: storageAccount
  name: 'default'
}

// The work queue of every endpoint.
resource endpointQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for endpoint in names.endpoints: {
  parent: queueService
  name: endpoint
}]

// The poison queue of every endpoint: the Functions host moves a message here
// after maxDequeueCount failed deliveries, using the '<queue>-poison' name.
resource poisonQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for endpoint in names.endpoints: {
  parent: queueService
  name: '${endpoint}-poison'
}]

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' = {
  parent: storageAccount
  name: 'default'
}

// The per-endpoint table (inbox/outbox state) of every endpoint.
resource endpointTables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [for endpoint in names.endpoints: {
  parent: tableService
  name: endpoint
}]

// Shared tables listed under resources.json "tables" (ingress, cleanup, ...).
resource sharedTables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [for table in items(names.tables): {
  parent: tableService
  name: table.value
}]

// Request logs of the three data services go to Log Analytics.
resource blobDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(logAnalyticsWorkspaceId)) {
  name: 'blob-requests'
  scope: blobService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
  }
}

resource queueDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(logAnalyticsWorkspaceId)) {
  name: 'queue-requests'
  scope: queueService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
  }
}

resource tableDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = if (!empty(logAnalyticsWorkspaceId)) {
  name: 'table-requests'
  scope: tableService
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'StorageRead'
        enabled: true
      }
      {
        category: 'StorageWrite'
        enabled: true
      }
      {
        category: 'StorageDelete'
        enabled: true
      }
    ]
  }
}

@description('Name of the storage account.')
output name string = storageAccount.name

@description('Resource id of the storage account.')
output id string = storageAccount.id

@description('Blob service endpoint, for example https://<account>.blob.core.windows.net/.')
output blobEndpoint string = storageAccount.properties.primaryEndpoints.blob

@description('Queue service endpoint, for example https://<account>.queue.core.windows.net/.')
output queueEndpoint string = storageAccount.properties.primaryEndpoints.queue

@description('Table service endpoint, for example https://<account>.table.core.windows.net/.')
output tableEndpoint string = storageAccount.properties.primaryEndpoints.table

@description('Name of the blob container that holds the Flex Consumption deployment package.')
output deploymentContainerName string = deploymentContainer.name
