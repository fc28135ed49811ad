"""Import a ChatGPT data export (conversations.json) as a user's conversations.

Each conversation is checked and stored on its own, all or nothing, so a bad one is
reported and the rest still come in. A progress bar counts the conversations done.
"""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from accounts.models import User
from conversations import services
from conversations.errors import ValidationFailed


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="the user who will own the conversations")
        parser.add_argument("file", type=Path, help="conversations.json from the export")
        parser.add_argument(
            "--max-bytes",
            type=int,
            default=None,
            help="largest file accepted (default PARLEY_IMPORT_MAX_BYTES); exports of "
            "long-time users are often larger",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        owner = User.objects.filter(username=options["username"]).first()
        if owner is None:
            raise CommandError(f"No user named {options['username']!r}.")
        try:
            document = options["file"].read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {options['file']}: {exc.strerror}.") from None
        bar: tqdm[Any] | None = None

        def start(total: int) -> None:
            nonlocal bar
            bar = tqdm(total=total, unit="conv", file=self.stderr, disable=total == 0)

        def advance(count: int) -> None:
            if bar is not None:
                bar.update(count)

        try:
            report = services.conversations_import_chatgpt(
                owner=owner,
                document=document,
                max_bytes=options["max_bytes"],
                on_start=start,
                progress=advance,
            )
        except ValidationFailed as exc:
            raise CommandError(f"Not a readable ChatGPT export: {exc}") from None
        finally:
            if bar is not None:
                bar.close()
        for result in report.results:
            if result.error is not None:
                title = result.title or "untitled"
                self.stdout.write(f"#{result.index} {title!r}: {result.error['message']}")
        self.stdout.write(report.summary())
        if report.results and not report.imported:
            raise CommandError("Nothing was imported.")
