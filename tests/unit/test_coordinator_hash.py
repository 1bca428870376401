"""Group -> __consumer_offsets partition, exactly as Kafka computes it (vectors from Java)."""

import pytest

from fleetkit.core.partitioning import java_string_hash, kafka_abs, partition_for


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
    from fleetctl.cli import main

    assert main(["coordinator", "partition", "my-group", "polygenelubricants", "x; rm -rf / #", "--partitions", "50"]) == 0
    assert capsys.readouterr().out.splitlines() == ["my-group\t12", "polygenelubricants\t0",
                                                    f"x; rm -rf / #\t{partition_for('x; rm -rf / #', 50)}"]
    assert main(["coordinator", "partition", "g", "--partitions", "0"]) == 2


def test_vectorised_matches_java_vectors():
    from fleetkit.core.partitioning import partitions_for

    groups = ["my-group", "polygenelubricants", "", "a", "hello", "\U0001F600"]
    assert partitions_for(groups, 50).tolist() == [12, 0, 0, 97 % 50, 99162322 % 50, partition_for("\U0001F600", 50)]
    assert partitions_for([], 50).tolist() == []
    with pytest.raises(ValueError, match="must be positive"):
        partitions_for(["g"], -1)


def test_vectorised_mixed_buckets():
    """Big buckets go through Horner columns, small ones through the weighted sum: both agree."""
    from fleetkit.core.partitioning import partitions_for

    groups = [f"group-{i}" for i in range(500)] + ["y" * i for i in range(300)] + ["😀ü" * i for i in range(40)]
    assert partitions_for(groups, 7).tolist() == [partition_for(g, 7) for g in groups]


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=60), max_size=200),
       st.integers(min_value=1, max_value=200))
def test_vectorised_equals_scalar(groups, partitions):
    from fleetkit.core.partitioning import partitions_for

    assert partitions_for(groups, partitions).tolist() == [partition_for(g, partitions) for g in groups]
