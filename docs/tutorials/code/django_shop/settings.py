"""The tutorial project's settings: the parts that matter to the outbox."""

import os

from psycopg.conninfo import conninfo_to_dict

# --8<-- [start:settings]
# Any libpq connection string: postgresql://user:pass@host:5432/shop or "dbname=shop host=...".
_db = conninfo_to_dict(os.environ["DATABASE_URL"])

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # Django's backend on psycopg 3
        "NAME": _db["dbname"],
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
    }
}
INSTALLED_APPS = [
    "outbox_adapters.django",  # `manage.py outbox ...`
    "django_shop",
]
# --8<-- [end:settings]
USE_TZ = True
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "tutorial-only-not-a-secret")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
