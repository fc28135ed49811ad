"""Settings for the test suite: PostgreSQL when DATABASE_URL is set, a SQLite file otherwise."""

from config.settings.base import *  # noqa: F403
from config.settings.base import BASE_DIR, DATABASES
from config.settings.env import env_bool, env_str

SECRET_KEY = env_str("SECRET_KEY") or "django-insecure-test-only"
PARLEY_SECRET_KEYS_DERIVED = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # Each test gets a directory of its own (the `file_storage` fixture of tests/conftest.py).
    "files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {
            "location": env_str("PARLEY_MEDIA_ROOT") or str(BASE_DIR / "var" / "test-media"),
            "base_url": None,
        },
    },
}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not Django's default in-memory database, so threaded tests see WAL and
    # IMMEDIATE transactions exactly as the running app does.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / "test-parley.sqlite3")}

# Tests never collect static files: WhiteNoise serves them from the apps' folders (the
# browser tests load the page's modules), looking them up per request.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

if not env_str("REDIS_URL"):
    # Until a test asks for the real server (the `redis_url` fixture switches to it),
    # notifications go nowhere instead of to a server that isn't running.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Throttle counters: per process is enough for tests (and needs no server).
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Async code reaches the database from a pool of helper threads; closing each
# connection after use keeps none of them open when the test database is dropped.
DATABASES["default"]["CONN_MAX_AGE"] = 0
if not env_bool("PARLEY_TEST_DB_POOL", default=False):
    # The test runner's own process connects without a pool: its pool would be created
    # before the test database exists and keep pointing at the other one. The workers and
    # web servers the end-to-end tests start use one, as in production (tests/e2e).
    DATABASES["default"].get("OPTIONS", {}).pop("pool", None)
