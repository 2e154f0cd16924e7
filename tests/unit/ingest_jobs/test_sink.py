"""What the Milvus sink reports back to the job."""

from ingest_jobs.sink import SinkStats


def test_the_job_totals_add_the_write_tasks_rows_per_embedding_node() -> None:
    parts = [SinkStats(3, 2, {"worker-0": 3}), SinkStats(5, 5, {"worker-0": 1, "worker-1": 4}), SinkStats()]
    assert SinkStats.total(parts) == SinkStats(8, 7, {"worker-0": 4, "worker-1": 4})
    assert SinkStats.total([]) == SinkStats()
