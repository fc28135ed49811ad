"""Give every conversation its root branch and move every message and run onto it.

Not atomic: each batch commits on its own (see _branch_fill.py), so a database of millions
of messages keeps taking writes while this runs.
"""

from django.db import migrations

from conversations.migrations._branch_fill import fill


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("conversations", "0015_branches")]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop, elidable=False)]
