"""What every layer stands on beside the public vocabulary: the types the public API is
written in, the checks every option passes, and structured logging."""
