"""Group -> __consumer_offsets partition, exactly as Kafka computes it (vectors from Java)."""

import pytest

from fleetkit.coordinator import java_string_hash, kafka_abs, partition_for


@pytest.mark.parametrize("s, h", [
    ("", 0), ("a", 97), ("my-group", -1906497762), ("polygenelubricants", -(2**31)),
    ("hello", 99162322), ("\U0001F600", 0xD83D * 31 + 0xDE00),  # non-BMP: two UTF-16 code units
])
def test_java_hash_vectors(s, h):
    assert java_string_hash(s) == h


def test_abs_is_not_the_mask():
    assert partition_for("my-group", 50) == 12       # Utils.abs
    assert (java_string_hash("my-group") & 0x7FFFFFFF) % 50 == 36  # the producer's toPositive
    assert partition_for("polygenelubricants", 50) == 0
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5


def test_bad_partition_count():
    with pytest.raises(ValueError, match="must be positive"):
        partition_for("g", 0)


def test_cli_prints_group_tab_partition(capsys):
    from fleet_airflow.cli import main

    assert main(["coordinator", "partition", "my-group", "polygenelubricants", "x; rm -rf / #", "--partitions", "50"]) == 0
    assert capsys.readouterr().out.splitlines() == ["my-group\t12", "polygenelubricants\t0",
                                                    f"x; rm -rf / #\t{partition_for('x; rm -rf / #', 50)}"]
    assert main(["coordinator", "partition", "g", "--partitions", "0"]) == 2
