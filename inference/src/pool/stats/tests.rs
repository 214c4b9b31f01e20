//! Unit tests of the metrics' buckets and quantiles.

use super::*;

#[test]
fn buckets_and_quantiles() {
    let metrics = Metrics::default();
    for size in [1, 2, 3, 8, 9, 200] {
        metrics.record_batch(size);
    }
    for us in [100, 100, 100, 5000] {
        metrics.record_latency(Duration::from_micros(us));
    }
    let stats = metrics.snapshot();
    assert_eq!(stats.batch_sizes, [1, 1, 1, 1, 1, 0, 0, 0, 1]);
    assert_eq!(stats.batches, 6);
    assert_eq!(stats.answered, 4);
    assert_eq!(stats.latency_p50, Duration::from_micros(128));
    assert_eq!(stats.latency_p99, Duration::from_micros(8192));
    assert_eq!(stats.latency_mean, Duration::from_micros(1325));
}
