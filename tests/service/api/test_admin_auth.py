"""The AdminService's bearer token: parsed from the metadata, compared, refused by name."""

from __future__ import annotations

from service.api.grpc.admin_auth import MISSING, WRONG, AdminAuthInterceptor, bearer_token


def test_the_bearer_token_is_read_from_the_authorization_entry():
    assert bearer_token([("authorization", "Bearer s3cret ")]) == "s3cret"
    assert bearer_token([("Authorization", "bearer s3cret")]) == "s3cret"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("x-other", "Bearer s3cret")]) is None
    assert bearer_token(None) is None


def test_a_call_without_the_token_or_with_another_is_refused():
    guard = AdminAuthInterceptor("strata.v1.AdminService", " s3cret ")
    assert guard.refusal([("authorization", "Bearer s3cret")]) is None
    assert guard.refusal([]) == MISSING
    assert guard.refusal([("authorization", "Bearer wrong")]) == WRONG
    assert guard.prefix == "/strata.v1.AdminService/"
