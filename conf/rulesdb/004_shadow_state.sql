-- fraudlake rules database, schema version 4: the rule state SHADOW (a rule released in shadow mode).
-- Applied by `fraudlake rulesdb init|start|migrate` like every NNN_*.sql file; never edited once released.
--
-- rule_state stays an unconstrained text column (001_fraud_rules.sql): the lakehouse validates rules, one
-- validator in one place (rules_cdc/rule_model.py), and a value it refuses is quarantined with its reason while
-- the rule's last good version stays in force. So SHADOW needs no new constraint or column here, only its
-- documentation in the catalog, where analysts (`\d+ fraud_rules` in `fraudlake rulesdb psql`) read it:
--
--   ACTIVE  evaluated by the engine; its alerts are acted on (alerts topic, live counts).
--   PAUSED  not evaluated; its state (buckets) and cooldown memory are kept for a resume.
--   SHADOW  evaluated exactly like ACTIVE, on live traffic; its alerts are recorded in the alerts table marked
--           shadow and never published or counted as live. UPDATE ... SET rule_state = 'ACTIVE' promotes it,
--           'SHADOW' demotes an ACTIVE rule: both keep the rule's state and cooldown memory.
--
-- A comment is catalog metadata: no row changes, so Debezium streams no event for it.

COMMENT ON COLUMN fraud_rules.rule_state IS
    'ACTIVE (evaluated, acted on) | PAUSED (not evaluated, state kept) | SHADOW (evaluated, alerts recorded as shadow, never acted on)';
