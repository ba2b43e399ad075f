"""istrace plots and reports."""
