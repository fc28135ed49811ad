"""Settings shared by every environment; every deploy-specific value comes from the environment."""

from pathlib import Path
from typing import Any

import dj_database_url

from config.settings.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent

DEBUG = env_bool("DEBUG", default=False)
# Local and test settings supply a development key; production refuses to start without one.
SECRET_KEY = env_str("SECRET_KEY")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "accounts",
    "conversations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_config(url: str) -> dict[str, Any]:
    """PostgreSQL (or anything dj-database-url parses) when DATABASE_URL is set, else SQLite.

    The SQLite default is tuned for the web process and the worker writing at the same
    time: WAL lets readers proceed during a write, IMMEDIATE transactions take the write
    lock up front (so two writers queue instead of failing with "database is locked" on
    lock upgrade), and the busy timeout makes the second writer wait rather than error.
    """
    if url:
        config = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
        return dict(config)
    (BASE_DIR / "var").mkdir(exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "var" / "parley.sqlite3",
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA foreign_keys=ON;"
                "PRAGMA busy_timeout=30000;"
            ),
        },
    }


DATABASES = {"default": database_config(env_str("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

REDIS_URL = env_str("REDIS_URL")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# --- LLM upstream -------------------------------------------------------------------------
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
PARLEY_MODEL = env_str("PARLEY_MODEL", "gpt-4o-mini")

# --- Conversation limits ------------------------------------------------------------------
# Model input: the newest history that fits this many estimated tokens (see context.py),
# read from at most PARLEY_CONTEXT_MAX_MESSAGES stored rows so a turn's cost stays flat.
PARLEY_CONTEXT_TOKENS = env_int("PARLEY_CONTEXT_TOKENS", 24_000)
PARLEY_CONTEXT_MAX_MESSAGES = env_int("PARLEY_CONTEXT_MAX_MESSAGES", 400)
PARLEY_MAX_MESSAGE_CHARS = env_int("PARLEY_MAX_MESSAGE_CHARS", 100_000)
PARLEY_MAX_DRAFT_CHARS = env_int("PARLEY_MAX_DRAFT_CHARS", 100_000)
PARLEY_MAX_SYSTEM_PROMPT_CHARS = env_int("PARLEY_MAX_SYSTEM_PROMPT_CHARS", 32_000)
PARLEY_IMPORT_MAX_BYTES = env_int("PARLEY_IMPORT_MAX_BYTES", 20 * 1024 * 1024)
PARLEY_IMPORT_MAX_MESSAGES = env_int("PARLEY_IMPORT_MAX_MESSAGES", 100_000)
PARLEY_DEMO_USERNAME = env_str("PARLEY_DEMO_USERNAME", "demo")
PARLEY_DEMO_PASSWORD = env_str("PARLEY_DEMO_PASSWORD", "demo")
