-- fraudlake rules database, schema version 7: four eyes enforced by the database, not only by the console.
-- Applied by `fraudlake rulesdb init|start|migrate` like every NNN_*.sql file; never edited once released.
--
--   fraudlake_operator  LOGIN; SELECT, INSERT, UPDATE, DELETE on fraud_rules: the operators' direct edits (the
--                       CLI's `rules upsert|pause|resume|delete`, notebook 01 with publish_to=rulesdb,
--                       `rulesdb psql --as operator`, the chaos campaign's SQL edits). The break-glass path: such
--                       an edit is unattributed (changed_by, approved_by NULL; "unattributed" in `rules history`)
--                       unless it sets changed_by / change_reason itself, as the CLI does. Nothing on rule_proposals.
--   fraudlake_approver  NOLOGIN: owns approve_rule_proposal(), now SECURITY DEFINER, and holds what approval
--                       writes: fraud_rules, and the decision columns of rule_proposals. Nobody is a member of it
--                       and nobody can log in as it: its rights are reachable only through that one function.
--   fraudlake_console   loses INSERT, UPDATE and DELETE on fraud_rules: it may read rules, propose, reject,
--                       withdraw, and approve only through approve_rule_proposal() (which keeps author <> approver,
--                       the base check and the attribution). An "approved" status can no longer be written by hand
--                       either: trigger rule_proposals_approved_by_function refuses it outside the function.
--
-- The function's search_path was already fixed (006: public, pg_temp); it is set again here with pg_catalog first,
-- so that, now running with its owner's rights, no object of a caller's (a temporary table or function: the
-- clients may not create any, 002) can stand in for one it uses.

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['fraudlake_operator', 'fraudlake_approver'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('CREATE ROLE %I', name);
        END IF;
    END LOOP;
END
$$;

-- Stated in full even for a role that existed (as in 002): a role created by hand with more rights loses them.
ALTER ROLE fraudlake_operator LOGIN   NOREPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
ALTER ROLE fraudlake_approver NOLOGIN NOREPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
ALTER ROLE fraudlake_approver PASSWORD NULL;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO fraudlake_operator', current_database());
END
$$;
GRANT USAGE ON SCHEMA public TO fraudlake_operator, fraudlake_approver;

GRANT SELECT, INSERT, UPDATE, DELETE ON fraud_rules TO fraudlake_operator, fraudlake_approver;
-- FOR UPDATE of the proposal needs UPDATE of one column; the decision columns are all approval writes.
GRANT SELECT ON rule_proposals TO fraudlake_approver;
GRANT UPDATE (status, decided_by, decided_at, decision_note) ON rule_proposals TO fraudlake_approver;

ALTER FUNCTION approve_rule_proposal(bigint, text, text) OWNER TO fraudlake_approver;
ALTER FUNCTION approve_rule_proposal(bigint, text, text) SECURITY DEFINER;
ALTER FUNCTION approve_rule_proposal(bigint, text, text) SET search_path = pg_catalog, public, pg_temp;
REVOKE ALL ON FUNCTION approve_rule_proposal(bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION approve_rule_proposal(bigint, text, text) TO fraudlake_console;

-- Without this the console could still mark a proposal approved by an UPDATE of status (its right to reject and
-- withdraw) without applying it: an approval in the record that never reached fraud_rules. Inside the SECURITY
-- DEFINER function current_user is the function's owner; anywhere else it is the caller.
CREATE FUNCTION rule_proposals_approved_by_function() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NEW.status = 'approved' AND current_user <> 'fraudlake_approver' THEN
        RAISE EXCEPTION 'proposal %: only approve_rule_proposal() approves (it applies the change)', NEW.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER rule_proposals_approved_by_function BEFORE INSERT OR UPDATE OF status ON rule_proposals
    FOR EACH ROW EXECUTE FUNCTION rule_proposals_approved_by_function();

-- Four eyes on fraud_rules is now the database's: the console proposes, only the function applies.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON fraud_rules FROM fraudlake_console;
