-- fraudlake rules database, schema version 8: distinct counts, the transaction's own value, relative limits.
-- Applied by `fraudlake rulesdb init|start|migrate` like every NNN_*.sql file; never edited once released.
--
-- The rule model (rules_cdc/rule_model.py; the contract in docs/engine.md) gained two aggregators and an optional
-- baseline; only the baseline needs a column:
--
--   aggregator_function_type  SUM | COUNT | AVG | MIN | MAX, and now
--                             COUNT_DISTINCT  distinct non-null values of aggregate_field_name (any type) in the
--                                             window, saturating at conf engine.distinct_cap; limit at most 10000;
--                                             takes no baseline
--                             VALUE           the evaluated transaction's own value of aggregate_field_name
--   baseline (jsonb, new)     NULL: limit_value is the limit. Else limit_value is a factor k of the key's own history:
--                             {"aggregatorFunctionType": "AVG"|"SUM"|"COUNT", "windowMinutes": W2 (>= window_minutes),
--                              "minCount": N (default 1), "perWindow": true|false (default false)}
--                             e.g. VALUE(paymentAmount) > 5 x the payer's AVG over 30 days, with at least 5 payments:
--                             baseline = '{"aggregatorFunctionType": "AVG", "windowMinutes": 43200, "minCount": 5}'
--
-- Values are still checked in the lakehouse, not here (001): a baseline the model refuses (an unknown aggregator, a
-- window shorter than the rule's, one on a COUNT_DISTINCT rule) is quarantined by the rules CDC job with its reason,
-- and the rule's last good version stays in force. So no CHECK constraint is added: one validator, in one place.
--
-- What else the column touches:
--   * Grants are table-wide (002, 007): every role that reads or writes fraud_rules reads or writes baseline; the
--     console still may not write fraud_rules. Nothing to grant, nothing widened.
--   * The publication fraudlake_rules has no column list (001): Debezium streams baseline with the row, as the
--     JSON text of the jsonb value (like filter); the model reads that text.
--   * The attribution triggers (005) name only the attribution columns: baseline is rule content, not attribution.
--   * Proposals (006) keep the proposed fraud_rules row as jsonb (proposed_rule): a proposal's baseline is its
--     "baseline" key. approve_rule_proposal() copied the rule's columns one by one and is replaced below so that it
--     copies baseline too (a proposal made before this version has no such key: NULL, a fixed limit).

ALTER TABLE fraud_rules ADD COLUMN baseline jsonb;

-- In the row, like filter (001): Debezium must never see '__debezium_unavailable_value'.
ALTER TABLE fraud_rules ALTER COLUMN baseline SET STORAGE PLAIN;

COMMENT ON COLUMN fraud_rules.aggregator_function_type IS
    'SUM | COUNT | AVG | MIN | MAX | COUNT_DISTINCT (distinct values of the field, any type, capped at engine.distinct_cap; no baseline) | VALUE (the transaction''s own value)';
COMMENT ON COLUMN fraud_rules.aggregate_field_name IS
    'A numeric transaction field, or COUNT (COUNT_FLINK); COUNT_DISTINCT counts a field of any type';
COMMENT ON COLUMN fraud_rules.limit_value IS
    'The limit; with a baseline, a factor of it (aggregate OP limit_value * baseline)';
COMMENT ON COLUMN fraud_rules.baseline IS
    'NULL: a fixed limit. Else {"aggregatorFunctionType": "AVG"|"SUM"|"COUNT", "windowMinutes": W2 >= window_minutes, "minCount": N, "perWindow": bool}: the key''s own history aggregate the limit multiplies';

-- As in 006/007, with baseline copied from the proposal. CREATE OR REPLACE keeps the owner (fraudlake_approver) and
-- the grants; SECURITY DEFINER and the search_path are part of the definition, so they are stated again, and the
-- owner and grants are restated too, so that this file alone says what the function is.
CREATE OR REPLACE FUNCTION approve_rule_proposal(p_id bigint, p_approver text, p_note text)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    p        rule_proposals;
    held_at  timestamptz;
    present  boolean;
    r        fraud_rules;
BEGIN
    SELECT * INTO p FROM rule_proposals WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'proposal % does not exist', p_id USING ERRCODE = 'no_data_found';
    END IF;
    IF p.status <> 'pending' THEN
        RAISE EXCEPTION 'proposal % is already %: a decision is final', p_id, p.status
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT updated_at, true INTO held_at, present FROM fraud_rules WHERE rule_id = p.rule_id FOR UPDATE;
    IF held_at IS DISTINCT FROM p.base_updated_at THEN
        RAISE EXCEPTION 'proposal % is stale: rule % changed since it was proposed (%, now %)', p_id, p.rule_id,
            coalesce(p.base_updated_at::text, 'absent'), coalesce(held_at::text, 'absent')
            USING ERRCODE = 'serialization_failure';
    END IF;
    -- The decision first: its CHECK (approver <> author) refuses a self-approval before anything is written.
    UPDATE rule_proposals SET status = 'approved', decided_by = p_approver, decided_at = now(),
                              decision_note = p_note
     WHERE id = p_id;
    IF p.kind IN ('create', 'update') THEN
        r := jsonb_populate_record(NULL::fraud_rules, p.proposed_rule);
        IF r.rule_id IS DISTINCT FROM p.rule_id THEN
            RAISE EXCEPTION 'proposal % names rule % but carries rule %', p_id, p.rule_id, r.rule_id
                USING ERRCODE = 'check_violation';
        END IF;
        INSERT INTO fraud_rules (rule_id, rule_name, rule_state, grouping_key_names, aggregate_field_name,
                                 aggregator_function_type, limit_operator_type, limit_value, window_minutes, filter,
                                 cooldown_minutes, disabled, baseline, changed_by, approved_by, change_reason,
                                 proposal_id)
        VALUES (r.rule_id, r.rule_name, coalesce(r.rule_state, 'ACTIVE'), coalesce(r.grouping_key_names, '{}'),
                r.aggregate_field_name, r.aggregator_function_type, r.limit_operator_type, r.limit_value,
                r.window_minutes, r.filter, r.cooldown_minutes, coalesce(r.disabled, false), r.baseline,
                p.proposed_by, p_approver, p.reason, p.id)
        ON CONFLICT (rule_id) DO UPDATE SET
            rule_name = excluded.rule_name, rule_state = excluded.rule_state,
            grouping_key_names = excluded.grouping_key_names, aggregate_field_name = excluded.aggregate_field_name,
            aggregator_function_type = excluded.aggregator_function_type,
            limit_operator_type = excluded.limit_operator_type, limit_value = excluded.limit_value,
            window_minutes = excluded.window_minutes, filter = excluded.filter,
            cooldown_minutes = excluded.cooldown_minutes, disabled = excluded.disabled, baseline = excluded.baseline,
            changed_by = excluded.changed_by, approved_by = excluded.approved_by,
            change_reason = excluded.change_reason, proposal_id = excluded.proposal_id;
        RETURN format('%s rule %s', CASE WHEN p.kind = 'create' THEN 'created' ELSE 'updated' END, p.rule_id);
    END IF;
    IF NOT coalesce(present, false) THEN
        RAISE EXCEPTION 'proposal % is stale: rule % is not in fraud_rules', p_id, p.rule_id
            USING ERRCODE = 'serialization_failure';
    END IF;
    IF p.kind IN ('pause', 'resume') THEN
        UPDATE fraud_rules SET rule_state = CASE WHEN p.kind = 'pause' THEN 'PAUSED' ELSE 'ACTIVE' END,
                               changed_by = p.proposed_by, approved_by = p_approver, change_reason = p.reason,
                               proposal_id = p.id
         WHERE rule_id = p.rule_id;
        RETURN format('%s rule %s', CASE WHEN p.kind = 'pause' THEN 'paused' ELSE 'resumed' END, p.rule_id);
    END IF;
    -- A delete event carries only the key (REPLICA IDENTITY DEFAULT): the attribution travels on an update of
    -- the attribution columns alone, in the same transaction, just before the delete.
    UPDATE fraud_rules SET changed_by = p.proposed_by, approved_by = p_approver, change_reason = p.reason,
                           proposal_id = p.id
     WHERE rule_id = p.rule_id;
    DELETE FROM fraud_rules WHERE rule_id = p.rule_id;
    RETURN format('deleted rule %s', p.rule_id);
END
$$;

ALTER FUNCTION approve_rule_proposal(bigint, text, text) OWNER TO fraudlake_approver;
REVOKE ALL ON FUNCTION approve_rule_proposal(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION approve_rule_proposal(bigint, text, text) TO fraudlake_console;
