-- fraudlake rules database, schema version 2: one login role per client, each with what it needs and no more.
-- Applied by `fraudlake rulesdb init|start|migrate` as the bootstrap superuser, in every database of the cluster
-- (roles are the cluster's, grants the database's). Passwords are not here: the migrating command sets each role's
-- from the environment or its secret file, as a SCRAM verifier (pipelines/local/rulesdb_secrets.py).
--
--   fraudlake_debezium  LOGIN REPLICATION; SELECT on fraud_rules (the snapshot). With publication.autocreate.mode
--                       = disabled Debezium only checks that the publication exists and streams through it:
--                       no ownership, no CREATE on the database (autocreate "filtered" would need to own the
--                       table, "all_tables" a superuser).
--   fraudlake_console   SELECT, INSERT, UPDATE, DELETE on fraud_rules: the analysts' edits. No DDL, no TRUNCATE.
--   fraudlake_reader    SELECT on fraud_rules and fraudlake_schema_version.
--
-- None is SUPERUSER, CREATEDB, CREATEROLE or BYPASSRLS, so none may COPY ... TO PROGRAM, read server files
-- (pg_read_file), create roles or change its own attributes.

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['fraudlake_debezium', 'fraudlake_console', 'fraudlake_reader'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('CREATE ROLE %I', name);
        END IF;
    END LOOP;
END
$$;

-- Stated in full even for a role that existed: a role created by hand with more rights loses them here.
ALTER ROLE fraudlake_debezium LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
ALTER ROLE fraudlake_console  LOGIN NOREPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
ALTER ROLE fraudlake_reader   LOGIN NOREPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;

-- This database: only the roles above may connect, and nobody but its owner may create temporary tables.
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO fraudlake_debezium, fraudlake_console, fraudlake_reader',
                   current_database());
END
$$;

-- PostgreSQL 15 already refuses CREATE in public to PUBLIC; older servers granted it: no table of a client's own.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO fraudlake_debezium, fraudlake_console, fraudlake_reader;

REVOKE ALL ON fraud_rules, fraudlake_schema_version FROM PUBLIC;
GRANT SELECT ON fraud_rules TO fraudlake_debezium, fraudlake_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON fraud_rules TO fraudlake_console;
GRANT SELECT ON fraudlake_schema_version TO fraudlake_reader;
