"""fleetkit: the domain library of the Kafka fleet maintenance toolkit.

Nothing in this package imports Airflow or Spark, so it is importable (and testable) in
milliseconds, and shippable to Spark executors.
"""

__version__ = "0.1.0"
