"""prismatic_tr: training-free visual token reduction for OpenVLA and timm ViTs."""

__version__ = "0.5.0"
