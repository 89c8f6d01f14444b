"""One worker's machinery: its options, the runner and its two modes (held transaction,
lease), the steps they share, timeouts, wake-ups, pauses, leases, rate limits, fair claims
and the live workers' registry. It imports the foundation and `_store`, never admin or
contrib."""
