"""What the group and transaction coordinators share (Kafka's ``coordinator-common``).

Both keep their state as key/value records in an internal, replicated topic
(``__consumer_offsets``, ``__transaction_state``), place a key on a partition
of it the way Kafka does, write through that partition's log and answer only
once the write is replicated, and rebuild their state by replaying the
partition when this broker becomes its leader:

* ``placement``: which partition holds a group or a transactional id;
* ``state_log``: the entries a coordinator writes and replays, and the
  ``StateLog`` protocol it writes through;
* ``partition_state_log``: that protocol over a partition ``Log``;
* ``pending`` and ``replication``: waiting for a write to be replicated, and
  the error a client sees when it was not.
"""
