"""The on-disk log: segments, sparse indexes, partition logs and the data directory.

Import from the modules (``headwater.log.log``, ``headwater.log.log_directory``,
...): this package init stays empty because ``headwater.protocol.fetch_types`` imports
``headwater.protocol.file_slice``, and an eager import here would make that a cycle.
"""
