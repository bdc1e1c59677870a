// One data role on one blob container of a storage account, for one principal:
// the narrowest scope Azure offers for blobs. The system template gives an app's
// identity Storage Blob Data Contributor on each container of the messaging
// account its app lists (tokens, payloads, topics, parked and its own), never on
// the account (messaging-roles.bicep).
//
// The assignment's name is guid(container, principal, role), as in roles.bicep.

@description('Required. Name of the storage account that holds the container.')
param storageAccountName string

@description('Required. Name of the container.')
param containerName string

@description('Required. Built-in role granted on the container: Storage Blob Data Contributor, and no other.')
@allowed([
  'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
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

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = {
  parent: blobService
  name: containerName
}

resource assignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(container.id, principalId, roleDefinitionId)
  scope: container
  properties: {
    roleDefinitionId: roleDefinitionId
    principalId: principalId
    principalType: principalType
  }
}

@description('Resource id of the container the role is granted on.')
output scopeId string = container.id
