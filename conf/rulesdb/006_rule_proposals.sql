-- fraudlake rules database, schema version 6: four eyes. An analyst's create, edit, pause, resume or delete is a
-- proposal until another person approves it; approval applies it to fraud_rules in the same transaction.
-- Applied by `fraudlake rulesdb init|start|migrate` like every NNN_*.sql file; never edited once released.
--
-- The database enforces what must hold whoever calls it (the console, the CLI, psql as fraudlake_console):
--   * the approver (or rejecter) is not the author: CHECK rule_proposals_four_eyes, and fraud_rules_four_eyes (005);
--   * a decision is final: a decided proposal cannot be changed again (trigger rule_proposals_final);
--   * a proposal made against a rule that changed since is refused at approval: base_updated_at is the rule's
--     updated_at when it was proposed (NULL: the rule did not exist), compared under the rule's row lock;
--   * approval is one transaction: the proposal row locked (FOR UPDATE), decided, and the rule written with
--     changed_by = author, approved_by = approver, change_reason = reason, proposal_id = id.
-- Who is a person, and who may approve, is the application's (the console's signed-in user and role, the CLI's
-- --as-user): the database sees one login, fraudlake_console, and trusts the names it is given.
--
-- Least privilege: approve_rule_proposal is SECURITY INVOKER (the default), so it runs with the caller's rights;
-- fraudlake_console needs nothing beyond what it had on fraud_rules, plus INSERT and SELECT on rule_proposals and
-- UPDATE of the four decision columns only (a proposal's content can never be rewritten). fraudlake_reader reads.

CREATE TABLE rule_proposals (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text        NOT NULL CHECK (kind IN ('create', 'update', 'pause', 'resume', 'delete')),
    rule_id         bigint      NOT NULL CHECK (rule_id >= 0),
    proposed_rule   jsonb,      -- the fraud_rules row (snake_case columns) for create/update; NULL otherwise
    base_updated_at timestamptz,  -- fraud_rules.updated_at when proposed; NULL: the rule did not exist
    proposed_by     text        NOT NULL CHECK (length(proposed_by) BETWEEN 1 AND 128),
    reason          text        NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 1000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'approved', 'rejected', 'withdrawn')),
    decided_by      text        CHECK (length(decided_by) BETWEEN 1 AND 128),
    decided_at      timestamptz,
    decision_note   text        CHECK (length(decision_note) <= 1000),
    CONSTRAINT rule_proposals_rule_content CHECK ((kind IN ('create', 'update')) = (proposed_rule IS NOT NULL)),
    CONSTRAINT rule_proposals_decided CHECK ((status = 'pending') = (decided_by IS NULL AND decided_at IS NULL)),
    CONSTRAINT rule_proposals_four_eyes CHECK (status NOT IN ('approved', 'rejected') OR decided_by <> proposed_by),
    CONSTRAINT rule_proposals_withdrawn_by_author CHECK (status <> 'withdrawn' OR decided_by = proposed_by)
);

CREATE INDEX rule_proposals_pending ON rule_proposals (created_at) WHERE status = 'pending';

COMMENT ON TABLE rule_proposals IS
    'Four eyes: rule changes proposed by one person, approved (applied to fraud_rules) or rejected by another.';

CREATE FUNCTION rule_proposals_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'pending' THEN
        RAISE EXCEPTION 'proposal % is already %: a decision is final', OLD.id, OLD.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER rule_proposals_final BEFORE UPDATE ON rule_proposals
    FOR EACH ROW EXECUTE FUNCTION rule_proposals_final();

-- Approve proposal p_id as p_approver: lock it, refuse it unless pending, by another person and still based on the
-- rule as it is, record the decision, apply the change. Returns what it did, e.g. 'updated rule 7'.
CREATE FUNCTION approve_rule_proposal(p_id bigint, p_approver text, p_note text)
RETURNS text LANGUAGE plpgsql SET search_path = public, pg_temp AS $$
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
                                 cooldown_minutes, disabled, changed_by, approved_by, change_reason, proposal_id)
        VALUES (r.rule_id, r.rule_name, coalesce(r.rule_state, 'ACTIVE'), coalesce(r.grouping_key_names, '{}'),
                r.aggregate_field_name, r.aggregator_function_type, r.limit_operator_type, r.limit_value,
                r.window_minutes, r.filter, r.cooldown_minutes, coalesce(r.disabled, false),
                p.proposed_by, p_approver, p.reason, p.id)
        ON CONFLICT (rule_id) DO UPDATE SET
            rule_name = excluded.rule_name, rule_state = excluded.rule_state,
            grouping_key_names = excluded.grouping_key_names, aggregate_field_name = excluded.aggregate_field_name,
            aggregator_function_type = excluded.aggregator_function_type,
            limit_operator_type = excluded.limit_operator_type, limit_value = excluded.limit_value,
            window_minutes = excluded.window_minutes, filter = excluded.filter,
            cooldown_minutes = excluded.cooldown_minutes, disabled = excluded.disabled,
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

REVOKE ALL ON rule_proposals FROM PUBLIC;
REVOKE ALL ON FUNCTION approve_rule_proposal(bigint, text, text) FROM PUBLIC;
GRANT SELECT, INSERT ON rule_proposals TO fraudlake_console;
GRANT UPDATE (status, decided_by, decided_at, decision_note) ON rule_proposals TO fraudlake_console;
GRANT EXECUTE ON FUNCTION approve_rule_proposal(bigint, text, text) TO fraudlake_console;
GRANT SELECT ON rule_proposals TO fraudlake_reader;
