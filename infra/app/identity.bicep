// User-assigned managed identity shared by the Function App host, the
// deployment-package download and Application Insights ingestion. Using one
// user-assigned identity (instead of the system-assigned one) lets the role
// assignments exist before the site is created, so the first start of the
// host already has data access.

@description('Required. Name of the user-assigned managed identity.')
param name string

@description('Optional. Azure region of the identity.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the identity.')
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

@description('Resource id of the identity (used in the site identity block and for deployment storage).')
output id string = identity.id

@description('Name of the identity.')
output name string = identity.name

@description('Client (application) id of the identity; the app settings use it to select this identity.')
output clientId string = identity.properties.clientId

@description('Object (principal) id of the identity; role assignments target it.')
output principalId string = identity.properties.principalId
