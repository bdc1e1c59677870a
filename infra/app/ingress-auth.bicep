// Optional Microsoft Entra ID authentication (App Service authentication) in
// front of every HTTP route of the Function App, for callers that move money.
//
// The platform checks the caller's bearer token (issuer, audience, calling
// application) before a request reaches the Functions host, which then still
// checks the function key: a caller needs both. Queue triggers do not pass
// through it. main.bicep deploys this module only when entraAuthEnabled is true.

@description('Required. Name of the existing Function App to protect.')
param functionAppName string

@description('Optional. Tenant that issues the accepted tokens; defaults to the tenant of the subscription.')
param tenantId string = subscription().tenantId

@description('Required. Application (client) id of the app registration that represents the ingress.')
@minLength(36)
@maxLength(36)
param clientId string

@description('Optional. Accepted token audiences (aud claim); empty means the ingress registration itself: api://<clientId> (v1.0 tokens) and <clientId> (v2.0 tokens).')
param allowedAudiences array = []

@description('Optional. Application (client) ids of the callers allowed to send; empty lets any client that obtains a token for the audience call.')
param allowedClientApplications array = []

// A token requested for api://<clientId>/.default carries that URI as its
// audience when it is a v1.0 token and the bare client id when it is v2.0.
var audiences = empty(allowedAudiences) ? [
  'api://${clientId}'
  clientId
] : allowedAudiences

resource functionApp 'Microsoft.Web/sites@2024-04-01' existing = {
  name: functionAppName
}

resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = {
  // checkov:skip=CKV_AZURE_13:The check reads properties.enabled of the legacy authsettings (V1) section. This is authsettingsV2, switched on by platform.enabled with requireAuthentication and a 401 for any request without a valid token.
  // checkov:skip=CKV_AZURE_63:HTTP logging is a property of the web config section, not of authsettingsV2; the app logs requests to Application Insights.
  // checkov:skip=CKV_AZURE_65:Detailed error messages are a property of the web config section, not of authsettingsV2; errors go to Application Insights.
  // checkov:skip=CKV_AZURE_66:Failed request tracing is a property of the web config section, not of authsettingsV2; failures go to Application Insights.
  // checkov:skip=CKV_AZURE_80:The .NET Framework version is a property of the web config section, not of authsettingsV2; this app runs Python.
  // checkov:skip=CKV_AZURE_88:Azure Files mounts belong to the azurestorageaccounts config section, not to authsettingsV2; the app mounts no file share.
  // checkov:skip=CKV_AZURE_222:Public network access is a property of the site (skipped there with its reason), not of its authsettingsV2 section, which is what narrows who may call.
  parent: functionApp
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: clientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: audiences
          defaultAuthorizationPolicy: {
            allowedApplications: allowedClientApplications
          }
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}

@description('Token audiences the ingress accepts.')
output allowedAudiences array = audiences
