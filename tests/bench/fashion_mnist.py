"""Fashion-MNIST for the PyTorch side of the benchmarks: the IDX files GPU Lab reads, as numpy arrays.

Debian's fashion-mnist package holds them gzipped in /usr/share/datasets/fashion-mnist; a GPU machine
gets them unpacked into the folder GPULAB_FASHION_MNIST_DIR names (scripts/gpu-suite.sh). Either is read.
"""
import gzip
import os

FASHION_DIR = os.environ.get("GPULAB_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def load_idx(name):
    """The IDX file `name` (e.g. "train-images-idx3-ubyte") as a uint8 array of its shape."""
    import numpy as np  # only where PyTorch runs (it brings numpy)

    path = os.path.join(FASHION_DIR, name)
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
    else:
        with gzip.open(path + ".gz") as f:
            data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
