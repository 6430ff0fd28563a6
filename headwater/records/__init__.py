"""Kafka RecordBatch v2: batch headers, codecs and records (pure, no I/O)."""

from headwater.records.batch import (
    BatchHeader,
    iter_batch_headers,
    parse_batch_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    validate_batches,
)
from headwater.records.compression import Compression, compress, decompress
from headwater.records.errors import (
    CorruptRecordError,
    KafkaApiError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from headwater.records.record import (
    DecodedBatch,
    Record,
    RecordBatchBuilder,
    build_batch,
    decode_batches,
)

__all__ = [
    "BatchHeader",
    "Compression",
    "CorruptRecordError",
    "DecodedBatch",
    "KafkaApiError",
    "Record",
    "RecordBatchBuilder",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "build_batch",
    "compress",
    "decode_batches",
    "decompress",
    "iter_batch_headers",
    "parse_batch_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "validate_batches",
]
