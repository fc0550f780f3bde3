"""stram container agent: runs operators in windows and moves their data."""
