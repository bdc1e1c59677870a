#!/bin/bash
# Deployment script of infra/app/postgres.bicep: makes the app identity a plain database
# role of the Flexible Server (infra/app/postgres-app-role.sql), signed in as the template's
# database-administrator identity with an Entra token. Runs in the Azure CLI container.
# Environment: PGHOST, PGDATABASE, PGUSER (the administrator identity's name), APP_ROLE,
# APP_OBJECT_ID, ROLE_SQL (the SQL file's text).
set -euo pipefail

if ! command -v psql >/dev/null; then
  # The Azure CLI image is Azure Linux (tdnf); older images were Alpine (apk).
  tdnf install -y postgresql >/dev/null 2>&1 || apk add --no-cache postgresql-client >/dev/null
fi

# The script service has already signed the CLI in as the script's identity.
PGPASSWORD="$(az account get-access-token --resource-type oss-rdbms --query accessToken -o tsv)"
export PGPASSWORD PGSSLMODE=require

printf '%s\n' "$ROLE_SQL" > /tmp/app-role.sql
psql --no-psqlrc --quiet \
  -v app_role="$APP_ROLE" -v app_object_id="$APP_OBJECT_ID" -v database="$PGDATABASE" \
  -f /tmp/app-role.sql

printf '{"appRole": "%s"}' "$APP_ROLE" > "$AZ_SCRIPTS_OUTPUT_PATH"
