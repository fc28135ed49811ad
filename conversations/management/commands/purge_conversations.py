"""Delete conversations with no activity for PARLEY_RETENTION_DAYS (or --days), audited."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from conversations import services


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be deleted; change nothing"
        )
        parser.add_argument(
            "--days", type=int, default=None, help="override PARLEY_RETENTION_DAYS for this run"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = settings.PARLEY_RETENTION_DAYS if options["days"] is None else options["days"]
        if days <= 0:
            raise CommandError(
                "Retention is off (PARLEY_RETENTION_DAYS is 0); pass --days N to purge anyway."
            )
        bar: tqdm[Any] | None = None

        def start(total: int) -> None:
            nonlocal bar
            if not options["dry_run"]:
                bar = tqdm(total=total, unit="conv", file=self.stderr, disable=total == 0)

        def advance(count: int) -> None:
            if bar is not None:
                bar.update(count)

        try:
            result = services.conversations_purge(
                days=days, dry_run=options["dry_run"], on_start=start, progress=advance
            )
        finally:
            if bar is not None:
                bar.close()
        cutoff = f"{result.cutoff:%Y-%m-%d %H:%M} UTC" if result.cutoff else "-"
        verb = "Would delete" if options["dry_run"] else "Deleted"
        self.stdout.write(
            f"{verb} {result.conversations} conversation(s) with {result.messages} message(s) "
            f"inactive since before {cutoff}."
        )
