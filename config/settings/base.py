"""Settings shared by every environment; every deploy-specific value comes from the environment."""

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.channel_layers import channel_layers_config
from config.settings.env import env_bool, env_float, env_int, env_list, env_str
from config.settings.files import *  # noqa: F403 (storage and uploaded files)
from config.settings.files import FILES_BEAT_SCHEDULE
from config.settings.runs import *  # noqa: F403 (the tool loop: runs, workers, tools)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

DEBUG = env_bool("DEBUG", default=False)
# Local and test settings supply a development key; production refuses to start without one.
SECRET_KEY = env_str("SECRET_KEY")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Fernet keys for secrets at rest (accounts/secrets.py), newest first. Local and test
# settings derive one from SECRET_KEY when none is given; production requires them.
PARLEY_SECRET_KEYS = env_list("PARLEY_SECRET_KEYS", [])
PARLEY_SECRET_KEYS_DERIVED = False
# A refused CSRF token is JSON on /api/ paths, the site's page elsewhere.
CSRF_FAILURE_VIEW = "conversations.api.errors.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "conversations",
    "web",
]

MIDDLEWARE = [
    # First: every answer gets its X-Request-ID, and every line logged for it that id.
    "config.request_id.request_id_middleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "web.security.ContentSecurityPolicyMiddleware",
]
# Websocket schemes the web UI's CSP lets pages connect to (production: wss only).
PARLEY_CSP_WEBSOCKET_SCHEMES = ["ws", "wss"]

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
                "web.context_processors.site",
            ],
        },
    },
]

SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    "init_command": (
        "PRAGMA journal_mode=WAL;"
        "PRAGMA synchronous=NORMAL;"
        "PRAGMA foreign_keys=ON;"
        "PRAGMA busy_timeout=30000;"
    ),
}


def database_config(url: str) -> dict[str, Any]:
    """PostgreSQL (or anything dj-database-url parses) when DATABASE_URL is set, else SQLite.

    The SQLite default is tuned for the web process and the worker writing at the same
    time: WAL lets readers proceed during a write, IMMEDIATE transactions take the write
    lock up front (so two writers queue instead of failing with "database is locked" on
    lock upgrade), and the busy timeout makes the second writer wait rather than error.
    """
    if url:
        config = dict(dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True))
        if config["ENGINE"] == "django.db.backends.sqlite3":
            config["OPTIONS"] = SQLITE_OPTIONS
        elif config["ENGINE"] == "django.db.backends.postgresql" and env_bool(
            "PARLEY_DB_POOL", True
        ):
            # A pool per process: a worker step gives its connection back while the model
            # streams and takes one again to store the reply. Opening a connection instead
            # forks a PostgreSQL backend each time, and 50 replies ending together made 50.
            config["CONN_MAX_AGE"] = 0  # the pool keeps the connections, Django does not
            options: dict[str, Any] = dict(config.get("OPTIONS") or {})  # type: ignore[call-overload]
            options["pool"] = {"min_size": 1, "max_size": env_int("PARLEY_DB_POOL_SIZE", 20)}
            config["OPTIONS"] = options
        return config
    (BASE_DIR / "var").mkdir(exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "var" / "parley.sqlite3",
        "OPTIONS": SQLITE_OPTIONS,
    }


DATABASES = {"default": database_config(env_str("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
# The lock-out backend comes first: it refuses a locked account or address on every path.
AUTHENTICATION_BACKENDS = [
    "accounts.login_guard.LoginLockBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Wrong passwords allowed per account and per client address within the window; the
# next attempt locks the account or address for the window, refusing even the right
# password (web, admin and API log-in, password change).
PARLEY_LOGIN_MAX_FAILURES = env_int("PARLEY_LOGIN_MAX_FAILURES", 10)
PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("PARLEY_LOGIN_MAX_FAILURES_PER_ADDRESS", 50)
PARLEY_LOGIN_LOCK_SECONDS = env_int("PARLEY_LOGIN_LOCK_SECONDS", 15 * 60)
# How many proxies in front append to X-Forwarded-For: the client's address is read that
# many entries from the header's right end (0: the peer's address, the header ignored).
PARLEY_TRUSTED_PROXY_COUNT = env_int("PARLEY_TRUSTED_PROXY_COUNT", 0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
# Anyone who can reach the server may create an account unless this is switched off.
PARLEY_SIGNUP_ENABLED = env_bool("PARLEY_SIGNUP_ENABLED", default=True)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []

# --- Redis-protocol server: broker, event log (and later the channel layer) -----------------
# Without REDIS_URL, `make run` starts an embedded Valkey on this port (see
# config/embedded_redis.py), so the same architecture runs everywhere.
PARLEY_EMBEDDED_REDIS_PORT = env_int("PARLEY_EMBEDDED_REDIS_PORT", 6390)
REDIS_URL = env_str("REDIS_URL") or f"redis://127.0.0.1:{PARLEY_EMBEDDED_REDIS_PORT}/0"

# Conversation notifications (second tabs, other devices) travel over the channel layer.
CHANNEL_LAYERS = channel_layers_config(REDIS_URL)
# Connections one process keeps to Redis for the event log; threads beyond it wait.
PARLEY_REDIS_MAX_CONNECTIONS = env_int("PARLEY_REDIS_MAX_CONNECTIONS", 50)
# Websocket frames larger than this are refused with an error event.
PARLEY_WS_MAX_FRAME_BYTES = env_int("PARLEY_WS_MAX_FRAME_BYTES", 256 * 1024)
# An open socket checks its credential again at least this often (and when its session
# expires), in case a notice of revocation was lost on the way.
PARLEY_WS_CREDENTIAL_RECHECK_SECONDS = env_int("PARLEY_WS_CREDENTIAL_RECHECK_SECONDS", 300)

# --- Celery: one task = one step of a run (conversations/engine/runner.py) ------------------
CELERY_BROKER_URL = REDIS_URL
# Redis, with a restart of the broker survived while steps run (see config/broker.py).
CELERY_BROKER_TRANSPORT = "config.broker:Transport"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "parley"
# A step acknowledged only when it finished; a killed worker's step is delivered again.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Time limits stay well below the broker's visibility timeout, so a running step is never
# handed to a second worker while the first is still within its limits. Celery enforces them
# in the prefork pool only; the threads pool that `make run` and the Procfile use cannot stop
# a thread. There the run's lease is the guard: every wait in a step is bounded (provider
# time-out, tool time limit), a step that stops renewing its lease loses the run to the
# watchdog, and its later writes are refused (they compare-and-set on the lease).
CELERY_TASK_SOFT_TIME_LIMIT = env_int("PARLEY_STEP_SOFT_TIME_LIMIT", 300)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 30
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BEAT_SCHEDULE = {
    "runs-watchdog": {
        "task": "conversations.tasks.runs_watchdog",
        "schedule": float(env_int("PARLEY_WATCHDOG_SECONDS", 10)),
    },
    # Does nothing while PARLEY_RETENTION_DAYS is 0 (keep forever).
    "conversations-retention": {
        "task": "conversations.tasks.conversations_purge",
        "schedule": float(env_int("PARLEY_RETENTION_PURGE_SECONDS", 3600)),
    },
    **FILES_BEAT_SCHEDULE,
}

# --- Operations: /healthz, /readyz, /metrics (config/ops.py) --------------------------------
# Each worker writes a heartbeat to Redis this often; /readyz counts workers alive while
# one was written within three periods (config/heartbeat.py).
PARLEY_WORKER_HEARTBEAT_SECONDS = env_int("PARLEY_WORKER_HEARTBEAT_SECONDS", 5)
# With a token, /metrics answers `Authorization: Bearer <token>` from any address; without
# one, only clients on this machine, so usage numbers are never public by accident.
PARLEY_METRICS_TOKEN = env_str("PARLEY_METRICS_TOKEN")

# Throttle counters live in the cache, so they must be shared by every web process.
CACHES = {
    "default": {
        "BACKEND": "config.cache.SharedRedisCache",  # Django's, sharing its connections
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "parley:cache",
    }
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.permissions.ScopedPermission"],
    "DEFAULT_RENDERER_CLASSES": ["conversations.api.renderers.StorableJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["conversations.api.parsers.StrictJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["conversations.throttles.RequestBudgets"],
    # Anonymous throttles read the client's address as the log-in limits do.
    "NUM_PROXIES": PARLEY_TRUSTED_PROXY_COUNT,
    "EXCEPTION_HANDLER": "conversations.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # `?format=` selects the export format, not a renderer.
    "URL_FORMAT_OVERRIDE": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Parley API",
    "DESCRIPTION": (
        "Conversations, messages, runs and their events, search, export/import and API keys. "
        "Authenticate with a session cookie or `Authorization: Bearer <key>`. Every error is "
        '`{"error": {"code", "message", "details"?}}`; every POST honours `Idempotency-Key`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "conversations.api.schema.postprocess",
    ],
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "conversations.models.RunStatus",
        "MessageRoleEnum": "conversations.models.MessageRole",
    },
}

# --- REST API limits ----------------------------------------------------------------------
# Requests and socket frames per user, every door's ("<n>/<second|minute|hour|day>").
PARLEY_API_THROTTLE_RATE = env_str("PARLEY_API_THROTTLE_RATE", "600/minute")
# Requests and frames that make the model work have their own budget besides.
PARLEY_API_MODEL_THROTTLE_RATE = env_str("PARLEY_API_MODEL_THROTTLE_RATE", "60/minute")
# Reads of shared links per client address, page and API alike.
PARLEY_SHARE_VIEW_THROTTLE_RATE = env_str("PARLEY_SHARE_VIEW_THROTTLE_RATE", "60/minute")
# Open share links (not revoked, not expired) one conversation may have at once.
PARLEY_MAX_SHARES_PER_CONVERSATION = env_int("PARLEY_MAX_SHARES_PER_CONVERSATION", 50)
# Stateless chat: how long a state stays usable, and how much history it may carry.
PARLEY_STATELESS_STATE_MAX_AGE_SECONDS = env_int(
    "PARLEY_STATELESS_STATE_MAX_AGE_SECONDS", 30 * 24 * 3600
)
PARLEY_STATELESS_STATE_MAX_BYTES = env_int("PARLEY_STATELESS_STATE_MAX_BYTES", 8 * 1024 * 1024)
PARLEY_STATELESS_STATE_MAX_MESSAGES = env_int("PARLEY_STATELESS_STATE_MAX_MESSAGES", 2000)
# Deepest nesting accepted in any JSON from outside (bodies, frames, imports, state).
PARLEY_JSON_MAX_DEPTH = env_int("PARLEY_JSON_MAX_DEPTH", 64)
# Largest request body outside import (which has PARLEY_IMPORT_MAX_BYTES).
PARLEY_API_MAX_BODY_BYTES = env_int("PARLEY_API_MAX_BODY_BYTES", 1024 * 1024)
# Search ranks at most this many of the newest matches (bounds the cost of common words).
PARLEY_SEARCH_CANDIDATES = env_int("PARLEY_SEARCH_CANDIDATES", 1000)
# How long `POST chat/` waits before a 202; how often silent streams keep alive, check the caller.
PARLEY_CHAT_WAIT_SECONDS = env_int("PARLEY_CHAT_WAIT_SECONDS", 60)
PARLEY_STREAM_KEEPALIVE_SECONDS = env_int("PARLEY_STREAM_KEEPALIVE_SECONDS", 15)
# Idempotency keys are remembered per user this long; a request still unanswered after
# PARLEY_IDEMPOTENCY_LOCK_SECONDS (a crashed process) no longer blocks a retry.
PARLEY_IDEMPOTENCY_TTL_SECONDS = env_int("PARLEY_IDEMPOTENCY_TTL_SECONDS", 24 * 3600)
PARLEY_IDEMPOTENCY_LOCK_SECONDS = env_int("PARLEY_IDEMPOTENCY_LOCK_SECONDS", 300)

# --- Logs (config/log_context.py) ----------------------------------------------------------
# Message text in logs (the model input of each call at DEBUG, exception messages, SQL
# parameters): off unless asked for.
PARLEY_LOG_CONTENT = env_bool("PARLEY_LOG_CONTENT", default=False)
# "plain": one line of text per record (the default); "json": one JSON object per line, with
# the request, user, conversation and run it belongs to where known, for log collectors.
# The web processes, the worker and beat all log this way (config/celery.py).
LOG_FORMAT = env_str("LOG_FORMAT", "plain").strip().lower()
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "ids": {"()": "config.log_context.LogIdsFilter"},
        "content": {"()": "config.log_context.ContentGuardFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "config.log_context.JsonLinesFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["ids", "content"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # The OpenAI SDK's HTTP client logs every request at INFO.
        "httpx2": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},  # the MCP client: tool arguments and results at DEBUG
        # With DEBUG on, every SQL statement is logged at DEBUG with its parameters: the
        # messages being stored among them.
        **({} if PARLEY_LOG_CONTENT else {"django.db.backends": {"level": "INFO"}}),
    },
}

# --- LLM upstream -------------------------------------------------------------------------
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
PARLEY_MODEL = env_str("PARLEY_MODEL", "gpt-4o-mini")
# Generation settings a conversation without its own gets. The output cap is also the
# highest max_output_tokens a conversation may ask for; no temperature means the
# provider's own default.
PARLEY_MAX_OUTPUT_TOKENS = env_int("PARLEY_MAX_OUTPUT_TOKENS", 32_768)
PARLEY_DEFAULT_MAX_OUTPUT_TOKENS = env_int("PARLEY_DEFAULT_MAX_OUTPUT_TOKENS", 4096)
PARLEY_DEFAULT_TEMPERATURE = env_float("PARLEY_DEFAULT_TEMPERATURE")

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
# Largest token count one imported message may report (usage beyond it is forged).
PARLEY_IMPORT_MAX_USAGE_TOKENS = env_int("PARLEY_IMPORT_MAX_USAGE_TOKENS", 10_000_000)
# Organising, whichever door writes it (the API's PATCH, an import): tags on one
# conversation, and the tags and folders one user may have, so a sidebar stays a list.
PARLEY_MAX_TAGS_PER_CONVERSATION = env_int("PARLEY_MAX_TAGS_PER_CONVERSATION", 20)
PARLEY_MAX_TAGS = env_int("PARLEY_MAX_TAGS", 500)
PARLEY_MAX_FOLDERS = env_int("PARLEY_MAX_FOLDERS", 200)

# --- Data governance ----------------------------------------------------------------------
# Conversations with no activity for this many days are deleted (audited) by the beat task
# and `manage.py purge_conversations`. 0 keeps everything.
PARLEY_RETENTION_DAYS = env_int("PARLEY_RETENTION_DAYS", 0)
# Quotas; 0 = unlimited. Messages are the user's own, counted per UTC day.
PARLEY_MAX_CONVERSATIONS_PER_USER = env_int("PARLEY_MAX_CONVERSATIONS_PER_USER", 0)
PARLEY_MAX_MESSAGES_PER_DAY = env_int("PARLEY_MAX_MESSAGES_PER_DAY", 0)
# Django refuses larger bodies before any view runs; the API applies tighter limits per
# endpoint, so this only needs to let an import of the largest allowed size through.
DATA_UPLOAD_MAX_MEMORY_SIZE = PARLEY_IMPORT_MAX_BYTES + 64 * 1024
# --- Model calls and run event logs (the tool loop's own settings: config/settings/runs.py) --
OPENAI_TIMEOUT_SECONDS = env_int("OPENAI_TIMEOUT_SECONDS", 60)
OPENAI_MAX_RETRIES = env_int("OPENAI_MAX_RETRIES", 2)
# Event log: the first delta of a burst is written at once, later ones merged into at most
# one write per this many milliseconds (or this many characters). 250 ms keeps a 100 tok/s
# reply under 60 Redis writes per 1,000 tokens; clients smooth the text in between.
PARLEY_EVENT_COALESCE_MS = env_int("PARLEY_EVENT_COALESCE_MS", 250)
PARLEY_EVENT_COALESCE_CHARS = env_int("PARLEY_EVENT_COALESCE_CHARS", 400)
# A finished run's event log is kept this long, then expires.
PARLEY_EVENT_TTL_SECONDS = env_int("PARLEY_EVENT_TTL_SECONDS", 24 * 3600)
# The offline demo model's pace (tokens per second; 0 = as fast as possible).
PARLEY_DEMO_TOKENS_PER_SECOND = env_int("PARLEY_DEMO_TOKENS_PER_SECOND", 40)
PARLEY_DEMO_USERNAME = env_str("PARLEY_DEMO_USERNAME", "demo")
PARLEY_DEMO_PASSWORD = env_str("PARLEY_DEMO_PASSWORD", "demo")
