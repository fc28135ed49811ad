"""Development settings: what `make run` uses. Zero configuration needed."""

from config.settings.base import *  # noqa: F403
from config.settings.env import env_bool, env_str

DEBUG = env_bool("DEBUG", default=True)
SECRET_KEY = env_str("SECRET_KEY") or "django-insecure-local-development-only"
PARLEY_SECRET_KEYS_DERIVED = True
