from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from accounts.models import User


class Command(BaseCommand):
    help = "Create (or reset) the demo account that `make run` prints. Not for production."

    def handle(self, *args: Any, **options: Any) -> None:
        username = settings.PARLEY_DEMO_USERNAME
        user, created = User.objects.get_or_create(username=username)
        # Staff and superuser so the demo login also opens the admin.
        user.is_staff = True
        user.is_superuser = True
        user.is_active = True
        user.set_password(settings.PARLEY_DEMO_PASSWORD)
        user.save()
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} demo user {username!r}.")
