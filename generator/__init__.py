"""IteraGPU Lab: offline GPU benchmark runner and static evidence-site generator."""

__version__ = "0.1.0"
