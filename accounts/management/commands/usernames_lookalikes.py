"""List the accounts whose usernames look alike: names that fold to one identity (any
case, NFKC, Unicode's confusables) but were made before such names were refused, or that
newer confusables data folds together. Changes nothing; a moderator decides which to
rename. Names outside ASCII are shown escaped, since they look like the others."""

from typing import Any

from django.core.management.base import BaseCommand
from tqdm import tqdm

from accounts.models import User
from accounts.usernames import LookalikeAccount, username_lookalike_groups


def _shown(account: LookalikeAccount) -> str:
    name = account.username if account.username.isascii() else ascii(account.username)[1:-1]
    held = ", holds the name" if account.holds_key else ""
    return f"{name} (id {account.id}{held})"


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args: Any, **options: Any) -> None:
        total = User.objects.count()
        with tqdm(total=total, unit="user", file=self.stderr, disable=total == 0) as bar:
            groups = username_lookalike_groups(progress=bar.update)
        if not groups:
            self.stdout.write(f"No look-alike usernames among {total} account(s).")
            return
        accounts = sum(len(group) for group in groups)
        self.stdout.write(
            f"{len(groups)} group(s) of look-alike usernames, {accounts} account(s) in all:"
        )
        for group in groups:
            self.stdout.write("  " + "; ".join(_shown(account) for account in group))
