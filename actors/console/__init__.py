"""The live web console (issue 37): a Ray actor serving server-rendered pages (aiohttp + jinja2)
from one collector that keeps the cluster's state warm; pages update over server-sent events.

Ray-free parts (`model`, `views`, `svg`, `decode`) import neither Ray nor aiohttp; the server side
is `collector` (composing `namesrv_watch`, `broker_stats`, `controller_watch`, `group_stats`, all
asking through `calls`), `actions`, `web` and `actor`."""

CONSOLE_NAME = "console"
"""The console actor's name in its deployment's Ray namespace."""
