"""The ``spirula`` command line (click)."""
