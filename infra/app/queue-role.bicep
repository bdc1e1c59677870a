// One data role on one queue of a storage account, for one principal: the
// narrowest scope Azure offers for queue messages. The system template gives an
// app's identity Storage Queue Data Contributor on its own endpoints' queues
// and poison queues, and Storage Queue Data Message Sender (add messages only)
// on the queues of other apps' endpoints it sends to (messaging-roles.bicep).
//
// The assignment's name is guid(queue, principal, role), as in roles.bicep.

@description('Required. Name of the storage account that holds the queue.')
param storageAccountName string

@description('Required. Name of the queue.')
param queueName string

@description('Required. Built-in role granted on the queue: Storage Queue Data Contributor or Storage Queue Data Message Sender, and no other.')
@allowed([
  '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
])
param roleId string

@description('Required. Object (principal) id that receives the role.')
param principalId string

@description('Optional. Kind of principal; ServicePrincipal for managed identities.')
@allowed([
  'ServicePrincipal'
  'User'
  'Group'
])
param principalType string = 'ServicePrincipal'

var roleDefinitionId = subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleId)

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource queue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = {
  parent: queueService
  name: queueName
}

resource assignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(queue.id, principalId, roleDefinitionId)
  scope: queue
  properties: {
    roleDefinitionId: roleDefinitionId
    principalId: principalId
    principalType: principalType
  }
}

@description('Resource id of the queue the role is granted on.')
output scopeId string = queue.id
