"""SCRAM, PLAIN and the per-connection SASL state machine, without sockets."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.protocol.error_codes import ErrorCode
from headwater.security.credentials import FileCredentialStore, InMemoryCredentialStore
from headwater.security.errors import IllegalSaslStateError, SaslAuthenticationError
from headwater.security.plain import PlainServer
from headwater.security.principal import user
from headwater.security.sasl import SaslServerSession, SaslState
from headwater.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    decode_saslname,
    encode_saslname,
)

# Few iterations keep property tests fast; the bounds are checked separately.
FAST = 4096


def store_with(name: str, password: str, *mechs: ScramMechanism) -> InMemoryCredentialStore:
    store = InMemoryCredentialStore()
    for m in mechs or (SCRAM_SHA_256, SCRAM_SHA_512):
        store.upsert(name, m, ScramCredential.from_password(m, password, FAST))
    return store


def test_rfc7677_test_vector_scram_sha_256() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt)
    server = ScramServer(
        SCRAM_SHA_256,
        lambda name, m: cred if name == "user" else None,
        nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_client_reproduces_rfc7677_proof() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final.endswith(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")


def exchange(server: ScramServer, client: ScramClient) -> None:
    client.verify(server.step(client.final(server.step(client.first()))))


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_wrong_password_and_unknown_user_fail_alike(mech: ScramMechanism) -> None:
    store = store_with("alice", "secret", mech)
    for name, password in (("alice", "wrong"), ("mallory", "secret")):
        server = ScramServer(mech, store.get)
        client = ScramClient(mech, name, password)
        with pytest.raises(SaslAuthenticationError, match="Invalid user credentials"):
            exchange(server, client)
        assert not server.complete and server.username is None


def test_unknown_user_gets_a_stable_salt() -> None:
    """Two probes of the same unknown name must not look different from a real user."""
    store = InMemoryCredentialStore()
    server_a = ScramServer(SCRAM_SHA_256, store.get, fake_salt_key=b"k" * 32)
    server_b = ScramServer(SCRAM_SHA_256, store.get, fake_salt_key=b"k" * 32)
    salt_a = server_a.step(b"n,,n=ghost,r=abc").split(b",")[1]
    salt_b = server_b.step(b"n,,n=ghost,r=xyz").split(b",")[1]
    assert salt_a == salt_b


def test_authzid_must_equal_username() -> None:
    store = store_with("alice", "pw")
    server = ScramServer(SCRAM_SHA_256, store.get)
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        server.step(b"n,a=bob,n=alice,r=abc")


def test_a_step_after_completion_is_an_illegal_state() -> None:
    store = store_with("alice", "pw")
    server = ScramServer(SCRAM_SHA_512, store.get)
    exchange(server, ScramClient(SCRAM_SHA_512, "alice", "pw"))
    with pytest.raises(IllegalSaslStateError):
        server.step(b"n,,n=alice,r=again")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"n,,",
        b"p=tls-unique,,n=a,r=b",
        b"x,,n=a,r=b",
        b"n,,r=b,n=a",
        b"n,,n=a=XY,r=b",
        b"n,,m=ext,n=a,r=b",
        b"n,,n=,r=b",
        b"\xff\xfe",
        b"n,,n=a,r=" + b"x" * 5000,
    ],
)
def test_malformed_client_first_is_refused(message: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, store_with("a", "pw").get)
    with pytest.raises(SaslAuthenticationError):
        server.step(message)


def test_tampered_client_final_is_refused() -> None:
    store = store_with("alice", "pw")
    server = ScramServer(SCRAM_SHA_256, store.get)
    client = ScramClient(SCRAM_SHA_256, "alice", "pw")
    final = client.final(server.step(client.first()))
    bad = final.replace(b"c=biws", b"c=eSws")  # "y,," channel binding claims
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        server.step(bad)


@settings(max_examples=30, deadline=None)
@given(
    name=st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s),
    password=st.text(min_size=1, max_size=20),
    mech=st.sampled_from([SCRAM_SHA_256, SCRAM_SHA_512]),
)
def test_any_name_and_password_round_trip(name: str, password: str, mech: ScramMechanism) -> None:
    assert decode_saslname(encode_saslname(name)) == name
    store = store_with(name, password, mech)
    server = ScramServer(mech, store.get)
    exchange(server, ScramClient(mech, name, password))
    assert server.complete and server.username == name


@settings(max_examples=300, deadline=None)
@given(first=st.binary(max_size=200), final=st.binary(max_size=200))
def test_scram_server_only_raises_authentication_errors_on_garbage(
    first: bytes, final: bytes
) -> None:
    server = ScramServer(SCRAM_SHA_256, store_with("a", "pw", SCRAM_SHA_256).get)
    try:
        server.step(first)
        server.step(final)
    except SaslAuthenticationError:
        assert not server.complete
        return
    # Random bytes cannot carry a valid proof.
    raise AssertionError("garbage authenticated")


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=10_000), flip=st.integers(1, 255))
def test_any_corrupted_byte_of_client_final_fails(position: int, flip: int) -> None:
    store = store_with("alice", "pw", SCRAM_SHA_256)
    server = ScramServer(SCRAM_SHA_256, store.get)
    client = ScramClient(SCRAM_SHA_256, "alice", "pw")
    final = bytearray(client.final(server.step(client.first())))
    final[position % len(final)] ^= flip
    with pytest.raises(SaslAuthenticationError):
        server.step(bytes(final))
    assert not server.complete


# -- PLAIN -------------------------------------------------------------------------


def test_plain_checks_the_scram_credential() -> None:
    store = store_with("alice", "s3cret", SCRAM_SHA_512)
    ok = PlainServer(store.get)
    ok.step(b"\x00alice\x00s3cret")
    assert ok.complete and ok.username == "alice"
    for msg in (
        b"\x00alice\x00wrong",
        b"\x00bob\x00s3cret",
        b"alice\x00s3cret",
        b"bob\x00alice\x00s3cret",
    ):
        server = PlainServer(store.get)
        with pytest.raises(SaslAuthenticationError):
            server.step(msg)
        assert not server.complete


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100))
def test_plain_garbage_never_authenticates(message: bytes) -> None:
    server = PlainServer(store_with("alice", "pw", SCRAM_SHA_256).get)
    try:
        server.step(message)
    except SaslAuthenticationError:
        return
    assert message == b"\x00alice\x00pw" or message == b"alice\x00alice\x00pw"


# -- the per-connection session --------------------------------------------------------


def session(store: InMemoryCredentialStore, reauth_ms: int = 0) -> SaslServerSession:
    return SaslServerSession(["PLAIN", "SCRAM-SHA-512"], store.get, max_reauth_ms=reauth_ms)


def scram_login(s: SaslServerSession, name: str, password: str, now_ms: int = 0) -> int:
    assert s.handshake("SCRAM-SHA-512").error_code == 0
    client = ScramClient(SCRAM_SHA_512, name, password)
    r1 = s.authenticate(client.first(), now_ms)
    if r1.error_code:
        return r1.error_code
    r2 = s.authenticate(client.final(r1.token), now_ms)
    if r2.error_code == 0:
        client.verify(r2.token)
    return r2.error_code


def test_session_authenticates_and_sets_the_principal() -> None:
    s = session(store_with("alice", "pw"), reauth_ms=1000)
    assert scram_login(s, "alice", "pw", now_ms=50) == 0
    assert s.authenticated and s.principal == user("alice")
    assert s.expires_at_ms == 1050 and not s.expired(1049) and s.expired(1050)


def test_wrong_password_fails_and_closes() -> None:
    s = session(store_with("alice", "pw"))
    assert scram_login(s, "alice", "nope") == ErrorCode.sasl_authentication_failed
    assert s.state is SaslState.FAILED and s.principal is None


def test_authenticate_before_handshake_is_illegal() -> None:
    s = session(store_with("alice", "pw"))
    r = s.authenticate(b"\x00alice\x00pw", 0)
    assert r.error_code == ErrorCode.illegal_sasl_state and r.close and not s.authenticated


def test_unsupported_mechanism_lists_the_enabled_ones() -> None:
    s = session(store_with("alice", "pw"))
    r = s.handshake("GSSAPI")
    assert r.error_code == ErrorCode.unsupported_sasl_mechanism and r.close
    assert r.mechanisms == ["PLAIN", "SCRAM-SHA-512"]


def test_oversized_token_is_refused_unread() -> None:
    s = SaslServerSession(["PLAIN"], store_with("a", "pw").get, max_token_bytes=100)
    s.handshake("PLAIN")
    r = s.authenticate(b"\x00a\x00" + b"p" * 200, 0)
    assert r.error_code == ErrorCode.sasl_authentication_failed and r.close


def test_reauthentication_keeps_the_principal() -> None:
    store = store_with("alice", "pw")
    store.upsert("bob", SCRAM_SHA_512, ScramCredential.from_password(SCRAM_SHA_512, "pw2", FAST))
    s = session(store, reauth_ms=100)
    assert scram_login(s, "alice", "pw", now_ms=0) == 0
    assert scram_login(s, "alice", "pw", now_ms=90) == 0
    assert s.reauthentications == 1 and s.expires_at_ms == 190
    assert scram_login(s, "bob", "pw2", now_ms=150) == ErrorCode.sasl_authentication_failed
    assert s.state is SaslState.FAILED


def test_reauthentication_cannot_switch_mechanism() -> None:
    s = session(store_with("alice", "pw"))
    assert scram_login(s, "alice", "pw") == 0
    assert s.handshake("PLAIN").error_code == ErrorCode.illegal_sasl_state


_ops = st.one_of(
    st.tuples(st.just("handshake"), st.sampled_from(["PLAIN", "SCRAM-SHA-512", "X", ""])),
    st.tuples(
        st.just("auth"),
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from([b"\x00alice\x00pw", b"n,,n=alice,r=abc", b"\x00alice\x00bad"]),
        ),
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ops, max_size=8))
def test_session_fuzz_never_crashes_and_failure_is_final(ops: list[tuple[str, object]]) -> None:
    s = session(store_with("alice", "pw"))
    failed = False
    for kind, arg in ops:
        if kind == "handshake":
            r_close = s.handshake(str(arg)).close
        else:
            assert isinstance(arg, bytes)
            r = s.authenticate(arg, 0)
            r_close = r.close
            assert r.error_code in (
                0,
                ErrorCode.illegal_sasl_state,
                ErrorCode.sasl_authentication_failed,
            )
        if failed:
            assert s.state is SaslState.FAILED and r_close
        failed = failed or r_close
        assert r_close == (s.state is SaslState.FAILED)
    if s.authenticated:
        # Only PLAIN with the right password can authenticate in one random step.
        assert s.principal == user("alice")
        assert any(arg == b"\x00alice\x00pw" for _, arg in ops)


# -- the durable store ------------------------------------------------------------------


def test_file_store_survives_reopen_and_holds_no_password(tmp_path: Path) -> None:
    store = FileCredentialStore.in_dir(tmp_path)
    store.upsert("alice", SCRAM_SHA_512, ScramCredential.from_password(SCRAM_SHA_512, "hunter22"))
    store.upsert("bob", SCRAM_SHA_256, ScramCredential.from_password(SCRAM_SHA_256, "pw", 8192))
    text = store.path.read_text()
    assert "hunter22" not in text and base64.b64encode(b"hunter22").decode() not in text
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    again = FileCredentialStore.in_dir(tmp_path)
    assert again.describe() == {"alice": {"SCRAM-SHA-512": 4096}, "bob": {"SCRAM-SHA-256": 8192}}
    cred = again.get("alice", SCRAM_SHA_512)
    assert cred is not None and cred.verify_password(SCRAM_SHA_512, "hunter22")
    assert again.delete("bob", SCRAM_SHA_256) and not again.delete("bob", SCRAM_SHA_256)
    assert FileCredentialStore.in_dir(tmp_path).describe() == {"alice": {"SCRAM-SHA-512": 4096}}


def test_iterations_outside_kafkas_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations"):
        ScramCredential.from_password(SCRAM_SHA_256, "pw", 1000)


def test_client_nonce_repeated_before_the_full_nonce_is_accepted_as_kafka_does() -> None:
    """librdkafka 2.0 sends r=<client nonce><client nonce><server nonce>; Kafka accepts it."""
    store = store_with("alice", "pw", SCRAM_SHA_256)
    server = ScramServer(SCRAM_SHA_256, store.get, nonce="SERVER")
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="CLIENT")
    first = server.step(client.first())
    final = client.final(first)  # proof over the exact message is what matters
    doubled = final.replace(b"r=CLIENTSERVER", b"r=CLIENTCLIENTSERVER")
    with pytest.raises(SaslAuthenticationError, match="Invalid user credentials"):
        # The proof was computed over the other nonce, so it fails, but not on the nonce rule.
        server.step(doubled)
    server2 = ScramServer(SCRAM_SHA_256, store.get, nonce="SERVER")
    server2.step(client.first())
    with pytest.raises(SaslAuthenticationError, match="nonce mismatch"):
        server2.step(final.replace(b"r=CLIENTSERVER", b"r=CLIENTSERVEX"))
