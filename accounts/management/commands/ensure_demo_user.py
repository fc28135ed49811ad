from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from accounts.users import demo_user_ensure


class Command(BaseCommand):
    help = "Create (or reset) the demo account that `make run` prints. Not for production."

    def handle(self, *args: Any, **options: Any) -> None:
        username = settings.PARLEY_DEMO_USERNAME
        try:
            _, created = demo_user_ensure(username=username, password=settings.PARLEY_DEMO_PASSWORD)
        except ValidationError as error:
            raise CommandError(f"Demo user {username!r}: {' '.join(error.messages)}") from None
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} demo user {username!r}.")
