-- fraudlake rules database, schema version 1: the analysts' table of fraud rules and its publication.
-- Applied once by `fraudlake rulesdb start` (recorded in fraudlake_schema_version); later changes are new files
-- 002_*.sql, ... never edits of this one.
--
-- The columns are the snake_case names the rule model accepts (rules_cdc/rule_model.py). Values are checked in
-- the lakehouse, not here: a row the database accepts but the model rejects (a window of 0, an unknown aggregate,
-- a field the transaction schema lacks) is quarantined by the rules CDC job with its reason, and the rule's last
-- good version stays in force. One validator, in one place.

CREATE TABLE fraud_rules (
    rule_id                  bigint      PRIMARY KEY,
    rule_name                text,
    rule_state               text        NOT NULL DEFAULT 'ACTIVE',      -- ACTIVE | PAUSED
    grouping_key_names       text[]      NOT NULL DEFAULT '{}',          -- transaction fields, e.g. {payerId}
    aggregate_field_name     text        NOT NULL,                       -- a numeric field, or COUNT
    aggregator_function_type text        NOT NULL,                       -- SUM | COUNT | AVG | MIN | MAX
    limit_operator_type      text        NOT NULL,                       -- GREATER | GREATER_EQUAL | LESS | ...
    limit_value              numeric     NOT NULL,
    window_minutes           integer     NOT NULL,
    filter                   jsonb,                                          -- the filter grammar, or NULL
    cooldown_minutes         integer,
    disabled                 boolean     NOT NULL DEFAULT false,         -- true: a DISABLED tombstone
    updated_at               timestamptz NOT NULL DEFAULT now()          -- bookkeeping; not part of the rule
);

COMMENT ON TABLE fraud_rules IS 'Fraud rules; every change reaches the lakehouse only through Debezium CDC.';

-- Keep every value in the row itself, never in a TOAST table. Debezium cannot read an unchanged value stored
-- out of line: with REPLICA IDENTITY DEFAULT an UPDATE would carry '__debezium_unavailable_value' for it. PLAIN
-- storage makes such a row impossible (PostgreSQL refuses a row over ~8 kB instead), so DEFAULT and FULL give
-- the same events.
ALTER TABLE fraud_rules
    ALTER COLUMN rule_name SET STORAGE PLAIN,
    ALTER COLUMN grouping_key_names SET STORAGE PLAIN,
    ALTER COLUMN filter SET STORAGE PLAIN;

CREATE FUNCTION fraud_rules_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER fraud_rules_touch BEFORE UPDATE ON fraud_rules FOR EACH ROW EXECUTE FUNCTION fraud_rules_touch();

-- What Debezium's pgoutput stream reads (its connector config sets publication.autocreate.mode=disabled):
-- inserts, updates, deletes and truncates of this table only.
CREATE PUBLICATION fraudlake_rules FOR TABLE fraud_rules WITH (publish = 'insert, update, delete, truncate');
