"""KIP-848 commit errors as the protocol means them (issue 41.5)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from sidecar.callback_commits import Verdict, fenced_message, verdict_of_codes
from sidecar.errors import CommitFenced, http_status


def test_no_error_is_committed() -> None:
    assert verdict_of_codes([None, None]) == (Verdict.COMMITTED, None)


def test_a_stale_member_epoch_is_retriable() -> None:
    stale = KafkaError.STALE_MEMBER_EPOCH
    assert verdict_of_codes([None, stale]) == (Verdict.RETRIABLE, stale)


def test_unknown_member_id_and_fenced_member_epoch_are_final() -> None:
    for code in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.FENCED_MEMBER_EPOCH):
        assert verdict_of_codes([code]) == (Verdict.FENCED, code)
        # A fence anywhere wins over a stale epoch elsewhere: retrying cannot help.
        assert verdict_of_codes([KafkaError.STALE_MEMBER_EPOCH, code]) == (Verdict.FENCED, code)


def test_other_errors_fail() -> None:
    code = KafkaError.OFFSET_METADATA_TOO_LARGE
    assert verdict_of_codes([code]) == (Verdict.FAILED, code)
    assert verdict_of_codes([KafkaError.STALE_MEMBER_EPOCH, code]) == (Verdict.FAILED, code)


def test_the_409_names_the_fence() -> None:
    for code, name in (
        (KafkaError.UNKNOWN_MEMBER_ID, "UNKNOWN_MEMBER_ID"),
        (KafkaError.FENCED_MEMBER_EPOCH, "FENCED_MEMBER_EPOCH"),
    ):
        error = CommitFenced(fenced_message(code))
        assert http_status(error) == 409
        assert name in str(error) and "nothing was committed" in str(error)
