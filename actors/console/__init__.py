"""The live web console (issue 37): a Ray actor serving server-rendered pages (aiohttp + jinja2)
from one collector that keeps the cluster's state warm; pages update over server-sent events.

Ray-free parts (`model`, `views`, `svg`, `forms`) import neither Ray nor aiohttp; `collector`,
`web` and `actor` are the server side."""

CONSOLE_NAME = "console"
"""The console actor's name in its deployment's Ray namespace."""
