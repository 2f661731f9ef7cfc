"""OpenVINO IR: the XML graph and its .bin of constants."""

from .reader import read_openvino

__all__ = ["read_openvino"]
