"""Status codes and stats slots shared by the columnar kernels and their callers.

Apart from ``columnar_kernels`` so that importing the decoder's Python side
does not import numba (~0.8 s): Spark's planning and driver processes import
the source but never decode, and only the first decode in a process pays.
"""

# Status codes of ``decode_records``; ``columnar.py`` words them.
OK = 0
TRUNCATED = 1  # a varint or a field runs past the end of its batch
VARINT_TOO_LONG = 2
RECORD_LENGTH = 3  # the record's fields do not span its declared length
TRAILING_BYTES = 4  # bytes after the batch's last record
NEGATIVE_HEADER_KEY = 5
NEGATIVE_HEADER_COUNT = 6
CAPACITY = 7  # an output buffer would overflow (cannot happen for valid input)

# Slots of the stats array ``decode_records`` returns next to its arrays.
S_STATUS, S_BATCH, S_POS, S_KEY_BYTES, S_KEY_NULLS, S_VALUE_BYTES, S_VALUE_NULLS = range(7)
S_HEADERS, S_HKEY_BYTES, S_HVALUE_BYTES, S_HVALUE_NULLS, S_RECORDS = range(7, 12)
N_STATS = 12
