"""The ``headwater`` command line, one module per command group.

``serve`` (a broker), ``topics``, ``produce``, ``consume``, ``groups``,
``transactions``, ``users``, ``acls``, ``cluster`` (a local dev cluster) and
``demo``; ``common`` holds what the client commands share (bootstrap,
security options, errors, output). ``headwater.cli:main`` is the console
script and ``python -m headwater.cli`` runs the same.
"""

from headwater.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
