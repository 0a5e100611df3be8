"""Rows written before the chain join it in id order; then, on PostgreSQL, a trigger refuses
UPDATE and DELETE on the audit table, whoever asks (raw SQL included).

The hash comes from controlpanel.auditchain.canonical, a pure module with no Django or model
import: the row format is a contract that the verifier and this migration must share.
"""

from django.db import migrations

from controlpanel.auditchain.canonical import GENESIS, hash_of

CHUNK = 2000

TRIGGER_SQL = """
CREATE OR REPLACE FUNCTION controlpanel_auditevent_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER controlpanel_auditevent_append_only
    BEFORE UPDATE OR DELETE ON controlpanel_auditevent
    FOR EACH ROW EXECUTE FUNCTION controlpanel_auditevent_append_only();
"""
DROP_TRIGGER_SQL = """
DROP TRIGGER IF EXISTS controlpanel_auditevent_append_only ON controlpanel_auditevent;
DROP FUNCTION IF EXISTS controlpanel_auditevent_append_only();
"""


def chain_existing_rows(apps, schema_editor):
    event = apps.get_model("controlpanel", "AuditEvent")
    rows = event.objects.using(schema_editor.connection.alias).filter(seq__isnull=True)
    seq, prev, after = 0, GENESIS, 0
    while batch := list(rows.filter(id__gt=after).order_by("id")[:CHUNK]):
        for row in batch:
            seq += 1
            row.seq, row.prev_hash = seq, prev
            digest = hash_of(row)
            rows.filter(pk=row.pk).update(seq=seq, prev_hash=prev, row_hash=digest)
            prev, after = digest, row.pk


def unchain(apps, schema_editor):
    event = apps.get_model("controlpanel", "AuditEvent")
    event.objects.using(schema_editor.connection.alias).update(seq=None, prev_hash="", row_hash="")


def create_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER_SQL, params=None)


def drop_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_TRIGGER_SQL, params=None)


class Migration(migrations.Migration):
    dependencies = [("controlpanel", "0003_audit_hash_chain")]
    operations = [
        migrations.RunPython(chain_existing_rows, unchain),
        # RunPython rather than RunSQL: the trigger is PostgreSQL's; SQLite has none to add.
        migrations.RunPython(create_trigger, drop_trigger),
    ]
