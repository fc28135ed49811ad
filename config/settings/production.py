"""Production settings: `manage.py check --deploy` reports nothing with these.

Required: SECRET_KEY (50+ random characters), ALLOWED_HOSTS and PARLEY_SECRET_KEYS (Fernet
keys for secrets at rest). TLS is assumed to end at
a proxy that sets X-Forwarded-Proto; set SECURE_SSL_REDIRECT=false if it redirects itself.
"""

from django.core.exceptions import ImproperlyConfigured

from config.settings.base import *  # noqa: F403
from config.settings.base import PARLEY_SECRET_KEYS, SECRET_KEY
from config.settings.env import env_bool, env_int

DEBUG = False
if len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("SECRET_KEY must be set to at least 50 random characters")
if not PARLEY_SECRET_KEYS:
    raise ImproperlyConfigured(
        "PARLEY_SECRET_KEYS must be set: comma-separated Fernet keys, newest first "
        '(make one with: python -c "from cryptography.fernet import Fernet; '
        'print(Fernet.generate_key().decode())")'
    )

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
# Health probes and metric scrapers reach the process itself, over plain HTTP from inside
# the network; a redirect to https would fail them. The redirect protects nothing there:
# a scraper's token has already been sent by the time it would be answered.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 60 * 60 * 24 * 365)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
# Preloading is a commitment browsers keep for months: only when asked for. The deploy
# check's advice to preload (security.W021) is then a choice made, not an oversight.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", default=False)
if not SECURE_HSTS_PRELOAD:
    SILENCED_SYSTEM_CHECKS = ["security.W021"]
# Pages are served over TLS, so their sockets are too.
PARLEY_CSP_WEBSOCKET_SCHEMES = ["wss"]
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
