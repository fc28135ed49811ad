"""Imports and forks made before messages carried the `copied` mark still counted as
their owner's own usage (an import could bring any figures). Mark them now: a fork's
first `forked_at_seq` messages are copies; of an imported conversation, the messages
dated up to the import and every reply no run of this server wrote."""

from django.db import migrations
from django.db.models import Q


def mark(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    AuditEvent = apps.get_model("conversations", "AuditEvent")
    forks = Conversation.objects.filter(forked_at_seq__isnull=False)
    for conversation_id, at_seq in forks.values_list("pk", "forked_at_seq").iterator():
        Message.objects.filter(
            conversation_id=conversation_id, seq__lte=at_seq, copied=False
        ).update(copied=True)
    imports = AuditEvent.objects.filter(action="imported", conversation_id__isnull=False)
    for conversation_id, at in imports.values_list("conversation_id", "at").iterator():
        Message.objects.filter(conversation_id=conversation_id, copied=False).filter(
            Q(created_at__lte=at) | Q(role="assistant", run__isnull=True)
        ).update(copied=True)


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0008_scrub_conversation_log_titles"),
    ]

    operations = [migrations.RunPython(mark, migrations.RunPython.noop)]
