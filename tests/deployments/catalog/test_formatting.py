"""The figures a person reads on the plan panel and model cards."""

from deployments.catalog.selectors import concurrency_text, human_bytes


def test_concurrency_reads_as_a_number_of_sequences() -> None:
    assert concurrency_text(597373.59) == "597,374"
    assert concurrency_text(2.5) == "2.5"
    assert concurrency_text(12.0) == "12"
    assert concurrency_text(0.37) == "0.37"


def test_small_weights_do_not_read_as_zero() -> None:
    assert human_bytes(401_000) == "392 KiB"
    assert human_bytes(5 << 20) == "5 MiB"
    assert human_bytes(int(16.2 * (1 << 30))) == "16.2 GiB"
    assert human_bytes(None) == "—"
