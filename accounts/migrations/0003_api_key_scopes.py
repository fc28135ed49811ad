import django.db.models.deletion
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

import accounts.models

# Every scope there is when keys got scopes: keys made before keep the access they had.
FULL_ACCESS = ["chat", "keys", "read"]


def keys_keep_full_access(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ApiKey = apps.get_model("accounts", "ApiKey")
    ApiKey.objects.using(schema_editor.connection.alias).update(scopes=FULL_ACCESS)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_idempotency_record"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="created_by_key",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="created_keys",
                to="accounts.apikey",
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="scopes",
            field=models.JSONField(default=list, validators=[accounts.models.scopes_validate]),
        ),
        migrations.RunPython(keys_keep_full_access, migrations.RunPython.noop),
    ]
