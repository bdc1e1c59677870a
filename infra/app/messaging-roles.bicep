// What one app's identity may do in the messaging account a system of services
// shares (../system.bicep), each right on the narrowest scope Azure offers:
//
//   Storage Queue Data Contributor   on each of its own endpoints' queues and
//                                    poison queues: the queue triggers receive
//                                    and delete, the bus parks, replays and
//                                    re-parks there.
//   Storage Queue Data Message Sender on the queue of each endpoint of another
//                                    app that it sends to or that subscribes to
//                                    its events (its app's external_endpoint
//                                    declarations, sendsTo): it adds messages
//                                    there, and cannot read, delete or see them.
//   Storage Blob Data Contributor    on each container its app lists: tokens and
//                                    payloads (a sender writes a message's token
//                                    and body, the receiving app reads and deletes
//                                    them), topics (each app writes its own
//                                    subscriptions and reads the recipient lists
//                                    of what it publishes), parked, and its own.
//   Storage Table Data Contributor   on each app-wide table its app lists: its
//                                    ingress records, cleanup checkpoints and
//                                    operators' journal.
//
// Nothing is granted on the account itself: no app can list, read or delete the
// queues of another app's endpoints, nor any table it does not list. Inside a
// shared container Azure has no narrower scope; there the app's cleanup judges
// only what its own endpoints sent or own (docs/deploy.md).

@description('Required. Name of the messaging storage account.')
param storageAccountName string

@description('Required. Name of the app, used to keep the names of its role deployments apart from those of the other apps.')
param appName string

@description('Required. Object (principal) id of the app identity.')
param principalId string

@description('Required. The app\'s resource names as `bus resources` prints them: containers (object), tables (object) and endpoints (array).')
param resources object

@description('Optional. Endpoints of other apps whose queues the app sends to (its external_endpoint declarations).')
param sendsTo array = []

var queueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var queueDataMessageSender = 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
var blobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var tableDataContributor = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'

module ownQueues 'queue-role.bicep' = [for endpoint in resources.endpoints: {
  name: take('${appName}-queue-${endpoint}', 64)
  params: {
    storageAccountName: storageAccountName
    queueName: endpoint
    roleId: queueDataContributor
    principalId: principalId
  }
}]

module ownPoisonQueues 'queue-role.bicep' = [for endpoint in resources.endpoints: {
  name: take('${appName}-poison-${endpoint}', 64)
  params: {
    storageAccountName: storageAccountName
    queueName: '${endpoint}-poison'
    roleId: queueDataContributor
    principalId: principalId
  }
}]

module sendQueues 'queue-role.bicep' = [for endpoint in sendsTo: {
  name: take('${appName}-send-${endpoint}', 64)
  params: {
    storageAccountName: storageAccountName
    queueName: endpoint
    roleId: queueDataMessageSender
    principalId: principalId
  }
}]

module containers 'container-role.bicep' = [for container in items(resources.containers): {
  name: take('${appName}-container-${container.key}', 64)
  params: {
    storageAccountName: storageAccountName
    containerName: container.value
    roleId: blobDataContributor
    principalId: principalId
  }
}]

module tables 'table-role.bicep' = [for table in items(resources.tables): {
  name: take('${appName}-table-${table.key}', 64)
  params: {
    storageAccountName: storageAccountName
    tableName: table.value
    roleId: tableDataContributor
    principalId: principalId
  }
}]

@description('Queues of other apps\' endpoints the identity may add messages to, and nothing more.')
output sendsTo array = sendsTo
