// Optional Azure Cosmos DB account (API for NoSQL, serverless) for endpoints declared with
// store="cosmos" (docs/deploy.md, "Cosmos DB and blob documents"). Each such endpoint keeps
// its rows as one JSON document per partition in a container named after the endpoint,
// partition key /id (the document's key).
//
// Keys exist on every Cosmos DB account but are refused here: disableLocalAuth turns off
// key sign-in on the data plane and disableKeyBasedMetadataWriteAccess keeps keys from
// changing databases and containers, so the app's identity signs in with an Entra token
// and is authorised by the built-in Cosmos DB Built-in Data Contributor role (a data-plane
// role of the account, not an Azure role assignment). That role reads and writes items but
// cannot create databases or containers: this template creates them, not `bus provision`.

@description('Required. Name of the account (globally unique, 3-44 lowercase letters, digits and hyphens).')
@minLength(3)
@maxLength(44)
param name string

@description('Optional. Azure region of the account; a serverless account lives in one region.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the account.')
param tags object = {}

@description('Optional. Name of the SQL database that holds the endpoint containers (BUS_COSMOS_DATABASE).')
param databaseName string = 'bus'

@description('Required. The endpoints that keep their rows in Cosmos DB: one container each, named after the endpoint.')
param containerNames array

@description('Required. Object (principal) id of the app identity, granted Cosmos DB Built-in Data Contributor on the account.')
param appPrincipalId string

@description('Optional. Object id of a person or pipeline granted the same data role, for local tools signed in with Entra ID; leave empty to skip.')
param deployerPrincipalId string = ''

@description('Optional. Whether the public endpoint accepts traffic (access still needs an Entra ID token and the data role). A Flex Consumption app without virtual network integration needs Enabled.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Optional. Spread the account\'s replicas over the region\'s availability zones. Set when the account is created and never changed after; false only where the region has no zones.')
param zoneRedundant bool = true

// Cosmos DB Built-in Data Contributor: read, write, delete and query items; no control of
// databases, containers, throughput or keys.
var dataContributorRoleId = '00000000-0000-0000-0000-000000000002'
var principals = empty(deployerPrincipalId) ? [appPrincipalId] : [appPrincipalId, deployerPrincipalId]

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  // checkov:skip=CKV_AZURE_101:Public network access is the publicNetworkAccess parameter, Enabled by default only because a Flex Consumption app without VNet integration reaches the account over its public endpoint; key sign-in is disabled, so every request still needs an Entra ID token and the data role.
  // checkov:skip=CKV_AZURE_100:Data at rest is encrypted with service-managed keys. Customer-managed keys need a Key Vault, a key and an identity with access to it that this template does not create; they can be added only when the account is created.
  name: name
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    capabilities: [
      {
        name: 'EnableServerless'
      }
    ]
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: zoneRedundant
      }
    ]
    // Strong, as Table Storage and Blob Storage are: a read from another instance must see
    // the last acknowledged write of a partition's document (the in-memory model and the
    // contract suite assume it). In a single-region account it costs reads about twice the
    // request units of Session, and writes nothing more.
    consistencyPolicy: {
      defaultConsistencyLevel: 'Strong'
    }
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    enableMultipleWriteLocations: false
    enableAutomaticFailover: false
    enableFreeTier: false
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: publicNetworkAccess
    isVirtualNetworkFilterEnabled: false
    networkAclBypass: 'None'
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
  }
}

// One container per endpoint. Only /id is indexed: the bus reads each document by its id
// and pages through a container in id order, so indexing the rows inside every document
// would cost request units on each write and serve no query.
resource containers 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = [for endpoint in containerNames: {
  parent: database
  name: endpoint
  properties: {
    resource: {
      id: endpoint
      partitionKey: {
        paths: [
          '/id'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/id/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
      }
    }
  }
}]

// Data-plane role assignments of the account itself (not Microsoft.Authorization), named
// guid(account, principal, role) so that a redeployment finds the same assignment.
resource dataContributors 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = [for principal in principals: {
  parent: account
  name: guid(account.id, principal, dataContributorRoleId)
  properties: {
    roleDefinitionId: '${account.id}/sqlRoleDefinitions/${dataContributorRoleId}'
    principalId: principal
    scope: account.id
  }
}]

@description('Name of the account.')
output name string = account.name

@description('Document endpoint of the account, for example https://<account>.documents.azure.com:443/ (BUS_COSMOS_ENDPOINT).')
output endpoint string = account.properties.documentEndpoint

@description('Name of the SQL database (BUS_COSMOS_DATABASE).')
output databaseName string = database.name
