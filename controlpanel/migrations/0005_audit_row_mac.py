"""Each audit row's MAC under the chain's key (controlpanel.auditchain.keyed). The column
comes with a database default, so adding it updates no row (the append-only trigger stays
quiet) and rows written before it carry none."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("controlpanel", "0004_audit_chain_existing_rows_and_trigger"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="row_mac",
            field=models.CharField(blank=True, db_default="", editable=False, max_length=64),
        ),
    ]
