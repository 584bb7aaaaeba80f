from pipeline.routing import all_queues, bucket_queues, queue_for

THRESHOLDS = (10.0, 30.0, 120.0)


def test_queue_names():
    assert bucket_queues(THRESHOLDS) == ["batch.le10s", "batch.le30s", "batch.le120s", "batch.gt120s"]
    assert all_queues(THRESHOLDS)[0] == "realtime"


def test_buckets_follow_estimated_speech_length():
    assert queue_for("x" * 150, "batch", THRESHOLDS) == "batch.le10s"  # 10 s
    assert queue_for("x" * 151, "batch", THRESHOLDS) == "batch.le30s"
    assert queue_for("x" * 1800, "batch", THRESHOLDS) == "batch.le120s"
    assert queue_for("x" * 1801, "batch", THRESHOLDS) == "batch.gt120s"
    assert queue_for("x" * 5000, "realtime", THRESHOLDS) == "realtime"
