"""HDF5 weight files (TensorFlow/Keras tf_model.h5, .weights.h5) and Keras 3 .keras archives, read
structure by structure with byte offsets and never through h5py for data stored in one piece."""

from .keras_zip import read_keras
from .reader import read_hdf5

__all__ = ["read_hdf5", "read_keras"]
