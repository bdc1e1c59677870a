// One app's names in its own state account in a system of services
// (../system.bicep): the table of each of its endpoints (state, outbox records,
// audit rows) and the rows container, <endpoint>-rows, of each endpoint that
// keeps its rows as blob documents (store="blob"). Nothing of the messaging
// role lives here.

@description('Required. Name of the app\'s state storage account (created by storage.bicep).')
param storageAccountName string

@description('Required. The app\'s endpoints, as `bus resources` lists them.')
param endpoints array

@description('Optional. The endpoints among them with store="blob" (blobEndpoints of `bus resources`): each gets its rows container.')
param blobEndpoints array = []

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource endpointTables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [for endpoint in endpoints: {
  parent: tableService
  name: endpoint
}]

resource rowsContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [for endpoint in blobEndpoints: {
  parent: blobService
  name: '${endpoint}-rows'
  properties: {
    publicAccess: 'None'
  }
}]

@description('Names of the endpoint tables created.')
output tableNames array = endpoints
