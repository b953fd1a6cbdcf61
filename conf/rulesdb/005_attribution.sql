-- fraudlake rules database, schema version 5: who changed a rule, who approved it, and why.
-- Applied by `fraudlake rulesdb init|start|migrate` like every NNN_*.sql file; never edited once released.
--
-- Four ordinary columns of fraud_rules, so Debezium streams them with the row and the rules CDC job writes them
-- to the Delta change log rule_changes (changedBy, approvedBy, changeReason, proposalId). They are not rule
-- content: the lakehouse strips them before validating the rule (rules_cdc/parse_events.py DATABASE_COLUMNS), so
-- a change of the reason alone changes no rule and rebuilds no engine state.
--
--   changed_by     who wrote this version (a proposal's author; the CLI's --as-user or OS user); NULL: unattributed
--   approved_by    who approved it (a proposal's approver, never its author); NULL: no second person
--   change_reason  why, as its author wrote it
--   proposal_id    the rule_proposals row it came from (006_rule_proposals.sql); NULL for a direct edit
--
-- An edit typed in SQL that does not name these columns must not inherit the previous version's author: the
-- triggers below clear, on every UPDATE, each of them its SET list does not name (PostgreSQL's UPDATE OF fires when
-- a column is named, even with its old value, so naming a column is the one way to keep or set it). An INSERT
-- that does not give them leaves them NULL. Either way the change shows as "unattributed" in `rules history`.

ALTER TABLE fraud_rules
    ADD COLUMN changed_by    text,
    ADD COLUMN approved_by   text,
    ADD COLUMN change_reason text,
    ADD COLUMN proposal_id   bigint;

-- In the row, like the other text columns (001): Debezium must never see '__debezium_unavailable_value'.
ALTER TABLE fraud_rules
    ALTER COLUMN changed_by SET STORAGE PLAIN,
    ALTER COLUMN approved_by SET STORAGE PLAIN,
    ALTER COLUMN change_reason SET STORAGE PLAIN;

-- Bounded: a reason is a sentence, a name a login; the whole row must stay under ~8 kB (PLAIN storage).
ALTER TABLE fraud_rules
    ADD CONSTRAINT fraud_rules_changed_by_length CHECK (length(changed_by) BETWEEN 1 AND 128),
    ADD CONSTRAINT fraud_rules_approved_by_length CHECK (length(approved_by) BETWEEN 1 AND 128),
    ADD CONSTRAINT fraud_rules_change_reason_length CHECK (length(change_reason) <= 1000),
    ADD CONSTRAINT fraud_rules_four_eyes CHECK (approved_by IS NULL OR approved_by <> changed_by);

-- Per row, in name order: a _1named_<column> trigger fires only when the statement names that column (it marks it
-- in a transaction-local setting), then _2clear on every update clears each column not marked, and resets the
-- marks for the next row. So a statement that names only change_reason keeps the reason it sets and clears the
-- approver: a reason fixed by its author was not approved by anyone.
CREATE FUNCTION fraud_rules_attribution_named() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('fraudlake.named_' || TG_ARGV[0], 'on', true);
    RETURN NEW;
END
$$;

CREATE FUNCTION fraud_rules_attribution_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('fraudlake.named_changed_by', true), '') <> 'on' THEN
        NEW.changed_by := NULL;
    END IF;
    IF coalesce(current_setting('fraudlake.named_approved_by', true), '') <> 'on' THEN
        NEW.approved_by := NULL;
    END IF;
    IF coalesce(current_setting('fraudlake.named_change_reason', true), '') <> 'on' THEN
        NEW.change_reason := NULL;
    END IF;
    IF coalesce(current_setting('fraudlake.named_proposal_id', true), '') <> 'on' THEN
        NEW.proposal_id := NULL;
    END IF;
    PERFORM set_config('fraudlake.named_changed_by', '', true), set_config('fraudlake.named_approved_by', '', true),
            set_config('fraudlake.named_change_reason', '', true), set_config('fraudlake.named_proposal_id', '', true);
    RETURN NEW;
END
$$;

CREATE TRIGGER fraud_rules_attribution_1named_approved_by BEFORE UPDATE OF approved_by ON fraud_rules
    FOR EACH ROW EXECUTE FUNCTION fraud_rules_attribution_named('approved_by');
CREATE TRIGGER fraud_rules_attribution_1named_change_reason BEFORE UPDATE OF change_reason ON fraud_rules
    FOR EACH ROW EXECUTE FUNCTION fraud_rules_attribution_named('change_reason');
CREATE TRIGGER fraud_rules_attribution_1named_changed_by BEFORE UPDATE OF changed_by ON fraud_rules
    FOR EACH ROW EXECUTE FUNCTION fraud_rules_attribution_named('changed_by');
CREATE TRIGGER fraud_rules_attribution_1named_proposal_id BEFORE UPDATE OF proposal_id ON fraud_rules
    FOR EACH ROW EXECUTE FUNCTION fraud_rules_attribution_named('proposal_id');
CREATE TRIGGER fraud_rules_attribution_2clear BEFORE UPDATE ON fraud_rules
    FOR EACH ROW EXECUTE FUNCTION fraud_rules_attribution_clear();

COMMENT ON COLUMN fraud_rules.changed_by IS 'Who wrote this version; NULL: unattributed (a SQL edit that did not say)';
COMMENT ON COLUMN fraud_rules.approved_by IS 'Who approved this version (never its author); NULL: no approval';
COMMENT ON COLUMN fraud_rules.change_reason IS 'Why, in the author''s words';
COMMENT ON COLUMN fraud_rules.proposal_id IS 'The rule_proposals row this version came from; NULL: a direct edit';
