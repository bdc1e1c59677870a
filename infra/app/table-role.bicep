// One data role on one table of a storage account, for one principal: the
// narrowest scope Azure offers for table entities. The system template gives an
// app's identity Storage Table Data Contributor on each of its own app-wide
// tables in the messaging account (ingress records, cleanup checkpoints, the
// operators' journal), never on the account (messaging-roles.bicep).
//
// The assignment's name is guid(table, principal, role), as in roles.bicep.

@description('Required. Name of the storage account that holds the table.')
param storageAccountName string

@description('Required. Name of the table.')
param tableName string

@description('Required. Built-in role granted on the table: Storage Table Data Contributor, and no other.')
@allowed([
  '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
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

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' existing = {
  parent: storageAccount
  name: 'default'
}

resource table 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = {
  parent: tableService
  name: tableName
}

resource assignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(table.id, principalId, roleDefinitionId)
  scope: table
  properties: {
    roleDefinitionId: roleDefinitionId
    principalId: principalId
    principalType: principalType
  }
}

@description('Resource id of the table the role is granted on.')
output scopeId string = table.id
