"""Files in messages: what attachments add to a message page, and what a model call with
many images reads.

- Message page: `GET conversations/{id}/messages/` of 50 messages as the API serves it
  (Django's test client, session auth), without files and with 10 of the messages
  carrying 10 files each; the SQL statements are counted and the median time taken.
- Model input: the input of the next model call for a conversation of 20 messages with
  one image each (`--image-kib` each), the first image attached to every message too; the
  files' opens and bytes read from storage are counted, and the median time taken, beside
  the same conversation with the images described in words (`vision` off).

    DATABASE_URL=postgres://... .venv/bin/python -m bench.attachments [--repeats 15]

Targets: a page whose messages carry 10 files adds at most 2 statements; a model call
opens each file once.
"""

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import django_setup, progress

MAX_EXTRA_QUERIES = 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--image-kib", type=int, default=256)
    parser.add_argument("--allow-sqlite", action="store_true", help="run on a non-PostgreSQL DB")
    args = parser.parse_args()
    if args.repeats < 1 or args.image_kib < 1:
        parser.error("need --repeats >= 1 and a positive --image-kib")
    return args


def timed(action: Callable[[], Any], repeats: int) -> float:
    """The median milliseconds of `action`, after one untimed run."""
    action()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def image_of(size: int) -> bytes:
    """A PNG of about `size` bytes: random pixels, which do not compress."""
    import io

    from PIL import Image

    side = max(1, int((size / 3) ** 0.5))
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, "PNG")
    return out.getvalue()


def main() -> int:
    args = parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-attachments-"))
    os.environ["PARLEY_MEDIA_ROOT"] = str(scratch / "media")
    django_setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from accounts.models import User
    from bench.common import database_label, database_refused, owner_delete
    from conversations import selectors, services
    from conversations.services.file_staging import file_stage

    def stored(owner: User, data: bytes, name: str) -> Any:
        import io

        staged = file_stage(source=io.BytesIO(data))
        try:
            return services.file_store(owner=owner, staged=staged, filename=name)[0]
        finally:
            staged.close()

    try:
        if database_refused("attachments", args.allow_sqlite):
            return 2
        call_command("migrate", interactive=False, verbosity=0)
        owner = User.objects.create_user(username=f"bench-{secrets.token_hex(6)}")
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]  # the test client's
        client = Client()
        client.force_login(owner)
        try:
            print(f"bench.attachments on {database_label()}, {os.cpu_count()} CPUs\n")
            progress("message pages")
            plain = services.conversation_create(owner=owner, title="plain")
            carrying = services.conversation_create(owner=owner, title="carrying")
            files = [stored(owner, f"file {n}".encode(), f"{n}.txt") for n in range(10)]
            for n in range(50):
                services.user_message_append(conversation=plain, content=f"message {n}")
                ids = [str(f.pk) for f in files] if n % 5 == 0 else []
                services.user_message_append(
                    conversation=carrying, content=f"message {n}", attachments=ids
                )

            def page(conversation: Any) -> Callable[[], Any]:
                url = f"/api/v1/conversations/{conversation.pk}/messages/?limit=50"
                return lambda: client.get(url)

            counts = {}
            for label, conversation in (("none", plain), ("10 x 10 files", carrying)):
                with CaptureQueriesContext(connection) as queries:
                    assert page(conversation)().status_code == 200
                counts[label] = (len(queries), timed(page(conversation), args.repeats))
            extra = counts["10 x 10 files"][0] - counts["none"][0]
            print("| message page (50 messages) | statements | median ms |")
            print("|---|---:|---:|")
            for label, (count, ms) in counts.items():
                print(f"| files: {label} | {count} | {ms:.2f} |")
            met = "met" if extra <= MAX_EXTRA_QUERIES else "missed"
            print(
                f"\nstatements added by 100 files on 10 messages: {extra} "
                f"(target <= {MAX_EXTRA_QUERIES}: {met})\n"
            )

            progress("model input")
            images = [stored(owner, image_of(args.image_kib * 1024), f"{n}.png") for n in range(20)]
            pictures = services.conversation_create(owner=owner, title="pictures")
            for n, image in enumerate(images):
                ids = list(dict.fromkeys([str(image.pk), str(images[0].pk)]))
                services.user_message_append(
                    conversation=pictures, content=f"and {n}", attachments=ids
                )
            storage = services.files_storage()
            real_open = storage.open
            opened: list[str] = []

            def counted_open(name: str, *rest: Any) -> Any:
                opened.append(name)
                return real_open(name, *rest)

            storage.open = counted_open  # type: ignore[method-assign,assignment]
            print("| model input, 20 images | opens | distinct files | MiB read | median ms |")
            print("|---|---:|---:|---:|---:|")
            verdict = True
            for vision in (True, False):
                services.conversation_update(conversation=pictures, vision=vision)
                pictures.refresh_from_db()

                def build() -> Any:
                    return selectors.conversation_model_input(
                        conversation=pictures, token_budget=100_000
                    )

                opened.clear()
                build()
                count, distinct = len(opened), len(set(opened))
                size = sum(storage.size(name) for name in opened) / (1024 * 1024)
                verdict &= count == distinct
                ms = timed(build, args.repeats)
                label = "sent as image parts" if vision else "described in words"
                print(f"| {label} | {count} | {distinct} | {size:.2f} | {ms:.1f} |")
            print(f"\neach file opened once per call: {'met' if verdict else 'missed'}")
        finally:
            owner_delete(owner)  # its files' bytes go with the scratch folder
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
