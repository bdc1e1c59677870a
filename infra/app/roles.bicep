// Data-plane role assignments for one principal.
//
// The storage roles are the narrowest built-in roles that cover what the
// principal does:
//   * Storage Blob Data Contributor: the Functions host takes blob leases for
//     its own coordination and reads the deployment package; the bus keeps
//     claim-check payloads and tokens in blobs. Read, write, delete and lease
//     need no more. Storage Blob Data Owner (which adds setting POSIX ACLs and
//     ownership) is granted instead only when the account has hierarchical
//     namespaces (hierarchicalNamespace), where the ACLs are part of access.
//   * Storage Queue Data Contributor: send, peek, receive and delete messages.
//   * Storage Table Data Contributor: read and write table entities.
// Monitoring Metrics Publisher on Application Insights lets the principal send
// telemetry while local (key) authentication is disabled.
//
// Assignment names are guid(scope, principalId, roleDefinitionId), so they are
// stable across re-deployments and unique per principal and role.

@description('Required. Name of the storage account that receives the data-role assignments.')
param storageAccountName string

@description('Required. Object (principal) id that receives the roles.')
param principalId string

@description('Optional. Kind of principal; ServicePrincipal for managed identities, User for a person running local tools.')
@allowed([
  'ServicePrincipal'
  'User'
  'Group'
])
param principalType string = 'ServicePrincipal'

@description('Required. Name of the Application Insights component the principal may publish telemetry to.')
param appInsightsName string

@description('Optional. Whether the storage account has hierarchical namespaces (Data Lake Storage); only then is Storage Blob Data Owner granted instead of Storage Blob Data Contributor.')
param hierarchicalNamespace bool = false

@description('Optional. Whether to grant Monitoring Metrics Publisher on the Application Insights component (the app needs it; a person running local tools does not).')
param assignMonitoringRole bool = true

// Built-in role definition ids (the same in every tenant).
var storageBlobDataContributorRoleId = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var storageBlobDataOwnerRoleId = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'

var storageDataRoles = {
  storageBlobData: hierarchicalNamespace ? storageBlobDataOwnerRoleId : storageBlobDataContributorRoleId
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
}

var monitoringMetricsPublisherRoleDefinitionId = subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '3913510d-42f4-4e42-8a64-420c390055eb')

resource storageAccount 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource storageRoleAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in items(storageDataRoles): {
  name: guid(storageAccount.id, principalId, subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role.value))
  scope: storageAccount
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role.value)
    principalId: principalId
    principalType: principalType
  }
}]

resource metricsPublisherAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (assignMonitoringRole) {
  name: guid(appInsights.id, principalId, monitoringMetricsPublisherRoleDefinitionId)
  scope: appInsights
  properties: {
    roleDefinitionId: monitoringMetricsPublisherRoleDefinitionId
    principalId: principalId
    principalType: principalType
  }
}

@description('Role definition ids (GUIDs) granted on the storage account.')
output storageRoleDefinitionIds array = [for role in items(storageDataRoles): role.value]
