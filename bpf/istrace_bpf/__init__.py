"""istrace probes (user side) and the merger."""
