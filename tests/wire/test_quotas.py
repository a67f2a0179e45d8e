"""The quota core: which entity's quota holds a pair (KIP-55's order), the sampled rate and
the throttle time, on a fake clock."""

from __future__ import annotations

import pytest

from rafka.wire.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    MATCHING_ORDER,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaManager,
    QuotaEntity,
    QuotaRequestError,
    SampledRate,
    client_throttles_itself,
    entity_components,
    entity_from_components,
    matches_filter,
    quota_for,
    quota_value,
    throttle_time_ms,
)

NAME, ANY = "<user>", "<client-id>"


def test_the_matching_order_is_kip_55s() -> None:
    assert MATCHING_ORDER == (
        (NAME, ANY), (NAME, DEFAULT), (NAME, None),
        (DEFAULT, ANY), (DEFAULT, DEFAULT), (DEFAULT, None),
        (None, ANY), (None, DEFAULT))


def test_the_most_specific_entity_that_sets_the_key_holds_the_pair() -> None:
    configs = {
        QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1.0},
        QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 2.0},
        QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 3.0},
        QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 4.0, CONSUMER_BYTE_RATE: 40.0},
        QuotaEntity("alice", "app"): {CONSUMER_BYTE_RATE: 50.0},
    }

    def bound(key: str, user: str, client_id: str) -> float | None:
        found = quota_for(configs, key, user, client_id)
        return None if found is None else found.bound

    assert bound(PRODUCER_BYTE_RATE, "alice", "app") == 4.0  # the pair sets no producer rate
    assert bound(CONSUMER_BYTE_RATE, "alice", "app") == 50.0
    assert bound(CONSUMER_BYTE_RATE, "alice", "other") == 40.0
    assert bound(PRODUCER_BYTE_RATE, "bob", "app") == 3.0  # a user default beats client ids
    assert bound(CONSUMER_BYTE_RATE, "bob", "app") is None
    del configs[QuotaEntity(DEFAULT, None)]
    assert bound(PRODUCER_BYTE_RATE, "bob", "app") == 2.0
    assert bound(PRODUCER_BYTE_RATE, "bob", "other") == 1.0


def test_usage_is_shared_where_the_quota_was_set() -> None:
    user_quota = quota_for({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1}},
                           PRODUCER_BYTE_RATE, "alice", "app")
    default_users = quota_for({QuotaEntity(DEFAULT, None): {PRODUCER_BYTE_RATE: 1}},
                              PRODUCER_BYTE_RATE, "alice", "app")
    client_default = quota_for({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1}},
                               PRODUCER_BYTE_RATE, "alice", "app")
    pair_default = quota_for({QuotaEntity(DEFAULT, DEFAULT): {PRODUCER_BYTE_RATE: 1}},
                             PRODUCER_BYTE_RATE, "alice", "app")
    assert user_quota is not None and user_quota.usage_key == ("alice", "")
    assert default_users is not None and default_users.usage_key == ("alice", "")
    assert client_default is not None and client_default.usage_key == ("", "app")
    assert pair_default is not None and pair_default.usage_key == ("alice", "app")


def test_the_rate_counts_at_least_all_windows_but_one() -> None:
    rate = SampledRate(samples=11, window_s=1.0)
    rate.record(1000, now=100.0)
    assert rate.elapsed_s(100.0) == 10.0
    assert rate.rate(100.0) == pytest.approx(100.0)
    for second in range(1, 20):
        rate.record(1000, now=100.0 + second)
    # 11 windows of 1000 bytes (the oldest began 10 s ago): older ones no longer count.
    assert rate.total(119.5) == 11_000
    assert rate.rate(119.5) == pytest.approx(11_000 / 10.5)
    assert rate.total(200.0) == 0


def test_throttle_time_is_the_wait_for_the_rate_to_fall_to_its_bound() -> None:
    assert throttle_time_ms(rate=100, bound=100, elapsed_s=10, most_ms=11_000) == 0
    assert throttle_time_ms(rate=150, bound=100, elapsed_s=10, most_ms=11_000) == 5_000
    assert throttle_time_ms(rate=1e9, bound=100, elapsed_s=10, most_ms=11_000) == 11_000
    assert throttle_time_ms(rate=1, bound=0, elapsed_s=10, most_ms=11_000) == 11_000


def test_a_client_over_its_quota_waits_in_proportion_to_its_excess() -> None:
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    assert manager.record("alice", "app", 1_000_000, now=0.0) == 0  # no quota: not counted
    manager.update({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000}})
    assert manager.enabled
    assert manager.record("alice", "app", 5_000, now=1.0) == 0  # 500 B/s over 10 s
    wait_ms = manager.record("alice", "other", 10_000, now=1.5)  # shared by the user's ids
    assert manager.rate("alice", "app", now=1.5) == pytest.approx(1500)
    assert wait_ms == 5_000  # half again its bound, over 10 s: half of 10 s
    assert manager.record("bob", "app", 1_000_000, now=2.0) == 0
    manager.update({})
    assert not manager.enabled
    assert manager.record("alice", "app", 1_000_000, now=3.0) == 0


def test_a_wait_is_at_most_the_span_the_rate_is_measured_over() -> None:
    manager = ClientQuotaManager(REQUEST_PERCENTAGE, samples=11, window_s=1.0)
    manager.update({QuotaEntity(None, DEFAULT): {REQUEST_PERCENTAGE: 1}})
    assert manager.record("alice", "app", 1e6, now=0.0) == manager.most_throttle_ms == 11_000


def test_unrecord_takes_back_what_was_counted() -> None:
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE)
    manager.update({QuotaEntity(None, "app"): {CONSUMER_BYTE_RATE: 100}})
    assert manager.record("alice", "app", 10_000, now=0.0) > 0
    manager.unrecord("alice", "app", 10_000, now=0.0)
    assert manager.rate("alice", "app", now=0.0) == 0
    assert manager.record("alice", "app", 500, now=0.1) == 0


def test_clients_throttle_themselves_from_kip_219s_versions() -> None:
    assert not client_throttles_itself("Produce", 5)
    assert client_throttles_itself("Produce", 6)
    assert not client_throttles_itself("Fetch", 7)
    assert client_throttles_itself("Fetch", 8)
    assert client_throttles_itself("DescribeClientQuotas", 0)


def test_an_entity_is_read_from_and_written_to_components() -> None:
    entity = entity_from_components([(CLIENT_ID, "app"), (USER, None)])
    assert entity == QuotaEntity(DEFAULT, "app")
    assert entity_components(entity) == [(USER, None), (CLIENT_ID, "app")]
    for wrong in ([], [("ip", "1.2.3.4")], [(USER, "a"), (USER, "b")], [(USER, DEFAULT)],
                  [(CLIENT_ID, "")], [(USER, "..")]):
        with pytest.raises(QuotaRequestError):
            entity_from_components(wrong)


def test_quota_values_are_kafkas() -> None:
    assert quota_value(PRODUCER_BYTE_RATE, 1024.0) == 1024.0
    assert quota_value(REQUEST_PERCENTAGE, 12.5) == 12.5
    for key, value in ((PRODUCER_BYTE_RATE, 10.5), (CONSUMER_BYTE_RATE, 0), ("x", 1.0),
                       (REQUEST_PERCENTAGE, -1.0)):
        with pytest.raises(QuotaRequestError):
            quota_value(key, value)


def test_describe_filters_match_as_kafkas_do() -> None:
    pair = QuotaEntity("alice", "app")
    user = QuotaEntity("alice", None)
    default = QuotaEntity(DEFAULT, None)
    assert matches_filter(pair, [(USER, MATCH_EXACT, "alice")], strict=False)
    assert not matches_filter(pair, [(USER, MATCH_EXACT, "alice")], strict=True)
    assert matches_filter(user, [(USER, MATCH_EXACT, "alice")], strict=True)
    assert matches_filter(default, [(USER, MATCH_DEFAULT, None)], strict=True)
    assert not matches_filter(user, [(USER, MATCH_DEFAULT, None)], strict=False)
    assert matches_filter(default, [(USER, MATCH_SPECIFIED, None)], strict=False)
    assert not matches_filter(pair, [(CLIENT_ID, MATCH_SPECIFIED, None),
                                     (USER, MATCH_EXACT, "bob")], strict=False)
    assert matches_filter(pair, [], strict=False) and not matches_filter(pair, [], strict=True)
