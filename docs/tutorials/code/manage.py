"""The tutorial project's manage.py (docs/tutorials/django.md): Django's usual one."""

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_shop.settings")
    execute_from_command_line(sys.argv)
