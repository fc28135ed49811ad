"""Recount the usage dashboard's figures from the stored messages.

The figures are kept as messages are stored; run this after changing messages by hand, or
once after a deploy during which processes older than the usage rollup kept storing
messages. Conversations are recounted a batch at a time, so people can keep chatting.
Usage of conversations deleted since stays as it was counted: it still happened.
"""

from typing import Any

from django.core.management.base import BaseCommand
from tqdm import tqdm

from conversations import services
from conversations.models import Conversation


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args: Any, **options: Any) -> None:
        total = Conversation.objects.count()
        with tqdm(total=total, unit="conv", file=self.stderr, disable=total == 0) as bar:
            done = services.usage_rebuild(progress=bar.update)
        self.stdout.write(f"Recounted the usage of {done} conversation(s).")
