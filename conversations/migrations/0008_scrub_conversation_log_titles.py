"""Admin log entries written before conversations stopped carrying their titles in their
label kept those titles (the first words of the first message) in `object_repr`, shown
as "Recent actions" to every staff member. Rewrite them to the neutral label."""

from django.db import migrations


def scrub(apps, schema_editor):
    LogEntry = apps.get_model("admin", "LogEntry")
    ContentType = apps.get_model("contenttypes", "ContentType")
    kind = ContentType.objects.filter(app_label="conversations", model="conversation").first()
    if kind is None:
        return
    entries = LogEntry.objects.filter(content_type=kind).only("pk", "object_id")
    for entry in entries.iterator():
        LogEntry.objects.filter(pk=entry.pk).update(
            object_repr=f"untitled conversation · {str(entry.object_id)[:8]}"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0007_message_copied"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(scrub, migrations.RunPython.noop)]
