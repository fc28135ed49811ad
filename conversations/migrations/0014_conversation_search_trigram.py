"""Trigram indexes for the admin's conversation search, on PostgreSQL only.

The search matches any part of a title and of an owner's username, case-insensitively
(Django's `icontains`, which PostgreSQL runs as `UPPER(column::text) LIKE UPPER(...)`),
and an owner's whole email in any case. Without an index that reads every conversation's
title on each search; a GIN index of `pg_trgm` trigrams over that same expression answers
it from the index instead. The owner indexes live on the accounts table but serve this
search only, so they are made here.

`pg_trgm` is a trusted extension (PostgreSQL 13+): a database owner may create it without
being a superuser. The indexes are built CONCURRENTLY (the migration is not atomic), so a
large table keeps taking writes meanwhile. SQLite has no trigrams: nothing happens there,
and the search is a plain substring match.
"""

from django.conf import settings
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations

# (index, model): each over UPPER(<column>::text), the expression `icontains` compares.
INDEXES = [
    ("conversation_title_trgm", ("conversations", "Conversation"), "title"),
    ("user_username_trgm", tuple(settings.AUTH_USER_MODEL.split(".")), "username"),
    # Owners are also found by their whole email in any case (`iexact`): since
    # PostgreSQL 14 a trigram index answers equality too.
    ("user_email_trgm", tuple(settings.AUTH_USER_MODEL.split(".")), "email"),
]


def _tables(apps):
    for name, (app_label, model_name), column in INDEXES:
        yield name, apps.get_model(app_label, model_name)._meta.db_table, column


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for name, table, column in _tables(apps):
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(name)} ON {quote(table)} "
            f"USING gin (UPPER({quote(column)}::text) gin_trgm_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _, _ in _tables(apps):
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("conversations", "0013_usage_day_fill"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Does nothing on other databases.
        TrigramExtension(),
        migrations.RunPython(create, drop, elidable=False),
    ]
