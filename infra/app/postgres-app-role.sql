-- The app identity as a plain database role, not a server administrator.
--
-- Run by infra/app/postgres-app-role.sh as the template's database-administrator identity,
-- with psql variables app_role (the identity's name), app_object_id (its principal id) and
-- database. Safe to run again: every step is skipped when already done.
--
-- What the role gets, and why:
-- - a login mapped to the Entra identity (Azure's pgaadauth function), no admin rights;
-- - CONNECT on the bus database;
-- - USAGE and CREATE on the schema "bus", so that `bus provision` run by the app itself can
--   apply the library's migrations there (the tables it creates are its own);
-- - the same on a schema named after it: PostgreSQL looks there first ("$user" in the
--   default search_path), so the app's own tables, written through ctx.sql, land there.
-- It cannot create roles, databases or other schemas, nor use other schemas' tables.
-- Schemas are created by the administrator and granted, rather than handed over with
-- AUTHORIZATION, which would need the administrator to be a member of the app's role.

\set ON_ERROR_STOP on

SELECT pgaadauth_create_principal_with_oid(:'app_role', :'app_object_id', 'service', false, false)
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'app_role');

GRANT CONNECT ON DATABASE :"database" TO :"app_role";

CREATE SCHEMA IF NOT EXISTS bus;
GRANT USAGE, CREATE ON SCHEMA bus TO :"app_role";

CREATE SCHEMA IF NOT EXISTS :"app_role";
GRANT USAGE, CREATE ON SCHEMA :"app_role" TO :"app_role";
