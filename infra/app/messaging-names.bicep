// One app's names in the messaging account of a system of services
// (../system.bicep): the queue and poison queue of each of its endpoints, and
// the containers and app-wide tables its app lists (`bus resources`). The
// containers every app lists (tokens, payloads, topics, parked) are declared by
// each app's deployment alike; system.bicep deploys these one app at a time so
// that two never create the same container at once.

@description('Required. Name of the messaging storage account (created by storage.bicep).')
param storageAccountName string

@description('Required. The app\'s resource names as `bus resources` prints them: containers (object), tables (object) and endpoints (array).')
param resources object

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource containers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [for container in items(resources.containers): {
  parent: blobService
  name: container.value
  properties: {
    publicAccess: 'None'
  }
}]

resource endpointQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for endpoint in resources.endpoints: {
  parent: queueService
  name: endpoint
}]

// The Functions host's '<queue>-poison' name; created up front, as storage.bicep does.
resource poisonQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for endpoint in resources.endpoints: {
  parent: queueService
  name: '${endpoint}-poison'
}]

resource tables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [for table in items(resources.tables): {
  parent: tableService
  name: table.value
}]

@description('Names of the endpoint queues created (each also has its -poison queue).')
output queueNames array = resources.endpoints
