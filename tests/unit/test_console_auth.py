"""The console's logins: password hashes, the user file, sessions and CSRF tokens."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher

from headwater.console.auth import (
    Session,
    SessionCodec,
    UserFileError,
    add_user_line,
    authenticate,
    csrf_ok,
    hash_password_scrypt,
    is_loopback_host,
    parse_user_file,
    verify_password,
)


def test_a_scrypt_hash_verifies_its_password_and_no_other() -> None:
    stored = hash_password_scrypt("s3cret", log_n=10)
    assert stored.startswith("$scrypt$ln=10,r=8,p=1$")
    assert verify_password(stored, "s3cret")
    assert not verify_password(stored, "s3cret ")
    assert not verify_password(stored, "")


def test_two_hashes_of_one_password_differ_by_their_salt() -> None:
    assert hash_password_scrypt("pw", log_n=10) != hash_password_scrypt("pw", log_n=10)


def test_an_argon2_hash_from_argon2_cffi_verifies() -> None:
    stored = PasswordHasher(time_cost=1, memory_cost=1024).hash("hunter2")
    assert verify_password(stored, "hunter2")
    assert not verify_password(stored, "hunter3")


@pytest.mark.parametrize(
    "stored",
    ["plain-text", "$scrypt$ln=x,r=8,p=1$AA$BB", "$scrypt$broken", "$argon2id$garbage", ""],
)
def test_a_malformed_hash_never_matches(stored: str) -> None:
    assert not verify_password(stored, "anything")


def test_the_user_file_reads_names_and_hashes_skipping_comments() -> None:
    h = hash_password_scrypt("pw", log_n=10)
    a = PasswordHasher(time_cost=1, memory_cost=1024).hash("pw2")
    users = parse_user_file(f"# operators\n\nalice:{h}\n bob : {a}\n")
    assert users == {"alice": h, "bob": a}
    assert authenticate(users, "alice", "pw")
    assert authenticate(users, "bob", "pw2")
    assert not authenticate(users, "carol", "pw")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("alice:plain\n", "plain passwords are refused"),
        ("alice\n", "expected NAME:HASH"),
        ("# nobody\n", "no users"),
        ("alice:$scrypt$ln=10,r=8,p=1$AAAA$AAAA\n", "32 bytes"),
    ],
)
def test_a_bad_user_file_names_the_line_at_fault(text: str, says: str) -> None:
    with pytest.raises(UserFileError, match=says):
        parse_user_file(text, "users.txt")


def test_a_user_named_twice_is_refused() -> None:
    h = hash_password_scrypt("pw", log_n=10)
    with pytest.raises(UserFileError, match=r"users\.txt:2: user 'alice' appears twice"):
        parse_user_file(f"alice:{h}\nalice:{h}\n", "users.txt")


def test_add_user_line_replaces_a_users_old_hash() -> None:
    text = add_user_line("# ops\nalice:$scrypt$old\n", "alice", "new-pw")
    users = parse_user_file(text)
    assert list(users) == ["alice"]
    assert verify_password(users["alice"], "new-pw")
    assert text.startswith("# ops\n")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("127.0.0.2", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("console.example.com", False),
    ],
)
def test_only_the_loopback_names_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_session_cookie_round_trips_and_a_tampered_one_reads_as_none() -> None:
    codec = SessionCodec("k" * 32)
    session = codec.new("alice")
    cookie = codec.dumps(session)
    assert codec.loads(cookie) == session
    assert codec.loads(cookie[:-2] + ("A" if cookie[-2] != "A" else "B") + cookie[-1]) is None
    assert SessionCodec("other-key" * 4).loads(cookie) is None
    assert codec.loads(None) is None


def test_an_expired_session_reads_as_none() -> None:
    codec = SessionCodec("k" * 32, max_age_s=-1)
    assert codec.loads(codec.dumps(codec.new("alice"))) is None


def test_csrf_needs_the_sessions_own_token() -> None:
    session = Session("alice", "token-1")
    assert csrf_ok(session, "token-1")
    assert not csrf_ok(session, "token-2")
    assert not csrf_ok(session, "")
    assert not csrf_ok(session, None)
    assert not csrf_ok(None, "token-1")


def test_each_new_session_gets_a_fresh_csrf_token() -> None:
    codec = SessionCodec()
    assert codec.new(None).csrf != codec.new(None).csrf
