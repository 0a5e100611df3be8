"""`retired` and `spans_hosts` become columns (they were the plan JSON's `retired` and
`multi_host` keys); the data step fills them from rows written before."""

from django.db import migrations, models


def fill_from_plan(apps, schema_editor):
    deployment = apps.get_model("deployments", "Deployment")
    deployment.objects.filter(plan__multi_host=True).update(spans_hosts=True)
    deployment.objects.filter(plan__retired=True).update(retired=True)


def back_to_plan(apps, schema_editor):
    deployment = apps.get_model("deployments", "Deployment")
    for row in deployment.objects.filter(models.Q(spans_hosts=True) | models.Q(retired=True)):
        row.plan = {**row.plan, "multi_host": row.spans_hosts, "retired": row.retired}
        row.save(update_fields=["plan"])


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0009_model_weights_on_hosts"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="spans_hosts",
            field=models.BooleanField(
                default=False,
                help_text="one replica over several hosts on a Ray cluster of its own",
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="retired",
            field=models.BooleanField(
                default=False, help_text="stopped by a scale-down: no longer one of the replicas"
            ),
        ),
        migrations.AlterField(
            model_name="deployment",
            name="plan",
            field=models.JSONField(default=dict, help_text="the PlanSnapshot's JSON (snapshot.py)"),
        ),
        migrations.RunPython(fill_from_plan, back_to_plan),
    ]
