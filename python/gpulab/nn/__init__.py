"""torch.nn over GPU Lab's engine."""
from . import functional, init, parallel, utils  # noqa: F401
from .modules import (  # noqa: F401
    Module, Sequential, ModuleList, Identity, Linear, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, BatchNorm1d,
    BatchNorm2d, Dropout, Dropout2d, Embedding, Flatten, ReLU, GELU, Sigmoid, Tanh, Softmax, LogSoftmax, MSELoss, L1Loss,
    SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss, NLLLoss, CrossEntropyLoss, DataParallel,
)
from .parameter import Parameter  # noqa: F401


def __getattr__(name):
    from .. import _missing

    raise _missing("torch.nn", name)
