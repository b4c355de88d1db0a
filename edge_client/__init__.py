"""Device side of fedort."""
