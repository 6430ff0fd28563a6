"""Authentication, authorization and quotas, kept out of the I/O layers.

Everything here is sans-I/O: SASL and SCRAM are state machines fed tokens,
the authorizer is an index queried with a principal, a host and a resource,
and the stores sit behind small interfaces so a cluster can keep them in
ZooKeeper. The broker's connection layer only carries bytes and the
principal these objects decide on.
"""
