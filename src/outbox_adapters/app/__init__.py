"""The host's outbox, described once in its own code and run by its process and by the CLI.

:class:`Outbox` names the database, the SMTP relay and the e-mail lanes with their hooks (a
suppression check, branding, a bounce report, a mailer of the host's own); ``async with
outbox.running("email"):`` runs their workers inside the host's process (a FastAPI lifespan), and
``outbox --app package.module:attribute worker --lane email`` (or ``OUTBOX_APP``) runs the same
object's lane from the command line. Both go through :func:`~.runner.run_email_lane`, so a row is
sent the same way in either. docs/tutorials/application.md shows it end to end.
"""

from outbox_adapters.app.application import Outbox, load_app
from outbox_adapters.app.lanes import EmailLane, MailerFactory
from outbox_adapters.app.runner import EmailLaneRun, run_email_lane

__all__ = ["EmailLane", "EmailLaneRun", "MailerFactory", "Outbox", "load_app", "run_email_lane"]
