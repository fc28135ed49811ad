"""Encrypt every stored secret (tool servers' shared secrets, users' tokens for them) again
with the newest key of PARLEY_SECRET_KEYS.

Rotating a key: put the new key first in PARLEY_SECRET_KEYS (keeping the old ones after
it), restart, run this, then drop the old keys. Secrets no configured key opens are
listed by server and user, never by value, and the command exits with an error: keep
the old keys until they are dealt with (set again, or removed).
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from conversations import services


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args: Any, **options: Any) -> None:
        total = services.secrets_count()
        with tqdm(total=total, unit="secret", file=self.stderr, disable=total == 0) as bar:
            result = services.secrets_rotate(progress=bar.update)
        self.stdout.write(f"Encrypted {result.rotated} secret(s) again with the newest key.")
        if result.unreadable:
            for which in result.unreadable:
                self.stderr.write(f"No configured key opens {which}.")
            raise CommandError(
                f"{len(result.unreadable)} secret(s) could not be opened; keep the old keys "
                "until they are set again or removed."
            )
