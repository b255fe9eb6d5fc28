"""MaSS: Multi-attribute Selective Suppression, the PyTorch core of MaSS-ETL (no Beam inside)."""

__version__ = "0.1.0"
