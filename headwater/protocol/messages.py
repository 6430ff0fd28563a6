"""Cold APIs (everything but Fetch and Produce) through kio's typed entities.

kio generates one frozen dataclass per API, version and nested struct from
Kafka's message schemas, reads natively and writes in Python. That is fast
enough for Metadata, group and admin APIs, so we reuse it instead of
hand-writing 20 APIs x 10 versions. Two gaps are closed here:

* kio's native reader raises ``KeyError`` on an unknown tagged field, while
  KIP-482 says a reader must skip it (newer clients may send tags we do not
  know). On that error we re-read with a small reader that walks the same
  entity classes and skips unknown tags.
* kio entities are version-specific; ``build`` makes one from a plain dict
  for any version, so a handler writes one dict per API.
"""

from __future__ import annotations

import datetime
import functools
import io
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, fields
from typing import Any, Final, NamedTuple, TypeVar

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

# kio keeps its schema introspection in private modules; they are the documented
# way its own reader/writer are built, and pinned by kio==0.6.5 in pyproject.
from kio.serial._implicit_defaults import get_implicit_default, get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._parse import get_field_reader
from kio.serial.errors import BufferUnderflow, SerialError
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.static.primitive import Records
from kio.static.protocol import Entity

from headwater.protocol.errors import (
    InvalidRequestError,
    InvalidResponseError,
    UnsupportedVersionError,
)

E = TypeVar("E", bound=Entity)

# (value, bytes consumed), the calling convention of kio's readers.
_Reader = Callable[[Any, int], tuple[Any, int]]


# --- entity classes --------------------------------------------------------


@functools.cache
def request_class(api_key: int, version: int) -> type[Entity]:
    """kio's request entity for this API key and version."""
    try:
        return load_request_schema(api_key, version)
    except KioIndexError as exc:
        raise UnsupportedVersionError(f"no request schema for api {api_key} v{version}") from exc


@functools.cache
def response_class(api_key: int, version: int) -> type[Entity]:
    """kio's response entity for this API key and version."""
    try:
        return load_response_schema(api_key, version)
    except KioIndexError as exc:
        raise UnsupportedVersionError(f"no response schema for api {api_key} v{version}") from exc


# --- reading ---------------------------------------------------------------


@functools.cache
def _native_reader(entity_type: type[Entity]) -> _Reader:
    return entity_reader(entity_type)


def preload(pairs: Iterable[tuple[int, int]]) -> int:
    """Import and compile the request and response schemas of every (API key, version).

    kio imports one module per API version on first use. A broker that met
    each pair lazily paid that import on its event loop (milliseconds, for
    the client waiting) and kept growing as new clients, or fuzzers, met new
    pairs: about 14 MB for the ~190 pairs served, which a long soak reads as
    a leak. A broker calls this once at start-up, on a thread. Returns how
    many pairs were loaded; a pair kio lacks is skipped (its requests are
    refused as unsupported when they come).
    """
    loaded = 0
    for api_key, version in pairs:
        try:
            _native_reader(request_class(api_key, version))
            response_class(api_key, version)
        except UnsupportedVersionError:
            continue
        loaded += 1
    return loaded


def _nullable_struct_reader(inner: _Reader) -> _Reader:
    """KIP-893 nullable struct: an int8 marker (-1 null, 1 present) then the struct."""

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_int8(buf, offset)
        if marker < 0:
            return None, size
        value, inner_size = inner(buf, offset + size)
        return value, size + inner_size

    return read


def _array_reader(inner: _Reader, flexible: bool) -> _Reader:
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        length, pos = read_length(buf, offset)
        if length is None or length < 0:
            return None, pos
        items = []
        pos += offset
        for _ in range(length):
            item, size = inner(buf, pos)
            items.append(item)
            pos += size
        return tuple(items), pos - offset

    return read


def _field_reader(entity_type: type[Entity], field: Field[Any], tagged: bool) -> _Reader:
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        # Primitives never contain tags, so kio's native readers are safe here.
        reader: _Reader = get_field_reader(entity_type, field, False, tagged)
        return reader
    inner = _tolerant_reader(kind.type_)
    if isinstance(kind, EntityTupleField):
        return _array_reader(inner, entity_type.__flexible__)
    if is_optional(field) and not tagged:
        return _nullable_struct_reader(inner)
    return inner


@functools.cache
def _tolerant_reader(entity_type: type[Entity]) -> _Reader:
    """A reader for ``entity_type`` that skips tagged fields it does not know (KIP-482)."""
    plain: list[tuple[str, _Reader]] = []
    tagged: dict[int, tuple[str, _Reader]] = {}
    tag_defaults: dict[str, Any] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append((field.name, _field_reader(entity_type, field, tagged=False)))
        else:
            tagged[tag] = (field.name, _field_reader(entity_type, field, tagged=True))
            tag_defaults[field.name] = get_tagged_field_default(field)
    flexible = entity_type.__flexible__

    def read(buf: Any, offset: int) -> tuple[Any, int]:
        pos = offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], size = reader(buf, pos)
            pos += size
        if flexible:
            values.update(tag_defaults)
            count, size = read_unsigned_varint(buf, pos)
            pos += size
            for _ in range(count):
                tag, size = read_unsigned_varint(buf, pos)
                pos += size
                length, size = read_unsigned_varint(buf, pos)
                pos += size
                if pos + length > len(buf):
                    raise BufferUnderflow("tagged field runs past the end of the buffer")
                known = tagged.get(tag)
                if known is not None:
                    values[known[0]], _ = known[1](buf, pos)
                pos += length
        return entity_type(**values), pos - offset

    return read


def _read_entity(entity_type: type[Entity], buf: Any, offset: int) -> Entity:
    # kio's native reader refuses writable buffers (bytearray, views of one);
    # a read-only view of the same memory costs no copy.
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    buf = view if view.readonly else view.toreadonly()
    try:
        entity, _ = _native_reader(entity_type)(buf, offset)
    except KeyError:  # kio: "Unknown tagged field tag: N"
        entity, _ = _tolerant_reader(entity_type)(buf, offset)
    result: Entity = entity
    return result


_DECODE_ERRORS: Final = (SerialError, ValueError, TypeError, IndexError)


def decode_request(api_key: int, version: int, buf: Any, offset: int = 0) -> Entity:
    """Decode a request body that starts at ``offset`` of ``buf`` (any bytes-like object)."""
    cls = request_class(api_key, version)
    try:
        return _read_entity(cls, buf, offset)
    except _DECODE_ERRORS as exc:
        raise InvalidRequestError(f"bad api {api_key} v{version} request: {exc}") from exc


def decode_response(api_key: int, version: int, buf: Any, offset: int = 0) -> Entity:
    """Client side: decode a response body (after the response header)."""
    cls = response_class(api_key, version)
    try:
        return _read_entity(cls, buf, offset)
    except _DECODE_ERRORS as exc:
        raise InvalidResponseError(f"bad api {api_key} v{version} response: {exc}") from exc


# --- writing ---------------------------------------------------------------


def _encode(entity: Entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def encode_response(entity: Entity) -> bytes:
    """The response body only; the server adds the response header and the frame length."""
    return _encode(entity)


def encode_request(entity: Entity) -> bytes:
    """Client side: the request body only (no request header, no frame length)."""
    return _encode(entity)


# --- building entities from dicts -------------------------------------------


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode()
    raise TypeError(f"expected str, got {type(value).__name__}")


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected bytes, got {type(value).__name__}")


def _to_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        return uuid.UUID(value)
    if isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    raise TypeError(f"expected UUID, got {type(value).__name__}")


_ERROR_CODES: Final[dict[int, ErrorCode]] = {int(code): code for code in ErrorCode}


def _to_error_code(value: Any) -> ErrorCode:
    """A dict lookup: ``ErrorCode(n)`` costs a microsecond, which shows on 10k topics."""
    try:
        return _ERROR_CODES[value]
    except KeyError:
        raise ValueError(f"unknown Kafka error code {value!r}") from None


def _to_timedelta(value: Any) -> datetime.timedelta:
    """Integers are milliseconds, as on the wire (throttle_time, timeouts)."""
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _to_datetime(value: Any) -> datetime.datetime:
    """Integers are epoch milliseconds, as on the wire."""
    if isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)


_PRIMITIVE_CONVERTERS: Final[dict[str, Callable[[Any], Any]]] = {
    "int8": int,
    "int16": int,
    "int32": int,
    "int64": int,
    "uint8": int,
    "uint16": int,
    "uint32": int,
    "uint64": int,
    "float64": float,
    "bool": bool,
    "string": _to_str,
    "bytes": _to_bytes,
    "records": _to_bytes,
    "uuid": _to_uuid,
    "error_code": _to_error_code,
    "timedelta_i32": _to_timedelta,
    "timedelta_i64": _to_timedelta,
    "datetime_i64": _to_datetime,
}


_ABSENT: Final = object()


class _FieldPlan(NamedTuple):
    """How ``build`` fills one field (a tuple so the hot loop can unpack it)."""

    name: str
    convert: Callable[[Any], Any]
    default: Any
    nullable: bool


def _entity_converter(entity_type: type[Entity]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if type(value) is dict or isinstance(value, Mapping):
            return build(entity_type, value)
        if isinstance(value, entity_type):
            return value
        raise TypeError(f"expected a mapping for {entity_type.__name__}")

    return convert


def _tuple_converter(item: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert(value: Any) -> tuple[Any, ...]:
        return tuple(map(item, value))

    return convert


def _default_for(field: Field[Any], kind: object, nullable: bool) -> Any:
    if field.default is not MISSING:
        return field.default
    if nullable:
        return None
    if isinstance(kind, PrimitiveTupleField | EntityTupleField):
        return ()
    if isinstance(kind, EntityField):
        return build(kind.type_, {})
    if get_schema_field_type(field) == "error_code":
        return ErrorCode.none
    if isinstance(kind, PrimitiveField) and issubclass(kind.type_, Records):
        return b""
    assert isinstance(kind, PrimitiveField)
    try:
        return get_implicit_default(kind.type_)
    except KeyError:  # bool and other builtins kio's table lacks: False / 0
        return kind.type_()


@functools.cache
def _plan(entity_type: type[Entity]) -> tuple[_FieldPlan, ...]:
    plans = []
    for field in fields(entity_type):
        kind = classify_field(field)
        tagged = get_field_tag(field) is not None
        nullable = is_optional(field) and not tagged
        if isinstance(kind, EntityField | EntityTupleField):
            convert = _entity_converter(kind.type_)
        else:
            convert = _PRIMITIVE_CONVERTERS[get_schema_field_type(field)]
        if isinstance(kind, PrimitiveTupleField | EntityTupleField):
            convert = _tuple_converter(convert)
        if tagged and field.default is MISSING:
            default = get_tagged_field_default(field)
        else:
            default = _default_for(field, kind, nullable)
        plans.append(_FieldPlan(field.name, convert, default, nullable))
    return tuple(plans)


def build(cls: type[E], data: Mapping[str, Any]) -> E:
    """Make a ``cls`` entity from a plain nested dict, whatever the version.

    Keys ``cls`` lacks are dropped; missing keys, and ``None`` for a field that
    cannot be null in this version, take the field's default. Nested dicts and
    lists become the nested entity classes; ints become kio's ``ErrorCode``,
    timedeltas (milliseconds) or datetimes (epoch ms) where the schema says so.
    """
    kwargs: dict[str, Any] = {}
    for name, convert, default, nullable in _plan(cls):
        value = data.get(name, _ABSENT)
        if value is None and nullable:
            kwargs[name] = None
        elif value is None or value is _ABSENT:
            kwargs[name] = default
        else:
            try:
                kwargs[name] = convert(value)
            except (TypeError, ValueError) as exc:
                error = ValueError if isinstance(exc, ValueError) else TypeError
                raise error(f"{cls.__name__}.{name}: {exc}") from exc
    return cls(**kwargs)


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Entity:
    """``build`` for the response entity of this API key and version."""
    return build(response_class(api_key, version), data)


def build_request(api_key: int, version: int, data: Mapping[str, Any]) -> Entity:
    """Client side: ``build`` for the request entity of this API key and version."""
    return build(request_class(api_key, version), data)
