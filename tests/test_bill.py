"""``benchmarks/bill.py``'s arithmetic: prices times counts, DynamoDB's request units, RDS's storage minimum, the
maintenance per thread-month, and the fitted model of the cheapest-saver table. Pure functions only: no server,
no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bill

PRICES = {
    "s3": {"put_list_per_1000": 0.005, "get_per_1000": 0.0004, "delete_per_1000": 0.0, "storage_gb_month": 0.023},
    "dynamodb": {"wru_per_million": 0.625, "rru_per_million": 0.125, "storage_gb_month": 0.25},
    "postgres": {"instance_month": 11.68, "storage_gb_month": 0.115, "minimum_storage_gb": 20},
}


def test_s3_requests_are_priced_by_kind() -> None:
    counts = {"PUT": 1000, "LIST": 1000, "OTHER": 1000, "GET": 1000, "HEAD": 1000, "DELETE": 5000}
    # PUT, LIST and the rest at $0.005 per 1,000, GET and HEAD at $0.0004, DELETE free
    assert bill.s3_request_dollars(counts, PRICES["s3"]) == pytest.approx(3 * 0.005 + 2 * 0.0004)
    assert bill.s3_request_dollars({}, PRICES["s3"]) == 0


def test_dynamodb_requests_and_units() -> None:
    assert bill.dynamodb_request_dollars(1e6, 2e6, PRICES["dynamodb"]) == pytest.approx(0.625 + 0.25)
    assert [bill.write_units(n) for n in (1, 1024, 1025, 4096)] == [1, 1, 2, 4]
    assert [bill.read_units(n) for n in (0, 4096, 4097, 3 * 4096)] == [0.5, 0.5, 1.0, 1.5]
    # names plus values: "PK" + "ab", "n" + a number of 3 digits (2 bytes + 1), "b" + 5 bytes
    assert bill.item_size({"PK": {"S": "ab"}, "n": {"N": "123"}, "b": {"B": b"12345"}}) == 4 + 4 + 6


def test_storage_and_the_rds_minimum() -> None:
    assert bill.storage_dollars("s3", 2.0, PRICES) == pytest.approx(0.046)
    assert bill.storage_dollars("dynamodb", 2.0, PRICES) == pytest.approx(0.5)
    assert bill.storage_dollars("postgres", 2.0, PRICES) == pytest.approx(20 * 0.115)  # 20 GB at least
    assert bill.storage_dollars("postgres", 30.0, PRICES) == pytest.approx(30 * 0.115)
    assert bill.postgres_month(2.0, PRICES) == pytest.approx(11.68 + 2.30)


def test_maintenance_per_thread_month() -> None:
    gc, expire = {"GET": 2, "LIST": 4}, {"LIST": 2}
    one_pass = 6 * 0.005 / 1000 + 2 * 0.0004 / 1000
    assert bill.maintenance_thread_month(gc, expire, passes=30, prices=PRICES["s3"]) == pytest.approx(30 * one_pass)
    # two prefixes of 10 and 5 threads: 4 LIST per thread, 4 LIST whatever the threads
    split = bill.per_thread({"LIST": 44, "GET": 20}, {"LIST": 24, "GET": 10}, 10, 5)
    assert split == {"per_thread": {"LIST": 4, "GET": 2}, "fixed": {"LIST": 4, "GET": 0}}


def test_interpolation_and_fit() -> None:
    xs, ys = [0.0, 10.0, 20.0, 30.0], [1.0, 3.0, 5.0, 7.0]
    assert bill.interpolate(xs, ys, 5.0) == pytest.approx(2.0)
    assert bill.interpolate(xs, ys, -5.0) == 1.0
    assert bill.interpolate(xs, ys, 40.0) == pytest.approx(9.0)  # on with the upper half's slope
    assert bill.least_squares([0.0, 1.0, 2.0], [1.0, 3.0, 5.0]) == pytest.approx((1.0, 2.0))
    assert bill.smooth([0.0, 0.0, 10.0, 0.0, 0.0], window=3) == pytest.approx([0.0, 10 / 3, 10 / 3, 10 / 3, 0.0])
    points = [{"state_bytes": s, "PUT": 9.0, "bytes": 3.0 * s} for s in (100.0, 200.0, 300.0)]
    curve = bill.fit(points, supersteps_per_turn=3)
    assert bill.at(curve, "PUT", 150.0) == pytest.approx(3.0)
    assert bill.at(curve, "bytes", 200.0) == pytest.approx(200.0)
    straight = bill.fit(points, supersteps_per_turn=3, straight=True)
    assert bill.at(straight, "bytes", 250.0) == pytest.approx(250.0)


def test_a_month_by_the_model() -> None:
    flat = {"state_bytes": [0.0, 1e6], "PUT": [3.0, 3.0], "GET": [1.0, 1.0], "bytes": [1000.0, 1000.0]}
    upkeep = {"thread_month": 0.001, "expiry": 0.0001}
    month = bill.model_month("s3", flat, 500.0, 1e6, upkeep, supersteps_per_thread=10, prices=PRICES)
    requests = 3e6 * 0.005 / 1000 + 1e6 * 0.0004 / 1000
    assert month == pytest.approx(requests + 1.0 * 0.023 + 1e5 * 0.0011)
    units = {"state_bytes": [0.0, 1e6], "wru": [4.0, 4.0], "rru": [2.0, 2.0], "bytes": [2000.0, 2000.0]}
    month = bill.model_month("dynamodb-gzip", units, 500.0, 1e6, prices=PRICES)
    assert month == pytest.approx(4 * 0.625 + 2 * 0.125 + 2.0 * 0.25)
    pg = {"state_bytes": [0.0, 1e6], "bytes": [5000.0, 5000.0]}
    assert bill.model_month("postgres", pg, 500.0, 1e6, prices=PRICES) == pytest.approx(11.68 + 20 * 0.115)
    assert bill.model_month("postgres", pg, 500.0, 1e7, prices=PRICES) == pytest.approx(11.68 + 50 * 0.115)
    assert bill.cheapest({"s3": 3.0, "dynamodb": 1.5, "postgres": 6.0}) == ("dynamodb", 1.5, 2.0)
