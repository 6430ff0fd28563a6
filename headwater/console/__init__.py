"""The web console: a cluster's brokers, topics, messages, groups and health in a browser.

A top-floor room, like the CLI: it talks to the cluster only through
``headwater.client`` (Metadata, DescribeLogDirs, DescribeConfigs,
ListOffsets, a consumer and a producer, the group and admin APIs), so it
works against any Kafka-compatible cluster and never reaches broker
internals. ``server`` serves it (uvicorn), ``app`` holds the pages
(Starlette, Jinja2, htmx), ``gateway`` every question put to the cluster,
``auth`` logins, sessions and CSRF; ``formatting``, ``offsets`` and
``metrics`` are the pure parts.
"""
