// Optional Azure Database for PostgreSQL Flexible Server for endpoints declared with
// store="postgres" (docs/postgres.md). Microsoft Entra authentication only: no password
// login exists. A user-assigned identity of its own is the server's Entra administrator; a
// deployment script signs in as it and makes the app's identity a plain database role
// (postgres-app-role.sql: its own schemas, no admin rights), which signs in with a token
// (BUS_POSTGRES_ENTRA=true). `bus provision`, run by the app, creates the bus tables.

@description('Required. Name of the server (globally unique, 3-63 lowercase letters, digits and hyphens).')
param name string

@description('Optional. Azure region of the server.')
param location string = resourceGroup().location

@description('Optional. Tags applied to the server.')
param tags object = {}

@description('Optional. Tenant of the Entra principals that may sign in.')
param tenantId string = subscription().tenantId

@description('Required. Object (principal) id of the app identity, made a plain database role of the server.')
param appPrincipalId string

@description('Required. Name of the app identity: the PostgreSQL role it signs in as (the user of BUS_POSTGRES_URL).')
param appPrincipalName string

@description('Optional. Object id of a person or group also registered as an Entra principal (for psql and migrations by hand); leave empty to skip.')
param adminPrincipalId string = ''

@description('Optional. Display name (user principal name or group name) of adminPrincipalId.')
param adminPrincipalName string = ''

@description('Optional. Principal type of adminPrincipalId.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param adminPrincipalType string = 'User'

@description('Optional. Name of the database that holds the bus schema and the app tables.')
param databaseName string = 'bus'

@description('Optional. PostgreSQL major version.')
@allowed([
  '15'
  '16'
])
param version string = '16'

@description('Optional. Compute SKU name, for example Standard_B1ms (Burstable) or Standard_D2ds_v5 (GeneralPurpose).')
param skuName string = 'Standard_B1ms'

@description('Optional. Compute tier matching skuName.')
@allowed([
  'Burstable'
  'GeneralPurpose'
  'MemoryOptimized'
])
param skuTier string = 'Burstable'

@description('Optional. Storage size in GiB.')
@minValue(32)
param storageSizeGB int = 32

@description('Optional. Keep backups in the paired region too (not available in every region).')
param geoRedundantBackup bool = true

@description('Optional. Zone-redundant high availability (a standby in another zone; not for Burstable).')
param zoneRedundantHa bool = false

@description('Optional. Whether the public endpoint accepts traffic (sign-in still needs an Entra token). Disabled needs private networking, which this template does not create.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

resource server 'Microsoft.DBforPostgreSQL/flexibleServers@2024-08-01' = {
  // checkov:skip=CKV2_AZURE_57:Flex Consumption apps without a virtual network reach the server over its public endpoint; private networking is per environment (docs/postgres.md).
  name: name
  location: location
  tags: tags
  sku: {
    name: skuName
    tier: skuTier
  }
  properties: {
    version: version
    authConfig: {
      activeDirectoryAuth: 'Enabled'
      passwordAuth: 'Disabled'
      tenantId: tenantId
    }
    storage: {
      storageSizeGB: storageSizeGB
      autoGrow: 'Enabled'
    }
    backup: {
      backupRetentionDays: 14
      geoRedundantBackup: geoRedundantBackup ? 'Enabled' : 'Disabled'
    }
    highAvailability: {
      mode: zoneRedundantHa ? 'ZoneRedundant' : 'Disabled'
    }
    network: {
      publicNetworkAccess: publicNetworkAccess
    }
  }
}

// TLS is required by default on Flexible Server; pinned so that nobody turns it off.
resource secureTransport 'Microsoft.DBforPostgreSQL/flexibleServers/configurations@2024-08-01' = {
  parent: server
  name: 'require_secure_transport'
  properties: {
    value: 'on'
    source: 'user-override'
  }
}

resource database 'Microsoft.DBforPostgreSQL/flexibleServers/databases@2024-08-01' = {
  parent: server
  name: databaseName
  properties: {
    charset: 'UTF8'
    collation: 'en_US.utf8'
  }
}

// The server's Entra administrator is an identity of its own, used only by the deployment
// script below: the app's identity never holds administrator rights.
resource dbAdmin 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-${name}-admin'
  location: location
  tags: tags
}

resource dbAdminPrincipal 'Microsoft.DBforPostgreSQL/flexibleServers/administrators@2024-08-01' = {
  parent: server
  name: dbAdmin.properties.principalId
  properties: {
    principalType: 'ServicePrincipal'
    principalName: dbAdmin.name
    tenantId: tenantId
  }
  dependsOn: [
    database
  ]
}

// The app identity as a plain role: Bicep registers Entra principals as administrators
// only, so the role is created in SQL, signed in as the administrator identity. The
// script's container reaches the server through the Azure-services rule below; with the
// public endpoint disabled, run postgres-app-role.sql from inside the network instead
// (docs/postgres.md).
resource appRole 'Microsoft.Resources/deploymentScripts@2023-08-01' = if (publicNetworkAccess == 'Enabled') {
  name: 'ds-${name}-app-role'
  location: location
  tags: tags
  kind: 'AzureCLI'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${dbAdmin.id}': {}
    }
  }
  properties: {
    azCliVersion: '2.61.0'
    retentionInterval: 'PT1H'
    cleanupPreference: 'OnSuccess'
    timeout: 'PT15M'
    scriptContent: loadTextContent('postgres-app-role.sh')
    environmentVariables: [
      { name: 'PGHOST', value: server.properties.fullyQualifiedDomainName }
      { name: 'PGDATABASE', value: database.name }
      { name: 'PGUSER', value: dbAdmin.name }
      { name: 'APP_ROLE', value: appPrincipalName }
      { name: 'APP_OBJECT_ID', value: appPrincipalId }
      { name: 'ROLE_SQL', value: loadTextContent('postgres-app-role.sql') }
    ]
  }
  dependsOn: [
    dbAdminPrincipal
    allowAzure
  ]
}

resource adminPrincipal 'Microsoft.DBforPostgreSQL/flexibleServers/administrators@2024-08-01' = if (!empty(adminPrincipalId)) {
  parent: server
  name: empty(adminPrincipalId) ? 'unused' : adminPrincipalId
  properties: {
    principalType: adminPrincipalType
    principalName: adminPrincipalName
    tenantId: tenantId
  }
  // One administrator change at a time: the service refuses concurrent ones.
  dependsOn: [
    dbAdminPrincipal
  ]
}

// Flex Consumption instances have no fixed outbound addresses: with the public endpoint,
// Azure-internal traffic is let through (sign-in still needs an Entra token of a role
// created above).
resource allowAzure 'Microsoft.DBforPostgreSQL/flexibleServers/firewallRules@2024-08-01' = if (publicNetworkAccess == 'Enabled') {
  parent: server
  name: 'AllowAzureServices'
  properties: {
    startIpAddress: '0.0.0.0'
    endIpAddress: '0.0.0.0'
  }
}

@description('Name of the server.')
output name string = server.name

@description('Host name clients connect to.')
output fqdn string = server.properties.fullyQualifiedDomainName

@description('Name of the database that holds the bus schema.')
output databaseName string = database.name

@description('Name of the identity that administers the server (for the deployment script; give it to nobody else).')
output adminIdentityName string = dbAdmin.name

@description('libpq URL of the database for BUS_POSTGRES_URL: the app identity as user, TLS required, no password (an Entra token is used).')
output url string = 'postgresql://${appPrincipalName}@${server.properties.fullyQualifiedDomainName}:5432/${database.name}?sslmode=require'
