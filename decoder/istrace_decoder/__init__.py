"""istrace decoder: Python side (reads the C decoder's tables; cwnd/state tracker)."""
